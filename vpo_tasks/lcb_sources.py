"""Where lcb's problems come from: two sources, read into one `RawProblem` shape.

livecodebench  `livecodebench/code_generation_lite` at a revision without the loading script (the
               generic JSON builder reads every `test*.jsonl`), or a directory of those files. Train
               and test are contest-date windows. Tests: the record's private tests, as JSON or as
               base64 -> zlib -> pickle, read by an unpickler that admits plain data only.
deepcoder      `agentica-org/DeepCoder-Preview-Dataset` (the data the paper's LiveCodeBench case
               study trains on): training problems from the configs `primeintellect`, `taco` and
               `lcbv5`, the held-out problems from `lcbv5`'s test split (LiveCodeBench problems of
               2024-08-01 to 2025-02-01 in the dataset card's account), or a directory in the
               dataset's layout (`<config>/<split>-*.parquet`). Each row holds `problem` (the
               statement), `tests` (JSON text) and, in `lcbv5`, `starter_code` and
               `metadata.func_name`. The three configs encode tests differently (`deepcoder_tests`).

Every test becomes {"input", "output"} text in LiveCodeBench's encoding: a functional test's input
is one JSON argument per line and its output one JSON value; a stdin test's are the raw texts.
"""

from __future__ import annotations

import base64
import io
import json
import pickle
import re
import zlib
from dataclasses import dataclass, field
from datetime import date, datetime
from pathlib import Path
from typing import Any, Iterator

from vpo.task import settings_from
from vpo_tasks.hub import DataUnavailable, load_hub_dataset

SOURCES = ("deepcoder", "livecodebench")
DEEPCODER_CONFIGS = ("primeintellect", "taco", "lcbv5", "codeforces")
MAX_DECODED_BYTES = 256 << 20  # a private-test blob inflating past this is refused (zip bomb)
PLAIN_TYPES = (str, bytes, list, dict, tuple, int, float, bool, type(None))


@dataclass
class LiveCodeBenchSource:
    path: str | None = None  # directory holding the release's test*.jsonl files; None: the hub dataset below
    dataset: str = "livecodebench/code_generation_lite"  # Hugging Face dataset id
    revision: str = "refs/pr/6"  # a revision without the loading script (the generic JSON builder reads all files)
    train_before: str = "2025-02-01"  # train: contest_date < this
    test_from: str = "2025-02-01"  # test: test_from <= contest_date < test_before
    test_before: str = "2025-05-01"

    @classmethod
    def from_dict(cls, values: dict[str, Any] | None) -> "LiveCodeBenchSource":
        s = settings_from(cls, values, "lcb.livecodebench")
        for name in ("train_before", "test_from", "test_before"):
            try:
                date.fromisoformat(str(getattr(s, name)))
            except ValueError:
                raise ValueError(
                    f"lcb.livecodebench: {name} must be a date like 2025-02-01, got {getattr(s, name)!r}"
                ) from None
        return s


@dataclass
class DeepCoderSource:
    path: str | None = None  # directory in the dataset's layout (<config>/<split>-*.parquet); None: the hub
    dataset: str = "agentica-org/DeepCoder-Preview-Dataset"  # Hugging Face dataset id
    revision: str | None = None  # hub revision (None: the default branch)
    train: list[str] = field(default_factory=lambda: ["primeintellect", "taco", "lcbv5"])  # configs, train split
    test: str = "lcbv5"  # config whose test split is the held-out set

    @classmethod
    def from_dict(cls, values: dict[str, Any] | None) -> "DeepCoderSource":
        s = settings_from(cls, values, "lcb.deepcoder")
        s.train = [s.train] if isinstance(s.train, str) else s.train
        if not isinstance(s.train, (list, tuple)) or not all(isinstance(name, str) for name in s.train):
            raise ValueError(f"lcb.deepcoder: setting train is {s.train!r}; expected a config name or a list of them")
        s.train = list(s.train)
        for name in [*s.train, s.test]:
            if name not in DEEPCODER_CONFIGS:
                raise ValueError(
                    f"lcb.deepcoder: {name!r} is not one of the dataset's configs ({', '.join(DEEPCODER_CONFIGS)})"
                )
        if not s.train:
            raise ValueError("lcb.deepcoder: train names no config")
        return s


@dataclass
class RawProblem:
    task_id: str  # the source's id (deepcoder rows have none: <config>-<split>-<row>)
    question: str  # the statement
    starter_code: str  # LeetCode's class stub, "" for stdin problems
    tests: list[dict[str, str]]  # every test, {"input", "output"} text in LiveCodeBench's encoding
    testtype: str  # functional | stdin
    fn_name: str | None  # the function a functional test calls
    info: dict[str, Any]  # what the rows carry along: source, platform, difficulty
    when: datetime | None = None  # contest date (livecodebench only)


class DroppedRecord(Exception):
    """A raw record that yields no problem: `reason` is counted, `detail` (if any) is logged."""

    def __init__(self, reason: str, detail: str = ""):
        super().__init__(reason)
        self.reason, self.detail = reason, detail


# ---- livecodebench ---------------------------------------------------------------------------
class UndecodableTests(ValueError):
    """A record's private tests are not plain data in either known encoding."""


class PlainDataUnpickler(pickle.Unpickler):
    """An unpickler that resolves no global at all, so only built-in plain data can come out."""

    def find_class(self, module: str, name: str):
        raise pickle.UnpicklingError(f"refused to load {module}.{name}: only plain data is admitted")

    def persistent_load(self, pid: Any):
        raise pickle.UnpicklingError("refused a persistent id: only plain data is admitted")


def _check_plain(value: Any, depth: int = 0) -> None:
    if depth > 20 or not isinstance(value, PLAIN_TYPES):
        raise UndecodableTests(f"not plain data: {type(value).__name__}")
    if isinstance(value, dict):
        for key, item in value.items():
            _check_plain(key, depth + 1)
            _check_plain(item, depth + 1)
    elif isinstance(value, (list, tuple)):
        for item in value:
            _check_plain(item, depth + 1)


def decode_tests(text: str) -> list[dict[str, str]]:
    """The test list of a `*_test_cases` field: JSON, else base64(zlib(pickle(JSON text)))."""
    try:
        value = json.loads(text)
    except (ValueError, TypeError):
        try:
            inflater = zlib.decompressobj()
            raw = inflater.decompress(base64.b64decode(text, validate=True), MAX_DECODED_BYTES)
            if inflater.unconsumed_tail:
                raise UndecodableTests(f"inflates past {MAX_DECODED_BYTES} bytes")
            value = PlainDataUnpickler(io.BytesIO(raw)).load()
        except UndecodableTests:
            raise
        except Exception as err:  # binascii, zlib and pickle errors alike
            raise UndecodableTests(f"{type(err).__name__}: {err}") from None
        _check_plain(value)
        if isinstance(value, (str, bytes)):
            try:
                value = json.loads(value)
            except ValueError as err:
                raise UndecodableTests(f"unpickled text is not JSON: {err}") from None
    if not isinstance(value, list) or not all(
        isinstance(t, dict) and isinstance(t.get("input"), str) and isinstance(t.get("output"), str) for t in value
    ):
        raise UndecodableTests("not a list of {input, output} objects with text values")
    return value


def as_datetime(value: Any) -> datetime:
    """contest_date as a datetime: ISO text (jsonl) or a datetime (the generic builder's timestamp)."""
    if isinstance(value, datetime):
        return value.replace(tzinfo=None)
    if isinstance(value, date):
        return datetime(value.year, value.month, value.day)
    return datetime.fromisoformat(str(value)).replace(tzinfo=None)


def func_name(metadata: Any) -> str | None:
    """metadata.func_name from a mapping or its JSON text; None when absent or unreadable."""
    if isinstance(metadata, str):
        try:
            metadata = json.loads(metadata or "{}")
        except ValueError:
            return None
    return metadata.get("func_name") if isinstance(metadata, dict) else None


def load_livecodebench(src: LiveCodeBenchSource) -> list[dict[str, Any]]:
    """Every record of the release, in file order."""
    if src.path:
        files = sorted(Path(src.path).expanduser().glob("test*.jsonl"))
        if not files:
            raise DataUnavailable(
                f"lcb: task_settings.lcb.data.livecodebench.path = {src.path!r} holds no test*.jsonl file"
            )
        return [record for f in files for record in _jsonl_objects(f)]
    return [
        dict(r)
        for r in load_hub_dataset(
            "lcb",
            src.dataset,
            split="test",
            revision=src.revision,
            path_setting="task_settings.lcb.data.livecodebench.path",
        )
    ]


def _jsonl_objects(path: Path) -> list[dict[str, Any]]:
    """The objects of a JSON-lines file; a line that is not one stops the preprocess naming the file and
    line (a damaged download: nothing says which record it held)."""
    records = []
    for number, line in enumerate(path.read_text(encoding="utf-8").splitlines(), start=1):
        if not line.strip():
            continue
        try:
            record = json.loads(line)
        except (ValueError, RecursionError) as err:
            raise DataUnavailable(
                f"lcb: {path}:{number} is not JSON ({' '.join(str(err).split())[:120]}); "
                "download the file again or delete the line"
            ) from None
        if not isinstance(record, dict):
            raise DataUnavailable(f"lcb: {path}:{number} holds a JSON {type(record).__name__}, not a record")
        records.append(record)
    return records


def _undated(record: dict[str, Any]) -> RawProblem:
    raise DroppedRecord("bad contest_date", f"contest_date {str(record.get('contest_date'))[:40]!r} is not a date")


def livecodebench_problem(record: dict[str, Any]) -> RawProblem:
    try:
        tests = decode_tests(record["private_test_cases"])
    except UndecodableTests as err:
        raise DroppedRecord("undecodable", f"private tests do not decode to plain data ({err})") from None
    testtype = tests[0].get("testtype", "stdin") if tests else "stdin"
    info = {"source": "livecodebench", "platform": record.get("platform"), "difficulty": record.get("difficulty")}
    return RawProblem(
        str(record["question_id"]),
        str(record["question_content"]),
        _starter(record),
        tests,
        testtype,
        func_name(record.get("metadata")),
        info,
        as_datetime(record["contest_date"]),
    )


def _starter(record: dict[str, Any]) -> str:
    """A record's starter code: text, or none."""
    starter = record.get("starter_code") or ""
    if not isinstance(starter, str):
        raise DroppedRecord("malformed", f"starter_code is a {type(starter).__name__}, not text")
    return starter


def livecodebench_records(src: LiveCodeBenchSource) -> Iterator[tuple[str, dict[str, Any], Any]]:
    """(split, record, reader) for every record inside a date window, train by contest date."""
    bounds = [as_datetime(getattr(src, n)) for n in ("train_before", "test_from", "test_before")]
    chosen = []
    for record in load_livecodebench(src):
        try:
            when = as_datetime(record["contest_date"])
        except (KeyError, TypeError, ValueError):
            yield "train", record, _undated  # counted among the drops, not a stop
            continue
        split = "train" if when < bounds[0] else "test" if bounds[1] <= when < bounds[2] else None
        if split is not None:
            chosen.append((split, when, record))
    chosen.sort(key=lambda item: (item[0] != "train", item[1] if item[0] == "train" else datetime.min))
    for split, _, record in chosen:
        yield split, record, livecodebench_problem


# ---- deepcoder -------------------------------------------------------------------------------
def _unwrap(value: Any) -> Any:
    """A call-based expected output as TACO and PrimeIntellect store it: wrapped in a one-item list."""
    return value[0] if isinstance(value, list) and len(value) == 1 else value


def _text(value: Any) -> str:
    """A stdin test's input or output: text, or a list of lines."""
    if isinstance(value, list) and all(isinstance(v, str) for v in value):
        return "\n".join(value)
    if not isinstance(value, str):
        raise DroppedRecord("unreadable tests", f"a stdin test holds {type(value).__name__}, not text")
    return value


def _call(args: Any, expected: Any) -> dict[str, str]:
    """A call-based test in LiveCodeBench's encoding: one JSON argument per line, the unwrapped output."""
    if not isinstance(args, list):
        raise DroppedRecord("unreadable tests", f"call arguments are {type(args).__name__}, not a list")
    return {"input": "\n".join(json.dumps(a) for a in args), "output": json.dumps(_unwrap(expected))}


def deepcoder_tests(raw: Any) -> tuple[str, str | None, list[dict[str, str]]]:
    """(testtype, fn_name or None, tests) of a row's `tests` value, in any of the three encodings:

    lcbv5           [{"input", "output", "testtype": "stdin" | "functional"}] as LiveCodeBench's
    primeintellect  [{"type": "stdin_stdout" | "function_call", "input", "output", "fn_name"?}]
                    (a call's input is the argument list, its output [expected])
    taco            {"inputs": [...], "outputs": [...], "fn_name"?} (a call's outputs each [expected])
    """
    try:
        value = json.loads(raw) if isinstance(raw, (str, bytes)) else raw
    except ValueError as err:
        raise DroppedRecord("unreadable tests", f"tests are not JSON ({err})") from None
    if isinstance(value, dict) and isinstance(value.get("inputs"), list) and isinstance(value.get("outputs"), list):
        fn = value.get("fn_name")
        pairs = list(zip(value["inputs"], value["outputs"]))
        if fn:
            return "functional", str(fn), [_call(a, o) for a, o in pairs]
        return "stdin", None, [{"input": _text(a), "output": _text(o)} for a, o in pairs]
    if not isinstance(value, list) or not all(isinstance(t, dict) for t in value):
        raise DroppedRecord("unreadable tests", "tests are neither a list of objects nor {inputs, outputs}")
    kinds = {t.get("testtype") or t.get("type") for t in value}
    if len(kinds) > 1:
        raise DroppedRecord("mixed test types", f"test types {sorted(map(str, kinds))} in one problem")
    kind = kinds.pop() if kinds else "stdin"
    if kind in ("stdin", "stdin_stdout"):
        return "stdin", None, [{"input": _text(t.get("input")), "output": _text(t.get("output"))} for t in value]
    if kind == "functional":
        return "functional", None, [{"input": _text(t.get("input")), "output": _text(t.get("output"))} for t in value]
    if kind == "function_call":
        names = {t.get("fn_name") for t in value}
        return (
            "functional",
            (names.pop() if len(names) == 1 else None),
            [_call(t.get("input"), t.get("output")) for t in value],
        )
    raise DroppedRecord("unreadable tests", f"unknown test type {kind!r}")


def deepcoder_problem(record: dict[str, Any]) -> RawProblem:
    testtype, fn, tests = deepcoder_tests(record.get("tests"))
    starter = _starter(record)
    if testtype == "functional" and not fn:
        fn = func_name(record.get("metadata"))
        match = re.search(r"^\s*def\s+([A-Za-z_]\w*)\s*\(", starter, re.MULTILINE)
        fn = fn or (match.group(1) if match else None)
    info = {"source": f"deepcoder/{record['_config']}", "platform": None, "difficulty": None}
    return RawProblem(record["_id"], str(record["problem"]), starter, tests, testtype, fn, info)


def load_deepcoder(src: DeepCoderSource, config: str, split: str) -> list[dict[str, Any]]:
    """One config's split, each row tagged with `_config` and `_id` (<config>-<split>-<row>)."""
    if src.path:
        folder = Path(src.path).expanduser() / config
        files = [
            f
            for f in sorted(folder.glob(f"{split}-*.parquet")) or sorted((folder / split).glob("*.parquet"))
            if f.is_file()
        ]  # a folder named *.parquet is no file of the dataset
        if not files:
            raise DataUnavailable(
                f"lcb: task_settings.lcb.data.deepcoder.path = {src.path!r} holds no "
                f"{config}/{split}-*.parquet (the dataset's layout)"
            )
        import pyarrow.parquet as pq

        rows = []
        for f in files:
            table = pq.read_table(f)
            missing = sorted({"problem", "tests"} - set(table.column_names))
            if missing:
                raise DataUnavailable(
                    f"lcb: {f} has no column {', '.join(missing)} (columns: "
                    f"{', '.join(table.column_names)}); it is not a DeepCoder file"
                )
            rows += table.to_pylist()
    else:
        rows = [
            dict(r)
            for r in load_hub_dataset(
                "lcb",
                src.dataset,
                name=config,
                split=split,
                revision=src.revision,
                path_setting="task_settings.lcb.data.deepcoder.path",
            )
        ]
    for i, row in enumerate(rows):
        row["_config"], row["_id"] = config, f"{config}-{split}-{i}"
    return rows


def deepcoder_records(src: DeepCoderSource) -> Iterator[tuple[str, dict[str, Any], Any]]:
    """(split, record, reader): the training configs in the order given, then the test config."""
    for config in src.train:
        for record in load_deepcoder(src, config, "train"):
            yield "train", record, deepcoder_problem
    for record in load_deepcoder(src, src.test, "test"):
        yield "test", record, deepcoder_problem

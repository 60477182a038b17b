"""Where lcb's problems come from: two sources, read into one `RawProblem` shape.

livecodebench  `livecodebench/code_generation_lite` at a revision without the loading script (the
               generic JSON builder reads every `test*.jsonl`), or a directory of those files. Train
               and test are contest-date windows. Tests: the record's private tests, as JSON or as
               base64 -> zlib -> pickle, read by an unpickler that admits plain data only.
deepcoder      `agentica-org/DeepCoder-Preview-Dataset`: read by vpo_tasks/lcb_deepcoder.py into the
               same shape.

Every test becomes {"input", "output"} text in LiveCodeBench's encoding: a functional test's input
is one JSON argument per line and its output one JSON value; a stdin test's are the raw texts.
"""

from __future__ import annotations

import base64
import io
import json
import pickle
import zlib
from dataclasses import dataclass, field
from datetime import date, datetime
from pathlib import Path
from typing import Any, Iterator

from vpo.task import settings_from
from vpo_tasks.hub import DataUnavailable, load_hub_dataset

SOURCES = ("deepcoder", "livecodebench")
_DEEPCODER_CONFIGS = ("primeintellect", "taco", "lcbv5", "codeforces")
_MAX_DECODED_BYTES = 256 << 20  # a private-test blob inflating past this is refused (zip bomb)
_PLAIN_TYPES = (str, bytes, list, dict, tuple, int, float, bool, type(None))


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
            if name not in _DEEPCODER_CONFIGS:
                raise ValueError(
                    f"lcb.deepcoder: {name!r} is not one of the dataset's configs ({', '.join(_DEEPCODER_CONFIGS)})"
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


def checked_fields(raw: RawProblem) -> RawProblem:
    """`raw` when every field a row carries has the type its parquet column needs; DroppedRecord naming the
    first one that does not (a `difficulty: 3` among text difficulties once stopped the whole preprocess
    with a pyarrow error naming no record)."""
    fields = {"task_id": raw.task_id, "question": raw.question, "starter_code": raw.starter_code}
    fields.update({"testtype": raw.testtype, "fn_name": raw.fn_name}, **{f"info.{k}": v for k, v in raw.info.items()})
    for name, value in fields.items():
        if not (value is None and (name == "fn_name" or name.startswith("info."))) and not isinstance(value, str):
            raise DroppedRecord("malformed", f"{name} is a {type(value).__name__}, not text")
    if raw.testtype not in ("functional", "stdin"):
        raise DroppedRecord("malformed", f"testtype {raw.testtype[:40]!r} is neither functional nor stdin")
    return raw


class DroppedRecord(Exception):
    """A raw record that yields no problem: `reason` is counted, `detail` (if any) is logged."""

    def __init__(self, reason: str, detail: str = ""):
        super().__init__(reason)
        self.reason, self.detail = reason, detail


# ---- livecodebench ---------------------------------------------------------------------------
class UndecodableTests(ValueError):
    """A record's private tests are not plain data in either known encoding."""


class _PlainDataUnpickler(pickle.Unpickler):
    """An unpickler that resolves no global at all, so only built-in plain data can come out."""

    def find_class(self, module: str, name: str):
        raise pickle.UnpicklingError(f"refused to load {module}.{name}: only plain data is admitted")

    def persistent_load(self, pid: Any):
        raise pickle.UnpicklingError("refused a persistent id: only plain data is admitted")


def _check_plain(value: Any, depth: int = 0) -> None:
    if depth > 20 or not isinstance(value, _PLAIN_TYPES):
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
            raw = inflater.decompress(base64.b64decode(text, validate=True), _MAX_DECODED_BYTES)
            if inflater.unconsumed_tail:
                raise UndecodableTests(f"inflates past {_MAX_DECODED_BYTES} bytes")
            value = _PlainDataUnpickler(io.BytesIO(raw)).load()
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


def _as_datetime(value: Any) -> datetime:
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


def _livecodebench_problem(record: dict[str, Any]) -> RawProblem:
    try:
        tests = decode_tests(record["private_test_cases"])
    except UndecodableTests as err:
        raise DroppedRecord("undecodable", f"private tests do not decode to plain data ({err})") from None
    testtype = tests[0].get("testtype", "stdin") if tests else "stdin"
    info = {"source": "livecodebench", "platform": record.get("platform"), "difficulty": record.get("difficulty")}
    return RawProblem(
        str(record["question_id"]),
        str(record["question_content"]),
        starter_code(record),
        tests,
        testtype,
        func_name(record.get("metadata")),
        info,
        _as_datetime(record["contest_date"]),
    )


def starter_code(record: dict[str, Any]) -> str:
    """A record's starter code: text, or none."""
    starter = record.get("starter_code") or ""
    if not isinstance(starter, str):
        raise DroppedRecord("malformed", f"starter_code is a {type(starter).__name__}, not text")
    return starter


def livecodebench_records(src: LiveCodeBenchSource) -> Iterator[tuple[str, dict[str, Any], Any]]:
    """(split, record, reader) for every record inside a date window, train by contest date."""
    bounds = [_as_datetime(getattr(src, n)) for n in ("train_before", "test_from", "test_before")]
    chosen = []
    for record in load_livecodebench(src):
        try:
            when = _as_datetime(record["contest_date"])
        except (KeyError, TypeError, ValueError):
            yield "train", record, _undated  # counted among the drops, not a stop
            continue
        split = "train" if when < bounds[0] else "test" if bounds[1] <= when < bounds[2] else None
        if split is not None:
            chosen.append((split, when, record))
    chosen.sort(key=lambda item: (item[0] != "train", item[1] if item[0] == "train" else datetime.min))
    for split, _, record in chosen:
        yield split, record, _livecodebench_problem

"""lcb's deepcoder source: `agentica-org/DeepCoder-Preview-Dataset` (the data the paper's LiveCodeBench
case study trains on), read into lcb_sources' `RawProblem` shape. Training problems come from the
configs `primeintellect`, `taco` and `lcbv5`, the held-out problems from `lcbv5`'s test split, or from a
directory in the dataset's layout (`<config>/<split>-*.parquet`). The three configs encode tests
differently (`deepcoder_tests`); every test becomes {"input", "output"} text in LiveCodeBench's encoding.
"""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any, Iterator

from vpo_tasks.hub import DataUnavailable, load_hub_dataset
from vpo_tasks.lcb_sources import DeepCoderSource, DroppedRecord, RawProblem, starter_code, func_name


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


def _deepcoder_problem(record: dict[str, Any]) -> RawProblem:
    testtype, fn, tests = deepcoder_tests(record.get("tests"))
    starter = starter_code(record)
    if testtype == "functional" and not fn:
        fn = func_name(record.get("metadata"))
        match = re.search(r"^\s*def\s+([A-Za-z_]\w*)\s*\(", starter, re.MULTILINE)
        fn = fn or (match.group(1) if match else None)
    info = {"source": f"deepcoder/{record['_config']}", "platform": None, "difficulty": None}
    return RawProblem(record["_id"], str(record["problem"]), starter, tests, testtype, fn, info)


def _load_deepcoder(src: DeepCoderSource, config: str, split: str) -> list[dict[str, Any]]:
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
        for record in _load_deepcoder(src, config, "train"):
            yield "train", record, _deepcoder_problem
    for record in _load_deepcoder(src, src.test, "test"):
        yield "test", record, _deepcoder_problem

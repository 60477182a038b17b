"""lcb: LiveCodeBench code generation (k = the problem's test cases, at most 16: tc_0..tc_15).

An answer is a Python program; channel i is 1 when it passes private test i, each test run on its
own in the sandbox (`vpo_tasks.lcb_grading`, `vpo.sandbox`). The GRPO scalar is the fraction of the
problem's tests passed; an answer is correct when it passes all of them. Reward rows have the
problem's own length (VPO draws weights of that length); methods that need a fixed k (GDPO, goal
conditioning) see them padded with zeros to 16 channels.

Data: `livecodebench/code_generation_lite` at a revision without the loading script (the generic
JSON builder reads every `test*.jsonl`), or a directory of those files (`data.path`). Train and test
are contest-date windows. Private tests only: decoded as JSON, else base64 -> zlib -> pickle read by
an unpickler that admits plain data only (a record that does not decode is dropped and named on
stderr, never run); tests over 8 KiB dropped; the `max_tests` smallest kept (stable order).
"""

from __future__ import annotations

import base64
import io
import json
import os
import pickle
import re
import sys
import zlib
from dataclasses import dataclass
from datetime import date, datetime
from pathlib import Path
from typing import Any, Sequence

from vpo.atomic import write_parquet_atomic
from vpo.task import Task, as_random, settings_from
from vpo_tasks.hub import DataUnavailable, load_hub_dataset
from vpo_tasks.lcb_grading import (COMPARE_RULES, eval_program, eval_solutions, extract_code, fingerprint,
                                   has_code_block, score_programs, split_solutions)

MAX_TESTS = 16  # reward channels; max_tests may not exceed it
MAX_DECODED_BYTES = 256 << 20  # a private-test blob inflating past this is refused (zip bomb)
PLAIN_TYPES = (str, bytes, list, dict, tuple, int, float, bool, type(None))
FORMAT_LINE = "Write your solution in one ```python code block."


@dataclass
class LcbSettings:
    path: str | None = None  # directory holding the release's test*.jsonl files; None: the hub dataset below
    dataset: str = "livecodebench/code_generation_lite"  # Hugging Face dataset id
    revision: str = "refs/pr/6"  # a revision without the loading script (the generic JSON builder reads all files)
    train_before: str = "2025-02-01"  # train: contest_date < this
    test_from: str = "2025-02-01"  # test: test_from <= contest_date < test_before
    test_before: str = "2025-05-01"
    max_tests: int = 16  # private tests kept per problem, the smallest first (<= 16)
    max_test_chars: int = 8192  # a test whose input + output is longer is dropped
    test_timeout_s: float = 6.0  # wall clock per test run
    memory_mb: int = 2048  # address space per test run
    compare: str = "official"  # stdin output rule: official (line/token, Decimal) | exact (right-stripped lines)
    train_size: int | None = None  # cap on training problems (in date order); None: all

    @classmethod
    def from_dict(cls, values: dict[str, Any] | None) -> "LcbSettings":
        s = settings_from(cls, values, "lcb")
        if not 1 <= s.max_tests <= MAX_TESTS:
            raise ValueError(f"lcb: max_tests must be between 1 and {MAX_TESTS}, got {s.max_tests}")
        if s.compare not in COMPARE_RULES:
            raise ValueError(f"lcb: compare {s.compare!r} is not one of {', '.join(COMPARE_RULES)}")
        if s.test_timeout_s <= 0 or s.memory_mb <= 0:
            raise ValueError("lcb: test_timeout_s and memory_mb must be positive")
        for name in ("train_before", "test_from", "test_before"):
            try:
                date.fromisoformat(str(getattr(s, name)))
            except ValueError:
                raise ValueError(f"lcb: {name} must be a date like 2025-02-01, got {getattr(s, name)!r}") from None
        return s


# ---- private tests ---------------------------------------------------------------------------
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
            isinstance(t, dict) and isinstance(t.get("input"), str) and isinstance(t.get("output"), str) for t in value):
        raise UndecodableTests("not a list of {input, output} objects with text values")
    return value


def smallest_tests(tests: list[dict[str, str]], max_tests: int, max_chars: int) -> list[dict[str, str]]:
    """Tests with input + output of at most max_chars, the max_tests smallest, ties in file order."""
    kept = [t for t in tests if len(t["input"]) + len(t["output"]) <= max_chars]
    return sorted(kept, key=lambda t: len(t["input"]) + len(t["output"]))[:max_tests]


# ---- data ------------------------------------------------------------------------------------
def as_datetime(value: Any) -> datetime:
    """contest_date as a datetime: ISO text (jsonl) or a datetime (the generic builder's timestamp)."""
    if isinstance(value, datetime):
        return value.replace(tzinfo=None)
    if isinstance(value, date):
        return datetime(value.year, value.month, value.day)
    return datetime.fromisoformat(str(value)).replace(tzinfo=None)


def load_raw(s: LcbSettings) -> list[dict[str, Any]]:
    """Every record of the release, in file order."""
    if s.path:
        files = sorted(Path(s.path).expanduser().glob("test*.jsonl"))
        if not files:
            raise DataUnavailable(f"lcb: task_settings.lcb.data.path = {s.path!r} holds no test*.jsonl file")
        return [json.loads(line) for f in files for line in f.read_text(encoding="utf-8").splitlines() if line.strip()]
    return [dict(r) for r in load_hub_dataset("lcb", s.dataset, split="test", revision=s.revision)]


class DroppedRecord(Exception):
    """A raw record that yields no problem: `reason` is counted, `detail` (if any) is logged."""

    def __init__(self, reason: str, detail: str = ""):
        super().__init__(reason)
        self.reason, self.detail = reason, detail


@dataclass
class Problem:
    record: dict[str, Any]  # the raw record (prompt fields, ids)
    tests: list[dict[str, str]]  # the kept private tests, smallest first
    testtype: str  # functional | stdin (from the first private test)
    fn_name: str | None  # metadata.func_name of a functional problem
    original: int  # private tests before the size filter and the cap


def problem_of(record: dict[str, Any], s: LcbSettings) -> Problem:
    """The kept tests, test type and function name of one raw record, or DroppedRecord."""
    try:
        tests = decode_tests(record["private_test_cases"])
    except UndecodableTests as err:
        raise DroppedRecord("undecodable", f"private tests do not decode to plain data ({err})") from None
    kept = smallest_tests(tests, s.max_tests, s.max_test_chars)
    if not kept:
        raise DroppedRecord("no test left")
    testtype = tests[0].get("testtype", "stdin")
    fn_name = None
    if testtype == "functional":
        try:
            fn_name = json.loads(record.get("metadata") or "{}").get("func_name")
        except (ValueError, AttributeError):
            fn_name = None
        if not fn_name:
            raise DroppedRecord("no func_name", "functional tests without metadata.func_name")
    return Problem(record, kept, testtype, fn_name, len(tests))


def signature(record: dict[str, Any], fn_name: str) -> str:
    """The starter's `def` line without `self`, or `def fn_name(...):` when the starter has none."""
    match = re.search(r"^[ \t]*(def [^\n]*)", record.get("starter_code") or "", re.MULTILINE)
    line = match.group(1).strip() if match else f"def {fn_name}(...):"
    return line.replace("(self, ", "(").replace("(self)", "()")


def build_prompt(record: dict[str, Any], testtype: str, fn_name: str | None) -> str:
    content = str(record["question_content"]).replace("(self, ", "(").replace("(self)", "()")
    if testtype == "functional":
        ask = f"Your solution should be a Python function with this signature:\n{signature(record, str(fn_name))}"
    else:
        ask = "Write a complete Python program that reads the input from stdin and writes the answer to stdout."
    return f"{content}\n\n{ask}\n{FORMAT_LINE}"


class LcbTask(Task):
    name = "lcb"
    data_source = "lcb"
    objectives = tuple((f"tc_{i}", f"Passing test case {i + 1}") for i in range(MAX_TESTS))
    scalar_weights = (1 / MAX_TESTS,) * MAX_TESTS  # on padded rows; `scalar` below uses the problem's own tests
    variable_k = True
    program_language = "python"
    default_m = 3
    single_format_line = FORMAT_LINE

    def scalar(self, vector: Sequence[float]) -> float:
        """Fraction of the problem's tests passed (the row has one entry per test)."""
        return float(sum(vector) / len(vector)) if len(vector) else 0.0

    def rows(self, split: str, problems: list["Problem"], s: LcbSettings) -> list[dict[str, Any]]:
        out = []
        for i, p in enumerate(problems):
            truth = {"testtype": p.testtype, "fn_name": p.fn_name, "inputs": [t["input"] for t in p.tests],
                     "outputs": [t["output"] for t in p.tests], "timeout_s": s.test_timeout_s,
                     "memory_mb": s.memory_mb, "compare": s.compare}
            out.append({
                "data_source": self.data_source,
                "prompt": [{"role": "user", "content": build_prompt(p.record, p.testtype, p.fn_name)}],
                "ability": "code",
                "reward_model": {"style": "rule", "ground_truth": truth},
                "extra_info": {"split": split, "index": i, "task_id": p.record["question_id"],
                               "platform": p.record.get("platform"), "difficulty": p.record.get("difficulty"),
                               "num_test_cases": len(p.tests), "num_test_cases_original": p.original,
                               "testtype": p.testtype},
            })
        return out

    def preprocess(self, out_dir: str, settings: dict[str, Any] | None = None) -> tuple[str, str]:
        s = LcbSettings.from_dict(settings)
        bounds = [as_datetime(getattr(s, n)) for n in ("train_before", "test_from", "test_before")]
        splits: dict[str, list[Problem]] = {"train": [], "test": []}
        dropped: dict[str, int] = {}
        for record in load_raw(s):
            when = as_datetime(record["contest_date"])
            split = "train" if when < bounds[0] else "test" if bounds[1] <= when < bounds[2] else None
            if split is None:
                continue
            try:
                splits[split].append(problem_of(record, s))
            except DroppedRecord as err:
                dropped[err.reason] = dropped.get(err.reason, 0) + 1
                if err.detail:
                    print(f"lcb: dropped {record.get('question_id')!r}: {err.detail}", file=sys.stderr)
        splits["train"].sort(key=lambda p: as_datetime(p.record["contest_date"]))
        if s.train_size is not None:
            splits["train"] = splits["train"][: s.train_size]
        print(f"lcb: train {len(splits['train'])} problems, test {len(splits['test'])}; dropped {dropped or 'none'}",
              file=sys.stderr)
        return tuple(write_parquet_atomic(self.rows(split, splits[split], s), os.path.join(out_dir, f"{split}.parquet"))
                     for split in ("train", "test"))

    # -- answers
    def distinct_codes(self, text: str, m: int) -> list[str]:
        """The programs of a response: m = 1 the extracted code; else the first m solutions, each
        extracted, empty ones skipped, one per AST fingerprint."""
        if m == 1:
            return [extract_code(text)] if self.parses(text) else []
        codes, seen = [], set()
        for solution in split_solutions(text, m):
            code = extract_code(solution)
            key = fingerprint(code) if code else None
            if key and key not in seen:
                seen.add(key)
                codes.append(code)
        return codes

    def parses(self, text: str) -> bool:
        return has_code_block(text)

    def split_answers(self, text: str, m: int) -> list[str]:
        return self.distinct_codes(str(text), m)

    def score_answer(self, answer: str, ground_truth: dict[str, Any]) -> list[float]:
        return score_programs([extract_code(str(answer))], ground_truth)[0]

    def answer_slots(self, text: str, m: int) -> list[str]:
        return eval_solutions(text, m)

    def candidate_answer(self, candidate: str) -> str:
        return eval_program(candidate)

    def score_candidate(self, candidate: str, ground_truth: dict[str, Any]) -> list[float]:
        """Per-test results of the program the evaluation reads from the candidate (no program: all fail)."""
        return self.score_candidates([candidate], ground_truth)[0]

    def score_candidates(self, candidates: Sequence[str], ground_truth: dict[str, Any]) -> list[list[float]]:
        """Every candidate's program against every test in one batch of sandbox runs (an empty or
        uncompilable program fails every test without running)."""
        rows = score_programs([eval_program(c) for c in candidates], ground_truth)
        return [self._clean(row) for row in rows]

    def score_response(self, text: str, ground_truth: dict[str, Any], m: int) -> tuple[list[list[float]], int]:
        """One row per distinct program (no padding; one zero row when there is none), run as one batch."""
        text = str(text)
        codes = [extract_code(text)] if m == 1 else self.distinct_codes(text, m)
        rows = [self._clean(row) for row in score_programs(codes, ground_truth)] if codes else []
        count = int(self.parses(text)) if m == 1 else len(codes)
        return rows or [[0.0] * len(ground_truth["inputs"])], count

    def multi_format(self, m: int) -> str:
        return (f"Write {m} different solutions, each in its own ```python code block, separated by a line "
                "holding only ---.")

    # -- warm-start demonstrations (CPU trainer only): well-formed programs, mostly wrong
    def demonstration(self, row: dict[str, Any], rng: Any, n_answers: int) -> str:
        rng = as_random(rng)
        truth = row["reward_model"]["ground_truth"]
        fn = truth.get("fn_name") or "solve"

        def one() -> str:
            if truth["testtype"] == "functional":
                body = rng.choice(["return args[0]", "return 0", "return sorted(args[0])", "return len(args)"])
                return f"```python\ndef {fn}(*args):\n    {body}\n```"
            body = rng.choice(["print(input())", "print(0)", "print(len(input()))", "import sys\nprint(sys.stdin.read())"])
            return f"```python\n{body}\n```"

        return one() if n_answers <= 1 else "\n---\n".join(one() for _ in range(n_answers))


LCB = LcbTask()  # found through the vpo.tasks entry point `lcb` (pyproject.toml)

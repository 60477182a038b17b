"""lcb: LiveCodeBench code generation (k = the problem's test cases, at most 16: tc_0..tc_15).

An answer is a Python program; channel i is 1 when it passes private test i, each test run on its
own in the sandbox (`vpo_tasks.lcb_grading`, `vpo.sandbox`). The GRPO scalar is the fraction of the
problem's tests passed; an answer is correct when it passes all of them. Reward rows have the
problem's own length (VPO draws weights of that length); methods that need a fixed k (GDPO, goal
conditioning) see them padded with zeros to 16 channels.

Data (`vpo_tasks.lcb_sources`): DeepCoder's release (the paper's case study: its training configs,
the held-out `lcbv5` test split) or LiveCodeBench's own (contest-date windows), from the hub or a
local directory; `data.source` picks one. A record whose tests do not decode is dropped and named on
stderr, never run; tests over 8 KiB are dropped; the `max_tests` smallest are kept (stable order).
"""

from __future__ import annotations

import json
import os
import re
import sys
from dataclasses import dataclass
from typing import Any, Sequence

from vpo.atomic import write_parquet_atomic
from vpo.task import DEGENERATE_STRATEGY, Task, as_random, settings_from
from vpo_tasks.lcb_deepcoder import deepcoder_records
from vpo_tasks.lcb_sources import (
    SOURCES,
    DeepCoderSource,
    DroppedRecord,
    LiveCodeBenchSource,
    RawProblem,
    checked_fields,
    livecodebench_records,
)
from vpo_tasks.lcb_grading import (
    COMPARE_RULES,
    eval_program,
    eval_solutions,
    extract_code,
    fingerprint,
    has_code_block,
    score_programs,
    split_solutions,
)

_MAX_TESTS = 16  # reward channels; max_tests may not exceed it
FORMAT_LINE = "Write your solution in one ```python code block."


@dataclass
class LcbSettings:
    source: str = "deepcoder"  # deepcoder (the paper's case study) | livecodebench (date windows of its own release)
    deepcoder: Any = None  # that source's location and configs: a mapping read into lcb_sources.DeepCoderSource
    livecodebench: Any = None  # that source's location and date windows: read into LiveCodeBenchSource
    max_tests: int = 16  # tests kept per problem, the smallest first (<= 16)
    max_test_chars: int = 8192  # a test whose input + output is longer is dropped
    test_timeout_s: float = 6.0  # wall clock per test run
    memory_mb: int = 2048  # address space per test run
    compare: str = "official"  # stdin output rule: official (line/token, Decimal) | exact (right-stripped lines)
    train_size: int | None = None  # cap on training problems (in the source's order); None: all

    @classmethod
    def from_dict(cls, values: dict[str, Any] | None) -> "LcbSettings":
        s = settings_from(cls, values, "lcb")
        if s.source not in SOURCES:
            raise ValueError(f"lcb: source {s.source!r} is not one of {', '.join(SOURCES)}")
        s.deepcoder = DeepCoderSource.from_dict(s.deepcoder)
        s.livecodebench = LiveCodeBenchSource.from_dict(s.livecodebench)
        if not 1 <= s.max_tests <= _MAX_TESTS:
            raise ValueError(f"lcb: max_tests must be between 1 and {_MAX_TESTS}, got {s.max_tests}")
        if s.compare not in COMPARE_RULES:
            raise ValueError(f"lcb: compare {s.compare!r} is not one of {', '.join(COMPARE_RULES)}")
        if s.max_test_chars < 1:
            raise ValueError(
                f"lcb: max_test_chars must be at least 1, got {s.max_test_chars} (it would drop every test)"
            )
        if s.test_timeout_s <= 0 or s.memory_mb <= 0:
            raise ValueError("lcb: test_timeout_s and memory_mb must be positive")
        return s


# ---- tests -----------------------------------------------------------------------------------
def _smallest_tests(tests: list[dict[str, str]], max_tests: int, max_chars: int) -> list[dict[str, str]]:
    """Tests with input + output of at most max_chars, the max_tests smallest, ties in file order."""
    kept = [t for t in tests if len(t["input"]) + len(t["output"]) <= max_chars]
    return sorted(kept, key=lambda t: len(t["input"]) + len(t["output"]))[:max_tests]


# ---- data ------------------------------------------------------------------------------------
@dataclass
class Problem:
    raw: RawProblem  # the source's problem (statement, starter code, every test)
    tests: list[dict[str, str]]  # the kept tests, smallest first


def _problem_of(raw: RawProblem, s: LcbSettings) -> Problem:
    """The kept tests of one problem, or DroppedRecord."""
    kept = _smallest_tests(raw.tests, s.max_tests, s.max_test_chars)
    if not kept:
        raise DroppedRecord("no test left")
    if raw.testtype == "functional" and not raw.fn_name:
        raise DroppedRecord("no func_name", "functional tests without a function name")
    return Problem(raw, kept)


def _record_name(record: Any) -> Any:
    """What names a raw record in the log: its question id (livecodebench) or row id (deepcoder)."""
    return record.get("question_id") or record.get("_id") if isinstance(record, dict) else None


def signature(starter_code: str, fn_name: str) -> str:
    """The starter's `def` line without `self`, or `def fn_name(...):` when the starter has none."""
    match = re.search(r"^[ \t]*(def [^\n]*)", starter_code or "", re.MULTILINE)
    line = match.group(1).strip() if match else f"def {fn_name}(...):"
    return line.replace("(self, ", "(").replace("(self)", "()")


def prompt_fields(raw: RawProblem) -> dict[str, str]:
    """The problem's pieces a prompt template can place (`vpo.templates`): the statement (`self`
    dropped from signatures) and the entry sentence (the function's signature, or stdin/stdout)."""
    question = raw.question.replace("(self, ", "(").replace("(self)", "()")
    if raw.testtype == "functional":
        shown = signature(raw.starter_code, str(raw.fn_name))
        entry = f"Your solution should be a Python function with this signature:\n{shown}"
    else:
        entry = "Write a complete Python program that reads the input from stdin and writes the answer to stdout."
    return {"question": question, "entry": entry}


def build_prompt(raw: RawProblem) -> str:
    fields = prompt_fields(raw)
    return f"{fields['question']}\n\n{fields['entry']}\n{FORMAT_LINE}"


class LcbTask(Task):
    name = "lcb"
    label = "LiveCodeBench"
    data_source = "lcb"
    ability = "code"
    objectives = tuple((f"tc_{i}", f"Passing test case {i + 1}") for i in range(_MAX_TESTS))
    scalar_weights = (1 / _MAX_TESTS,) * _MAX_TESTS  # on padded rows; `scalar` below uses the problem's own tests
    variable_k = True
    program_language = "python"
    default_m = 3
    single_format_line = FORMAT_LINE
    template_fields = ("question", "entry")
    required_template_fields = ("question", "entry")
    settings_class = LcbSettings

    def scalar(self, vector: Sequence[float]) -> float:
        """Fraction of the problem's tests passed (the row has one entry per test)."""
        return float(sum(vector) / len(vector)) if len(vector) else 0.0

    def rows(self, split: str, problems: list[Problem], s: LcbSettings) -> list[dict[str, Any]]:
        out = []
        for i, p in enumerate(problems):
            raw = p.raw
            truth = {
                "testtype": raw.testtype,
                "fn_name": raw.fn_name,
                "inputs": [t["input"] for t in p.tests],
                "outputs": [t["output"] for t in p.tests],
                "timeout_s": s.test_timeout_s,
                "memory_mb": s.memory_mb,
                "compare": s.compare,
            }
            out.append(
                self.row(
                    build_prompt(raw),
                    truth,
                    split=split,
                    index=i,
                    task_id=raw.task_id,
                    **raw.info,
                    num_test_cases=len(p.tests),
                    num_test_cases_original=len(raw.tests),
                    testtype=raw.testtype,
                    prompt_fields=json.dumps(prompt_fields(raw)),
                )
            )
        return out

    def preprocess(self, out_dir: str, settings: dict[str, Any] | None = None) -> tuple[str, str]:
        s = LcbSettings.from_dict(settings)
        records = deepcoder_records(s.deepcoder) if s.source == "deepcoder" else livecodebench_records(s.livecodebench)
        splits: dict[str, list[Problem]] = {"train": [], "test": []}
        dropped: dict[str, int] = {}
        for split, record, reader in records:
            try:
                splits[split].append(_problem_of(checked_fields(reader(record)), s))
            except DroppedRecord as err:
                dropped[err.reason] = dropped.get(err.reason, 0) + 1
                if err.detail:
                    print(f"lcb: dropped {_record_name(record)!r}: {err.detail}", file=sys.stderr)
            except (RecursionError, TypeError, KeyError, ValueError, AttributeError) as err:
                # one malformed record (a missing field, 100k-deep JSON, a number where text belongs) is
                # dropped and named; it once stopped the whole preprocess naming nothing
                dropped["malformed"] = dropped.get("malformed", 0) + 1
                detail = " ".join(str(err).split())[:200]
                print(
                    f"lcb: dropped {_record_name(record)!r}: malformed record ({type(err).__name__}: {detail})",
                    file=sys.stderr,
                )
        if s.train_size is not None:  # fewer than asked: `vpo preprocess` refuses the split (split_problem)
            splits["train"] = splits["train"][: s.train_size]
        print(
            f"lcb ({s.source}): train {len(splits['train'])} problems, test {len(splits['test'])}; "
            f"dropped {dropped or 'none'}",
            file=sys.stderr,
        )
        return tuple(
            write_parquet_atomic(self.rows(split, splits[split], s), os.path.join(out_dir, f"{split}.parquet"))
            for split in ("train", "test")
        )

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

    def strategy_key(self, text: str, ground_truth: dict[str, Any], matrix: list[list[float]]) -> str:
        """The pattern of tests each program passes (1 passed, 0 failed): programs that fail alike are one
        strategy; a response without a program is degenerate."""
        if not self.split_answers(str(text), len(matrix)):
            return DEGENERATE_STRATEGY
        return "\n".join(sorted({"".join("1" if v >= 1.0 else "0" for v in row) for row in matrix}))

    def score_answer(self, answer: str, ground_truth: dict[str, Any]) -> list[float]:
        return score_programs([extract_code(str(answer))], ground_truth)[0]

    def answer_slots(self, text: str, m: int) -> list[str]:
        return eval_solutions(text, m)

    def candidate_answer(self, candidate: str, m: int) -> str:
        return eval_program(candidate)  # a single chain and a slot alike: the program the evaluation runs

    def score_answers(self, answers: Sequence[str], ground_truth: dict[str, Any]) -> list[list[float]]:
        """`score_answer` of each answer, their programs run as one batch."""
        return [self._clean(row) for row in score_programs([extract_code(str(a)) for a in answers], ground_truth)]

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
        return (
            f"Write {m} different solutions, each in its own ```python code block, separated by a line "
            "holding only ---."
        )

    # -- warm-start demonstrations (CPU trainer only): well-formed programs, mostly wrong
    def demonstration(self, row: dict[str, Any], rng: Any, n_answers: int) -> str:
        rng = as_random(rng)
        truth = row["reward_model"]["ground_truth"]
        fn = truth.get("fn_name") or "solve"

        def one() -> str:
            if truth["testtype"] == "functional":
                body = rng.choice(["return args[0]", "return 0", "return sorted(args[0])", "return len(args)"])
                return f"```python\ndef {fn}(*args):\n    {body}\n```"
            body = rng.choice(
                ["print(input())", "print(0)", "print(len(input()))", "import sys\nprint(sys.stdin.read())"]
            )
            return f"```python\n{body}\n```"

        return one() if n_answers <= 1 else "\n---\n".join(one() for _ in range(n_answers))


LCB = LcbTask()  # found through the vpo.tasks entry point `lcb` (pyproject.toml)

"""Grading LiveCodeBench answers (docs/tasks.md, lcb): code extraction, the multi-solution split, the
AST fingerprint, and one sandboxed run per test case.

A functional (LeetCode) test calls `fn_name(*args)` on a bare function or on a `Solution()`
instance, with the official harness's import block in scope, and passes when the result (a tuple
read as a list) equals the expected JSON value. A stdin (AtCoder, Codeforces) test runs the program
as `__main__` with the test input on stdin and compares stdout with one of two rules:

    official   strip the output, split into lines, strip each line, same line count; per line an
               exact match or the same whitespace-separated tokens as Decimals (so 6.0 == 6)
    exact      CRLF to LF, right-strip every line, drop trailing blank lines, then equality

Every test runs in its own fresh process (vpo.sandbox), so nothing a program changes carries over
to the next test. Code that does not compile fails every test without being run.
"""

from __future__ import annotations

import ast
import json
import re
import secrets
from decimal import Decimal, InvalidOperation
from typing import Any, Sequence

from vpo.sandbox import Program, default_workers, run_programs

COMPARE_RULES = ("official", "exact")
_PYTHON_BLOCK = re.compile(r"```python(.*?)```", re.DOTALL)
_SEPARATOR_LINE = re.compile(r"^[ \t]*---[ \t]*\r?$", re.MULTILINE)
# The official harness's import block for call-based problems (typing names, the usual modules).
_PRELUDE = """from typing import *
import bisect, collections, copy, functools, heapq, itertools, math, operator, random, re, string, sys
from bisect import *
from collections import *
from functools import *
from heapq import *
from itertools import *
from math import *
sys.setrecursionlimit(50000)
"""


# ---- reading answers -------------------------------------------------------------------------
def extract_code(text: str) -> str:
    """The program of one answer: the first complete ```python block; else an unterminated one to
    the end; else the first pair of ``` fences (info string dropped); else the whole text. Stripped."""
    text = str(text)
    match = _PYTHON_BLOCK.search(text)
    if match:
        return match.group(1).strip()
    start = text.find("```python")
    if start >= 0:
        return text[start + len("```python") :].strip()
    first = text.find("```")
    second = text.find("```", first + 3)  # -1 when there is no pair (no fence at all: first is -1 too)
    if second > first:
        body = text[first + 3 : second]
        newline = body.find("\n")
        return (body[newline + 1 :] if newline >= 0 else "").strip()
    return text.strip()


def has_code_block(text: str) -> bool:
    """Whether a response holds a fenced block with something in it (the parse-failure metric)."""
    text = str(text)
    return "```" in text and bool(extract_code(text))


def split_solutions(text: str, m: int) -> list[str]:
    """The first m solutions of a multi-solution response (docs/tasks.md, lcb): two or more complete python
    blocks are the solutions; else the stripped non-empty parts around `---` lines, or the lone
    python block when that leaves at most one part."""
    text = str(text)
    blocks = [match.group(0) for match in _PYTHON_BLOCK.finditer(text)]
    if len(blocks) >= 2:
        return blocks[:m]
    parts = [part.strip() for part in _SEPARATOR_LINE.split(text)]
    parts = [part for part in parts if part]
    if len(parts) <= 1 and len(blocks) == 1:
        return blocks
    return parts[:m]


# ---- the evaluation's reading of answers (docs/evaluation.md: the authors' eval, not the reward) ---
def _fenced(text: str, opener: str, pos: int = 0) -> tuple[str, int] | None:
    """Body of the first `opener` ... ``` pair at or after pos and the index past its closing fence.
    (If the first opener has no closing fence after it, no later one has: a linear search.)"""
    start = text.find(opener, pos)
    end = text.find("```", start + len(opener)) if start != -1 else -1
    return None if end == -1 else (text[start + len(opener) : end], end + 3)


def eval_code_block(text: str) -> str:
    """One answer's code as the evaluation reads it: the body of the first complete ```python block;
    else everything after an unterminated ```python fence; else the body of the first ``` pair (an
    info string after the fence stays part of it); else the whole text. Stripped."""
    text = str(text)
    found = _fenced(text, "```python")
    if found is not None:
        return found[0].strip()
    start = text.find("```python")
    if 0 <= start < len(text) - len("```python"):
        return text[start + len("```python") :].strip()
    found = _fenced(text, "```")
    return found[0].strip() if found is not None else text.strip()


def eval_solutions(text: str, m: int) -> list[str]:
    """The m solution slots of a multi-solution response as the evaluation splits it: every complete
    ```python block, if there is one; else the parts around every `---` (inline ones too), when there
    are at least two, each read by `eval_code_block`; else the whole response read by it. The first
    m, "" for missing ones, repeats kept."""
    text = str(text)
    blocks, pos = [], 0
    while (found := _fenced(text, "```python", pos)) is not None:
        blocks.append(found[0].strip())
        pos = found[1]
    if not blocks:
        parts = [part.strip() for part in text.split("---") if part.strip()]
        blocks = [eval_code_block(part) for part in parts] if len(parts) > 1 else [eval_code_block(text)]
    return (blocks + [""] * m)[:m]


def eval_program(candidate: str) -> str:
    """The program the evaluation runs for one candidate: `eval_code_block` when it holds a ```python
    fence; else the candidate is wrapped in one, so its code ends at its first ``` fence. Stripped."""
    candidate = str(candidate)
    if "```python" in candidate:
        return eval_code_block(candidate)
    return candidate.split("```")[0].strip()


# Parsing runs in the scoring process with no time limit (a 10 MB program took 12.7 s): a longer
# program is not parsed. Responses are token-limited far below this (8192 tokens ~ 40 kB).
MAX_PROGRAM_CHARS = 200_000
_SOURCE_NAME = "main.py"  # what compile errors name the program


def fingerprint(code: str) -> str:
    """AST dump (comments, blank lines and spacing ignored); code that does not parse, or is longer
    than MAX_PROGRAM_CHARS: its text with whitespace collapsed, lower-cased."""
    if len(code) > MAX_PROGRAM_CHARS:
        return "text:" + " ".join(code.split()).lower()
    try:
        return "ast:" + ast.dump(ast.parse(code))
    except Exception:  # SyntaxError, RecursionError on absurd nesting, ValueError on NUL bytes
        return "text:" + " ".join(code.split()).lower()


def compiles(code: str) -> bool:
    """Whether the program compiles (compiling runs nothing); a program over MAX_PROGRAM_CHARS does not."""
    if len(code) > MAX_PROGRAM_CHARS:
        return False
    try:
        compile(code, _SOURCE_NAME, "exec")
        return True
    except Exception:
        return False


# ---- comparing outputs -----------------------------------------------------------------------
def _decimals(tokens: Sequence[str]) -> list[Decimal] | None:
    try:
        return [Decimal(token) for token in tokens]
    except (InvalidOperation, ValueError):
        return None


def stdout_matches(got: str, expected: str, rule: str) -> bool:
    """Whether a stdin program's output matches the expected output under `rule` (module docstring)."""
    if rule == "exact":

        def lines(text: str) -> list[str]:
            rows = [line.rstrip() for line in text.split("\n")]  # rstrip takes a \r of \r\n too
            while rows and not rows[-1]:
                rows.pop()
            return rows

        return lines(got) == lines(expected)
    if rule != "official":
        raise ValueError(f"unknown stdin comparison rule {rule!r}; one of {COMPARE_RULES}")
    got_lines = [line.strip() for line in got.strip().split("\n")]
    want_lines = [line.strip() for line in expected.strip().split("\n")]
    if len(got_lines) != len(want_lines):
        return False
    for have, want in zip(got_lines, want_lines):
        if have == want:
            continue
        numbers = _decimals(have.split())  # a line that differs matches only as the same numbers
        if numbers is None or numbers != _decimals(want.split()):
            return False
    return True


# ---- running tests ---------------------------------------------------------------------------
def functional_program(code: str, fn_name: str, args_text: str, marker: str) -> str:
    """A program that defines the solution, calls it once and prints `marker` + JSON of the result."""
    return f"""import io as _io, json as _json, sys as _sys
_args = [_json.loads(_line) for _line in {args_text!r}.split("\\n") if _line.strip()]
_out = _sys.stdout
_sys.stdout = _io.StringIO()
_ns = {{"__name__": "solution"}}
exec(compile({_PRELUDE + code!r}, "solution.py", "exec"), _ns)
_cls = _ns.get("Solution")
if isinstance(_cls, type) and hasattr(_cls, {fn_name!r}):
    _fn = getattr(_cls(), {fn_name!r})
elif callable(_ns.get({fn_name!r})):
    _fn = _ns[{fn_name!r}]
else:
    raise SystemExit("no function {fn_name}")
_result = _fn(*_args)
if isinstance(_result, tuple):
    _result = list(_result)
_out.write("\\n" + {marker!r} + _json.dumps(_result) + "\\n")
_out.flush()
"""


def functional_result(stdout: str, marker: str) -> tuple[bool, Any]:
    """(found, value) of the marked result line."""
    for line in reversed(stdout.splitlines()):
        if line.startswith(marker):
            try:
                return True, json.loads(line[len(marker) :])
            except ValueError:
                return False, None
    return False, None


def programs_for_tests(code: str, truth: dict[str, Any]) -> tuple[list[Program], str]:
    """One sandbox Program per test of a problem, and the result marker of functional runs."""
    timeout = float(truth.get("timeout_s", 6.0))
    memory = int(truth.get("memory_mb", 2048))
    marker = "@@vpo-result-" + secrets.token_hex(8) + "@@"
    programs = []
    for test_input in truth["inputs"]:
        if truth["testtype"] == "functional":
            source, stdin = functional_program(code, str(truth["fn_name"]), str(test_input), marker), ""
        else:
            source, stdin = code, str(test_input)
        programs.append(Program(source, stdin, timeout_s=timeout, memory_mb=memory))
    return programs, marker


def passed(result, expected: str, truth: dict[str, Any], marker: str) -> float:
    """1.0 when one test's run passes, else 0.0."""
    if result.status != "ok":
        return 0.0
    if truth["testtype"] == "functional":
        found, value = functional_result(result.stdout, marker)
        try:
            return float(found and value == json.loads(expected))
        except ValueError:
            return 0.0
    return float(stdout_matches(result.stdout, str(expected), str(truth.get("compare", "official"))))


def score_programs(codes: Sequence[str], truth: dict[str, Any], workers: int | None = None) -> list[list[float]]:
    """Per-test 0/1 rows, one per code, from one batch of sandbox runs (`workers` at a time)."""
    n = len(truth["inputs"])
    rows = [[0.0] * n for _ in codes]
    batch, where, markers = [], [], []
    for i, code in enumerate(codes):
        if not code or not compiles(code):
            continue
        programs, marker = programs_for_tests(code, truth)
        batch += programs
        where += [(i, t) for t in range(n)]
        markers += [marker] * n
    results = run_programs(batch, workers=workers or default_workers())
    for (i, t), result, marker in zip(where, results, markers):
        rows[i][t] = passed(result, truth["outputs"][t], truth, marker)
    return rows

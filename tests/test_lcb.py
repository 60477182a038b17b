"""lcb: the fixture records L1-L4 (tests/fixtures/lcb) (raw code_generation_lite jsonl, both test
encodings, both test types), the restricted unpickler, code extraction and the per-test reward."""

from __future__ import annotations

import base64
import json
import os
import pickle
import zlib
from datetime import datetime
from pathlib import Path

import pandas as pd
import pytest

from vpo.reward import compute_score
from vpo_tasks import lcb, lcb_sources
from vpo_tasks.lcb import LCB
from vpo_tasks.lcb_sources import UndecodableTests, decode_tests
from vpo_tasks.lcb_grading import extract_code, fingerprint, has_code_block, split_solutions, stdout_matches

FIXTURE = Path(__file__).parent / "fixtures" / "lcb"
LOCAL = {"source": "livecodebench", "livecodebench": {"path": str(FIXTURE)}}
# L3's 20 tests are x -> 2x for these x; by size (len(input) + len(output)), ties in file order, the
# 16 smallest are these indices (sizes 4,4,4,4,4,5,5,5,5,6,7,7,9,10,12,13; dropped: 14,16,19,20).
L3_X = [1, 50, 3, 12345, 7, 999, 4, 123456789, 60, 2, 100000, 9, 31, 4444, 55555, 8, 1234567, 0, 77777777, 6]
L3_KEPT = [0, 2, 6, 9, 17, 4, 11, 15, 19, 12, 1, 8, 5, 13, 3, 14]


def encode(value) -> str:
    return base64.b64encode(zlib.compress(pickle.dumps(value))).decode()


@pytest.fixture(scope="module")
def splits(tmp_path_factory):
    out = tmp_path_factory.mktemp("lcb")
    LCB.preprocess(str(out), LOCAL)
    return {name: pd.read_parquet(out / f"{name}.parquet") for name in ("train", "test")}


def truth_of(frame, task_id, **override):
    row = frame[frame["extra_info"].map(lambda e: e["task_id"]) == task_id].iloc[0]
    truth = {k: (list(v) if hasattr(v, "tolist") else v) for k, v in row["reward_model"]["ground_truth"].items()}
    truth.update(override)
    return truth


def test_fixture_splits(splits):
    train, test = splits["train"], splits["test"]
    assert [e["task_id"] for e in train["extra_info"]] == ["2030A"]
    assert [e["task_id"] for e in test["extra_info"]] == ["lc-add-k", "abc400_a"]
    counts = {
        e["task_id"]: (e["num_test_cases"], e["num_test_cases_original"], e["testtype"], e["platform"])
        for e in [*train["extra_info"], *test["extra_info"]]
    }
    assert counts == {
        "2030A": (16, 20, "stdin", "codeforces"),
        "lc-add-k": (3, 3, "functional", "leetcode"),
        "abc400_a": (1, 2, "stdin", "atcoder"),
    }
    l3 = truth_of(train, "2030A")
    assert l3["inputs"] == [f"{L3_X[i]}\n" for i in L3_KEPT]
    assert l3["outputs"] == [f"{2 * L3_X[i]}\n" for i in L3_KEPT]
    l1 = truth_of(test, "lc-add-k")
    assert (l1["testtype"], l1["fn_name"], l1["compare"]) == ("functional", "addK", "official")
    assert truth_of(test, "abc400_a")["inputs"] == ["3\n1 2 3\n"]  # the 9,000-character test is dropped


def test_prompts_drop_self_and_ask_for_one_block(splits):
    prompt = splits["test"]["prompt"].iloc[0][0]["content"]
    assert "def addK(nums: List[int], k: int) -> List[int]:" in prompt and "self" not in prompt
    assert prompt.endswith(lcb.FORMAT_LINE)
    from vpo.prompts import rewrite_prompt

    multi = rewrite_prompt([{"role": "user", "content": prompt}], mode="multi", m=3, task=LCB)[0]["content"]
    assert "3 different solutions" in multi and lcb.FORMAT_LINE not in multi


def test_cap_is_stable_and_configurable(tmp_path):
    LCB.preprocess(str(tmp_path), {**LOCAL, "max_tests": 5})
    truth = pd.read_parquet(tmp_path / "train.parquet")["reward_model"].iloc[0]["ground_truth"]
    assert list(truth["inputs"]) == [f"{L3_X[i]}\n" for i in L3_KEPT[:5]]
    with pytest.raises(ValueError, match="max_tests"):
        LCB.preprocess(str(tmp_path), {**LOCAL, "max_tests": 17})


def test_contest_date_as_datetime(tmp_path, monkeypatch):
    records = [json.loads(line) for f in sorted(FIXTURE.glob("test*.jsonl")) for line in f.read_text().splitlines()]
    for record in records:
        record["contest_date"] = datetime.fromisoformat(record["contest_date"])  # the generic builder's timestamp
    monkeypatch.setattr(lcb_sources, "load_livecodebench", lambda settings: records)
    LCB.preprocess(str(tmp_path), {"source": "livecodebench"})
    assert [e["task_id"] for e in pd.read_parquet(tmp_path / "test.parquet")["extra_info"]] == ["lc-add-k", "abc400_a"]


# ---- decoding private tests ------------------------------------------------------------------
def test_both_encodings_decode():
    tests = [{"input": "1\n", "output": "2\n", "testtype": "stdin"}]
    assert decode_tests(json.dumps(tests)) == tests
    assert decode_tests(encode(json.dumps(tests))) == tests


class Exploit:
    def __init__(self, canary):
        self.canary = canary

    def __reduce__(self):
        return (os.system, (f"touch {self.canary}",))


def test_malicious_pickle_never_runs(tmp_path, capsys):
    canary = tmp_path / "canary"
    blob = encode(Exploit(canary))
    assert not canary.exists()
    with pytest.raises(UndecodableTests, match="only plain data"):
        decode_tests(blob)
    for sneaky in (encode({"input": {1, 2}}), encode([Exploit(canary)]), "not base64 !!"):
        with pytest.raises(UndecodableTests):
            decode_tests(sneaky)
    raw = tmp_path / "raw"
    raw.mkdir()
    records = [json.loads(line) for line in (FIXTURE / "test.jsonl").read_text().splitlines()]
    records[0]["private_test_cases"] = blob
    (raw / "test.jsonl").write_text("\n".join(json.dumps(r) for r in records))
    LCB.preprocess(str(tmp_path / "out"), {"source": "livecodebench", "livecodebench": {"path": str(raw)}})
    err = capsys.readouterr().err
    assert "dropped 'lc-add-k'" in err and "'undecodable': 1" in err
    assert [e["task_id"] for e in pd.read_parquet(tmp_path / "out" / "test.parquet")["extra_info"]] == ["abc400_a"]
    assert not canary.exists()


# ---- scoring (the fixture records; ryanboldi/vpo at 767db79 vpo_tasks/livecodebench.py; this project's conventions)
L1_SOLUTIONS = {
    "bare function with its import": (
        "from typing import List\ndef addK(nums, k):\n    return [x + k for x in nums]",
        [1, 1, 1],
    ),
    "tuple result": ("def addK(nums, k):\n    return tuple(x + k for x in nums)", [1, 1, 1]),
    "Solution class": (
        "class Solution:\n    def addK(self, nums, k):\n        return [x + k for x in nums]",
        [1, 1, 1],
    ),
    "List annotation, no import": (
        "def addK(nums: List[int], k: int) -> List[int]:\n    return [x + k for x in nums]",
        [1, 1, 1],
    ),
    # kept tests by size: ([0], 5), ([-1, 4], 1), ([1, 2, 3], 2)
    "fails only k = 5": ("def addK(nums, k):\n    return [] if k == 5 else [x + k for x in nums]", [0, 1, 1]),
    "prints instead": ("def addK(nums, k):\n    print([x + k for x in nums])", [0, 0, 0]),
    "wrong name": ("def add_k(nums, k):\n    return [x + k for x in nums]", [0, 0, 0]),
    "syntax error": ("def addK(nums, k)\n    return nums", [0, 0, 0]),
}


@pytest.mark.parametrize("case", sorted(L1_SOLUTIONS))
def test_functional_scores(splits, case):
    code, expected = L1_SOLUTIONS[case]
    assert LCB.score_answer(f"Here:\n```python\n{code}\n```", truth_of(splits["test"], "lc-add-k")) == expected


L2_SOLUTIONS = {
    "input()": ("input()\nprint(sum(map(int, input().split())))", 1, 1),
    "open(0)": ("print(sum(map(int, open(0).read().split()[1:])))", 1, 1),
    "sys.stdin.buffer": ("import sys\nprint(sum(map(int, sys.stdin.buffer.read().split()[1:])))", 1, 1),
    "trailing space": ("input()\nprint(str(sum(map(int, input().split()))) + ' ')", 1, 1),
    "6.0": ("input()\nprint(float(sum(map(int, input().split()))))", 1, 0),
    "main guard and sys.exit": (
        "import sys\ndef main():\n    input()\n    print(6)\n    sys.exit(0)\nif __name__ == '__main__':\n    main()",
        1,
        1,
    ),
    "wrong": ("print(5)", 0, 0),
}


@pytest.mark.parametrize("case", sorted(L2_SOLUTIONS))
def test_stdin_scores_under_both_rules(splits, case):
    code, official, exact = L2_SOLUTIONS[case]
    for rule, expected in (("official", official), ("exact", exact)):
        truth = truth_of(splits["test"], "abc400_a", compare=rule)
        assert LCB.score_answer(f"```python\n{code}\n```", truth) == [expected], rule


def test_infinite_loop_scores_zero_after_the_timeout(splits):
    truth = truth_of(splits["test"], "abc400_a", timeout_s=1.0)
    assert LCB.score_answer("```python\nwhile True:\n    pass\n```", truth) == [0]


def test_sixteen_tests_each_run(splits):
    truth = truth_of(splits["train"], "2030A")
    assert LCB.score_answer("```python\nprint(2 * int(input()))\n```", truth) == [1.0] * 16
    half = "```python\nx = int(input())\nprint(2 * x if x < 100 else 0)\n```"
    assert LCB.score_answer(half, truth) == [float(L3_X[i] < 100) for i in L3_KEPT]


def test_stdout_rules():
    assert stdout_matches("6\n\n", "6\n", "exact") and not stdout_matches(" 6", "6", "exact")
    assert stdout_matches(" 6 \r\n", "6", "official") and stdout_matches("1.50 2", "1.5 2.0", "official")
    assert not stdout_matches("6\n7", "6", "official") and not stdout_matches("abc", "abd", "official")


# ---- reading answers (ryanboldi/vpo at 767db79 vpo/utils/parse_solutions.py) ----------------------------------------
def test_code_extraction_rules():
    assert extract_code("a\n```python\nx = 1\n```\n```python\ny = 2\n```") == "x = 1"
    assert extract_code("```python3\nx = 1\n```") == "3\nx = 1"
    assert extract_code("text\n```python\nx = 1\n") == "x = 1"
    assert extract_code("```py\nx = 1\n```") == "x = 1"  # info string dropped (deliberate deviation)
    assert extract_code("  x = 1  ") == "x = 1"


def test_multi_solution_split_rules():
    two = "```python\na = 1\n```\nand\n```python\nb = 2\n```"
    assert [extract_code(s) for s in split_solutions(two, 3)] == ["a = 1", "b = 2"]
    assert split_solutions("A\n  ---\t\r\nB\n---\n\nC\n---\nD", 3) == ["A", "B", "C"]
    assert split_solutions("A --- B\n----\nC", 3) == ["A --- B\n----\nC"]  # inline and four dashes do not split
    lone = "```python\na = 1\n```"
    assert split_solutions(f"intro\n{lone}", 3) == [lone]
    assert split_solutions("```python\na = 1\n---\nb = 2\n```", 3) == ["```python\na = 1", "b = 2\n```"]


def test_ast_dedup_and_multi_answer_reward(splits):
    assert fingerprint("x = 1  # one\n\n") == fingerprint("x=1")
    assert fingerprint("x = 1") != fingerprint("y = 1")
    truth = truth_of(splits["test"], "lc-add-k")
    good = "def addK(nums, k):\n    return [x + k for x in nums]"
    same = "def addK(nums, k):  # the same program\n\n    return [x + k for x in nums]"
    bad = "def addK(nums, k):\n    return [] if k == 5 else [x + k for x in nums]"
    text = "\n---\n".join(f"```python\n{c}\n```" for c in (good, same, bad))
    result = compute_score("lcb", text, truth, {"num_solutions": 3})
    assert json.loads(result["sub_scores"]) == [[1, 1, 1], [0, 1, 1]]
    assert result["num_answers"] == 2 and result["acc"] == 1.0
    assert result["score"] == pytest.approx(1 + 2 / 3)  # Multi-RLVR: the fractions passed, summed
    assert [result[f"tc_{i}"] for i in range(16)] == [1, 1, 1] + [0] * 13  # padded to 16 channels
    prose = compute_score("lcb", "no code here", truth, {"num_solutions": 3})  # the whole text is the program
    assert json.loads(prose["sub_scores"]) == [[0, 0, 0]] and prose["num_answers"] == 1
    empty = compute_score("lcb", "\n---\n  \n---\n", truth, {"num_solutions": 3})
    assert json.loads(empty["sub_scores"]) == [[0, 0, 0]] and empty["num_answers"] == 0


def test_single_answer_and_weighted_rewards(splits):
    truth = truth_of(splits["test"], "lc-add-k")
    code = "```python\ndef addK(nums, k):\n    return [] if k == 5 else [x + k for x in nums]\n```"
    single = compute_score("lcb", code, truth)
    assert single["score"] == pytest.approx(2 / 3) and single["acc"] == 0.0
    weights = [0.5, 0.5] + [0.0] * 14
    assert compute_score("lcb", code, {**truth, "weights": weights})["score"] == pytest.approx(0.5)


def test_a_huge_program_is_not_parsed_in_the_scoring_process():
    """A 10 MB program once took 12.7 s to fingerprint and compile (m = 1), in the calling process."""
    from unittest import mock

    from vpo_tasks import lcb_grading
    from vpo_tasks.lcb_grading import MAX_PROGRAM_CHARS, compiles, fingerprint

    huge = "x = 1\n" * (10_000_000 // 6)
    refuse = mock.Mock(side_effect=AssertionError("parsed a program over the cap"))
    with (
        mock.patch.object(lcb_grading.ast, "parse", refuse),
        mock.patch.object(lcb_grading, "compile", refuse, create=True),
    ):
        assert not compiles(huge) and fingerprint(huge).startswith("text:")
    small = "x = 1\n" * (MAX_PROGRAM_CHARS // 12)
    assert compiles(small) and fingerprint(small).startswith("ast:")


# ---- reading and grading, function by function ---------------------------------------------------
@pytest.mark.parametrize(
    "text, code",
    [
        ("```python\nx = 1", "x = 1"),  # unterminated, at the very start
        ("see\n```python\ny = 2", "y = 2"),  # unterminated, later
        ("```\nx = 1\n```", "x = 1"),  # bare fences
        ("```cpp\nint x;\n```", "int x;"),  # the info string is dropped
        ("```\nab```", "ab"),  # the body starts after the newline
        ("```x = 1```", ""),  # a one-line pair holds only an info string
        ("``````", ""),  # an empty pair
        ("```\na\n```\nb\n```", "a"),  # the first pair, not the last fence
        ("  no fences  ", "no fences"),
        ("prose ```\nx = 1\n```", "x = 1"),  # a pair after some text
    ],
)
def test_extract_code_reads_each_fence_form(text, code):
    assert extract_code(text) == code


def test_has_code_block_needs_a_fence_with_code():
    assert has_code_block("```python\nx = 1\n```") and has_code_block("```\nx\n```")
    assert not has_code_block("x = 1") and not has_code_block("```\n```") and not has_code_block(None)


def test_fingerprint_and_compiles_at_the_size_limit():
    from vpo_tasks.lcb_grading import MAX_PROGRAM_CHARS, compiles

    at_limit = "x = 1" + " " * (MAX_PROGRAM_CHARS - 5)
    assert len(at_limit) == MAX_PROGRAM_CHARS
    assert fingerprint(at_limit).startswith("ast:") and compiles(at_limit)
    assert fingerprint(at_limit + " ") == "text:x = 1" and not compiles(at_limit + " ")
    assert fingerprint("X = (1 +\n  2") == "text:x = (1 + 2"  # does not parse: the words, lower-cased
    assert not compiles("def f(:\n") and compiles("def f():\n    return 1\n")


def test_stdout_rules_line_by_line():
    assert stdout_matches("1\r\n2\r\n\r\n", "1\n2", "exact") and not stdout_matches("1\n2", "1\n 2", "exact")
    assert stdout_matches("1 \n2", "1\n2", "exact")  # trailing spaces of each line
    assert stdout_matches("1 \n 2", "1\n2", "official") and stdout_matches("1\n2", " 1 \n2 ", "official")
    assert not stdout_matches("1\n2", "1\n3", "official")  # a later line differs
    assert stdout_matches("1.0 2\nyes", "1 2.00\nyes", "official")  # numbers compare as numbers
    assert not stdout_matches("abc", "1", "official") and not stdout_matches("1", "abc", "official")
    assert not stdout_matches("1 2", "1", "official") and not stdout_matches("a b", "a c", "official")
    with pytest.raises(ValueError, match=r"^unknown stdin comparison rule 'fuzzy'; one of "):
        stdout_matches("1", "1", "fuzzy")


def test_functional_results_and_single_test_grading():
    from types import SimpleNamespace

    from vpo_tasks.lcb_grading import functional_result, passed

    assert functional_result("x\n@@m@@[1, 2]\n", "@@m@@") == (True, [1, 2])
    assert functional_result("@@m@@[1, 2\n", "@@m@@") == (False, None)  # not JSON
    assert functional_result("[1, 2]\n", "@@m@@") == (False, None)  # no marked line
    ok = SimpleNamespace(status="ok", stdout="1.0\n")
    assert passed(ok, "1", {"testtype": "stdin"}, "") == 1.0  # the official rule by default
    assert passed(ok, "1", {"testtype": "stdin", "compare": "exact"}, "") == 0.0
    assert passed(SimpleNamespace(status="timeout", stdout="1\n"), "1", {"testtype": "stdin"}, "") == 0.0
    functional = {"testtype": "functional"}
    assert passed(SimpleNamespace(status="ok", stdout="@@m@@3\n"), "3", functional, "@@m@@") == 1.0
    assert passed(SimpleNamespace(status="ok", stdout="@@m@@3\n"), "not json", functional, "@@m@@") == 0.0


def test_programs_for_tests_carry_limits_inputs_and_a_fresh_marker():
    import re

    from vpo_tasks.lcb_grading import programs_for_tests

    stdin_truth = {"testtype": "stdin", "inputs": ["1\n", "2\n"]}
    programs, marker = programs_for_tests("print(input())", stdin_truth)
    assert [(p.code, p.stdin, p.timeout_s, p.memory_mb) for p in programs] == [
        ("print(input())", "1\n", 6.0, 2048),
        ("print(input())", "2\n", 6.0, 2048),
    ]  # the defaults
    assert re.fullmatch(r"@@vpo-result-[0-9a-f]{16}@@", marker)
    assert programs_for_tests("x", stdin_truth)[1] != marker
    functional = {"testtype": "functional", "fn_name": "f", "inputs": ["3"], "timeout_s": 2.5, "memory_mb": 512}
    (program,), marker = programs_for_tests("def f(x):\n    return x", functional)
    assert (program.stdin, program.timeout_s, program.memory_mb) == ("", 2.5, 512)
    assert marker in program.code and "def f(x)" in program.code


def test_code_that_does_not_compile_is_not_run(monkeypatch):
    from vpo_tasks import lcb_grading

    ran = []
    real = lcb_grading.run_programs

    def recording(programs, **kwargs):
        ran.extend(p.code for p in programs)
        return real(programs, **kwargs)

    monkeypatch.setattr(lcb_grading, "run_programs", recording)
    truth = {"testtype": "stdin", "inputs": ["2\n"], "outputs": ["4\n"], "timeout_s": 5.0}
    rows = lcb_grading.score_programs(["print(int(input(", "", "print(2 * int(input()))"], truth, workers=1)
    assert rows == [[0.0], [0.0], [1.0]]  # the program after a broken one is still scored
    assert ran == ["print(2 * int(input()))"]


def test_the_evaluations_code_reading_at_its_edges():
    from vpo_tasks.lcb_grading import eval_code_block, eval_solutions

    assert eval_code_block("abc```python") == "abc```python"  # a fence at the very end opens nothing
    assert eval_solutions("```python\na\n``````python\nb\n```", 2) == ["a", "b"]  # blocks back to back
    assert eval_solutions("```python```python\nb\n```", 2) == ["", ""]  # the second opener closed the first
    assert eval_solutions("only one ---", 2) == ["only one ---", ""]  # one part: the whole text

"""tool: the fixture of tests/fixtures/tool (raw rlla_4k parquet layout) through `vpo preprocess --set path=...`
and compute_score, the call parser and typed value matching of 4.3, the appended multi-answer
instruction, the download branch failing fast, and a fuzzed scorer."""

from __future__ import annotations

import json
import time
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from vpo.cli import main as vpo_main
from vpo.prompts import prepare_row
from vpo.reward import compute_score
from vpo_tasks import tool

FIXTURE = Path(__file__).parent / "fixtures" / "tool"
CALL = "<think>x</think>\n<tool_call>\n{body}\n</tool_call>"


@pytest.fixture(scope="module")
def rows(tmp_path_factory):
    out = tmp_path_factory.mktemp("tool")
    assert vpo_main(["preprocess", "--task", "tool", "--out", str(out), "--set", f"path={FIXTURE}"]) == 0
    return pd.read_parquet(out / "test.parquet").to_dict("records"), pd.read_parquet(out / "train.parquet")


def truth(rows, i):
    return rows[0][i]["reward_model"]["ground_truth"]


def test_preprocessed_rows(rows):
    test, train = rows
    assert len(test) == 5 and len(train) == 9
    assert [t["reward_model"]["ground_truth"]["num_tool_calls"] for t in test] == [1, 2, 0, 1, 1]
    assert json.loads(truth(rows, 0)["tool_calls_json"]) == [{"name": "GetNews", "parameters": {"page": "1"}}]
    assert truth(rows, 3)["response_text"] == "Checking the weather for Oslo."
    assert [m["role"] for m in test[4]["prompt"]] == ["system", "user"] and "<obs>" in test[4]["prompt"][1]["content"]
    assert test[0]["data_source"] == "tool" and test[0]["ability"] == "tool_use"


DASH = {"name": "dashboard", "parameters": {"login_id": "77", "api_key": "k-9", "survey_code": "S-12"}}
TSV = {"name": "tsv2", "parameters": {"subset": "train", "dataset": "reviews", "limit": 20}}


@pytest.mark.parametrize(
    "i, response, vector",
    [
        (0, CALL.format(body='{"name": "GetNews", "parameters": {"page": 1}}'), [1, 1, 1, 1]),
        (0, CALL.format(body='{"name": "GetPowerBINews", "parameters": {"page": 1}}'), [1, 0, 1, 1]),
        (0, '<tool_call>\n{"name": "GetNews", "parameters": {"page": 1}}\n</tool_call>', [0, 1, 1, 1]),
        (0, "", [0, 0, 0, 0]),
        (1, CALL.format(body=json.dumps(DASH)), [1, 2 / 3, 0.5, 0.5]),
        (
            1,
            CALL.format(body="\n".join(json.dumps(c) for c in (DASH, TSV, {"name": "extra", "parameters": {}}))),
            [1, 0.8, 2 / 3, 2 / 3],
        ),
        (2, "<think>ok</think>\n<response>Sure</response>", [1, 1, 1, 1]),
        (2, "<think>ok</think>\n<tool_call>\n" + json.dumps(DASH) + "\n</tool_call>", [0, 0, 0, 0]),
    ],
)
def test_fixture_vectors(rows, i, response, vector):
    result = compute_score("tool", response, truth(rows, i), {})
    assert json.loads(result["sub_scores"]) == [pytest.approx(vector)]
    assert result["score"] == pytest.approx(sum(vector) / 4)


@pytest.mark.parametrize(
    "body, names",
    [
        ('[{"name": "a", "parameters": {}}, 3, {"name": "b"}]', ["a", "b"]),  # a JSON array: its objects
        ('[{"name": "a"}', []),  # a broken array: nothing
        ('"note" {"name": "a"}', []),  # stops at a non-object
        ('42, {"name": "a"}', []),
        ('{"name": "a"} [{"name": "b"}]', ["a"]),
        ('{"name": "a"},\n , {"name": "b"} {"name": "c" x}', ["a", "b"]),  # stops at the first invalid object
        ('{"name": null}\n{"name": 7}\n{}', ["None", "7", ""]),
        ("{" * 5000 + "}" * 5000, []),  # too deep: invalid, no RecursionError
    ],
)
def test_call_parser(body, names):
    assert [c["name"] for c in tool.parse_calls(body)] == names


@settings(max_examples=2000, deadline=None)
@given(
    st.lists(
        st.sampled_from(
            [
                '{"name": "a"}',
                '{"name": "b", "parameters": {"x": 1}}',
                '{"s": "}\n{"}',
                '{"s": "x}',
                "42",
                '"t"',
                "[1]",
                "{",
                "}",
                "",
                " ",
                "\n",
                ",",
                "\t",
                '{"n": null}',
            ]
        ),
        max_size=12,
    ).map("".join)
)
def test_the_fast_path_reads_what_the_object_stream_reads(body):
    body = body.strip()
    if not body.startswith("["):
        assert tool._objects(body) == tool._object_stream(body)


def test_arguments_fallback_and_non_object_parameters():
    calls = tool.parse_calls(
        '{"name": "a", "arguments": {"x": 1}}\n{"name": "b", "parameters": [1]}\n'
        '{"name": "c", "parameters": {"y": 2}, "arguments": {"z": 3}}'
    )
    assert [c["parameters"] for c in calls] == [{"x": 1}, {}, {"y": 2}]


@pytest.mark.parametrize(
    "pred, gold, expected",
    [
        ("false", False, 0.0),
        (True, 2, 1.0),
        (False, None, 1.0),  # either a bool: truthiness
        (2.0, 2, 1.0),
        ("2", 2, 1.0),
        (" 2 ", 2, 1.0),
        ("2e0", 2, 1.0),
        ("two", 2, 0.0),
        (3, 2, 0.0),
        (["A", "b"], ["a", "B", "c"], 0.8),
        ("a", ["a"], 1.0),  # lists: multiset F1
        ({}, {}, 1.0),
        ({"x": 1}, {"x": 2, "y": 3}, 2 / 3),
        ("x", {"x": 1}, 0.0),
        ("the big dog", "big dog", 0.8),
        ("", "", 1.0),  # strings: token F1, articles kept
        (1, "1", 1.0),
        (None, None, 1.0),
        ("", None, 1.0),
        (1.0, "1", 0.0),  # otherwise: normalised texts equal
    ],
)
def test_value_match(pred, gold, expected):
    assert tool.value_match(pred, gold) == pytest.approx(expected)


def test_alignment_prefers_name_then_keys_and_first_on_ties():
    gold = [{"name": "a", "parameters": {"x": 1}}]
    pred = [{"name": "b", "parameters": {"x": 1}}, {"name": "a", "parameters": {}}, {"name": "a", "parameters": {}}]
    pairs = tool.align(pred, gold, ["b", "a", "a"])
    assert pairs[0][1] is pred[1] and [p for g, p in pairs if g is None] == [pred[0], pred[2]]
    assert tool.align([{"name": "", "parameters": {}}], [{"name": "", "parameters": {"k": 1}}], [""])[0][1] is not None


def call(name, **parameters):
    return {"name": name, "parameters": parameters}


@pytest.mark.parametrize(
    "pred, gold, expected",
    [
        # the name and every key beat the name alone, even when the name alone comes first
        ([call("f"), call("f", a=1, b=2)], [call("f", a=1, b=2)], 1),
        ([call("f", a=1), call("f", a=1, b=2)], [call("f", a=1, b=2)], 1),
        # the name beats a prediction that shares every key under another name
        ([call("g", a=1), call("f", a=2)], [call("f", a=2)], 1),
        # a name already taken: the second gold f still prefers the remaining f over g
        ([call("f", x=0), call("g", a=1), call("f", a=2)], [call("f", x=0), call("f", a=2)], 2),
    ],
)
def test_alignment_finds_the_best_prediction(pred, gold, expected):
    pairs = tool.align(pred, gold, [p["name"] for p in pred])
    assert pairs[len(gold) - 1][1] is pred[expected]


def test_scores_of_calls_by_hand():
    assert tool.score_calls([], []) == (1.0, 1.0, 1.0)
    # f twice against one gold f(a, b): names F1 2/3; the full f pairs, the empty one is left over
    names, keys, values = tool.score_calls([call("f"), call("f", a=1, b=2)], [call("f", a=1, b=2)])
    assert (names, keys, values) == pytest.approx((2 / 3, 1 / 2, 1 / 2))
    assert tool.score_calls([call("f")], [call("f")]) == (1.0, 1.0, 1.0)  # no parameters: values count as 1
    assert tool.score_calls([call("f", a=2)], [call("f", a=1)]) == (1.0, 1.0, 0.0)  # the right key, a wrong value
    assert tool.set_f1({"a"}, set()) == 0.0 and tool.set_f1({"a"}, {"b"}) == 0.0 and tool.set_f1(set(), set()) == 1.0
    assert tool.multiset_f1(["a"], []) == 0.0 and tool.multiset_f1(["a", "a"], ["a"]) == pytest.approx(2 / 3)


def test_typed_value_rules_at_their_edges():
    assert tool.value_match("3.5", 3) == 0.0 and tool.value_match("3.0", 3) == 1.0
    assert tool.value_match(10**20 + 1, 10**20) == 0.0  # integers compare exactly
    assert tool.value_match(str(10**400), 10**400) == 1.0  # too large for a float: compared as text
    assert tool.value_match("ab", ["ab"]) == 1.0  # a scalar against a list is a list of one
    assert tool.value_match(3, "3 apples") == 0.0 and tool.value_match(3, "3") == 1.0  # a non-string: exact text
    assert tool.normalize("Hello, World!") == "hello world"


def test_parsing_calls_and_responses():
    assert tool.parse_calls(None) == [] and tool.parse_calls("  ") == []
    assert tool.parse_calls('{"arguments": {"q": 1}}') == [{"name": "", "parameters": {"q": 1}}]
    assert tool.parse_calls('{"name": 7, "parameters": [1]}') == [{"name": "7", "parameters": {}}]
    assert tool.parse_calls('[{"name": "a"}, 3]') == [{"name": "a", "parameters": {}}]
    parsed = tool.parse_response("<tool_call>{}</tool_call>")
    assert (parsed["think"], parsed["response"], parsed["has_think"]) == ("", "", False)
    assert (
        tool.TOOL.parses("<think>x</think>") and not tool.TOOL.parses("x") and not tool.TOOL.parses("<THINK>x</THINK>")
    )
    assert tool.gold_calls({}) == [] and tool.gold_calls({"tool_calls_json": '[{"parameters": 3}, 5]'}) == [
        {"name": "", "parameters": {}}
    ]


def test_multi_answer_slots_and_prompt(rows):
    row = rows[0][0]
    good = CALL.format(body='{"name": "GetNews", "parameters": {"page": 1}}')
    text = f"<response_1>{good}</response_1><response_2>   </response_2><response_3>{good}</response_3>"
    assert json.loads(compute_score("tool", text, truth(rows, 0), {"num_solutions": 3})["sub_scores"]) == [
        [1, 1, 1, 1],
        [0, 0, 0, 0],
        [0, 0, 0, 0],
    ]
    # a slot without tags is still scored: against a gold without calls it gives [0, 1, 1, 1]
    got = json.loads(
        compute_score("tool", "<response_1>hello</response_1>", truth(rows, 2), {"num_solutions": 2})["sub_scores"]
    )
    assert got == [[0, 1, 1, 1], [0, 0, 0, 0]]
    prepared = prepare_row(row, "vpo", 3, seed=0)["prompt"]
    assert prepared[0]["content"] == row["prompt"][0]["content"]  # the system prompt (tools, format) is kept
    assert prepared[1]["content"].startswith(row["prompt"][1]["content"])
    assert "<response_1></response_1> to <response_3></response_3>" in prepared[1]["content"]


def test_download_failure_is_fast_and_names_the_path_setting(tmp_path):
    start = time.time()
    with pytest.raises(ValueError, match="task_settings.tool.data.path"):
        tool.TOOL.preprocess(str(tmp_path), {"url": "http://127.0.0.1:9/rlla_4k", "timeout_s": 5})
    assert time.time() - start < 30 and not (tmp_path / "train.parquet").exists()


def test_download_branch_reads_what_it_fetched(tmp_path):
    out = tmp_path / "out"
    train, test = tool.TOOL.preprocess(str(out), {"url": FIXTURE.as_uri()})  # a file:// URL stands in for the web
    assert len(pd.read_parquet(train)) == 9 and len(pd.read_parquet(test)) == 5


PIECES = [
    "<think>",
    "</think>",
    "<tool_call>",
    "</tool_call>",
    "<response>",
    "</response>",
    "<response_1>",
    "</response_1>",
    '{"name": "GetNews", "parameters": {"page": 1}}',
    '[{"name": "x"}]',
    "{",
    "}",
    ",",
    "\n",
    '"page"',
    ":",
    "null",
    "true",
]


@pytest.mark.slow
@settings(max_examples=10_000, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    text=st.one_of(st.text(max_size=300), st.lists(st.sampled_from(PIECES), max_size=40).map("".join)),
    m=st.sampled_from([1, 3]),
)
def test_scorer_never_raises_and_stays_in_range(text, m):
    gold = {
        "tool_calls_json": json.dumps([{"name": "GetNews", "parameters": {"page": "1"}}]),
        "response_text": "",
        "think_text": "",
        "raw_gt": "",
        "num_tool_calls": 1,
    }
    matrix = np.asarray(json.loads(compute_score("tool", text, gold, {"num_solutions": m})["sub_scores"]))
    assert matrix.shape == (m, 4) and np.all((matrix >= 0) & (matrix <= 1))

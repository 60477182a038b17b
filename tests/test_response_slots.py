"""The `<response_i>` slot rules that MuSiQue, EUREQA and ToolRL share (vpo_tasks/response_slots.py),
on hand-written responses."""

from __future__ import annotations

import json

from vpo_tasks.musique import MUSIQUE
from vpo_tasks.response_slots import first_block, first_block_nocase, response_slots
from vpo_tasks.tool import TOOL

TRUTH = {"answer": "Paris", "answer_aliases": [], "supporting_indices_ordered": [3, 7], "num_hops": 2}


def test_first_block_takes_the_first_closer_after_the_opener():
    assert first_block("</a>x<a>y</a>z</a>", "<a>", "</a>") == "y"
    assert first_block("<a></a>", "<a>", "</a>") == ""
    assert first_block("<a>y", "<a>", "</a>") is None and first_block("y</a>", "<a>", "</a>") is None
    assert first_block("<A>y</A>", "<a>", "</a>") is None  # case-sensitive


def test_first_block_nocase_matches_tags_in_any_case():
    assert first_block_nocase("<Entity_A>x</ENTITY_a>", "entity_A") == "x"
    assert first_block_nocase("</a><a>x</a>", "a") == "x"  # the closer after the opener
    assert first_block_nocase("<a>x", "a") is None and first_block_nocase("x", "a") is None


def test_slots_and_distinct_answers():
    text = "<response_2> b </response_2><response_1>a</response_1><response_3>a</response_3><response_4> </response_4>"
    assert response_slots(text, 4) == ["a", " b ", "a", " "]
    assert response_slots(text, 2) == ["a", " b "]
    assert MUSIQUE.split_answers(text, 4) == ["a", "b"]  # stripped, empty and repeated slots dropped
    assert MUSIQUE.split_answers(text, 2) == ["a", "b"]
    assert MUSIQUE.answer_slots(text, 3) == ["a", " b ", "a"]
    # one answer: the whole text when it parses, else nothing (slot tags mean nothing here)
    assert MUSIQUE.split_answers("  <answer>Paris</answer> ", 1) == ["<answer>Paris</answer>"]
    assert MUSIQUE.split_answers("<response_1><answer></answer></response_1>", 1) == []


def test_an_empty_slot_is_a_zero_row_even_where_the_empty_answer_scores():
    # ToolRL without gold calls: an empty call list matches the empty gold (call scores 1), but an empty
    # slot is no answer at all
    truth = {"tool_calls_json": json.dumps([])}
    rows, given = TOOL.score_response("<response_1><think>x</think></response_1><response_2> </response_2>", truth, 2)
    assert rows == [[1.0, 1.0, 1.0, 1.0], [0.0, 0.0, 0.0, 0.0]] and given == 1
    rows, given = MUSIQUE.score_response(
        "<response_1><answer>Paris</answer><support>3, 7</support></response_1>"
        "<response_2><answer>Paris</answer><support>3, 7</support></response_2>",
        TRUTH,
        3,
    )
    assert rows == [[1.0] * 5, [0.0] * 5, [0.0] * 5] and given == 1  # a repeat is dropped, zeros pad to m


def test_rows_count_and_single_answers():
    wrong = "<answer>Lyon</answer><support>7</support>"  # hop 2 only, F1 0
    right = "<answer>Paris</answer><support>3, 7</support>"
    rows, given = MUSIQUE.score_response(
        f"<response_1>{wrong}</response_1><response_2> </response_2><response_3>{right}</response_3>", TRUTH, 3
    )
    assert rows == [[0.0, 1.0, 1.0, 1.0, 0.0], [0.0] * 5, [1.0] * 5] and given == 2
    assert MUSIQUE.score_response(right, TRUTH, 1) == ([[1.0] * 5], 1)  # one answer: the whole text
    assert MUSIQUE.score_response("Paris", TRUTH, 1) == ([[0.0] * 5], 0)
    assert first_block("<a>x</a><a>y</a>", "<a>", "</a>") == "x"  # the first block

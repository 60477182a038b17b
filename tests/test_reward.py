"""compute_score: modes, key sets, JSON round trip, errors on bad rows, and a property test that
arbitrary and near-miss model text never breaks the maze reward."""

from __future__ import annotations

import json
import random
import re
from pathlib import Path

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from vpo.reward import compute_score, weighted_scalar
from vpo.rollouts import as_matrix
from vpo.task import TASKS, Task, register
from vpo_tasks.maze import MAZE
from vpo_tasks.maze_generator import generate_mazes

FIXTURE = json.loads((Path(__file__).parent / "fixtures" / "maze_5x5.json").read_text())
GT = {**FIXTURE["ground_truth"], "score_mode": "convex_bonus"}
ROUTE = {r["name"]: r for r in FIXTURE["routes"]}
A, B = ROUTE["A"]["moves"], ROUTE["B"]["moves"]
OBJECTIVES = ["completion", "gold", "diamond", "avoid_lava"]


def test_single_multi_and_goal_rows_give_identical_keys():
    single = compute_score("maze", f"<answer>{A}</answer>", GT, {"index": 0})
    multi = compute_score("maze", f"<route_1>{A}</route_1><route_2>{B}</route_2>", GT, {"num_solutions": 3})
    goal = compute_score("maze", f"<answer>{B}</answer>", {**GT, "weights": [0.1, 0.2, 0.3, 0.4]}, None)
    junk = compute_score("maze", None, GT, {"num_solutions": 1})
    keys = set(single)
    assert keys >= {"score", "sub_scores", "acc", *OBJECTIVES}
    assert set(multi) == set(goal) == set(junk) == keys
    for result in (single, multi, goal, junk):
        matrix = as_matrix(result["sub_scores"])
        assert json.loads(json.dumps(json.loads(result["sub_scores"]))) == matrix.tolist()
        assert all(isinstance(result[k], float) for k in keys - {"sub_scores", "strategy"})
        assert isinstance(result["strategy"], str)
    assert junk["strategy"] == "degenerate" and single["strategy"] != multi["strategy"]


def test_scores_per_mode_are_the_method_scalars():
    # single: mean of route A's convex vector [1, 1, 0, 1]
    assert compute_score("maze", A, GT, {})["score"] == pytest.approx(0.75)
    # goal-conditioned: w . channels of route B [1, 0, 1, 0.25] = 0.1 + 0.3 + 0.1
    goal = compute_score("maze", B, {**GT, "weights": [0.1, 0.2, 0.3, 0.4]}, {})
    assert goal["score"] == pytest.approx(0.5)
    assert as_matrix(goal["sub_scores"]).shape == (1, 4)
    # multi: sum of row means 0.75 + 0.5625 + 0; channels are the best row's (route A)
    multi = compute_score("maze", f"<route_1>{B}</route_1><route_2>{A}</route_2>", GT, {"num_solutions": 3})
    assert multi["score"] == pytest.approx(0.75 + 0.5625)
    assert [multi[k] for k in OBJECTIVES] == [1, 1, 0, 1]
    assert multi["acc"] == 1.0 and multi["num_answers"] == 2.0
    failed = compute_score("maze", ROUTE["D"]["moves"], GT, {})
    assert failed["acc"] == 0.0 and failed["num_answers"] == 1.0  # parsed, but E not reached
    assert compute_score("maze", "no idea", GT, {})["num_answers"] == 0.0


def test_rows_that_are_misconfigured_raise():
    with pytest.raises(ValueError, match="both multi-answer"):
        compute_score("maze", A, {**GT, "weights": [0.25] * 4}, {"num_solutions": 3})
    with pytest.raises(ValueError, match="4 finite floats"):
        compute_score("maze", A, {**GT, "weights": [0.5, 0.5]}, {})
    with pytest.raises(ValueError, match="num_solutions"):
        compute_score("maze", A, GT, {"num_solutions": 0})
    with pytest.raises(ValueError, match="whole number"):
        compute_score("maze", A, GT, {"num_solutions": 2.7})  # never read as 2
    assert compute_score("maze", A, GT, {"num_solutions": 3.0})["num_answers"] == 1.0
    with pytest.raises(ValueError, match="unknown task"):
        compute_score("not_a_task", A, GT, {})


def test_row_errors_name_the_row_and_the_fix():
    with pytest.raises(
        ValueError,
        match=r"^a row cannot be both multi-answer \(num_solutions > 1\) and weighted "
        r"\(ground_truth\['weights'\]\); prepare the row for one method$",
    ):
        compute_score("maze", A, {**GT, "weights": [0.25] * 4}, {"num_solutions": 2})
    with pytest.raises(ValueError, match=r"must be 4 finite floats for task 'maze'"):
        compute_score("maze", A, {**GT, "weights": [0.5, None, 0.25, 0.25]}, {})  # a null from a parquet column
    with pytest.raises(ValueError, match=r"^channels \(2,\) and weights \(1,\) must have the same length$"):
        weighted_scalar([1.0, 0.0], [1.0])


def test_weights_as_a_one_row_matrix_and_m_of_two():
    goal = compute_score("maze", B, {**GT, "weights": [[0.1, 0.2, 0.3, 0.4]]}, {})  # a (1, k) array's list
    assert goal["score"] == pytest.approx(0.5)
    two = compute_score("maze", f"<route_1>{B}</route_1><route_2>{A}</route_2>", GT, {"num_solutions": 2})
    assert two["score"] == pytest.approx(0.5625 + 0.75)  # Multi-RLVR's sum, not the first row's scalar
    assert as_matrix(two["sub_scores"]).shape == (2, 4)


class EchoTask(Task):
    """Records the text the dispatcher hands to the task (k = 1: does it contain any text)."""

    name = "echo_test"
    data_source = "echo_source"
    objectives = (("said", "Said something"),)
    scalar_weights = (1.0,)
    default_m = 2
    single_format_line = "Say something."
    seen: list = []

    def split_answers(self, text, m):
        return [text][:m]

    def score_answer(self, answer, ground_truth):
        EchoTask.seen.append(answer)
        return [float(bool(answer))]

    def multi_format(self, m):
        return "Say something."


def test_the_task_gets_text_none_is_empty():
    task = register(EchoTask())
    try:
        for given, text in ((None, ""), ("hi", "hi"), (17, "17")):
            EchoTask.seen.clear()
            compute_score("echo_source", given, {}, {})
            assert EchoTask.seen == [text]
    finally:
        del TASKS[task.name]


def test_ground_truth_as_read_back_from_parquet():
    """veRL hands ground truth with numpy arrays and numpy ints; the scorer takes them as is."""
    gt = {
        **GT,
        "start": np.array([0, 0]),
        "end": np.array([4, 4]),
        "max_steps": np.int64(12),
        "weights": np.array([0.25, 0.25, 0.25, 0.25]),
    }
    assert compute_score("maze", A, gt, {"num_solutions": np.int64(1)})["score"] == pytest.approx(0.75)


# ---- property test: model text never breaks the reward -------------------------------------
REAL_GT = {
    **{
        k: v
        for k, v in generate_mazes(1, 42)[0].items()
        if k in ("grid_text", "start", "end", "max_steps", "num_gold", "num_diamond", "num_lava")
    },
    "score_mode": "linear",
}
FRAGMENTS = [
    "UP",
    "DOWN",
    "LEFT",
    "RIGHT",
    "up",
    "Right",
    "UPRIGHT",
    "DOWN,",
    "LEFTRIGHT",
    " ",
    "\n",
    "<answer>",
    "</answer>",
    "<ANSWER>",
    "</answer",
    "<route_1>",
    "</route_1>",
    "<route_2>",
    "</route_3>",
    "<route_>",
    "<route_10>",
    "</route_10>",
    "---",
    "--",
    "-",
    "<",
    ">",
    "/",
    "route",
    "answer",
    "\x00",
    "é",
    "🙂",
    "{",
    "}",
    "[]",
    "\\",
    "$",
    "\t",
    "nan",
    "1e309",
]
near_miss = st.lists(st.one_of(st.sampled_from(FRAGMENTS), st.text(max_size=4)), max_size=60).map("".join)
texts = st.one_of(st.text(max_size=300), near_miss, near_miss)
rows = st.tuples(
    st.sampled_from([1, 2, 3, 5]),  # m
    st.sampled_from(["linear", "convex_bonus"]),  # score mode
    st.sampled_from(["fixture", "generated"]),  # which maze
    st.booleans(),  # goal weights (m = 1 only)
)


def check(text, row):
    m, mode, which, weighted = row
    truth = {**(GT if which == "fixture" else REAL_GT), "score_mode": mode}
    if weighted and m == 1:
        truth["weights"] = [0.4, 0.3, 0.2, 0.1]
    result = compute_score("maze", text, truth, {"num_solutions": m})
    matrix = as_matrix(result["sub_scores"])
    assert matrix.shape == (m, 4)
    assert np.all((matrix >= 0) & (matrix <= 1))
    assert all(0.0 <= result[k] <= 1.0 for k in [*OBJECTIVES, "acc"])
    assert 0.0 <= result["score"] <= m + 1e-12
    if m > 1:
        assert result["score"] == pytest.approx(matrix.mean(axis=1).sum())
        rows_seen = [tuple(r) for r in matrix if r.any()]
        assert result["num_answers"] >= len(rows_seen)


FAST = settings(
    deadline=None,
    database=None,
    derandomize=True,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.filter_too_much, HealthCheck.data_too_large],
)
BATCH = 10  # strings per generated example: 600 + 450 examples give 10,500 strings


@settings(FAST, max_examples=600)
@given(st.lists(texts, min_size=BATCH, max_size=BATCH), rows)
def test_arbitrary_text_never_breaks_the_reward(batch, row):
    for text in batch:
        check(text, row)


# known-good routes (fixture routes, and demonstrations on the generated maze) with random moves
# added around them, so a good share of the strings reach E and exercise the item scoring
_rng = random.Random(0)
BASE_ROUTES = [r["moves"] for r in FIXTURE["routes"]] + [
    re.sub(r"</?answer>", "", MAZE.demonstration({"reward_model": {"ground_truth": REAL_GT}}, _rng, 1))
    for _ in range(30)
]
_move = st.sampled_from(["UP", "DOWN", "LEFT", "RIGHT", "right", "Down"])
MOVE_WORDS = st.one_of(
    st.lists(_move, max_size=30).map(" ".join),
    st.tuples(st.lists(_move, max_size=3), st.sampled_from(BASE_ROUTES), st.lists(_move, max_size=3)).map(
        lambda t: " ".join([*t[0], t[1], *t[2]])
    ),
)
TEMPLATES = [
    "<answer>{}</answer>",
    "<route_1>{}</route_1>\n<route_2>{}</route_2>",
    "{} --- {}",
    "<route_1>{}</route_1><route_1>{}",
    "<answer>{}</answer><answer>{}</answer>",
    "{}",
]
formatted = st.tuples(MOVE_WORDS, MOVE_WORDS, st.sampled_from(TEMPLATES)).map(
    lambda t: t[2].format(*t[: t[2].count("{}")])
)


@settings(FAST, max_examples=450)
@given(st.lists(formatted, min_size=BATCH, max_size=BATCH), rows)
def test_move_sequences_in_real_formats(batch, row):
    """Near-misses that do parse: random routes (often reaching E) in the real tag formats."""
    for text in batch:
        check(text, row)

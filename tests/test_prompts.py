"""Prompt rewrites and prepare_row for every method of the method table."""

from __future__ import annotations

import json
import re

import numpy as np
import pandas as pd
import pytest

from vpo.methods import METHODS
from vpo.prompts import goal_weights, prepare_row, rewrite_prompt
from vpo.reward import compute_score
from vpo_tasks.maze import MAZE
from vpo_tasks.maze_generator import generate_mazes


@pytest.fixture(scope="module")
def rows():
    return MAZE.rows("train", generate_mazes(6, 42), "convex_bonus")


def content(row) -> str:
    return row["prompt"][-1]["content"]


def test_multi_rewrite_asks_for_m_routes_with_a_per_route_budget(rows):
    row = rows[0]
    budget = row["reward_model"]["ground_truth"]["max_steps"]
    for m in (2, 3, 5):
        text = rewrite_prompt(row["prompt"], mode="multi", m=m, task="maze")[0]["content"]
        assert MAZE.single_format_line not in text and "<answer>" not in text
        assert f"give {m} genuinely different routes" in text
        assert f"<route_1></route_1> to <route_{m}></route_{m}>" in text
        assert f"You have {budget} steps per route." in text
        example = re.findall(r"<route_(\d+)>[A-Z ]+</route_\1>", text)
        assert example == [str(i) for i in range(1, m + 1)]
        # the grid and the rules are untouched
        assert row["reward_model"]["ground_truth"]["grid_text"] in text
    assert content(row).endswith(MAZE.single_format_line)  # the input was not modified


def test_a_rewrite_without_its_anchor_raises():
    with pytest.raises(ValueError, match="did not find"):
        rewrite_prompt(
            [{"role": "user", "content": "Solve this maze, you have 9 steps."}], mode="multi", m=3, task="maze"
        )
    with pytest.raises(ValueError, match="no user message"):
        rewrite_prompt([{"role": "system", "content": MAZE.single_format_line}], mode="multi", m=3, task="maze")
    with pytest.raises(ValueError, match="prompt mode"):
        rewrite_prompt([{"role": "user", "content": "x"}], mode="multiple", m=3, task="maze")
    with pytest.raises(ValueError, match="needs 4 weights"):
        rewrite_prompt([{"role": "user", "content": "x"}], mode="goal", m=1, task="maze", weights=[1.0])


def test_goal_rewrite_shows_each_objective_with_its_weight(rows):
    w = [0.1234, 0.5, 0.0066, 0.37]
    text = rewrite_prompt(rows[1]["prompt"], mode="goal", m=1, task=MAZE, weights=w)[0]["content"]
    assert text.startswith(content(rows[1]))  # appended, the answer format is kept
    tail = text[len(content(rows[1])) :].strip().split("\n")
    assert tail == [
        "Your objective weights (higher = more important to optimize):",
        "- Reaching the exit (E): 0.12",
        "- Collecting Gold (G) tiles: 0.50",
        "- Collecting Diamond (D) tiles: 0.01",
        "- Avoiding Lava (L) tiles: 0.37",
        "Maximize your weighted score.",
    ]


def test_goal_weights_are_fixed_per_seed_and_row():
    w = goal_weights(0, 7, 4)
    assert w.shape == (4,) and np.all(w > 0) and w.sum() == pytest.approx(1.0)
    assert np.array_equal(w, goal_weights(0, 7, 4))
    assert not np.allclose(w, goal_weights(1, 7, 4)) and not np.allclose(w, goal_weights(0, 8, 4))
    # Dirichlet(1) has mean 1/k and Var = (k-1)/(k^2 (k+1)) = 0.0375 per coordinate at k = 4
    many = np.stack([goal_weights(3, i, 4) for i in range(4000)])
    assert many.mean(axis=0) == pytest.approx([0.25] * 4, abs=0.015)
    assert many.var(axis=0) == pytest.approx([0.0375] * 4, abs=0.006)
    # alpha < 1 pushes weight to the corners: the largest coordinate is larger on average
    sparse = np.stack([goal_weights(3, i, 4, alpha=0.2) for i in range(500)])
    assert sparse.max(axis=1).mean() > many.max(axis=1).mean() + 0.2
    with pytest.raises(ValueError):
        goal_weights(0, 0, 4, alpha=0)


@pytest.mark.parametrize("name", list(METHODS))
def test_prepare_row_for_every_method(rows, name):
    method = METHODS[name]
    row = rows[2]
    before = json.dumps(row, sort_keys=True)
    out = prepare_row(row, name, 3, seed=5)
    assert json.dumps(row, sort_keys=True) == before  # input untouched
    json.dumps(out)  # plain Python all the way down
    gt = out["reward_model"]["ground_truth"]
    assert out["extra_info"]["num_solutions"] == (3 if method.multi_answer else 1)
    if method.prompt == "multi":
        assert "<route_3></route_3>" in content(out) and "steps per route" in content(out)
    elif method.prompt == "goal":
        assert "Your objective weights" in content(out)
    else:
        assert out["prompt"] == row["prompt"]
    if method.reward == "weighted":
        assert gt["weights"] == pytest.approx(goal_weights(5, row["extra_info"]["index"], 4).tolist())
        if method.prompt == "goal":
            assert f"Reaching the exit (E): {gt['weights'][0]:.2f}" in content(out)
    else:
        assert "weights" not in gt
    # the prepared row scores through compute_score with the same keys as any other
    text = MAZE.demonstration(out, np.random.default_rng(0), out["extra_info"]["num_solutions"])
    result = compute_score(out["data_source"], text, gt, out["extra_info"])
    assert len(json.loads(result["sub_scores"])) == out["extra_info"]["num_solutions"]
    assert set(result) == set(compute_score("maze", "", rows[0]["reward_model"]["ground_truth"], {}))


def test_read_rows_gives_back_the_rows_written(tmp_path):
    """vpo.data.read_rows on a file written as `vpo preprocess` writes one: the rows as written, a key that
    another row's struct has added as None, with what the five tasks' files hold (nested lists, structs
    whose keys differ between rows, missing values inside structs, integers beside floats)."""
    from vpo.atomic import write_parquet_atomic
    from vpo.data import read_rows

    def row(i: int, truth: dict, info: dict) -> dict:
        prompt = [{"role": "system", "content": "sys"}, {"role": "user", "content": f"question {i}"}]
        return {"data_source": "maze", "prompt": prompt, "ability": "x", "reward_model": {"ground_truth": truth},
                "extra_info": {"index": i, **info}}  # fmt: skip

    rows = [
        row(0, {"grid": [[1, 2], [3]], "score": 0.5, "tests": ["a", "b"]}, {"flag": True, "tags": {"n": 1}}),
        row(1, {"grid": [[4]], "score": None, "tests": []}, {"flag": False, "only_here": "yes", "tags": {"n": None}}),
    ]
    write_parquet_atomic(rows, tmp_path / "test.parquet")
    got = read_rows(tmp_path, "test")
    rows[0]["extra_info"]["only_here"] = None
    assert got == rows
    # == takes 1 for 1.0: the integer beside a missing value stays one (pandas' reader made it 1.0)
    assert type(got[0]["extra_info"]["tags"]["n"]) is int and type(got[1]["extra_info"]["index"]) is int
    assert type(got[0]["reward_model"]["ground_truth"]["score"]) is float
    assert type(got[0]["prompt"]) is list and type(got[0]["reward_model"]["ground_truth"]["grid"][0]) is list


def test_prepare_row_takes_rows_read_back_from_parquet(rows, tmp_path):
    path = tmp_path / "rows.parquet"
    pd.DataFrame(rows).to_parquet(path)
    row = pd.read_parquet(path).iloc[3].to_dict()
    assert isinstance(row["prompt"], np.ndarray)  # what pandas gives back
    out = prepare_row(row, "vpo", 2, seed=0)
    assert isinstance(out["prompt"], list) and out["extra_info"]["num_solutions"] == 2
    assert out["reward_model"]["ground_truth"]["start"] == rows[3]["reward_model"]["ground_truth"]["start"]
    with pytest.raises(ValueError, match="did not find"):
        prepare_row(out, "vpo", 2, seed=0)  # rewriting twice is refused, not silently skipped
    with pytest.raises(ValueError, match="unknown method"):
        prepare_row(row, "vpo_multi", 2, seed=0)

"""Aggregation: eval seeds averaged inside each training seed, then mean and standard error over
training seeds; expectations computed by hand (see the comments)."""

import json
import math

import pandas as pd
import pytest

from vpo.data import write_csv
from vpo.report.aggregate import (
    aggregate_evals,
    aggregate_training,
    read_metrics_jsonl,
    training_curve_stats,
)


def write_eval(dir_, task, method, train_seed, eval_seed, best, diversity, *, budget=3, objectives=None):
    """An evalseed{e}.json with the keys `vpo eval` writes (INTERFACES.md)."""
    path = dir_ / f"{task}_{method}_seed{train_seed}_evalseed{eval_seed}.json"
    path.write_text(
        json.dumps(
            {
                "task": task,
                "method": method,
                "train_seed": train_seed,
                "eval_seed": eval_seed,
                "budget": budget,
                "n_problems": 4,
                "pass_at_k": [b / 2 for b in best],
                "best_at_k": best,
                "best_at_k_perm": best,
                "expected_best_of_m": 0.5,
                "diversity": diversity,
                "parse_failure_rate": 0.0,
                "objective_means": objectives or {"completion": 0.25},
            }
        )
    )
    return path


@pytest.fixture
def three_seeds(tmp_path):
    """vpo on maze, training seeds 0..2, two eval seeds each."""
    data = {  # train seed -> [(best_at_k curve, diversity) per eval seed]
        0: [([0.2, 0.4, 0.5], 1.0), ([0.4, 0.6, 0.7], 0.5)],  # averages: [0.3, 0.5, 0.6], 0.75
        1: [([0.1, 0.2, 0.3], 0.2), ([0.3, 0.4, 0.5], 0.4)],  # averages: [0.2, 0.3, 0.4], 0.30
        2: [([0.5, 0.6, 0.8], 0.9), ([0.5, 0.8, 0.8], 0.9)],  # averages: [0.5, 0.7, 0.8], 0.90
    }
    return [
        write_eval(tmp_path, "maze", "vpo", s, e, best, div)
        for s, evals in data.items()
        for e, (best, div) in enumerate(evals)
    ]


def row(summary, metric, k=None):
    rows = summary[(summary.metric == metric) & (summary.k.isna() if k is None else summary.k == k)]
    assert len(rows) == 1
    return rows.iloc[0]


def test_mean_and_stderr_over_training_seeds(three_seeds):
    per_seed, summary = aggregate_evals(three_seeds)
    # k=1: seed means 0.3, 0.2, 0.5 -> mean 1/3; squared deviations 0.0011.., 0.0177.., 0.0277..
    # sum 0.046667, var (ddof 1) 0.023333, stderr sqrt(0.023333 / 3) = 0.0881917
    k1 = row(summary, "best_at_k", 1)
    assert k1["mean"] == pytest.approx(1 / 3)
    assert k1["stderr"] == pytest.approx(0.0881917, abs=1e-6)
    assert k1["n_seeds"] == 3
    # k=3: 0.6, 0.4, 0.8 -> mean 0.6, var 0.04, stderr sqrt(0.04 / 3) = 0.1154701
    k3 = row(summary, "best_at_k", 3)
    assert k3["mean"] == pytest.approx(0.6)
    assert k3["stderr"] == pytest.approx(0.1154701, abs=1e-6)
    # diversity: 0.75, 0.30, 0.90 -> mean 0.65, var 0.0975, stderr sqrt(0.0325) = 0.1802776
    div = row(summary, "diversity")
    assert div["mean"] == pytest.approx(0.65)
    assert div["stderr"] == pytest.approx(0.1802776, abs=1e-6)
    # pass_at_k was written as best / 2, so its k=2 mean is half of best@2's (0.5 / 2)
    assert row(summary, "pass_at_k", 2)["mean"] == pytest.approx(0.25)
    assert row(summary, "objective/completion")["mean"] == pytest.approx(0.25)
    # per_seed keeps the eval-seed averages
    s0 = per_seed[(per_seed.train_seed == 0) & (per_seed.metric == "best_at_k") & (per_seed.k == 2)].iloc[0]
    assert s0["value"] == pytest.approx(0.5) and s0["n_eval_seeds"] == 2


def test_eval_seeds_are_averaged_before_training_seeds(tmp_path):
    # seed 0 has eval seeds 0.2 and 0.4 (average 0.3), seed 1 one eval seed 0.9. Averaging inside
    # training seeds first gives (0.3 + 0.9) / 2 = 0.6; pooling all three values would give 0.5.
    paths = [
        write_eval(tmp_path, "maze", "grpo", 0, 0, [0.2], 0.0, budget=1),
        write_eval(tmp_path, "maze", "grpo", 0, 1, [0.4], 0.0, budget=1),
        write_eval(tmp_path, "maze", "grpo", 1, 0, [0.9], 0.0, budget=1),
    ]
    _, summary = aggregate_evals(paths)
    k1 = row(summary, "best_at_k", 1)
    assert k1["mean"] == pytest.approx(0.6)
    # stderr of (0.3, 0.9): std (ddof 1) = 0.4242641, / sqrt(2) = 0.3
    assert k1["stderr"] == pytest.approx(0.3)


def test_single_seed_has_no_stderr(tmp_path):
    _, summary = aggregate_evals([write_eval(tmp_path, "maze", "vpo", 0, 0, [0.1, 0.2, 0.3], 0.4)])
    assert math.isnan(row(summary, "best_at_k", 3)["stderr"])
    assert row(summary, "best_at_k", 3)["mean"] == pytest.approx(0.3) and row(summary, "best_at_k", 3)["n_seeds"] == 1


def test_methods_and_tasks_are_kept_apart(tmp_path):
    paths = [
        write_eval(tmp_path, "maze", "vpo", 0, 0, [1.0], 0.0, budget=1),
        write_eval(tmp_path, "maze", "grpo", 0, 0, [0.0], 0.0, budget=1),
        write_eval(tmp_path, "tool", "vpo", 0, 0, [0.5], 0.0, budget=1),
    ]
    _, summary = aggregate_evals(paths)
    best = summary[summary.metric == "best_at_k"].set_index(["task", "method"])["mean"]
    assert best.to_dict() == {("maze", "grpo"): 0.0, ("maze", "vpo"): 1.0, ("tool", "vpo"): 0.5}


def test_bad_inputs_fail_with_the_file_named(tmp_path):
    good = write_eval(tmp_path, "maze", "vpo", 0, 0, [0.1, 0.2, 0.3], 0.4)
    with pytest.raises(ValueError, match="each evaluation seed must appear once"):
        aggregate_evals([good, good])
    short = write_eval(tmp_path, "maze", "gdpo", 0, 0, [0.1, 0.2], 0.4, budget=3)
    with pytest.raises(ValueError, match="gdpo_seed0_evalseed0.json: pass_at_k has 2 values, expected budget=3"):
        aggregate_evals([short])
    broken = tmp_path / "broken.json"
    broken.write_text(json.dumps({"task": "maze"}))
    with pytest.raises(ValueError, match="broken.json: missing keys"):
        aggregate_evals([broken])


def test_csv_round_trip_keeps_integer_k(tmp_path, three_seeds):
    _, summary = aggregate_evals(three_seeds)
    write_csv(summary, tmp_path / "out" / "summary.csv")
    text = (tmp_path / "out" / "summary.csv").read_text()
    assert "best_at_k,1," in text and "best_at_k,1.0" not in text
    back = pd.read_csv(tmp_path / "out" / "summary.csv")
    assert back[(back.metric == "best_at_k") & (back.k == 3)]["mean"].item() == pytest.approx(0.6)


# ---- training curves ----------------------------------------------------------------------------
def make_cell(root, task, method, seed, lines):
    cell = root / task / method / f"seed{seed}"
    cell.mkdir(parents=True)
    (cell / "train.json").write_text(json.dumps({"backend": "local", "task": task, "method": method, "seed": seed}))
    (cell / "metrics.jsonl").write_text("".join(lines))
    return cell / "train.json"


def test_both_metrics_line_formats(tmp_path):
    local = make_cell(
        tmp_path,
        "maze",
        "vpo",
        0,
        [
            json.dumps({"step": 1, "pool_diversity": 0.2, "score_mean": 0.1, "vpo/advantage_draw_std": 0.05}) + "\n",
            json.dumps({"step": 2, "pool_diversity": 0.4, "vpo/advantage_draw_std": 0.03}) + "\n",
            '{"step": 3, "pool_div',  # cut off by a killed trainer: ignored
        ],
    )
    verl = make_cell(
        tmp_path,
        "maze",
        "vpo",
        1,
        [  # veRL's file logger: {"step", "data": {...}}
            json.dumps({"step": 1, "data": {"vpo/pool_diversity": 0.6, "critic/score/mean": 0.3}}) + "\n",
            json.dumps({"step": 2, "data": {"vpo/pool_diversity": 0.8}}) + "\n",
            json.dumps({"step": 2, "data": {"val-core/maze/acc/mean@3": 0.5}}) + "\n",  # no diversity: skipped
        ],
    )
    curves = aggregate_training([local, verl])
    assert curves.iloc[:, :5].values.tolist() == [
        ["maze", "vpo", 0, 1, 0.2],
        ["maze", "vpo", 0, 2, 0.4],
        ["maze", "vpo", 1, 1, 0.6],
        ["maze", "vpo", 1, 2, 0.8],
    ]
    # the advantage's spread over weight draws where it is logged, NaN where not
    assert curves.advantage_draw_std.tolist()[:2] == [0.05, 0.03] and curves.advantage_draw_std[2:].isna().all()
    assert training_curve_stats(curves, "advantage_draw_std")["mean"].tolist()[:2] == pytest.approx([0.05, 0.03])
    stats = training_curve_stats(curves)
    # step 1: (0.2, 0.6) -> mean 0.4, stderr std(ddof 1)=0.2828427 / sqrt 2 = 0.2
    step1 = stats[stats.step == 1].iloc[0]
    assert step1["mean"] == pytest.approx(0.4) and step1["stderr"] == pytest.approx(0.2)


def test_broken_metrics_line_in_the_middle_is_an_error(tmp_path):
    path = tmp_path / "metrics.jsonl"
    path.write_text('{"step": 1, "pool_diversity": 0.1}\nnot json\n{"step": 2, "pool_diversity": 0.2}\n')
    with pytest.raises(ValueError, match="metrics.jsonl:2"):
        read_metrics_jsonl(path)


def test_missing_diversity_is_an_error(tmp_path):
    marker = make_cell(tmp_path, "maze", "grpo", 0, [json.dumps({"step": 1, "score_mean": 0.1}) + "\n"])
    with pytest.raises(ValueError, match="no 'pool_diversity' values"):
        aggregate_training([marker])


@pytest.mark.parametrize("steps", [[1, 2, 3, 2, 3], [1, 2, 2], [3, 1]])
def test_repeated_or_backward_steps_are_an_error_naming_the_file(tmp_path, steps):
    """Two trainers once wrote one cell's metrics (steps 35-40 twice): aggregation refuses such a file."""
    path = tmp_path / "metrics.jsonl"
    path.write_text("".join(json.dumps({"step": s, "pool_diversity": 0.5}) + "\n" for s in steps))
    with pytest.raises(ValueError, match=rf"{path}:\d+: step \d+ after step \d+"):
        read_metrics_jsonl(path)

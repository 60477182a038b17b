"""Pool quality per problem (hypervolume, non-dominated set) and the bootstrap intervals over seeds x
problems, against hand-computed cases and a direct re-computation of the resampling."""

import json

import numpy as np
import pandas as pd
import pytest

from vpo.report import intervals as iv
from vpo.report.aggregate import aggregate_problems, problem_scores


def test_problem_scores_of_a_two_problem_frame():
    frame = pd.DataFrame(
        {
            "problem": [0, 0, 0, 0, 1, 1, 1, 1],
            "chain": [0, 0, 1, 1, 0, 0, 1, 1],
            "slot": [0, 1] * 4,
            "scalar": [1.0, 0.0, 0.0, 0.0, 0.5, 0.5, 0.25, 0.75],
            "correct": [1, 0, 0, 0, 0, 0, 0, 0],
            "k": [2] * 8,
            "a": [1.0, 0.0, 0.5, 0.5, 0.2, 0.2, 0.2, 0.2],
            "b": [0.0, 1.0, 0.5, 0.5, 0.5, 0.5, 0.5, 0.5],
        }
    )
    scores = problem_scores(frame, ["a", "b"], ks=[1, 2, 10], eval_seed=0).set_index(["problem", "metric", "k"]).value
    assert scores[(0, "best_at_k", 1)] == pytest.approx(0.25)  # the mean scalar
    assert scores[(0, "best_at_k", 2)] == pytest.approx(0.5)  # P(the one 1.0 is among 2 of 4)
    assert scores[(0, "best_at_k", 4)] == 1.0  # k = 10 capped at the pool of 4
    assert scores[(0, "pass_at_k", 2)] == pytest.approx(0.5)
    assert scores[(1, "pass_at_k", 4)] == 0.0
    quality = problem_scores(frame, ["a", "b"], ks=[1], eval_seed=0)
    quality = quality[quality.k.isna()].set_index(["problem", "metric"]).value
    # problem 0: front (1,0), (0,1), (0.5,0.5); only (0.5,0.5) spans volume
    assert quality[(0, "nondominated")] == 3 and quality[(0, "hypervolume")] == pytest.approx(0.25)
    assert quality[(1, "nondominated")] == 1 and quality[(1, "hypervolume")] == pytest.approx(0.1)
    # pairwise L1 distances of problem 0's (1, 0), (0, 1), (.5, .5), (.5, .5): 2, 1, 1, 1, 1, 0; problem 1's are equal
    assert quality[(0, "diversity")] == pytest.approx(1.0) and quality[(1, "diversity")] == 0.0
    # one distinct vector: its utility is w . r averaged over the weights, about 0.35 for uniform weights
    assert 0.25 < quality[(1, "expected_utility")] < 0.45


def test_aggregate_problems_averages_eval_seeds(tmp_path):
    rows = []
    for eval_seed, value in ((0, 1.0), (1, 0.0)):
        frame = pd.DataFrame(
            {
                "problem": [0, 0],
                "chain": [0, 1],
                "slot": [0, 0],
                "scalar": [value, value],
                "correct": [value > 0] * 2,
                "k": [4, 4],
                "completion": [1.0, 1.0],
                "gold": [1.0, 0.5],
                "diamond": [1.0, 1.0],
                "avoid_lava": [value, value],
            }
        )
        path = tmp_path / f"evalseed{eval_seed}.parquet"
        frame.to_parquet(path)
        path.with_suffix(".json").write_text(
            json.dumps({"task": "maze", "method": "vpo", "train_seed": 3, "eval_seed": eval_seed})
        )
        rows.append(path)
    table = aggregate_problems(rows, ks=[1, 2]).set_index(["metric", "k"])
    assert table.loc[("best_at_k", 1)].value.item() == pytest.approx(0.5)
    assert table.loc[("pass_at_k", 2)].value.item() == pytest.approx(0.5)
    assert set(table.train_seed) == {3} and set(table.task) == {"maze"}
    with pytest.raises(ValueError, match="given twice"):
        aggregate_problems(rows + rows[:1], ks=[1])


# ---- the estimators -------------------------------------------------------------------------------
def hand_iqm(values):
    ordered = sorted(values)
    cut = len(ordered) // 4
    middle = ordered[cut : len(ordered) - cut]
    return sum(middle) / len(middle)


def test_iqm_and_mean_by_hand():
    scores = np.arange(12, dtype=float).reshape(3, 4)  # 0..11: the middle six are 3..8
    assert iv.iqm(scores) == pytest.approx(5.5) == pytest.approx(hand_iqm(scores.ravel()))
    assert iv.mean(scores) == pytest.approx(5.5)


def test_bootstrap_interval_against_a_direct_computation():
    rng = np.random.default_rng(11)
    scores = rng.random((3, 4))
    reps, seed = 400, 7
    point, low, high = iv.interval(scores, "iqm", reps=reps, seed=seed)
    draws = np.random.default_rng(seed)  # the same draws, taken apart by hand
    seed_index = draws.integers(3, size=(reps, 3, 4))
    problem_index = draws.integers(4, size=(reps, 1, 4))
    replicates = []
    for r in range(reps):
        values = [scores[seed_index[r, n, m], problem_index[r, 0, m]] for n in range(3) for m in range(4)]
        replicates.append(hand_iqm(values))
    replicates.sort()
    expected_low = np.interp(0.025 * (reps - 1), np.arange(reps), replicates)
    expected_high = np.interp(0.975 * (reps - 1), np.arange(reps), replicates)
    assert point == pytest.approx(hand_iqm(scores.ravel()))
    assert (low, high) == (pytest.approx(expected_low), pytest.approx(expected_high))
    assert iv.interval(scores, "iqm", reps=reps, seed=seed) == (point, low, high)  # a rerun is the same


def test_mean_interval_matches_the_two_stage_variance_on_many_problems():
    # i.i.d. N(0, 1) scores, n seeds x P problems. Resampling a problem, then n seeds within it, gives a
    # column mean of variance 1/n (between problems) + (n - 1)/n^2 (within): the mean's bootstrap
    # standard deviation is sqrt((1 + (n - 1)/n) / (n P)), and a 95% interval 2 x 1.96 of that wide
    n, problems = 3, 2000
    scores = np.random.default_rng(0).normal(size=(n, problems))
    point, low, high = iv.interval(scores, "mean", reps=2000, seed=1)
    assert high - low == pytest.approx(2 * 1.96 * np.sqrt((1 + (n - 1) / n) / (n * problems)), rel=0.08)
    assert low < point < high


def test_iqm_is_scipys_trimmed_mean_for_matrices_and_replicates():
    rng = np.random.default_rng(5)
    scores = rng.random((3, 17))  # 51 scores: scipy cuts int(0.25 * 51) = 12 at each end
    from scipy.stats import trim_mean

    assert iv.iqm(scores) == pytest.approx(trim_mean(scores.ravel(), 0.25))
    replicates = rng.random((4, 3, 17))
    assert iv.iqm(replicates) == pytest.approx([trim_mean(r.ravel(), 0.25) for r in replicates])
    assert iv.mean(replicates) == pytest.approx(replicates.mean(axis=(1, 2)))


def test_probability_of_improvement_by_hand_and_against_the_mann_whitney_u():
    from scipy.stats import mannwhitneyu

    # one problem: x seeds (1, 0), y seeds (0, 0): x wins 2 of 4 pairs, ties 2 (half each) -> 0.75
    assert iv.probability_of_improvement(np.array([[1.0], [0.0]]), np.array([[0.0], [0.0]])) == pytest.approx(0.75)
    rng = np.random.default_rng(3)
    x, y = rng.integers(0, 3, size=(3, 20)).astype(float), rng.integers(0, 3, size=(3, 20)).astype(float)
    u = np.mean([mannwhitneyu(x[:, j], y[:, j]).statistic / (3 * 3) for j in range(20)])  # U of x, ties half
    assert iv.probability_of_improvement(x, y) == pytest.approx(u)
    p, low, high = iv.improvement_interval(x, y, reps=500, seed=0)
    assert p == pytest.approx(u) and low <= p <= high
    assert iv.improvement_interval(x, x, reps=200, seed=0)[0] == pytest.approx(0.5)


def test_performance_profile_on_three_problems():
    scores = np.array([[0.2, 0.5, 0.9]])  # one seed, three problems
    taus = np.array([0.0, 0.3, 0.6, 1.0])
    fractions, band = iv.profile(scores, taus, reps=300, seed=0)
    assert fractions.tolist() == pytest.approx([1.0, 2 / 3, 1 / 3, 0.0])
    assert (band[0] <= fractions + 1e-12).all() and (fractions <= band[1] + 1e-12).all()
    assert band[:, 0].tolist() == [1.0, 1.0] and band[:, -1].tolist() == [0.0, 0.0]


def test_score_matrix_refuses_seeds_on_different_problems():
    frame = pd.DataFrame(
        {
            "task": "maze",
            "method": "vpo",
            "metric": "best_at_k",
            "k": 1.0,
            "train_seed": [0, 0, 1],
            "problem": [0, 1, 0],
            "value": [0.1, 0.2, 0.3],
        }
    )
    with pytest.raises(ValueError, match="different problems"):
        iv.score_matrix(frame, "maze", "vpo", "best_at_k", 1.0)


def test_estimate_all_and_the_tables():
    rng = np.random.default_rng(5)
    rows = [
        dict(task="maze", method=method, train_seed=s, problem=p, metric=metric, k=k, value=float(rng.random() + shift))
        for method, shift in (("grpo", 0.0), ("vpo", 0.5))
        for s in range(3)
        for p in range(30)
        for metric, k in (
            ("best_at_k", 1.0),
            ("best_at_k", 4.0),
            ("pass_at_k", 4.0),
            ("hypervolume", np.nan),
            ("expected_utility", np.nan),
            ("nondominated", np.nan),
        )
    ]
    intervals, improvement, profiles = iv.estimate_all(pd.DataFrame(rows), "vpo", reps=200, seed=0)
    assert len(intervals) == 2 * 6 * 2 and set(intervals.estimator) == {"mean", "iqm"}
    assert (intervals.low <= intervals.point).all() and (intervals.point <= intervals.high).all()
    assert (
        set(improvement.other) == {"grpo"} and (improvement[improvement.metric == "best_at_k"].probability > 0.8).all()
    )
    assert set(profiles.k) == {4.0} and len(profiles) == 2 * iv.PROFILE_POINTS
    table = iv.interval_table(intervals, improvement, ["grpo", "vpo"], ["maze"], ["best_at_k", "pass_at_k"])
    text = iv.render_intervals(table, "vpo", latex=False)
    assert "GRPO: best@4" in text and "P(VPO > ·)" in text and "–" in text  # VPO's own row has no P
    latex = iv.render_intervals(table, "vpo", latex=True)
    assert r"$>$" in latex and "·" not in latex
    pool = iv.interval_table(intervals, improvement, ["grpo", "vpo"], ["maze"], list(iv.POOL_LABELS))
    assert "hypervolume" in iv.render_intervals(pool, "vpo", latex=False, pool=True)


# ---- figures ----------------------------------------------------------------------------------------
@pytest.fixture
def estimates():
    rng = np.random.default_rng(9)
    rows = [
        dict(
            task="maze",
            method=method,
            train_seed=s,
            problem=p,
            metric=metric,
            k=k,
            value=0.0 if metric == "hypervolume" else float(rng.random() + shift),
        )
        for method, shift in (("grpo", 0.0), ("vpo", 0.3))
        for s in range(3)
        for p in range(12)
        for metric, k in (
            ("best_at_k", 1.0),
            ("best_at_k", 6.0),
            ("pass_at_k", 6.0),
            ("hypervolume", np.nan),
            ("expected_utility", np.nan),
            ("nondominated", np.nan),
        )
    ]
    per_problem = pd.DataFrame(rows)
    return (per_problem, *iv.estimate_all(per_problem, "vpo", reps=200, seed=0))


def test_the_interval_figures_draw_every_method(estimates, tmp_path):
    import matplotlib.pyplot as plt

    from vpo.report import interval_figures as figs

    per_problem, intervals, improvement, profiles = estimates
    fig = figs.intervals(
        intervals=intervals,
        improvement=improvement,
        methods=["grpo", "vpo"],
        tasks=["maze"],
        out=tmp_path / "intervals.png",
    )
    best, _, better = fig.axes[:3]
    assert [t.get_text() for t in best.get_yticklabels()] == ["GRPO", "VPO"]
    assert len(best.lines) >= 4  # IQM and mean per method
    assert [t.get_text() for t in better.get_yticklabels()] == ["GRPO"]  # VPO against the others
    plt.close(fig)
    fig = figs.performance_profiles(
        profiles=profiles,
        per_problem=per_problem,
        methods=["grpo", "vpo"],
        tasks=["maze"],
        out=tmp_path / "profiles.png",
    )
    ax = fig.axes[0]
    assert len(ax.collections) == 2  # one bootstrap band per method
    # seaborn's complementary ECDF: starts at 1 and ends at 0
    ys = ax.lines[0].get_ydata()
    assert ys[0] == pytest.approx(1.0) and ys[-1] == pytest.approx(0.0)
    plt.close(fig)
    fig = figs.pool_quality(intervals=intervals, methods=["grpo", "vpo"], tasks=["maze"], out=tmp_path / "pool.png")
    # hypervolume is 0 for every maze pool: its panel is left out, and the caption says why
    titles = [ax.get_title() for ax in fig.axes if ax.get_visible() and ax.get_title()]
    assert titles == ["Maze: expected utility", "Maze: non-dominated vectors"]
    caption = " ".join(" ".join(t.get_text() for t in fig.texts).split())
    assert "hypervolume not drawn for Maze: 0 for every pool" in caption
    plt.close(fig)
    assert all((tmp_path / name).stat().st_size > 0 for name in ("intervals.png", "profiles.png", "pool.png"))

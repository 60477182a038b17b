"""Interval estimates over training seeds and problems (Agarwal et al., NeurIPS 2021; the `rliable`
library): from `per_problem.csv` (`vpo aggregate problems`), per task, method, metric and k, a score
matrix (training seeds, problems) and

- the mean and the interquartile mean (IQM: the mean of the middle 50% of all seed x problem scores)
  with 95% stratified-bootstrap confidence intervals, resampling training seeds within each problem
  and the problems themselves (rliable's `task_bootstrap`);
- the probability of improvement P(X > Y) of the reference method (VPO) over each other method: per
  problem the chance that a training seed of X scores above one of Y (ties count half, the
  Mann-Whitney U statistic over n_X n_Y), averaged over problems; its interval resamples each
  method's seeds within each problem;
- the performance profile of best@K: the fraction of (seed, problem) scores above tau, for tau over
  the task's range, with the same bootstrap's band.

`vpo intervals estimate` writes

    intervals.csv    task, method, metric, k, estimator (mean | iqm), point, low, high, n_seeds, n_problems
    improvement.csv  task, method (the reference), other, metric, k, probability, low, high
    profiles.csv     task, method, metric, k, tau, fraction, low, high

Each estimator is written once and computes the point estimate and the bootstrap replicates alike
(a (seeds, problems) matrix or (reps, seeds, problems) replicates): the mean; the IQM, scipy's
`trim_mean` cutting a quarter at each end, which is what rliable's `aggregate_iqm` calls; the probability
of improvement, the Mann-Whitney U statistic over n_X n_Y per problem (tests/test_intervals.py checks it
against scipy's `mannwhitneyu`). The rliable package is not used: its bootstrap (`rliable.library`) is
built on `arch`, whose 7.x releases do not import under pandas 3 and whose 8.x releases reject the
keyword rliable passes, so the resampling is written here as its StratifiedBootstrap defines it, and a
point estimate from rliable beside replicates from this file would be two implementations of one number.
Each estimate draws from its own generator seeded by --seed, so a rerun gives the same intervals.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

import numpy as np
import pandas as pd

from vpo.data import read_csv_table
from vpo.data import write_csv
from vpo.report.labels import method_label, task_label, use_variants
from vpo.report.table_render import cell_frame, render, write_outputs

_COLUMNS = {
    "intervals": ["task", "method", "metric", "k", "estimator", "point", "low", "high", "n_seeds", "n_problems"],
    "improvement": ["task", "method", "other", "metric", "k", "probability", "low", "high"],
    "profiles": ["task", "method", "metric", "k", "tau", "fraction", "low", "high"],
}
CONFIDENCE = 0.95  # the intervals' coverage
PROFILE_POINTS = 51  # thresholds tau of a performance profile, evenly over the task's score range


def mean(scores: np.ndarray) -> np.ndarray | float:
    """Mean of every seed x problem score: a (seeds, problems) matrix -> float, replicates
    (reps, seeds, problems) -> (reps,)."""
    result = np.asarray(scores, dtype=float).mean(axis=(-2, -1))
    return float(result) if result.ndim == 0 else result


def iqm(scores: np.ndarray) -> np.ndarray | float:
    """Interquartile mean of every seed x problem score (the mean of the middle 50%: scipy's trim_mean
    cutting a quarter at each end): a (seeds, problems) matrix -> float, replicates -> (reps,)."""
    from scipy.stats import trim_mean

    scores = np.asarray(scores, dtype=float)
    result = trim_mean(scores.reshape(*scores.shape[:-2], -1), proportiontocut=0.25, axis=-1)
    return float(result) if np.ndim(result) == 0 else result


ESTIMATORS = {"mean": mean, "iqm": iqm}  # name -> estimator of a matrix or of its replicates


def probability_of_improvement(x: np.ndarray, y: np.ndarray) -> np.ndarray | float:
    """Mean over problems of P(X > Y) + P(X = Y) / 2 between one seed of each method (the Mann-Whitney
    U statistic over n_X n_Y), vectorised.

    x: (seeds_x, problems), y: (seeds_y, problems) -> float; or replicates (reps, seeds, problems) -> (reps,).
    """
    x, y = np.asarray(x, dtype=float), np.asarray(y, dtype=float)
    if x.shape[-1] != y.shape[-1]:
        raise ValueError(f"the two score matrices cover {x.shape[-1]} and {y.shape[-1]} problems; they must match")
    a, b = x[..., :, None, :], y[..., None, :, :]
    per_problem = (a > b).mean(axis=(-3, -2)) + (a == b).mean(axis=(-3, -2)) / 2
    result = per_problem.mean(axis=-1)
    return float(result) if result.ndim == 0 else result


def _stratified_resamples(scores: np.ndarray, reps: int, rng: np.random.Generator, *, problems: bool) -> np.ndarray:
    """rliable's stratified bootstrap: (reps, seeds, problems) replicates of a (seeds, problems) matrix,
    each column's seeds drawn with replacement from that column's (its stratum); with `problems`, the
    columns themselves drawn with replacement too (rliable's task_bootstrap). Seed indices are drawn
    first, (reps, seeds, problems), then problem indices, (reps, problems)."""
    n_seeds, n_problems = scores.shape
    seed_index = rng.integers(n_seeds, size=(reps, n_seeds, n_problems))
    problem_index = rng.integers(n_problems, size=(reps, 1, n_problems)) if problems else np.arange(n_problems)
    return scores[seed_index, problem_index]


def _percentile_interval(replicates: np.ndarray) -> tuple[float, float]:
    """The central CONFIDENCE interval of bootstrap replicates (reps, ...): percentiles, as rliable's default."""
    tail = 100 * (1 - CONFIDENCE) / 2
    low, high = np.percentile(replicates, [tail, 100 - tail], axis=0)
    return low, high


def interval(scores: np.ndarray, estimator: str, *, reps: int, seed: int) -> tuple[float, float, float]:
    """(point, low, high) of an estimator over a (seeds, problems) matrix: seeds resampled within
    problems and problems resampled, percentile interval of coverage CONFIDENCE."""
    estimate = ESTIMATORS[estimator]
    rng = np.random.default_rng(seed)
    low, high = _percentile_interval(estimate(_stratified_resamples(scores, reps, rng, problems=True)))
    return estimate(scores), float(low), float(high)


def improvement_interval(x: np.ndarray, y: np.ndarray, *, reps: int, seed: int) -> tuple[float, float, float]:
    """(P(X > Y), low, high): each method's seeds resampled within each problem, independently
    (rliable's StratifiedIndependentBootstrap)."""
    rng = np.random.default_rng(seed)
    replicates = probability_of_improvement(
        _stratified_resamples(x, reps, rng, problems=False), _stratified_resamples(y, reps, rng, problems=False)
    )
    low, high = _percentile_interval(replicates)
    return probability_of_improvement(x, y), float(low), float(high)


def profile(scores: np.ndarray, taus: np.ndarray, *, reps: int, seed: int) -> tuple[np.ndarray, np.ndarray]:
    """Fraction of seed x problem scores above each tau (taus,) and its band (2, taus), over the
    stratified bootstrap of seeds and problems (rliable's score distribution)."""
    rng = np.random.default_rng(seed)
    samples = _stratified_resamples(scores, reps, rng, problems=True).reshape(reps, -1)
    fractions = np.array([(scores > tau).mean() for tau in taus])
    low, high = _percentile_interval(np.stack([(samples > tau).mean(axis=1) for tau in taus], axis=1))
    return fractions, np.stack([low, high])


def score_table(per_problem: pd.DataFrame, task: str, method: str, metric: str, k) -> pd.DataFrame:
    """(training seeds, problems) scores of one task, method and metric (k NaN for pool quality), the
    columns the problems' ids in ascending order."""
    rows = per_problem[(per_problem.task == task) & (per_problem.method == method) & (per_problem.metric == metric)]
    rows = rows[rows.k.isna()] if pd.isna(k) else rows[rows.k == k]
    if rows.empty:
        raise ValueError(f"per_problem has no {metric} (k={k}) for task={task} method={method}")
    if rows.duplicated(["train_seed", "problem"]).any():
        raise ValueError(f"task={task} method={method} {metric} (k={k}): a (training seed, problem) appears twice")
    matrix = rows.pivot(index="train_seed", columns="problem", values="value").sort_index().sort_index(axis=1)
    if matrix.isna().any().any():
        raise ValueError(
            f"task={task} method={method}: the training seeds were evaluated on different problems; "
            "rerun `vpo eval` so every seed covers the same test set"
        )
    return matrix


def score_matrix(per_problem: pd.DataFrame, task: str, method: str, metric: str, k) -> np.ndarray:
    """`score_table` as an array (training seeds, problems)."""
    return score_table(per_problem, task, method, metric, k).to_numpy(float)


def paired(x: pd.DataFrame, y: pd.DataFrame, names: tuple[str, str]) -> tuple[np.ndarray, np.ndarray]:
    """Two methods' score tables (seeds, problems) as arrays whose columns are the same problems, matched by
    id; ValueError naming the methods when they were evaluated on different problems (compared column by
    column, they once paired problem 3 of one method with problem 7 of the other)."""
    if set(x.columns) != set(y.columns):
        only_x, only_y = sorted(set(x.columns) - set(y.columns)), sorted(set(y.columns) - set(x.columns))
        raise ValueError(
            f"{names[0]} and {names[1]} were evaluated on different problems ({len(only_x)} only {names[0]}'s, "
            f"e.g. {only_x[:3]}; {len(only_y)} only {names[1]}'s, e.g. {only_y[:3]}); evaluate both on the same "
            "test split"
        )
    return x.to_numpy(float), y[list(x.columns)].to_numpy(float)


def estimate_all(per_problem: pd.DataFrame, reference: str, *, reps: int, seed: int):
    """The three tables of the module docstring from per_problem.csv rows."""
    intervals, improvement, profiles = [], [], []
    keys = per_problem[["task", "metric", "k"]].drop_duplicates().sort_values(["task", "metric", "k"])
    for task, metric, k in keys.itertuples(index=False):
        methods = list(dict.fromkeys(per_problem[per_problem.task == task].method))
        matrices = {m: score_table(per_problem, task, m, metric, k) for m in methods}
        for method, scores in matrices.items():
            for estimator in ESTIMATORS:
                point, low, high = interval(scores.to_numpy(float), estimator, reps=reps, seed=seed)
                intervals.append(
                    dict(
                        task=task,
                        method=method,
                        metric=metric,
                        k=k,
                        estimator=estimator,
                        point=point,
                        low=low,
                        high=high,
                        n_seeds=scores.shape[0],
                        n_problems=scores.shape[1],
                    )
                )
        if reference in matrices:
            for other in (m for m in methods if m != reference):
                x, y = paired(matrices[reference], matrices[other], (reference, other))
                p, low, high = improvement_interval(x, y, reps=reps, seed=seed)
                improvement.append(
                    dict(
                        task=task, method=reference, other=other, metric=metric, k=k, probability=p, low=low, high=high
                    )
                )
    for task, rows in per_problem[per_problem.metric == "best_at_k"].groupby("task", sort=True):
        budget = rows.k.max()
        top = rows[rows.k == budget]
        taus = np.linspace(top.value.min(), top.value.max(), PROFILE_POINTS)
        for method in dict.fromkeys(top.method):
            fractions, bands = profile(
                score_matrix(per_problem, task, method, "best_at_k", budget), taus, reps=reps, seed=seed
            )
            profiles += [
                dict(task=task, method=method, metric="best_at_k", k=budget, tau=t, fraction=f, low=lo, high=hi)
                for t, f, lo, hi in zip(taus, fractions, bands[0], bands[1])
            ]
    return tuple(
        pd.DataFrame(rows, columns=_COLUMNS[name])
        for name, rows in (("intervals", intervals), ("improvement", improvement), ("profiles", profiles))
    )


# ---- tables -------------------------------------------------------------------------------------
POOL_LABELS = {
    "hypervolume": "hypervolume",
    "expected_utility": "expected utility",
    "nondominated": "non-dominated",
    "diversity": "diversity",
}


def _format_interval(point: float, low: float, high: float, *, latex: bool = False, digits: int = 3) -> str:
    """0.6123, 0.58, 0.64 -> '0.612 [0.580, 0.640]'."""
    text = f"{point:.{digits}f} [{low:.{digits}f}, {high:.{digits}f}]"
    return f"${text}$" if latex else text


def _metric_name(metric: str, k) -> str:
    return POOL_LABELS.get(metric) or f"{metric.split('_at_')[0]}@{int(k)}"


def interval_table(
    intervals: pd.DataFrame, improvement: pd.DataFrame, methods: list[str], tasks: list[str], metrics: list[str]
) -> pd.DataFrame:
    """One row per method, metric, k and task of `metrics`: mean and IQM (point, low, high) and the
    reference method's probability of improvement over it (NaN for the reference itself)."""
    records = []
    for method in methods:
        for task in tasks:
            mine = intervals[(intervals.task == task) & (intervals.method == method) & intervals.metric.isin(metrics)]
            if mine.empty:
                raise ValueError(f"intervals.csv has no rows for task={task} method={method}; rerun `vpo intervals`")
            for (metric, k), rows in sorted(
                mine.groupby(["metric", "k"], dropna=False, sort=True), key=lambda item: metrics.index(item[0][0])
            ):
                record = {
                    "method": method,
                    "task": task,
                    "metric": metric,
                    "k": k,
                    "n_seeds": int(rows.n_seeds.iloc[0]),
                    "n_problems": int(rows.n_problems.iloc[0]),
                }
                for row in rows.itertuples():
                    record.update(
                        {
                            f"{row.estimator}": row.point,
                            f"{row.estimator}_low": row.low,
                            f"{row.estimator}_high": row.high,
                        }
                    )
                better = improvement[
                    (improvement.task == task)
                    & (improvement.other == method)
                    & (improvement.metric == metric)
                    & ((improvement.k == k) | pd.isna(k))
                ]
                first = better.iloc[0] if len(better) else None
                record.update(
                    {
                        "improvement": np.nan if first is None else first.probability,
                        "improvement_low": np.nan if first is None else first.low,
                        "improvement_high": np.nan if first is None else first.high,
                    }
                )
                records.append(record)
    return pd.DataFrame.from_records(records)


def render_intervals(
    table: pd.DataFrame, reference: str, *, latex: bool, html: bool = False, pool: bool = False
) -> str:

    ref = method_label(reference)
    cells: dict[str, dict] = {}
    for row in table.itertuples():
        label = method_label(row.method) if pool else f"{method_label(row.method)}: {_metric_name(row.metric, row.k)}"
        cell = cells.setdefault(label, {})
        if pool:  # counts of vectors with two decimals
            cell[(task_label(row.task), _metric_name(row.metric, row.k))] = _format_interval(
                row.mean, row.mean_low, row.mean_high, latex=latex, digits=2 if row.metric == "nondominated" else 3
            )
            continue
        cell[(task_label(row.task), "mean")] = _format_interval(row.mean, row.mean_low, row.mean_high, latex=latex)
        cell[(task_label(row.task), "IQM")] = _format_interval(row.iqm, row.iqm_low, row.iqm_high, latex=latex)
        cell[(task_label(row.task), f"P({ref} > ·)")] = (
            "–"
            if pd.isna(row.improvement)
            else _format_interval(row.improvement, row.improvement_low, row.improvement_high, latex=latex)
        )
    seeds = "/".join(map(str, sorted(table.n_seeds.unique())))
    problems = ", ".join(f"{task_label(t)} {n}" for t, n in table.groupby("task", sort=False).n_problems.max().items())
    if pool:
        caption = (
            f"Quality of each evaluation pool as a multi-objective set, per problem: hypervolume of its "
            f"non-dominated reward vectors against 0, expected utility E_w[max w · r] under Dirichlet(1) "
            f"weights, the number of distinct non-dominated vectors, and the diversity (mean pairwise L1 "
            f"distance of the pool's reward vectors); mean over {seeds} training seeds "
            f"x problems ({problems}) with a 95% stratified-bootstrap interval."
        )
    else:
        caption = (
            f"Mean and interquartile mean (IQM) over {seeds} training seeds x problems ({problems}) with 95% "
            f"stratified-bootstrap intervals [low, high] (seeds within problems, and problems); P({ref} > ·): "
            f"probability that a {ref} seed beats one of the row's method on a problem, averaged over "
            "problems, with its interval."
        )
    return render(cell_frame(cells), latex=latex, caption=caption, html=html)


# ---- command line -------------------------------------------------------------------------------
def add_arguments(parser: argparse.ArgumentParser) -> None:
    sub = parser.add_subparsers(dest="what", required=True)
    estimate = sub.add_parser("estimate", help="per_problem.csv -> intervals.csv, improvement.csv, profiles.csv")
    estimate.add_argument("--per-problem", required=True, help="aggregate/per_problem.csv (`vpo aggregate problems`)")
    estimate.add_argument("--out-dir", required=True, help="directory for intervals.csv, improvement.csv, profiles.csv")
    estimate.add_argument("--reference", default="vpo", help="the method whose probability of improvement is given")
    estimate.add_argument("--reps", type=int, default=2000, help="bootstrap resamples per estimate")
    estimate.add_argument("--seed", type=int, default=0, help="seed of the resampling")
    table = sub.add_parser("table", help="the intervals or pool-quality table (csv, md, tex, html)")
    table.add_argument(
        "--kind",
        required=True,
        choices=("intervals", "pool_quality"),
        help="intervals: best@k and pass@k with P(improvement); pool_quality: hypervolume and kin",
    )
    table.add_argument("--intervals", required=True, help="aggregate/intervals.csv")
    table.add_argument("--improvement", default=None, help="aggregate/improvement.csv (--kind intervals)")
    table.add_argument("--methods", required=True, help="comma-separated methods (row order)")
    table.add_argument("--tasks", required=True, help="comma-separated tasks (column groups)")
    table.add_argument("--variants", default=None, help="JSON {variant: {method, label}} of config.yaml `variants`")
    table.add_argument("--out", nargs="+", required=True, help="output files: .csv, .md, .tex and/or .html")


def run(args: argparse.Namespace) -> int:
    if args.what == "table":
        use_variants(args.variants)
        pool = args.kind == "pool_quality"
        if not pool and not args.improvement:
            raise ValueError("--kind intervals needs --improvement (aggregate/improvement.csv)")
        rows = read_csv_table(args.intervals)
        improvement = pd.DataFrame(columns=_COLUMNS["improvement"]) if pool else read_csv_table(args.improvement)
        reference = improvement.method.iloc[0] if len(improvement) else "vpo"
        table = interval_table(
            rows,
            improvement,
            args.methods.split(","),
            args.tasks.split(","),
            list(POOL_LABELS) if pool else ["best_at_k", "pass_at_k"],
        )
        write_outputs(table, lambda **fmt: render_intervals(table, reference, pool=pool, **fmt), args.out)
        return 0
    if args.reps < 100:
        raise ValueError(f"--reps {args.reps} is too few for a 95% percentile interval; use at least 100")
    intervals, improvement, profiles = estimate_all(
        read_csv_table(args.per_problem), args.reference, reps=args.reps, seed=args.seed
    )
    for name, frame in (("intervals", intervals), ("improvement", improvement), ("profiles", profiles)):
        write_csv(frame, Path(args.out_dir) / f"{name}.csv")
    print(
        f"{len(intervals)} intervals, {len(improvement)} improvement probabilities, "
        f"{profiles.groupby(['task', 'method']).ngroups if len(profiles) else 0} profiles",
        file=sys.stderr,
    )
    return 0

"""The claims README makes about a run, checked on its results: `vpo claims --results results/cpu`.

Prints the numbers README quotes (per method: best@1 and best@budget of the task scalar, the evaluation
pool's diversity, mean and standard error over training seeds; the training batches' pool diversity at
the first and last step; the evolutionary search's solved problems at its last iteration) and then one
line per claim: holds or fails, with its 95% interval.
The exit status is 1 when a claim fails, so CI, which runs it on a fresh CPU default run, fails when a
change flips a claim, instead of README going wrong quietly.

Every claim compares the reference method (VPO) with each other method of the run on every task, per
(training seed, problem) of the evaluation pools (`aggregate/per_problem.csv`): the probability of
improvement P(VPO > other) with its 95% bootstrap interval, each method's seeds resampled within each
problem (`vpo.report.intervals.improvement_interval`). A claim "above" holds when the whole interval
lies above 1/2 for every other method; "below", when it lies below 1/2. A claim that does not hold
that way on the default's seeds is not made in README.
"""

from __future__ import annotations

import argparse
import sys
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pandas as pd

from vpo.data import read_csv_table, rebuild_hint
from vpo.report.intervals import improvement_interval, paired, score_table


@dataclass(frozen=True)
class Claim:
    text: str  # the sentence README makes
    metric: str  # a per_problem.csv metric, or "gain": best@budget minus best@1 of the same seed and problem
    k: int | None  # k of best_at_k / pass_at_k (None for pool metrics and for the gain)
    side: str  # "above": VPO beats every other method; "below": every other method beats VPO
    reference: str | None = None  # the method the claim is about (None: `--reference`, default vpo)
    against: tuple[str, ...] = ()  # the methods it is compared with (empty: every other method evaluated)


CLAIMS = (
    Claim(
        "VPO's evaluation pools are the most diverse (mean pairwise L1 distance of the reward vectors)",
        "diversity",
        None,
        "above",
    ),
    Claim("VPO gains the most from more candidates (best@budget minus best@1)", "gain", None, "above"),
    Claim("VPO is the lowest at best@1", "best_at_k", 1, "below"),
)
_REPS = 2000  # bootstrap resamples per comparison (vpo intervals' default)
# Training: a method's batch pool diversity falls (or rises) from the mean of its first FIRST_STEPS logged
# steps to the mean of its last LAST_STEPS: the mean change over training seeds, whose one-sided 95% t
# bound (n - 1 degrees of freedom) must stay below (above) 0. VPO's rise held on every seed of one 5-seed
# run, by 0.02 on one seed: not claimed.
_TRAINING_CLAIMS = (("grpo", "falls"),)  # (method, falls | rises[, training_curves.csv column])
FIRST_STEPS, LAST_STEPS = 5, 10


def load_claims(path: str | Path) -> tuple[tuple[Claim, ...], tuple[tuple, ...]]:
    """(claims, training claims) of a claims file: `claims:` entries with text, metric, k, side and optionally
    reference and against; `training:` entries with method, way and optionally column. Errors name the file."""
    import yaml

    try:
        data = yaml.safe_load(Path(path).read_text()) or {}
        claims = tuple(
            Claim(c["text"], c["metric"], c.get("k"), c["side"], c.get("reference"), tuple(c.get("against") or ()))
            for c in data.get("claims") or []
        )
        training = tuple((t["method"], t["way"], t.get("column", "pool_diversity")) for t in data.get("training") or [])
    except (OSError, yaml.YAMLError, KeyError, TypeError, AttributeError) as err:
        raise ValueError(
            f"{path} is not a claims file ({type(err).__name__}: {err}); see vpo/report/claims.py"
        ) from err
    bad = [c.side for c in claims if c.side not in ("above", "below")] + [t[1] for t in training if t[1] not in _WAYS]
    if bad or not (claims or training):
        raise ValueError(f"{path}: sides must be above or below, ways falls or rises ({bad}), and claims not empty")
    return claims, training


_WAYS = ("falls", "rises")


def _training_trend(training: pd.DataFrame, method: str, column: str = "pool_diversity") -> pd.DataFrame:
    """Per task and seed of `method`: a training curve's column at the start and at the end of training."""
    rows = []
    for (task, seed), curve in training[training.method == method].groupby(["task", "seed"], sort=True):
        curve = curve.sort_values("step")[column]
        rows.append(
            {"task": task, "seed": seed, "start": curve.head(FIRST_STEPS).mean(), "end": curve.tail(LAST_STEPS).mean()}
        )
    return pd.DataFrame(rows, columns=["task", "seed", "start", "end"])


def claim_matrix(per_problem: pd.DataFrame, task: str, method: str, claim: Claim) -> pd.DataFrame:
    """(training seeds, problems) scores the claim compares, the columns the problems' ids."""
    if claim.metric != "gain":
        return score_table(per_problem, task, method, claim.metric, np.nan if claim.k is None else claim.k)
    budget = per_problem[(per_problem.task == task) & (per_problem.metric == "best_at_k")].k.max()
    return score_table(per_problem, task, method, "best_at_k", budget) - score_table(
        per_problem, task, method, "best_at_k", 1
    )


def _unchecked(task: str, other: str, reason: str) -> dict:
    """The row of a comparison that could not be made: it fails, saying why."""
    return dict(task=task, other=other, probability=np.nan, low=np.nan, high=np.nan, holds=False, reason=reason)


def check(per_problem: pd.DataFrame, claim: Claim, reference: str, *, reps: int = _REPS, seed: int = 0) -> pd.DataFrame:
    """One row per task and other method: probability, low, high, holds, and why it cannot be checked
    (`reason`, "" when it was). A task with no other method gives one failing row: a claim compared with
    nothing never holds."""
    rows = []
    for task in sorted(per_problem.task.unique()):
        methods = list(dict.fromkeys(per_problem[per_problem.task == task].method))
        if reference not in methods:
            raise ValueError(f"per_problem.csv has no {reference!r} rows for task {task!r}: the claims compare it")
        others = [m for m in methods if m != reference and (not claim.against or m in claim.against)]
        for absent in (m for m in claim.against if m not in methods):
            rows.append(_unchecked(task, absent, f"{absent} was not evaluated on {task}"))
        if not others and not claim.against:
            rows.append(_unchecked(task, "-", f"only {reference} was evaluated on {task}: nothing to compare it with"))
        mine = claim_matrix(per_problem, task, reference, claim)
        for other in others:
            try:
                x, y = paired(mine, claim_matrix(per_problem, task, other, claim), (reference, other))
            except ValueError as err:
                rows.append(_unchecked(task, other, str(err)))
                continue
            p, low, high = improvement_interval(x, y, reps=reps, seed=seed)
            holds = low > 0.5 if claim.side == "above" else high < 0.5
            rows.append(dict(task=task, other=other, probability=p, low=low, high=high, holds=holds, reason=""))
    return pd.DataFrame(rows, columns=["task", "other", "probability", "low", "high", "holds", "reason"])


def trend_bound(changes: pd.Series, way: str) -> tuple[float, float]:
    """(mean change, its one-sided 95% t bound: upper for "falls", lower for "rises"); NaN bound for
    fewer than two seeds."""
    from scipy.stats import t

    n = len(changes)
    mean = float(changes.mean()) if n else float("nan")
    if n < 2:
        return mean, float("nan")
    margin = float(t.ppf(0.95, n - 1) * changes.std(ddof=1) / np.sqrt(n))
    return mean, mean + margin if way == "falls" else mean - margin


def numbers(summary: pd.DataFrame, evolve: pd.DataFrame | None, training: pd.DataFrame | None = None) -> str:
    """The numbers README quotes, as text: per task and method, mean (standard error) over training seeds;
    the training batches' pool diversity at the first and last logged step; the search's solved problems."""
    lines = []
    for task, rows in summary.groupby("task", sort=True):
        budget = int(rows[rows.metric == "best_at_k"].k.max())
        lines.append(f"{task}: mean (standard error) over training seeds")
        for method in dict.fromkeys(rows.method):
            mine = rows[rows.method == method]

            def value(metric, k=None):
                row = mine[(mine.metric == metric) & (mine.k.isna() if k is None else mine.k == k)]
                if row.empty:
                    return "-"
                return f"{row['mean'].iloc[0]:.3f} ({row['stderr'].iloc[0]:.3f})"

            n = int(mine.n_seeds.max())
            lines.append(
                f"  {method:12} best@1 {value('best_at_k', 1)}  best@{budget} {value('best_at_k', budget)}  "
                f"pool diversity {value('diversity')}  seeds {n}"
            )
    if training is not None and len(training):
        for (task, method), rows in training.groupby(["task", "method"], sort=False):
            first, last = rows.step.min(), rows.step.max()
            start, end = (rows[rows.step == step].pool_diversity.mean() for step in (first, last))
            lines.append(
                f"{task} training, {method}: pool diversity {start:.2f} at step {int(first)}, "
                f"{end:.2f} at step {int(last)} (mean over {rows.seed.nunique()} seeds)"
            )
    if evolve is not None and len(evolve):
        solved = evolve[evolve.metric == "solved"]
        for task, rows in solved.groupby("task", sort=True):
            last = rows[rows.iteration == rows.iteration.max()]
            n = int(last.n_problems.max())
            text = ", ".join(f"{r.method} {r.mean:.1f}" for r in last.itertuples())
            lines.append(
                f"{task} evolutionary search, problems solved of {n} at iteration {int(rows.iteration.max())}: {text}"
            )
    return "\n".join(lines)


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--results", required=True, help="a preset's results folder, e.g. results/cpu")
    parser.add_argument("--reference", default="vpo", help="the method the claims are about")
    parser.add_argument(
        "--reps", type=int, default=_REPS, help=f"bootstrap resamples per comparison (at least {_MIN_REPS})"
    )
    parser.add_argument("--claims", default=None, help="a claims file (YAML; default: README's claims on the cpu run)")


_MIN_REPS = 100  # fewer gives intervals of a few distinct replicates (1: zero width), which decide nothing


def _read_per_problem(path: Path) -> pd.DataFrame:
    """per_problem.csv, refused naming the file when a value is missing or not finite (a truncated or
    damaged file) or a (task, method, seed, problem, metric, k) row repeats."""
    frame = read_csv_table(path)
    key = ["task", "method", "train_seed", "problem", "metric", "k"]
    missing = [c for c in (*key, "value") if c not in frame.columns]
    if missing:
        raise ValueError(f"{path} has no column {', '.join(missing)}; {rebuild_hint(path)}")
    bad = frame[~np.isfinite(pd.to_numeric(frame.value, errors="coerce"))]
    if len(bad):
        raise ValueError(
            f"{path}: {len(bad)} rows have no finite value (first: line {bad.index[0] + 2}); {rebuild_hint(path)}"
        )
    repeated = frame[frame.duplicated(key, keep=False)]
    if len(repeated):
        raise ValueError(
            f"{path}: {len(repeated)} rows repeat a (task, method, seed, problem, metric, k) (first: line "
            f"{repeated.index[0] + 2}); {rebuild_hint(path)}"
        )
    return frame


def _training_claims(training: pd.DataFrame | None, path: Path, claims=_TRAINING_CLAIMS) -> list[tuple[bool, str]]:
    """(holds, text) of each training claim; one that cannot be checked (no curves, no runs of its method,
    one seed) fails and says why."""
    results = []
    for method, way, *rest in claims:
        column = rest[0] if rest else "pool_diversity"
        what = "batch pool diversity" if column == "pool_diversity" else column.replace("_", " ")
        head = f"{method}'s {what} {way} during training"
        if training is None:
            results.append((False, f"{head}: cannot be checked, {path} is missing (run `vpo aggregate` first)"))
            continue
        trend = _training_trend(training, method, column) if column in training else training.iloc[:0]
        if len(trend) < 2:
            results.append((False, f"{head}: cannot be checked, {path} holds {len(trend)} {method} runs (needs 2)"))
            continue
        change, bound = trend_bound(trend.end - trend.start, way)
        ok = bool(np.isfinite(bound)) and (bound < 0 if way == "falls" else bound > 0)
        lines = [
            f"{head} (first {FIRST_STEPS} steps -> last {LAST_STEPS}): mean change {change:+.2f}, one-sided 95% "
            f"bound {bound:+.2f}"
        ]
        lines += [f"    {row.task} seed {row.seed}: {row.start:.2f} -> {row.end:.2f}" for row in trend.itertuples()]
        results.append((ok, "\n".join(lines)))
    return results


def run(args: argparse.Namespace) -> int:
    if args.reps < _MIN_REPS:
        raise SystemExit(f"vpo claims: --reps {args.reps} is too few bootstrap resamples; give at least {_MIN_REPS}")
    agg = Path(args.results) / "aggregate"
    needed = [agg / "summary.csv", agg / "per_problem.csv"]
    missing = [str(p) for p in needed if not p.is_file()]
    if missing:
        raise FileNotFoundError(
            f"{', '.join(missing)} missing: run the preset first (`snakemake --cores all` for the cpu default)"
        )
    evolve_files = sorted(agg.glob("evolve_*.csv"))
    evolve = pd.concat([read_csv_table(p) for p in evolve_files]) if evolve_files else None
    curves = agg / "training_curves.csv"
    training = read_csv_table(curves) if curves.is_file() else None
    per_problem = _read_per_problem(needed[1])
    print(numbers(read_csv_table(needed[0]), evolve, training))
    claims, trends = load_claims(args.claims) if getattr(args, "claims", None) else (CLAIMS, _TRAINING_CLAIMS)
    print(rules(args.reps))
    outcomes = []
    for claim in claims:
        reference = claim.reference or args.reference
        result = check(per_problem, claim, reference, reps=args.reps)
        ok = bool(len(result)) and bool(result.holds.all())
        outcomes.append(ok)
        print(f"{'holds' if ok else 'FAILS'}: {claim.text}")
        for row in result.itertuples():
            if row.reason:
                print(f"    {row.task} vs {row.other}: cannot be checked: {row.reason}  <- fails")
                continue
            print(
                f"    {row.task} vs {row.other}: P({reference} > {row.other}) {row.probability:.3f} "
                f"[{row.low:.3f}, {row.high:.3f}]{'' if row.holds else '  <- fails'}"
            )
    for ok, text in _training_claims(training, curves, trends):
        outcomes.append(ok)
        print(f"{'holds' if ok else 'FAILS'}: {text}")
    print(_NOT_CLAIMED)
    print(f"{sum(outcomes)} of {len(outcomes)} claims hold", file=sys.stderr)
    return 0 if all(outcomes) else 1


def rules(reps: int) -> str:
    """What a claim's verdict means, printed before the verdicts."""
    return (
        "How each claim is checked: per task, P(reference > other) over (training seed, problem) pairs of the\n"
        f"evaluation pools, with a 95% percentile interval from {reps} bootstrap resamples of each method's training\n"
        "seeds within each problem. 'above' holds when the interval lies above 1/2 for every method compared,\n"
        "'below' when it lies below. A training claim holds when the one-sided 95% t bound of the mean change\n"
        f"(first {FIRST_STEPS} logged steps -> last {LAST_STEPS}, one value per seed) stays below 0 (falls) or above\n"
        "0 (rises)."
    )


# printed after the verdicts: they are about this run, not the paper
_NOT_CLAIMED = (
    "Not claimed: the order at best@budget, the evolutionary search's ranking, and anything about the paper's\n"
    "models and tasks. These results come from the run's own model and preset; the paper's numbers need the\n"
    "paper preset on GPUs (docs/reproducibility.md)."
)

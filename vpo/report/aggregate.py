"""Seeds to mean and standard error: every cell's evaluation and training logs into two tables.

Evaluation (`vpo aggregate evals`): each `evalseed{e}.json` (INTERFACES: pass_at_k, best_at_k,
best_at_k_perm as lists over k = 1..budget, plus scalar pool metrics) becomes rows of
`per_seed.csv` after averaging its evaluation seeds inside its training seed, and rows of
`summary.csv` after taking the mean and standard error over training seeds:

    per_seed.csv     task, method, train_seed, metric, k, value, n_eval_seeds
    summary.csv      task, method, metric, k, mean, stderr, n_seeds
    provenance.json  what made each result and where they disagree (vpo.provenance)

`k` is the number of candidates for curve metrics and empty for scalar metrics. The standard error
is the sample standard deviation (ddof=1) over training seeds divided by sqrt(n); with one seed it
is empty (NaN), never zero.

Training (`vpo aggregate training`): each cell's `metrics.jsonl`, next to its `train.json`
marker, becomes rows `task, method, seed, step, pool_diversity, advantage_draw_std, strategies_per_group` of
one CSV (the second empty for methods that draw no weights: `vpo/advantage_draw_std`, docs/metrics.md; the
third empty for runs made before the reward returned strategy keys). Both line formats are
read: the local trainer's flat `{"step": 3, "pool_diversity": 0.4, ...}` and veRL's file logger's
`{"step": 3, "data": {"...pool_diversity": 0.4, ...}}`.

Per problem (`vpo aggregate problems`): each `evalseed{e}.parquet` pool gives, per problem, best@k and
pass@k at chosen k and the pool's quality as a multi-objective set (hypervolume of its non-dominated
set against 0, expected utility E_w[max over the pool of w . r] under uniform Dirichlet weights, the
number of distinct non-dominated vectors, the diversity), averaged over evaluation seeds:

    per_problem.csv  task, method, train_seed, problem, metric, k, value

Evolutionary search (`vpo aggregate evolve`): each cell's `evolve/summary.json` and scores become
rows `task, method, iteration, metric (solved | mean_best), mean, stderr, n_seeds, n_problems`.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
from pathlib import Path
from typing import Iterable

import numpy as np
import pandas as pd

from vpo.atomic import write_json_atomic
from vpo.cell_lock import reading_cells
from vpo.data import read_json_object, write_csv
from vpo.metrics import best_at_k, diversity, expected_best_of_m, hypervolume, nondominated_distinct, pass_at_k
from vpo.provenance import collect, summarize
from vpo.task import resolve
from vpo.weights import eval_weights

_CURVE_METRICS = ("pass_at_k", "best_at_k", "best_at_k_perm")
_SCALAR_METRICS = ("expected_best_of_m", "diversity", "parse_failure_rate")
_REQUIRED_KEYS = ("task", "method", "train_seed", "eval_seed", "budget") + _CURVE_METRICS + _SCALAR_METRICS
_DIVERSITY_KEY = "pool_diversity"
_SPREAD_KEY = "vpo/advantage_draw_std"  # logged by VPO's estimators only
_STRATEGIES_KEY = "strategies_per_group"  # distinct strategy keys per group (docs/metrics.md)
TRAINING_COLUMNS = ["task", "method", "seed", "step", "pool_diversity", "advantage_draw_std", _STRATEGIES_KEY]


# ---- evaluation results -----------------------------------------------------------------------
def _read_eval_json(path: str | os.PathLike) -> list[dict]:
    """One evalseed{e}.json -> long rows (task, method, train_seed, eval_seed, metric, k, value)."""
    result = read_json_object(path)
    missing = [key for key in _REQUIRED_KEYS if key not in result]
    if missing:
        raise ValueError(f"{path}: missing keys {missing}; rerun `vpo eval` for this cell")
    ids = {key: result[key] for key in ("task", "method", "train_seed", "eval_seed")}
    budget = int(result["budget"])
    rows = []
    for metric in _CURVE_METRICS:
        curve = result[metric]
        if len(curve) != budget:
            raise ValueError(f"{path}: {metric} has {len(curve)} values, expected budget={budget} (k = 1..budget)")
        rows += [dict(ids, metric=metric, k=k, value=float(v)) for k, v in enumerate(curve, start=1)]
    scalars = {name: result[name] for name in _SCALAR_METRICS}
    scalars.update({f"objective/{name}": v for name, v in result.get("objective_means", {}).items()})
    rows += [dict(ids, metric=name, k=np.nan, value=float(v)) for name, v in scalars.items()]
    return rows


def _average_eval_seeds(rows: pd.DataFrame) -> pd.DataFrame:
    """Mean over evaluation seeds inside each (task, method, train_seed, metric, k).

    rows: columns task, method, train_seed, eval_seed, metric, k, value (k NaN for scalars).
    Returns task, method, train_seed, metric, k, value, n_eval_seeds.
    """
    dup = rows.duplicated(["task", "method", "train_seed", "eval_seed", "metric", "k"])
    if dup.any():
        first = rows[dup].iloc[0]
        raise ValueError(
            f"two results for task={first.task} method={first.method} train_seed={first.train_seed} "
            f"eval_seed={first.eval_seed}; each evaluation seed must appear once"
        )
    keys = ["task", "method", "train_seed", "metric", "k"]
    grouped = rows.groupby(keys, dropna=False, sort=True)["value"]
    out = grouped.mean().to_frame("value")
    out["n_eval_seeds"] = grouped.size()
    return out.reset_index()


def _seed_statistics(frame: pd.DataFrame, keys: list[str], value: str, seed: str) -> pd.DataFrame:
    """Per `keys` group: mean, standard error (std with ddof=1 over sqrt(n); NaN for one value, never 0)
    and the number of seeds of column `value`. Groups with a NaN key (k of scalar metrics) are kept."""
    stats = frame.groupby(keys, dropna=False, sort=True).agg(
        mean=(value, "mean"), stderr=(value, "sem"), n_seeds=(seed, "nunique")
    )
    return stats.reset_index()


def summarise_seeds(per_seed: pd.DataFrame) -> pd.DataFrame:
    """Mean and standard error over training seeds.

    per_seed: task, method, train_seed, metric, k, value. Returns task, method, metric, k, mean,
    stderr, n_seeds.
    """
    return _seed_statistics(per_seed, ["task", "method", "metric", "k"], "value", "train_seed")


def aggregate_evals(paths: Iterable[str | os.PathLike]) -> tuple[pd.DataFrame, pd.DataFrame]:
    """Eval JSON files -> (per_seed, summary) tables as described in the module docstring."""
    rows = [row for path in paths for row in _read_eval_json(path)]
    if not rows:
        raise ValueError("no evaluation results given")
    per_seed = _average_eval_seeds(pd.DataFrame.from_records(rows))
    return per_seed, summarise_seeds(per_seed)


def provenance_record(paths: Iterable[str | os.PathLike]) -> dict:
    """The aggregate's provenance.json: this process's provenance, each result's (its evaluation's and
    its training's, as the evaluation JSON carries them) and the fields on which they disagree."""
    import json

    results = {}
    for path in paths:
        payload = json.loads(Path(path).read_text())
        name = (
            f"{payload.get('task')}/{payload.get('method')}/seed{payload.get('train_seed')}"
            f"/evalseed{payload.get('eval_seed')}"
        )
        results[name] = {
            "evaluation": payload.get("provenance") or {},
            "training": payload.get("training_provenance") or {},
        }
    every = {
        **{f"{n} (evaluation)": r["evaluation"] for n, r in results.items()},
        **{f"{n} (training)": r["training"] for n, r in results.items() if r["training"]},
    }
    return {"aggregate": collect(), "results": results, "mixed": summarize(every)}


# ---- per problem ----------------------------------------------------------------------------------
POOL_QUALITY = ("hypervolume", "expected_utility", "nondominated", "diversity")  # per problem, k empty


def problem_scores(
    frame: pd.DataFrame, objective_names: list[str], *, ks: list[int], eval_seed: int, hv_reference: float = 0.0
) -> pd.DataFrame:
    """One candidate frame (`vpo eval`'s parquet) -> rows problem, metric, k, value: best@k and pass@k
    at each k of `ks` (capped at the pool size) and the POOL_QUALITY metrics (k NaN; the hypervolume
    against the point hv_reference in every objective). Expected utility uses the evaluation's own
    weights (100 Dirichlet(1) draws from the eval seed, as E_w[best-of-m])."""
    rows, weights = [], {}
    for problem, pool in frame.groupby("problem", sort=True):
        scalars, n, correct = pool["scalar"].to_numpy(float), len(pool), int(pool["correct"].sum())
        for k in sorted({min(k, n) for k in ks}):
            rows += [
                (problem, "best_at_k", k, best_at_k(scalars, k)),
                (problem, "pass_at_k", k, pass_at_k(n, correct, k)),
            ]
        dims = int(pool["k"].iloc[0])  # the problem's own number of objectives
        if dims not in weights:
            weights[dims] = eval_weights(dims, eval_seed)
        vectors = pool[objective_names[:dims]].to_numpy(float)
        rows += [
            (problem, "hypervolume", np.nan, hypervolume(vectors, hv_reference)),
            (problem, "expected_utility", np.nan, expected_best_of_m(vectors, weights[dims])),
            (problem, "nondominated", np.nan, float(len(nondominated_distinct(vectors)))),
            (problem, "diversity", np.nan, diversity(vectors)),
        ]
    return pd.DataFrame.from_records(rows, columns=["problem", "metric", "k", "value"])


def aggregate_problems(pools: Iterable[str | os.PathLike], ks: list[int], hv_reference: float = 0.0) -> pd.DataFrame:
    """evalseed{e}.parquet pools (their .json beside them names the cell) -> per_problem.csv rows,
    averaged over evaluation seeds inside each training seed."""
    frames = []
    for path in pools:
        path = Path(path)
        meta = read_json_object(path.with_suffix(".json"))
        try:
            frame = pd.read_parquet(path)
        except Exception as err:
            raise ValueError(
                f"{path}: cannot read the evaluation pool ({err}); rerun `vpo eval` for this cell"
            ) from None
        scores = problem_scores(
            frame,
            resolve(meta["task"]).objective_names,
            ks=ks,
            eval_seed=int(meta["eval_seed"]),
            hv_reference=hv_reference,
        )
        frames.append(
            scores.assign(
                task=meta["task"],
                method=meta["method"],
                train_seed=int(meta["train_seed"]),
                eval_seed=int(meta["eval_seed"]),
            )
        )
    if not frames:
        raise ValueError("no evaluation pools given")
    rows = pd.concat(frames, ignore_index=True)
    keys = ["task", "method", "train_seed", "problem", "metric", "k"]
    if rows.duplicated(keys + ["eval_seed"]).any():
        raise ValueError("an evaluation pool is given twice (same task, method, training and evaluation seed)")
    return rows.groupby(keys, dropna=False, sort=True)["value"].mean().reset_index()


# ---- training curves --------------------------------------------------------------------------
def _parse_metrics_line(record: dict) -> tuple[int, float, float, float] | None:
    """(step, pool diversity, advantage draw spread or NaN, strategies per group or NaN) of one metrics.jsonl
    object in either format; None if the diversity is not logged."""
    metrics = record.get("data") if isinstance(record.get("data"), dict) else record
    if "step" not in record:
        return None
    spread, strategies = (metrics.get(key) for key in (_SPREAD_KEY, _STRATEGIES_KEY))
    spread = float(spread) if spread is not None else float("nan")
    strategies = float(strategies) if strategies is not None else float("nan")
    for key, value in metrics.items():
        if (key == _DIVERSITY_KEY or key.endswith("/" + _DIVERSITY_KEY)) and value is not None:
            return int(record["step"]), float(value), spread, strategies
    return None


def read_metrics_jsonl(path: str | os.PathLike) -> list[tuple[int, float, float, float]]:
    """All (step, pool_diversity, advantage_draw_std, strategies_per_group) of a metrics.jsonl; a cut-off last
    line is ignored."""
    lines = Path(path).read_text().splitlines()
    points = []
    for number, line in enumerate(lines, start=1):
        if not line.strip():
            continue
        try:
            record = json.loads(line)
        except json.JSONDecodeError:
            if number == len(lines):  # a killed trainer may leave half a line at the end
                break
            raise ValueError(f"{path}:{number}: not a JSON object") from None
        point = _parse_metrics_line(record)
        if point is not None:
            if points and point[0] <= points[-1][0]:  # two writers, or a resume that did not truncate
                raise ValueError(
                    f"{path}:{number}: step {point[0]} after step {points[-1][0]}; the steps of a "
                    "metrics file must increase. Retrain the cell (snakemake -f <cell>/train.json)"
                )
            points.append(point)
    return points


def aggregate_training(markers: Iterable[str | os.PathLike]) -> pd.DataFrame:
    """train.json markers -> TRAINING_COLUMNS from each metrics.jsonl."""
    records = []
    for marker in markers:
        marker = Path(marker)
        if not marker.exists():
            raise FileNotFoundError(
                f"{marker} is missing: the cell has not finished training (or a training "
                "has just started over it); rerun when it has"
            )
        info = read_json_object(marker)
        metrics_path = marker.with_name("metrics.jsonl")
        if not metrics_path.exists():
            raise FileNotFoundError(f"{metrics_path} is missing; the trainer writes it next to {marker.name}")
        points = read_metrics_jsonl(metrics_path)
        if not points:
            raise ValueError(f"{metrics_path} has no '{_DIVERSITY_KEY}' values; the trainer must log it per step")
        records += [(info["task"], info["method"], int(info["seed"]), *point) for point in points]
    return pd.DataFrame.from_records(records, columns=TRAINING_COLUMNS)


def training_curve_stats(curves: pd.DataFrame, column: str = "pool_diversity") -> pd.DataFrame:
    """Per task, method and step: mean and standard error over seeds of a training curve's column."""
    return _seed_statistics(curves, ["task", "method", "step"], column, "seed")


# ---- evolutionary search ----------------------------------------------------------------------
def aggregate_evolve(summaries: Iterable[str | os.PathLike]) -> pd.DataFrame:
    """Each cell's search (`evolve/summary.json`, `scores.parquet` beside it) -> per task, method and
    iteration: problems solved so far and mean best score so far, as mean and standard error over
    training seeds. Columns: task, method, iteration, metric (solved | mean_best), mean, stderr, n_seeds,
    n_problems."""
    per_seed = []
    for path in summaries:
        meta = read_json_object(path)
        scores = pd.read_parquet(Path(path).with_name("scores.parquet"))
        per_iteration = scores.groupby("iteration").agg(
            solved=("solved", "sum"), mean_best=("best_score", "mean"), n_problems=("problem", "nunique")
        )
        per_seed.append(
            per_iteration.reset_index().assign(task=meta["task"], method=meta["method"], train_seed=meta["train_seed"])
        )
    if not per_seed:
        raise ValueError("no search results given")
    frame = pd.concat(per_seed, ignore_index=True).melt(
        id_vars=["task", "method", "train_seed", "iteration", "n_problems"],
        value_vars=["solved", "mean_best"],
        var_name="metric",
    )
    stats = _seed_statistics(frame, ["task", "method", "iteration", "metric"], "value", "train_seed")
    problems = frame.groupby(["task", "method", "iteration", "metric"])["n_problems"].max().to_numpy()
    return stats.assign(n_problems=problems.astype(int))


# ---- writing ------------------------------------------------------------------------------------
def add_arguments(parser: argparse.ArgumentParser) -> None:
    sub = parser.add_subparsers(dest="what", required=True)
    evals = sub.add_parser("evals", help="eval JSONs -> per_seed.csv and summary.csv")
    evals.add_argument("--out-dir", required=True, help="directory for per_seed.csv, summary.csv and provenance.json")
    evals.add_argument("files", nargs="+", help="evalseed{e}.json files of every cell")
    training = sub.add_parser("training", help="train.json markers -> training curves CSV")
    training.add_argument("--out", required=True, help="CSV to write (" + ", ".join(TRAINING_COLUMNS) + ")")
    training.add_argument("markers", nargs="+", help="train.json of each cell; metrics.jsonl is read next to it")
    problems = sub.add_parser("problems", help="evaluation pools -> per_problem.csv (best@k, pass@k, pool quality)")
    problems.add_argument(
        "--out", required=True, help="CSV to write (task, method, train_seed, problem, metric, k, value)"
    )
    problems.add_argument("--ks", required=True, help="comma-separated k of best@k and pass@k, e.g. 1,10,30")
    problems.add_argument(
        "--hv-reference",
        type=float,
        default=0.0,
        help="the hypervolume's reference point, the same in every objective (default 0)",
    )
    problems.add_argument("pools", nargs="+", help="evalseed{e}.parquet of every cell; its .json beside it")
    evolve = sub.add_parser("evolve", help="evolve/summary.json of each cell -> search curves CSV")
    evolve.add_argument("--out", required=True, help="CSV to write (task, method, iteration, metric, mean, stderr)")
    evolve.add_argument("summaries", nargs="+", help="evolve/summary.json of each cell; scores.parquet beside it")


def run(args: argparse.Namespace) -> int:
    inputs = {"evals": "files", "problems": "pools", "evolve": "summaries", "training": "markers"}[args.what]
    with reading_cells(getattr(args, inputs), what=f"vpo aggregate {args.what}"):
        return aggregate(args)


def aggregate(args: argparse.Namespace) -> int:
    """What `run` does once the cells are locked for reading."""
    if args.what == "evals":
        per_seed, summary = aggregate_evals(args.files)
        write_csv(per_seed, Path(args.out_dir) / "per_seed.csv")
        write_csv(summary, Path(args.out_dir) / "summary.csv")
        write_json_atomic(Path(args.out_dir) / "provenance.json", provenance_record(args.files))
        print(f"aggregated {len(args.files)} eval results into {len(summary)} summary rows", file=sys.stderr)
    elif args.what == "problems":
        per_problem = aggregate_problems(args.pools, [int(k) for k in args.ks.split(",")], args.hv_reference)
        write_csv(per_problem, args.out)
        print(f"scored {per_problem.problem.nunique()} problems of {len(args.pools)} pools", file=sys.stderr)
    elif args.what == "evolve":
        curves = aggregate_evolve(args.summaries)
        write_csv(curves, args.out)
        print(f"collected the searches of {len(args.summaries)} cells", file=sys.stderr)
    else:
        curves = aggregate_training(args.markers)
        write_csv(curves, args.out)
        print(f"collected {len(curves)} training points from {len(args.markers)} cells", file=sys.stderr)
    return 0

"""Paper tables from results/aggregate/summary.csv, each written as CSV, Markdown and LaTeX.

`vpo table main`: best@K (K = report.best_at, 30 in the paper) and eval-pool diversity per method
and task, mean ± standard error over training seeds; a task's best best@K in bold only when its
±1 SE interval clears every other method's, else the methods tied for the lead are marked.
`vpo table curve`: one task's best@k or pass@k curve, methods x landmark k.
`vpo table evolve`: problems solved by the evolutionary search at chosen iterations (from
results/aggregate/evolve_*.csv).
`vpo table ablations`: each ablation's methods (config.yaml `ablations`), best@k at chosen k and diversity.
The CSV holds the numbers (mean and stderr columns); Markdown (pandas' to_markdown) and LaTeX
(pandas' Styler.to_latex, booktabs, a spanning header per task) hold the formatted cells.
"""

from __future__ import annotations

import argparse

import pandas as pd

from vpo.data import read_csv_table
from vpo.report.labels import use_variants
from vpo.report.table_render import render_ablations, render_curve, render_evolve, render_main, write_outputs


def lookup(summary: pd.DataFrame, task: str, method: str, metric: str, k: int | None = None) -> pd.Series:
    """The one summary row of (task, method, metric[, k]); a clear error if the cell is missing."""
    rows = summary[(summary.task == task) & (summary.method == method) & (summary.metric == metric)]
    rows = rows[rows.k.isna()] if k is None else rows[rows.k == k]
    if len(rows) != 1:
        at = f" at k={k}" if k is not None else ""
        raise ValueError(
            f"summary has {len(rows)} rows for task={task} method={method} metric={metric}{at}; "
            "was every cell evaluated (and with a budget that reaches this k)?"
        )
    return rows.iloc[0]


def main_table(summary: pd.DataFrame, methods: list[str], tasks: list[str], best_at: int) -> pd.DataFrame:
    """One row per method: for each task best@K and diversity (mean, stderr) and the seed count."""
    records = []
    for method in methods:
        record = {"method": method}
        for task in tasks:
            best = lookup(summary, task, method, "best_at_k", best_at)
            diversity = lookup(summary, task, method, "diversity")
            record.update(
                {
                    f"{task}_best_at_{best_at}_mean": best["mean"],
                    f"{task}_best_at_{best_at}_stderr": best["stderr"],
                    f"{task}_diversity_mean": diversity["mean"],
                    f"{task}_diversity_stderr": diversity["stderr"],
                    f"{task}_n_seeds": int(best["n_seeds"]),
                }
            )
        records.append(record)
    return pd.DataFrame.from_records(records)


def curve_table(summary: pd.DataFrame, methods: list[str], task: str, metric: str) -> pd.DataFrame:
    """Long table method, k, mean, stderr, n_seeds of one task's curve (every k evaluated)."""
    rows = summary[(summary.task == task) & (summary.metric == metric) & summary.method.isin(methods)]
    missing = sorted(set(methods) - set(rows.method))
    if missing:
        raise ValueError(f"summary has no {metric} for task={task} and methods {missing}")
    order = {m: i for i, m in enumerate(methods)}
    rows = rows.assign(_order=rows.method.map(order), k=rows.k.astype(int)).sort_values(["_order", "k"])
    return rows[["method", "k", "mean", "stderr", "n_seeds"]].reset_index(drop=True)


def evolve_table(curves: pd.DataFrame, methods: list[str], at: list[int]) -> pd.DataFrame:
    """Problems solved by iteration t per task and method: task, method, iteration, mean, stderr,
    n_seeds, n_problems (from `vpo aggregate evolve`'s CSVs; t past the search's end reads its last iteration)."""
    rows = []
    for task, per_task in curves[curves.metric == "solved"].groupby("task", sort=False):
        last = int(per_task.iteration.max())
        for method in methods:
            mine = per_task[per_task.method == method].set_index("iteration")
            if mine.empty:
                raise ValueError(f"no search curve for task={task} method={method}; did its evolve job run?")
            for t in sorted({min(t, last) for t in at}):
                point = mine.loc[t]
                rows.append(
                    {
                        "task": task,
                        "method": method,
                        "iteration": t,
                        "mean": point["mean"],
                        "stderr": point["stderr"],
                        "n_seeds": int(point["n_seeds"]),
                        "n_problems": int(point["n_problems"]),
                    }
                )
    return pd.DataFrame(rows)


def _ablation_table(
    summary: pd.DataFrame, ablations: dict[str, list[str]], tasks: list[str], ks: list[int]
) -> pd.DataFrame:
    """One row per ablation, method and task: best@k at each of `ks` and pool diversity (mean, stderr)
    and the seed count, from the ablations' aggregate summary.csv."""
    records = []
    for name, methods in ablations.items():
        for method in methods:
            for task in tasks:
                record = {"ablation": name, "method": method, "task": task}
                for k in ks:
                    best = lookup(summary, task, method, "best_at_k", k)
                    record.update({f"best_at_{k}_mean": best["mean"], f"best_at_{k}_stderr": best["stderr"]})
                diversity = lookup(summary, task, method, "diversity")
                record.update(
                    {
                        "diversity_mean": diversity["mean"],
                        "diversity_stderr": diversity["stderr"],
                        "n_seeds": int(diversity["n_seeds"]),
                    }
                )
                records.append(record)
    return pd.DataFrame.from_records(records)


def add_arguments(parser: argparse.ArgumentParser) -> None:
    sub = parser.add_subparsers(dest="table", required=True)
    main = sub.add_parser("main", help="best@K and diversity per method and task")
    main.add_argument("--best-at", type=int, default=30, help="K of the best@K column")
    main.add_argument("--tasks", required=True, help="comma-separated tasks (column order)")
    curve = sub.add_parser("curve", help="one task's best@k or pass@k curve")
    curve.add_argument("--metric", required=True, choices=["best_at_k", "pass_at_k", "best_at_k_perm"])
    curve.add_argument("--task", required=True)
    ablations = sub.add_parser("ablations", help="best@k and diversity of every ablation's methods")
    ablations.add_argument(
        "--ablation",
        action="append",
        required=True,
        metavar="NAME=M1,M2",
        help="an ablation and its methods in row order (repeat for each)",
    )
    ablations.add_argument("--tasks", required=True, help="comma-separated tasks (column groups)")
    ablations.add_argument("--ks", required=True, help="comma-separated k of the best@k columns, e.g. 1,10,30")
    for p in (main, curve, ablations):
        p.add_argument("--summary", required=True, help="results/aggregate/summary.csv")
    evolve = sub.add_parser("evolve", help="problems solved by the evolutionary search, per task and method")
    evolve.add_argument("--curves", nargs="+", required=True, help="results/aggregate/evolve_{task}.csv files")
    evolve.add_argument("--at", required=True, help="comma-separated iterations (columns), e.g. 50,100,200")
    for p in (main, curve, evolve):
        p.add_argument("--methods", required=True, help="comma-separated methods (row order)")
    for p in (main, curve, evolve, ablations):
        p.add_argument("--variants", default=None, help="JSON {variant: {method, label}} of config.yaml `variants`")
        p.add_argument("--out", nargs="+", required=True, help="output files: .csv, .md, .tex and/or .html")


def run(args: argparse.Namespace) -> int:
    use_variants(args.variants)
    if args.table == "ablations":
        chosen = dict(spec.split("=", 1) for spec in args.ablation)
        ks = [int(k) for k in args.ks.split(",")]
        table = _ablation_table(
            read_csv_table(args.summary), {n: m.split(",") for n, m in chosen.items()}, args.tasks.split(","), ks
        )
        write_outputs(table, lambda **fmt: render_ablations(table, ks, **fmt), args.out)
        return 0
    methods = args.methods.split(",")
    if args.table == "evolve":
        curves = pd.concat([read_csv_table(path) for path in args.curves], ignore_index=True)
        table = evolve_table(curves, methods, [int(t) for t in args.at.split(",")])
        write_outputs(table, lambda **fmt: render_evolve(table, **fmt), args.out)
        return 0
    summary = read_csv_table(args.summary)
    if args.table == "main":
        tasks = args.tasks.split(",")
        table = main_table(summary, methods, tasks, args.best_at)
        write_outputs(table, lambda **fmt: render_main(table, tasks, args.best_at, **fmt), args.out)
    else:
        table = curve_table(summary, methods, args.task, args.metric)
        write_outputs(table, lambda **fmt: render_curve(table, args.task, args.metric, **fmt), args.out)
    return 0

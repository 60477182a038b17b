"""Paper tables from results/aggregate/summary.csv, each written as CSV, Markdown and LaTeX.

`vpo table main`: best@K (K = report.best_at, 30 in the paper) and eval-pool diversity per method
and task, mean ± standard error over training seeds; a task's best best@K in bold only when its
±1 SE interval clears every other method's, else the methods tied for the lead are marked.
`vpo table curve`: one task's best@k or pass@k curve, methods x landmark k.
`vpo table evolve`: problems solved by the evolutionary search at chosen iterations (from results/aggregate/evolve_*.csv).
`vpo table ablations`: each ablation's methods (config.yaml `ablations`), best@k at chosen k and diversity.
The CSV holds the numbers (mean and stderr columns); Markdown (pandas' to_markdown) and LaTeX
(pandas' Styler.to_latex, booktabs, a spanning header per task) hold the formatted cells.
"""

from __future__ import annotations

import argparse
import math
import re
from pathlib import Path

import pandas as pd

from vpo.atomic import write_text_atomic
from vpo.data import read_csv_table

LANDMARKS = (1, 2, 3, 5, 10, 15, 20, 25, 30)


def method_label(name: str) -> str:
    """The method's label in the method table (vpo/methods.py); an unknown name as is."""
    from vpo.methods import METHODS

    method = METHODS.get(name)
    return (method.label or method.name) if method else name


def task_label(name: str) -> str:
    """The task plugin's label (`Task.label`); a name no installed plugin has, as is."""
    from vpo.task import TASKS

    task = TASKS.get(name)
    return (task.label or task.name) if task else name


def use_variants(text: str | None) -> None:
    """Register the method variants a figure or table shows (JSON {name: {"method": base, "label":
    label}}, as the workflow passes them from config.yaml `variants`), so they get their labels and looks."""
    import json

    from vpo.methods import register_variant

    for name, variant in (json.loads(text) if text else {}).items():
        register_variant(name, variant["method"], variant.get("label"))


TIE_MARK = "†"  # tied for the lead: its ±1 standard error interval overlaps the leader's


def format_cell(mean: float, stderr: float, *, latex: bool = False, bold: bool = False, tie: bool = False) -> str:
    """0.5931, 0.0123 -> '0.593 ± 0.012'; a NaN stderr (one seed) shows the mean alone."""
    pm = r" \pm " if latex else " ± "
    text = f"{mean:.3f}" if math.isnan(stderr) else f"{mean:.3f}{pm}{stderr:.3f}"
    if latex:
        text = rf"\mathbf{{{text}}}" if bold else text
        return f"${text}$" + (r"$^\dagger$" if tie else "")
    return (f"**{text}**" if bold else text) + (TIE_MARK if tie else "")


def lead_marks(means: list[float], stderrs: list[float]) -> tuple[list[bool], list[bool]]:
    """(bold, tie) per row: the leader is bold only when its ±1 SE interval clears every other
    row's; otherwise every row whose interval reaches the leader's is marked tied. Without standard
    errors (one seed) nothing is marked: a lead cannot be told from noise."""
    n = len(means)
    if n < 2 or any(math.isnan(s) for s in stderrs):
        return [False] * n, [False] * n
    lead = max(range(n), key=lambda i: means[i])
    tied = [i != lead and means[i] + stderrs[i] >= means[lead] - stderrs[lead] for i in range(n)]
    if not any(tied):
        return [i == lead for i in range(n)], [False] * n
    return [False] * n, [t or i == lead for i, t in enumerate(tied)]


def lookup(summary: pd.DataFrame, task: str, method: str, metric: str, k: int | None = None) -> pd.Series:
    """The one summary row of (task, method, metric[, k]); a clear error if the cell is missing."""
    rows = summary[(summary.task == task) & (summary.method == method) & (summary.metric == metric)]
    rows = rows[rows.k.isna()] if k is None else rows[rows.k == k]
    if len(rows) != 1:
        at = f" at k={k}" if k is not None else ""
        raise ValueError(f"summary has {len(rows)} rows for task={task} method={method} metric={metric}{at}; "
                         "was every cell evaluated (and with a budget that reaches this k)?")
    return rows.iloc[0]


def main_table(summary: pd.DataFrame, methods: list[str], tasks: list[str], best_at: int) -> pd.DataFrame:
    """One row per method: for each task best@K and diversity (mean, stderr) and the seed count."""
    records = []
    for method in methods:
        record = {"method": method}
        for task in tasks:
            best = lookup(summary, task, method, "best_at_k", best_at)
            diversity = lookup(summary, task, method, "diversity")
            record.update({
                f"{task}_best_at_{best_at}_mean": best["mean"], f"{task}_best_at_{best_at}_stderr": best["stderr"],
                f"{task}_diversity_mean": diversity["mean"], f"{task}_diversity_stderr": diversity["stderr"],
                f"{task}_n_seeds": int(best["n_seeds"]),
            })
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
                rows.append({"task": task, "method": method, "iteration": t, "mean": point["mean"],
                             "stderr": point["stderr"], "n_seeds": int(point["n_seeds"]),
                             "n_problems": int(point["n_problems"])})
    return pd.DataFrame(rows)


def ablation_table(summary: pd.DataFrame, ablations: dict[str, list[str]], tasks: list[str],
                   ks: list[int]) -> pd.DataFrame:
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
                record.update({"diversity_mean": diversity["mean"], "diversity_stderr": diversity["stderr"],
                               "n_seeds": int(diversity["n_seeds"])})
                records.append(record)
    return pd.DataFrame.from_records(records)


def render_ablations(table: pd.DataFrame, ks: list[int], *, latex: bool, html: bool = False) -> str:
    columns = [f"best@{k}" for k in ks] + ["diversity"]
    cells = {}
    for (name, method), group in table.groupby(["ablation", "method"], sort=False):
        cells[f"{name}: {method_label(method)}"] = {
            (task_label(r["task"]), column): format_cell(r[f"{key}_mean"], r[f"{key}_stderr"], latex=latex)
            for r in group.to_dict("records") for column, key in zip(columns, [f"best_at_{k}" for k in ks] + ["diversity"])}
    seeds = "/".join(map(str, sorted(table.n_seeds.unique())))
    caption = (f"Ablations: best@k on the task scalar and reward-space diversity of the evaluation pool (mean "
               f"pairwise L1), mean ± standard error over {seeds} training seeds; rows are named "
               "ablation: method (figures/ablation_<ablation>.pdf).")
    return render(cell_frame(cells), latex=latex, caption=caption, html=html)


def render_evolve(table: pd.DataFrame, *, latex: bool, html: bool = False) -> str:
    cells = {}
    for method, group in table.groupby("method", sort=False):
        cells[method_label(method)] = {(task_label(r.task), f"t={r.iteration}"): format_cell(r.mean, r.stderr, latex=latex)
                                       for r in group.itertuples()}
    sizes = ", ".join(f"{task_label(t)} {int(n)}" for t, n in table.groupby("task", sort=False).n_problems.max().items())
    caption = (f"Evolutionary search (OpenEvolve): problems solved by iteration t, of the hardest problems "
               f"searched ({sizes}), mean ± standard error over training seeds.")
    return render(cell_frame(cells), latex=latex, caption=caption, html=html)


# ---- rendering ----------------------------------------------------------------------------------
def cell_frame(cells: dict[str, dict]) -> pd.DataFrame:
    """{row label: {column: formatted cell}} -> a frame indexed by "Method"; tuple columns become a
    (group, column) MultiIndex, e.g. (task, metric)."""
    frame = pd.DataFrame.from_dict(cells, orient="index")
    if len(frame.columns) and isinstance(frame.columns[0], tuple):
        frame.columns = pd.MultiIndex.from_tuples(frame.columns)
    frame.index.name = "Method"
    return frame


LATEX_SPECIALS = {"\\": r"\textbackslash{}", "&": r"\&", "%": r"\%", "$": r"\$", "#": r"\#", "_": r"\_",
                  "{": r"\{", "}": r"\}", "~": r"\textasciitilde{}", "^": r"\textasciicircum{}",
                  "±": r"$\pm$", "†": r"$^\dagger$", "α": r"$\alpha$", "·": r"$\cdot$", ">": r"$>$"}


def escape_latex(text: str) -> str:
    return "".join(LATEX_SPECIALS.get(ch, ch) for ch in str(text))


HTML_STYLE = [  # readable without a stylesheet: rules between rows, centred numbers, the caption above
    {"selector": "", "props": "border-collapse: collapse; font-family: sans-serif; font-size: 14px;"},
    {"selector": "caption", "props": "caption-side: top; text-align: left; padding-bottom: 8px; max-width: 60em;"},
    {"selector": "th, td", "props": "padding: 4px 10px; border-bottom: 1px solid #ccc; text-align: center;"},
    {"selector": "th.row_heading", "props": "text-align: left;"},
]


def render(cells: pd.DataFrame, *, latex: bool, caption: str, html: bool = False) -> str:
    """Formatted cells as Markdown (pandas' to_markdown: a group and its column share one header),
    LaTeX (Styler.to_latex: booktabs rules, one spanning header per group; labels and caption
    escaped, the cells are LaTeX already) or, from the Markdown cells, an HTML page (Styler.to_html;
    the HTML report shows it as a table)."""
    if html:
        import html as html_lib

        bold = cells.map(lambda c: re.sub(r"\*\*(.+?)\*\*", r"<b>\1</b>", html_lib.escape(str(c))))
        styler = bold.style.format_index(html_lib.escape, axis=0).format_index(html_lib.escape, axis=1).hide(names=True)
        styler = styler.set_caption(html_lib.escape(caption)).set_table_styles(HTML_STYLE).set_uuid("table")
        return f"<!DOCTYPE html>\n<html><head><meta charset=\"utf-8\"></head><body>\n{styler.to_html()}</body></html>\n"
    if not latex:
        flat = cells.copy()
        if isinstance(flat.columns, pd.MultiIndex):
            flat.columns = [" ".join(c) for c in flat.columns]
        return f"{caption}\n\n" + flat.to_markdown(tablefmt="pipe", stralign="left", disable_numparse=True) + "\n"
    styler = cells.style.format_index(escape_latex, axis=0).format_index(escape_latex, axis=1).hide(names=True)
    return styler.to_latex(caption=escape_latex(caption), position="t", position_float="centering", hrules=True,
                           column_format="l" + "c" * cells.shape[1], multicol_align="c")


def render_main(table: pd.DataFrame, tasks: list[str], best_at: int, *, latex: bool, html: bool = False) -> str:
    marks = {t: lead_marks(table[f"{t}_best_at_{best_at}_mean"].tolist(), table[f"{t}_best_at_{best_at}_stderr"].tolist())
             for t in tasks}
    cells = {}
    for r, row in enumerate(table.itertuples(index=False)):
        row = row._asdict()
        cells[method_label(row["method"])] = {
            **{(task_label(t), f"best@{best_at}"): format_cell(row[f"{t}_best_at_{best_at}_mean"],
                                                             row[f"{t}_best_at_{best_at}_stderr"], latex=latex,
                                                             bold=marks[t][0][r], tie=marks[t][1][r]) for t in tasks},
            **{(task_label(t), "diversity"): format_cell(row[f"{t}_diversity_mean"], row[f"{t}_diversity_stderr"],
                                                         latex=latex) for t in tasks},
        }
    columns = [(task_label(t), name) for t in tasks for name in (f"best@{best_at}", "diversity")]
    seeds = sorted({int(table[f"{t}_n_seeds"].min()) for t in tasks})
    caption = (f"best@{best_at} on the task scalar and reward-space diversity of the evaluation pool "
               f"(mean pairwise L1), mean ± standard error over {'/'.join(map(str, seeds))} training "
               f"seed{'' if seeds == [1] else 's'}{' (one seed: no standard error, no leader marked)' if seeds == [1] else ''}. "
               f"Bold: leads every other method by more than one standard error on each side; "
               f"{TIE_MARK}: tied for the lead (intervals overlap).")
    return render(cell_frame(cells)[pd.MultiIndex.from_tuples(columns)], latex=latex, caption=caption, html=html)


def render_curve(table: pd.DataFrame, task: str, metric: str, *, latex: bool, html: bool = False) -> str:
    budget = int(table.k.max())
    ks = [k for k in LANDMARKS if k < budget] + [budget]
    name = {"best_at_k": "best@k", "pass_at_k": "pass@k"}.get(metric, metric)
    cells = {}
    for method, group in table.groupby("method", sort=False):
        by_k = group.set_index("k")
        cells[method_label(method)] = {f"k={k}": format_cell(by_k.at[k, "mean"], by_k.at[k, "stderr"], latex=latex)
                                       for k in ks}
    caption = f"{task_label(task)}: {name} by number of candidates k, mean ± standard error over training seeds."
    return render(cell_frame(cells), latex=latex, caption=caption, html=html)


def write_outputs(frame: pd.DataFrame, render_as, outputs: list[str]) -> None:
    """The numbers as CSV; the formatted table as Markdown, LaTeX or HTML (`render_as(latex=, html=)`)."""
    for path in outputs:
        suffix = Path(path).suffix
        if suffix == ".csv":
            write_text_atomic(path, frame.to_csv(index=False))
        elif suffix in (".md", ".tex", ".html"):
            write_text_atomic(path, render_as(latex=suffix == ".tex", html=suffix == ".html"))
        else:
            raise ValueError(f"{path}: unknown table format {suffix!r}; use .csv, .md, .tex or .html")


def add_arguments(parser: argparse.ArgumentParser) -> None:
    sub = parser.add_subparsers(dest="table", required=True)
    main = sub.add_parser("main", help="best@K and diversity per method and task")
    main.add_argument("--best-at", type=int, default=30, help="K of the best@K column")
    main.add_argument("--tasks", required=True, help="comma-separated tasks (column order)")
    curve = sub.add_parser("curve", help="one task's best@k or pass@k curve")
    curve.add_argument("--metric", required=True, choices=["best_at_k", "pass_at_k", "best_at_k_perm"])
    curve.add_argument("--task", required=True)
    ablations = sub.add_parser("ablations", help="best@k and diversity of every ablation's methods")
    ablations.add_argument("--ablation", action="append", required=True, metavar="NAME=M1,M2",
                           help="an ablation and its methods in row order (repeat for each)")
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
        table = ablation_table(read_csv_table(args.summary), {n: m.split(",") for n, m in chosen.items()},
                               args.tasks.split(","), ks)
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

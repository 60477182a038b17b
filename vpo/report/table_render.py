"""The paper tables as text: each cell `mean ± stderr` (bold for a clear leader, a dagger for a tie),
written as Markdown (pandas' to_markdown), LaTeX (pandas' Styler.to_latex, booktabs, a spanning header
per task) or HTML beside the CSV of the numbers. vpo/report/tables.py builds the tables.
"""

from __future__ import annotations

import math
import re
from pathlib import Path

import pandas as pd

from vpo.atomic import write_text_atomic
from vpo.report.labels import method_label, task_label

_LANDMARKS = (1, 2, 3, 5, 10, 15, 20, 25, 30)  # the k columns of a curve table (and the budget)


_TIE_MARK = "†"  # tied for the lead: its ±1 standard error interval overlaps the leader's


def format_cell(mean: float, stderr: float, *, latex: bool = False, bold: bool = False, tie: bool = False) -> str:
    """0.5931, 0.0123 -> '0.593 ± 0.012'; a NaN stderr (one seed) shows the mean alone."""
    pm = r" \pm " if latex else " ± "
    text = f"{mean:.3f}" if math.isnan(stderr) else f"{mean:.3f}{pm}{stderr:.3f}"
    if latex:
        text = rf"\mathbf{{{text}}}" if bold else text
        return f"${text}$" + (r"$^\dagger$" if tie else "")
    return (f"**{text}**" if bold else text) + (_TIE_MARK if tie else "")


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


def render_ablations(table: pd.DataFrame, ks: list[int], *, latex: bool, html: bool = False) -> str:
    columns = [f"best@{k}" for k in ks] + ["diversity"]
    cells = {}
    for (name, method), group in table.groupby(["ablation", "method"], sort=False):
        cells[f"{name}: {method_label(method)}"] = {
            (task_label(r["task"]), column): format_cell(r[f"{key}_mean"], r[f"{key}_stderr"], latex=latex)
            for r in group.to_dict("records")
            for column, key in zip(columns, [f"best_at_{k}" for k in ks] + ["diversity"])
        }
    seeds = "/".join(map(str, sorted(table.n_seeds.unique())))
    caption = (
        f"Ablations: best@k on the task scalar and reward-space diversity of the evaluation pool (mean "
        f"pairwise L1), mean ± standard error over {seeds} training seeds; rows are named "
        "ablation: method (figures/ablation_<ablation>.pdf)."
    )
    return render(cell_frame(cells), latex=latex, caption=caption, html=html)


def render_evolve(table: pd.DataFrame, *, latex: bool, html: bool = False) -> str:
    cells = {}
    for method, group in table.groupby("method", sort=False):
        cells[method_label(method)] = {
            (task_label(r.task), f"t={r.iteration}"): format_cell(r.mean, r.stderr, latex=latex)
            for r in group.itertuples()
        }
    sizes = ", ".join(
        f"{task_label(t)} {int(n)}" for t, n in table.groupby("task", sort=False).n_problems.max().items()
    )
    caption = (
        f"Evolutionary search (OpenEvolve): problems solved by iteration t, of the hardest problems "
        f"searched ({sizes}), mean ± standard error over training seeds."
    )
    return render(cell_frame(cells), latex=latex, caption=caption, html=html)


def cell_frame(cells: dict[str, dict]) -> pd.DataFrame:
    """{row label: {column: formatted cell}} -> a frame indexed by "Method"; tuple columns become a
    (group, column) MultiIndex, e.g. (task, metric)."""
    frame = pd.DataFrame.from_dict(cells, orient="index")
    if len(frame.columns) and isinstance(frame.columns[0], tuple):
        frame.columns = pd.MultiIndex.from_tuples(frame.columns)
    frame.index.name = "Method"
    return frame


_LATEX_SPECIALS = {
    "\\": r"\textbackslash{}",
    "&": r"\&",
    "%": r"\%",
    "$": r"\$",
    "#": r"\#",
    "_": r"\_",
    "{": r"\{",
    "}": r"\}",
    "~": r"\textasciitilde{}",
    "^": r"\textasciicircum{}",
    "±": r"$\pm$",
    "†": r"$^\dagger$",
    "α": r"$\alpha$",
    "·": r"$\cdot$",
    ">": r"$>$",
}


def _escape_latex(text: str) -> str:
    return "".join(_LATEX_SPECIALS.get(ch, ch) for ch in str(text))


_HTML_STYLE = [  # readable without a stylesheet: rules between rows, centred numbers, the caption above
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
        styler = styler.set_caption(html_lib.escape(caption)).set_table_styles(_HTML_STYLE).set_uuid("table")
        return f'<!DOCTYPE html>\n<html><head><meta charset="utf-8"></head><body>\n{styler.to_html()}</body></html>\n'
    if not latex:
        flat = cells.copy()
        if isinstance(flat.columns, pd.MultiIndex):
            flat.columns = [" ".join(c) for c in flat.columns]
        return f"{caption}\n\n" + flat.to_markdown(tablefmt="pipe", stralign="left", disable_numparse=True) + "\n"
    styler = cells.style.format_index(_escape_latex, axis=0).format_index(_escape_latex, axis=1).hide(names=True)
    return styler.to_latex(
        caption=_escape_latex(caption),
        position="t",
        position_float="centering",
        hrules=True,
        column_format="l" + "c" * cells.shape[1],
        multicol_align="c",
    )


def render_main(table: pd.DataFrame, tasks: list[str], best_at: int, *, latex: bool, html: bool = False) -> str:
    marks = {
        t: lead_marks(table[f"{t}_best_at_{best_at}_mean"].tolist(), table[f"{t}_best_at_{best_at}_stderr"].tolist())
        for t in tasks
    }
    cells = {}
    for r, row in enumerate(table.itertuples(index=False)):
        row = row._asdict()
        cells[method_label(row["method"])] = {
            **{
                (task_label(t), f"best@{best_at}"): format_cell(
                    row[f"{t}_best_at_{best_at}_mean"],
                    row[f"{t}_best_at_{best_at}_stderr"],
                    latex=latex,
                    bold=marks[t][0][r],
                    tie=marks[t][1][r],
                )
                for t in tasks
            },
            **{
                (task_label(t), "diversity"): format_cell(
                    row[f"{t}_diversity_mean"], row[f"{t}_diversity_stderr"], latex=latex
                )
                for t in tasks
            },
        }
    columns = [(task_label(t), name) for t in tasks for name in (f"best@{best_at}", "diversity")]
    seeds = sorted({int(table[f"{t}_n_seeds"].min()) for t in tasks})
    caption = (
        f"best@{best_at} on the task scalar and reward-space diversity of the evaluation pool "
        f"(mean pairwise L1), mean ± standard error over {'/'.join(map(str, seeds))} training "
        f"seed{'' if seeds == [1] else 's'}"
        f"{' (one seed: no standard error, no leader marked)' if seeds == [1] else ''}. "
        f"Bold: leads every other method by more than one standard error on each side; "
        f"{_TIE_MARK}: tied for the lead (intervals overlap)."
    )
    return render(cell_frame(cells)[pd.MultiIndex.from_tuples(columns)], latex=latex, caption=caption, html=html)


def render_curve(table: pd.DataFrame, task: str, metric: str, *, latex: bool, html: bool = False) -> str:
    budget = int(table.k.max())
    ks = [k for k in _LANDMARKS if k < budget] + [budget]
    name = {"best_at_k": "best@k", "pass_at_k": "pass@k"}.get(metric, metric)
    cells = {}
    for method, group in table.groupby("method", sort=False):
        by_k = group.set_index("k")
        cells[method_label(method)] = {
            f"k={k}": format_cell(by_k.at[k, "mean"], by_k.at[k, "stderr"], latex=latex) for k in ks
        }
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

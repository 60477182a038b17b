"""The shared figure kit: one look per method, fonts sized for a paper, panel grids, mean lines
with standard-error bands (or each seed when there are too few), titles that say the seeds and the
scale, and the panels several figures share (a curve against k, a search metric against iteration).
A method's colour is fixed across figures (its position in the method table)."""

from __future__ import annotations

import math
import os
import re
import textwrap
from pathlib import Path

import numpy as np
import pandas as pd

from vpo.atomic import atomic_file
from vpo.methods import METHODS, UNSTYLED
from vpo.report.labels import method_label, task_label

METHOD_ORDER = list(METHODS)  # the method table's order (vpo/methods.py)
SMOOTH_STEPS = 5  # moving-average window of the diversity-over-training lines
METRIC_LABELS = {
    "pass_at_k": "pass@k",
    "best_at_k": "best@k (task scalar)",
    "best_at_k_perm": "best@k (one permutation)",
}


# Series that are not methods (bandit arms, k, weight samplers): the Okabe-Ito colours the methods use
# least, each with its own line style and marker, in this order.
_SERIES_STYLES = [
    ("#000000", "-", "o"),
    ("#CC79A7", "--", "s"),
    ("#E69F00", "-.", "^"),
    ("#999999", ":", "D"),
    ("#56B4E9", (0, (5, 1)), "v"),
    ("#D55E00", (0, (3, 1, 1, 1)), "P"),
]


def series_style(i: int) -> dict:
    """matplotlib keywords of the i-th non-method series."""
    color, linestyle, marker = _SERIES_STYLES[i % len(_SERIES_STYLES)]
    return {"color": color, "ls": linestyle, "marker": marker}


def method_style(method: str) -> dict:
    """matplotlib keywords of a method's line: its colour, line style and marker in the method table
    (a name not in it: grey, solid, circles). A variant (config.yaml `variants`) gets the series look
    of its place among the registered variants, so it differs from its method and keeps its look in
    every figure of a run."""
    if method in METHODS and METHODS[method].base is not None:
        return series_style([name for name, m in METHODS.items() if m.base is not None].index(method))
    color, linestyle, marker = METHODS[method].style if method in METHODS else UNSTYLED
    return {"color": color, "ls": linestyle, "marker": marker}


FONT_PT = 9  # every text in a figure
_CAPTION_PT = 8  # the caption under a figure's legend (its scale and seeds)
TEXT_WIDTH_IN = 6.75  # a paper's text width: figures are at most FONT_PT / MIN_FONT_PT times wider
MIN_FONT_PT = 7  # the smallest text once a figure is scaled to the text width
_PANEL_IN = (4.2, 3.4)  # a panel's width and height when the figure is not limited by the text width


def use_figure_fonts() -> None:
    import matplotlib

    matplotlib.use("Agg")
    matplotlib.rcParams.update(
        {
            "font.size": FONT_PT,
            "axes.titlesize": FONT_PT,
            "axes.labelsize": FONT_PT,
            "xtick.labelsize": FONT_PT - 1,
            "ytick.labelsize": FONT_PT - 1,
            "legend.fontsize": FONT_PT,
        }
    )


def max_width_in() -> float:
    """The widest figure whose smallest text (FONT_PT - 1, the ticks) is MIN_FONT_PT at text width."""
    return TEXT_WIDTH_IN * (FONT_PT - 1) / MIN_FONT_PT


def panel_grid(n_panels: int):
    """A figure with one axis per panel: a single row up to three panels, else rows of three. Wide
    grids are narrowed so their 9 pt text stays >= 7 pt when the figure is scaled to the text width."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    use_figure_fonts()
    ncols = min(n_panels, 3)
    nrows = math.ceil(n_panels / ncols)
    width = min(_PANEL_IN[0] * ncols, max_width_in())
    panel_height = _PANEL_IN[1] * width / (_PANEL_IN[0] * ncols)
    fig, axes = plt.subplots(nrows, ncols, figsize=(width, panel_height * nrows + 1.1), squeeze=False)
    for ax in axes.flat[n_panels:]:
        ax.set_visible(False)
    return fig, list(axes.flat[:n_panels])


MIN_SEEDS_FOR_BAND = 3  # with fewer training seeds a standard error says little: draw every seed


def draw_band(ax, x, mean, stderr, *, method: str, mark_all: bool = False, seeds: list | None = None) -> None:
    """Mean line in the method's style plus a ±1 standard-error band; with fewer than
    MIN_SEEDS_FOR_BAND seeds and their lines given (`seeds`: (x, y) per seed), each seed as a thin
    line instead of the band. mark_all: a marker on every point, else about six per line."""
    style = method_style(method)
    color = style["color"]
    if not mark_all:
        style["markevery"] = max(1, len(x) // 6)
    ax.plot(x, mean, label=method_label(method), lw=1.6, ms=3.5, **style)
    if seeds is not None and len(seeds) < MIN_SEEDS_FOR_BAND:
        for seed_x, seed_y in seeds:
            ax.plot(seed_x, seed_y, color=color, lw=0.7, alpha=0.45)
        return
    stderr = np.asarray(stderr, dtype=float)
    if np.isfinite(stderr).any():
        ax.fill_between(x, mean - stderr, mean + stderr, color=color, alpha=0.2, lw=0)


def smooth(values: np.ndarray, window: int | None = None) -> np.ndarray:
    """Centred moving average over `window` steps (SMOOTH_STEPS), shorter at the ends."""
    return (
        pd.Series(np.asarray(values, dtype=float))
        .rolling(window or SMOOTH_STEPS, center=True, min_periods=1)
        .mean()
        .to_numpy()
    )


def finish_default_note(n_seeds: set[int]) -> str:
    seeds = "/".join(str(n) for n in sorted(n_seeds))
    band = "band: ±1 standard error" if max(n_seeds) > 1 else "one seed: no error band"
    return f"mean over {seeds} training seed{'' if n_seeds == {1} else 's'}; {band}"


def seed_note(n_seeds: set[int], *, per_seed_lines: bool) -> str | None:
    """The suptitle's second line when seeds are drawn one by one (None: finish's default)."""
    if not per_seed_lines or max(n_seeds) >= MIN_SEEDS_FOR_BAND or max(n_seeds) < 2:
        return None
    seeds = "/".join(map(str, sorted(n_seeds)))
    return f"thick: mean over {seeds} training seeds; thin: each seed (too few for an error band)"


def finish(
    fig,
    axes,
    out: str | os.PathLike,
    *,
    title: str,
    n_seeds: set[int],
    note: str | None = None,
    scale: str | None = None,
    integer_x: bool = True,
) -> None:
    """A one-line title, the shared legend below the panels and under it a caption: the run's scale and
    the seed count (or `note`); save via a temporary name. integer_x: linear x axes count steps or k
    (integer ticks); False for continuous values."""
    from matplotlib.ticker import MaxNLocator

    handles, labels = axes[0].get_legend_handles_labels()
    for ax in axes[1:]:
        for h, label in zip(*ax.get_legend_handles_labels()):
            if label not in labels:
                handles.append(h)
                labels.append(label)
    width_in, height_in = fig.get_size_inches()
    ncol = min(len(labels), max(2, int(width_in / 1.6)))  # a legend entry takes about 1.6 in
    legend_rows = math.ceil(len(labels) / ncol)
    width = int(width_in * 72 / (0.55 * _CAPTION_PT))  # characters per caption line
    seeds = note or finish_default_note(n_seeds)
    scale = scale.strip().rstrip(".") + "." if scale else None  # a sentence, then the seeds' sentence
    if not re.match(r"[a-z] =", seeds):  # a sentence starts upper case; "m = 3 ..." keeps its symbol
        seeds = seeds[:1].upper() + seeds[1:]
    caption = textwrap.fill(" ".join(filter(None, [scale, seeds + "."])), width)
    caption_in = (caption.count("\n") + 1) * 1.35 * _CAPTION_PT / 72 + 0.08
    fig.text(0.5, 0.04 / height_in, caption, ha="center", va="bottom", fontsize=_CAPTION_PT, color="0.25")
    line_in = 1.45 * FONT_PT / 72  # one line of legend text
    fig.legend(
        handles, labels, loc="lower center", ncol=ncol, frameon=False, bbox_to_anchor=(0.5, caption_in / height_in)
    )
    fig.suptitle(title, fontsize=FONT_PT + 1)
    for ax in axes:
        if integer_x and ax.get_xscale() == "linear":  # integer steps and k; log axes keep their own ticks
            ax.xaxis.set_major_locator(MaxNLocator(nbins=5, integer=True))
    fig.tight_layout(rect=(0, (0.1 + caption_in + line_in * legend_rows) / height_in, 1, 1))
    with atomic_file(out) as tmp:
        fig.savefig(tmp, format=Path(out).suffix.lstrip(".") or None)


def draw_curve_panel(
    ax, summary: pd.DataFrame, metric: str, methods: list[str], task: str, per_seed: pd.DataFrame | None = None
) -> set[int]:
    """One task's pass@k or best@k against k on `ax`, a line per method; returns the seed counts seen."""
    from matplotlib.ticker import FuncFormatter

    n_seeds = set()
    for method in methods:
        rows = summary[(summary.task == task) & (summary.method == method) & (summary.metric == metric)]
        if rows.empty:
            raise ValueError(f"summary has no {metric} for task={task} method={method}; was the cell evaluated?")
        rows = rows.sort_values("k")
        n_seeds.add(int(rows.n_seeds.min()))
        seeds = None
        if per_seed is not None:
            mine = per_seed[(per_seed.task == task) & (per_seed.method == method) & (per_seed.metric == metric)]
            seeds = [
                (g.sort_values("k").k.to_numpy(), g.sort_values("k").value.to_numpy())
                for _, g in mine.groupby("train_seed")
            ]
        draw_band(
            ax,
            rows.k.to_numpy(),
            rows["mean"].to_numpy(),
            rows.stderr.to_numpy(),
            method=method,
            mark_all=len(rows) <= 12,
            seeds=seeds,
        )
    ax.set_title(task_label(task))
    budget = int(summary[(summary.task == task) & (summary.metric == metric)].k.max())
    ax.set_xscale("log", base=2)  # pass@k and best@k change most at small k
    ax.set_xticks([2**i for i in range(int(math.log2(budget)) + 1)] + ([budget] if budget & (budget - 1) else []))
    ax.xaxis.set_major_formatter(FuncFormatter(lambda v, _: f"{v:g}"))
    ax.set_xlabel("candidates k (log2 scale)")
    ax.set_ylabel(METRIC_LABELS.get(metric, metric))
    ax.grid(alpha=0.3)
    return n_seeds


SEARCH_METRICS = {"solved": "problems solved by iteration t", "mean_best": "mean best score by iteration t"}


def draw_search_panel(ax, curves: pd.DataFrame, task: str, metric: str, methods: list[str]) -> set[int]:
    """One search metric against iteration on `ax`, a line per method; returns the seed counts seen."""
    n_seeds, n_problems = set(), 0
    for method in methods:
        rows = curves[(curves.task == task) & (curves.method == method) & (curves.metric == metric)]
        if rows.empty:
            raise ValueError(f"no search curve for task={task} method={method}; did its evolve job run?")
        rows = rows.sort_values("iteration")
        n_seeds.add(int(rows.n_seeds.min()))
        n_problems = max(n_problems, int(rows.n_problems.max()))
        draw_band(
            ax,
            rows.iteration.to_numpy(),
            rows["mean"].to_numpy(),
            rows.stderr.to_numpy(),
            method=method,
            mark_all=len(rows) <= 12,
        )
    ax.set_xlabel("search iteration t")
    if metric == "solved":
        ax.set_ylabel(f"problems solved (of {n_problems})")
        ax.set_ylim(-0.05 * n_problems, n_problems * 1.05)
    else:
        ax.set_ylabel("mean best score so far")
        ax.set_ylim(-0.02, 1.02)
    ax.grid(alpha=0.3)
    return n_seeds

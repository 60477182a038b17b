"""Figures of the evolutionary search (paper Fig. 3), from `vpo aggregate evolve`'s curves CSV.

`figures/evolve_{task}.pdf`: (left) problems solved by iteration t, (right) mean best score by
iteration t, a line per method with a ±1 standard-error band over training seeds.
`figures/lcb_case_study.pdf`: the paper's four panels: (a) pass@k and (b) best@k on the whole
LiveCodeBench test split, (c) and (d) the two search panels on its hardest problems.
"""

from __future__ import annotations

import pandas as pd

from vpo.plots import draw_band, draw_curve_panel, finish, max_width_in, seed_note, use_figure_fonts
from vpo.tables import task_label

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
        draw_band(ax, rows.iteration.to_numpy(), rows["mean"].to_numpy(), rows.stderr.to_numpy(), method=method,
                  mark_all=len(rows) <= 12)
    ax.set_xlabel("search iteration t")
    if metric == "solved":
        ax.set_ylabel(f"problems solved (of {n_problems})")
        ax.set_ylim(-0.05 * n_problems, n_problems * 1.05)
    else:
        ax.set_ylabel("mean best score so far")
        ax.set_ylim(-0.02, 1.02)
    ax.grid(alpha=0.3)
    return n_seeds


def plot_evolve(curves: pd.DataFrame, task: str, methods: list[str], out, scale: str | None = None):
    """Both search panels for one task; saves to `out` and returns the figure."""
    from vpo.plots import panel_grid

    fig, axes = panel_grid(2)
    n_seeds = set()
    for ax, metric in zip(axes, SEARCH_METRICS):
        n_seeds |= draw_search_panel(ax, curves, task, metric, methods)
        ax.set_title(f"{task_label(task)}: {SEARCH_METRICS[metric]}")
    finish(fig, axes, out, title=f"Evolutionary search (OpenEvolve) on the hardest {task_label(task)} problems",
           n_seeds=n_seeds, scale=scale)
    return fig


def plot_case_study(summary: pd.DataFrame, per_seed: pd.DataFrame | None, curves: pd.DataFrame,
                    methods: list[str], out, scale: str | None = None):
    """The LiveCodeBench case study's four panels (a)-(d) in one row; saves to `out`, returns the figure."""
    use_figure_fonts()
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(1, 4, figsize=(max_width_in(), 3.3))  # one row, as the paper's
    axes = list(axes)
    n_seeds = set()
    for ax, metric, letter in zip(axes[:2], ("pass_at_k", "best_at_k"), "ab"):
        n_seeds |= draw_curve_panel(ax, summary, metric, methods, "lcb", per_seed)
        ax.set_title(f"({letter}) {'pass@k' if metric == 'pass_at_k' else 'best@k'}, all problems")
    for ax, metric, letter in zip(axes[2:], SEARCH_METRICS, "cd"):
        n_seeds |= draw_search_panel(ax, curves, "lcb", metric, methods)
        ax.set_title(f"({letter}) search: {'solved' if metric == 'solved' else 'mean best@t'}")
    finish(fig, axes, out, title="LiveCodeBench case study", n_seeds=n_seeds,
           note=seed_note(n_seeds, per_seed_lines=per_seed is not None), scale=scale)
    return fig

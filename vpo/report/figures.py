"""Every paper figure: one function per figure file, and `FIGURES`, the table that names them.

A figure's stem is its file name (`figures/<stem>.pdf`; `evolve` draws `evolve_{task}.pdf`), its
`vpo plot <stem>` subcommand, its rule (`figure_<stem>` in rules/figures.smk) and its function here.
Each function takes its CSV tables and options as keywords, saves the figure to `out` (a temporary
name, then renamed) and returns it; the caller closes it. Adding a figure: its function, its entry in
`FIGURES`, its rule.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Callable

import pandas as pd

from vpo.methods import METHODS
from vpo.report import interval_figures
from vpo.report.aggregate import training_curve_stats
from vpo.report.kit import (
    METRIC_LABELS,
    SEARCH_METRICS,
    SMOOTH_STEPS,
    draw_band,
    draw_curve_panel,
    draw_search_panel,
    finish,
    finish_default_note,
    max_width_in,
    method_style,
    panel_grid,
    seed_note,
    smooth,
    use_figure_fonts,
)
from vpo.report.labels import method_label, task_label
from vpo.report.mechanism_figures import mechanism_advantage, mechanism_bandit
from vpo.report.tables import lookup


# ---- main results ----------------------------------------------------------------------------
def curves_by_k(
    summary: pd.DataFrame,
    metric: str,
    methods: list[str],
    tasks: list[str],
    out,
    per_seed: pd.DataFrame | None = None,
    scale: str | None = None,
):
    """pass@k or best@k against k: one panel per task, every method (all must be present).
    per_seed: aggregate's per_seed.csv, for drawing each seed when there are too few for a band."""
    fig, axes = panel_grid(len(tasks))
    n_seeds = set()
    for ax, task in zip(axes, tasks):
        n_seeds |= draw_curve_panel(ax, summary, metric, methods, task, per_seed)
    finish(
        fig,
        axes,
        out,
        title=METRIC_LABELS.get(metric, metric).split(" ")[0] + " by number of candidates",
        n_seeds=n_seeds,
        note=seed_note(n_seeds, per_seed_lines=per_seed is not None),
        scale=scale,
    )
    return fig


def pass_at_k(
    *,
    summary: pd.DataFrame,
    methods: list[str],
    tasks: list[str],
    out,
    per_seed: pd.DataFrame | None = None,
    scale: str | None = None,
):
    """Paper Fig. 2 (top): pass@k against k for `report.main_methods`, one panel per task."""
    return curves_by_k(summary, "pass_at_k", methods, tasks, out, per_seed, scale)


def best_at_k(
    *,
    summary: pd.DataFrame,
    methods: list[str],
    tasks: list[str],
    out,
    per_seed: pd.DataFrame | None = None,
    scale: str | None = None,
):
    """Paper Fig. 2 (bottom): best@k (the task scalar) against k, one panel per task."""
    return curves_by_k(summary, "best_at_k", methods, tasks, out, per_seed, scale)


def appendix_pass_at_k(
    *,
    summary: pd.DataFrame,
    methods: list[str],
    tasks: list[str],
    out,
    per_seed: pd.DataFrame | None = None,
    scale: str | None = None,
):
    """pass@k against k with every method of the grid (the appendix's baselines)."""
    return curves_by_k(summary, "pass_at_k", methods, tasks, out, per_seed, scale)


def appendix_best_at_k(
    *,
    summary: pd.DataFrame,
    methods: list[str],
    tasks: list[str],
    out,
    per_seed: pd.DataFrame | None = None,
    scale: str | None = None,
):
    """best@k against k with every method of the grid."""
    return curves_by_k(summary, "best_at_k", methods, tasks, out, per_seed, scale)


def diversity_over_training(
    *, training: pd.DataFrame, methods: list[str], tasks: list[str], out, scale: str | None = None
):
    """Paper Fig. 4: pool diversity against training step, one panel per task, mean and band over seeds
    (training: aggregate's training_curves.csv)."""
    return _training_figure(training, "pool_diversity", methods, tasks, out, "Pool diversity over training", scale)


def strategies_over_training(
    *, training: pd.DataFrame, methods: list[str], tasks: list[str], out, scale: str | None = None
):
    """Distinct strategies (`Task.strategy_key`) among each group's rollouts against training step: the
    diversity set RL rewards across rollouts, beside VPO's, whose key holds a rollout's m answers."""
    title = "Distinct strategies per group over training"
    return _training_figure(training, "strategies_per_group", methods, tasks, out, title, scale)


def _training_figure(training: pd.DataFrame, column: str, methods, tasks, out, title: str, scale: str | None):
    """One training-curve column against step, one panel per task, mean and band over seeds."""
    fig, axes = panel_grid(len(tasks))
    n_seeds = set()
    for ax, task in zip(axes, tasks):
        n_seeds |= _draw_training_panel(ax, training, column, methods, task)
        ax.set_title(task_label(task))
    note = seed_note(n_seeds, per_seed_lines=True) or finish_default_note(n_seeds)
    note = f"{note}; lines: moving average over {SMOOTH_STEPS} steps, dots: the mean at each step"
    finish(fig, axes, out, title=title, n_seeds=n_seeds, scale=scale, note=note)
    return fig


_TRAINING_LABELS = {
    "pool_diversity": "pool diversity (pairwise L1)",
    "strategies_per_group": "distinct strategies per group",
    "advantage_draw_std": "advantage std over weight draws",
}


def _draw_training_panel(ax, curves: pd.DataFrame, column: str, methods: list[str], task: str) -> set[int]:
    """One training-curve column (aggregate's training_curves.csv) against step on `ax`: per method the
    smoothed mean with a band (or each seed), dots at each step's mean; returns the seed counts seen."""
    stats = training_curve_stats(curves, column)
    n_seeds = set()
    for method in methods:
        rows = stats[(stats.task == task) & (stats.method == method)].sort_values("step")
        if rows.empty or rows["mean"].isna().all():
            raise ValueError(f"no training curve of {column} for task={task} method={method}; is it logged?")
        n_seeds.add(int(rows.n_seeds.max()))
        mine = curves[(curves.task == task) & (curves.method == method)]
        seeds = [
            (g.sort_values("step").step.to_numpy(), smooth(g.sort_values("step")[column].to_numpy()))
            for _, g in mine.groupby("seed")
        ]
        ax.plot(rows.step, rows["mean"], ls="none", marker=".", ms=3, alpha=0.3, color=method_style(method)["color"])
        draw_band(
            ax,
            rows.step.to_numpy(),
            smooth(rows["mean"].to_numpy()),
            smooth(rows.stderr.to_numpy()),
            method=method,
            seeds=seeds,
        )
    ax.set_xlabel("training step")
    ax.set_ylabel(_TRAINING_LABELS.get(column, column))
    ax.grid(alpha=0.3)
    return n_seeds


# ---- ablations ---------------------------------------------------------------------------------
_ABLATION_TITLES = {  # (one-line title, what the caption adds)
    "components": (
        "Which part of VPO does the work",
        "random scalarisation alone (random-weight GRPO), multi-answer generation alone (Multi-RLVR), VPO's "
        "score on one answer, and both (VPO)",
    ),
    "alpha": ("VPO's Dirichlet concentration α", "small: weights near the corners; large: near the centre"),
    "sampler": ("VPO's weight sampler", "i.i.d. Dirichlet against scrambled Sobol"),
    "m": ("Answers per rollout m", "the pool stays at the same number of candidates"),
}
_VALUE_LABELS = {"alpha": ("Dirichlet α", "log"), "m": ("answers per rollout m", "linear")}


def ablation(
    *,
    summary: pd.DataFrame,
    training: pd.DataFrame,
    ablation: str,
    methods: list[str],
    tasks: list[str],
    out,
    per_seed: pd.DataFrame | None = None,
    values: str | None = None,
    scale: str | None = None,
):
    """An ablation (file ablation_{ablation}; config.yaml `ablations`): per task, best@k and pass@k against
    k and pool diversity over training; the sampler ablation adds the advantage's spread over weight draws
    during training (vpo/advantage_draw_std), and an ablation with `values` (JSON {method: its alpha or m})
    best@1 and best@budget against that value, a line per method of the table."""
    import json

    setting = json.loads(values) if values else {}
    extra = ablation == "sampler" or bool(setting)
    fig, axes = panel_grid(len(tasks) * (3 + extra))
    n_seeds = set()
    per_task = 3 + extra
    for t, task in enumerate(tasks):
        row = axes[t * per_task : (t + 1) * per_task]
        for ax, metric in zip(row, ("best_at_k", "pass_at_k")):
            n_seeds |= draw_curve_panel(ax, summary, metric, methods, task, per_seed)
            ax.set_title(f"{task_label(task)}: {METRIC_LABELS[metric].split(' ')[0]}")
        n_seeds |= _draw_training_panel(row[2], training, "pool_diversity", methods, task)
        row[2].set_title(f"{task_label(task)}: pool diversity in training")
        if ablation == "sampler":
            _draw_training_panel(row[3], training, "advantage_draw_std", methods, task)
            row[3].set_title(f"{task_label(task)}: Monte Carlo noise of the advantage")
        elif setting:
            _draw_setting_panel(row[3], summary, setting, task, *_VALUE_LABELS.get(ablation, (ablation, "linear")))
    finish(
        fig,
        axes,
        out,
        title=_ABLATION_TITLES.get(ablation, (f"Ablation: {ablation}", ""))[0],
        n_seeds=n_seeds,
        note="; ".join(
            filter(
                None,
                [
                    _ABLATION_TITLES.get(ablation, ("", ""))[1],
                    seed_note(n_seeds, per_seed_lines=per_seed is not None) or finish_default_note(n_seeds),
                ],
            )
        ),
        scale=scale,
    )
    return fig


def _draw_setting_panel(ax, summary: pd.DataFrame, setting: dict, task: str, xlabel: str, xscale: str) -> None:
    """best@1 (dashed, open markers) and best@budget (solid) against a setting's value, with ±1 standard
    error bars, one line per method of the table (a variant joins its method's line)."""
    from matplotlib.ticker import FuncFormatter, NullFormatter

    budget = int(summary[(summary.task == task) & (summary.metric == "best_at_k")].k.max())
    families: dict[str, list[str]] = {}
    for method in setting:
        families.setdefault(METHODS[method].base or method, []).append(method)
    for family, members in families.items():
        members = sorted(members, key=lambda m: setting[m])
        style = method_style(family)
        for k, ls, face in ((budget, "-", style["color"]), (1, "--", "white")):
            points = [lookup(summary, task, m, "best_at_k", k) for m in members]
            ax.errorbar(
                [setting[m] for m in members],
                [p["mean"] for p in points],
                yerr=[0 if pd.isna(p.stderr) else p.stderr for p in points],
                color=style["color"],
                ls=ls,
                marker=style["marker"],
                mfc=face,
                ms=4,
                capsize=2,
                lw=1.4,
                label=f"{method_label(family)}: best@{k}",
            )
    ax.set_xscale(xscale)
    ax.set_xticks(sorted(set(setting.values())))
    ax.xaxis.set_major_formatter(FuncFormatter(lambda v, _: f"{v:g}"))
    ax.xaxis.set_minor_formatter(NullFormatter())  # a log axis would label its minor ticks over the values
    ax.set(xlabel=xlabel, ylabel="best@k (task scalar)", title=f"{task_label(task)}: best@1 and best@{budget}")
    ax.grid(alpha=0.3)


# ---- the evolutionary search -----------------------------------------------------------------
def evolve(*, curves: pd.DataFrame, task: str, methods: list[str], out, scale: str | None = None):
    """The evolutionary search on one task's unsolved or lowest-scoring problems (file evolve_{task}):
    problems solved and mean best score by iteration t, a line per method (curves: aggregate's
    evolve_{task}.csv)."""
    fig, axes = panel_grid(2)
    n_seeds = set()
    for ax, metric in zip(axes, SEARCH_METRICS):
        n_seeds |= draw_search_panel(ax, curves, task, metric, methods)
        ax.set_title(f"{task_label(task)}: {SEARCH_METRICS[metric]}")
    finish(
        fig,
        axes,
        out,
        title=f"Evolutionary search (OpenEvolve) on {task_label(task)}",
        n_seeds=n_seeds,
        note="on the test problems no selecting method solved within the best@k budget, or, when fewer, the "
        f"lowest-scoring ones (vpo/search/hardest.py); {finish_default_note(n_seeds)}",
        scale=scale,
    )
    return fig


def lcb_case_study(
    *,
    summary: pd.DataFrame,
    curves: pd.DataFrame,
    methods: list[str],
    out,
    per_seed: pd.DataFrame | None = None,
    scale: str | None = None,
):
    """Paper Fig. 3: (a) pass@k and (b) best@k on the whole LiveCodeBench test split, (c) problems
    solved and (d) mean best@t inside the search on its unsolved or lowest-scoring problems, in one row."""
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
        ax.set_title(f"({letter}) search: {'solved' if metric == 'solved' else 'best@t'}")  # fits a quarter width
    finish(
        fig,
        axes,
        out,
        title="LiveCodeBench case study",
        n_seeds=n_seeds,
        note=seed_note(n_seeds, per_seed_lines=per_seed is not None),
        scale=scale,
    )
    return fig


# ---- the table -------------------------------------------------------------------------------
@dataclass(frozen=True)
class Figure:
    draw: Callable[..., Any]  # the function above
    tables: tuple[str, ...]  # its CSV inputs, by keyword (`vpo plot <stem> --<name> FILE`)
    # its other keywords: methods and tasks (comma lists), task, ablation, values, scale; `variants` (the
    # config's method variants, JSON) is read by `vpo plot` itself, which registers them before drawing
    options: tuple[str, ...]
    optional: tuple[str, ...] = ()  # tables it draws without (per_seed: seeds drawn one by one when given)


_CURVES = Figure(pass_at_k, ("summary", "per_seed"), ("methods", "tasks", "variants", "scale"), optional=("per_seed",))
FIGURES: dict[str, Figure] = {
    "pass_at_k": _CURVES,
    "best_at_k": Figure(best_at_k, _CURVES.tables, _CURVES.options, _CURVES.optional),
    "appendix_pass_at_k": Figure(appendix_pass_at_k, _CURVES.tables, _CURVES.options, _CURVES.optional),
    "appendix_best_at_k": Figure(appendix_best_at_k, _CURVES.tables, _CURVES.options, _CURVES.optional),
    "strategies_over_training": Figure(
        strategies_over_training, ("training",), ("methods", "tasks", "variants", "scale")
    ),
    "diversity_over_training": Figure(
        diversity_over_training, ("training",), ("methods", "tasks", "variants", "scale")
    ),
    "mechanism_bandit": Figure(mechanism_bandit, ("bandit",), ()),
    "mechanism_advantage": Figure(mechanism_advantage, ("sweeps",), ()),
    "evolve": Figure(evolve, ("curves",), ("task", "methods", "variants", "scale")),
    "ablation": Figure(
        ablation,
        ("summary", "per_seed", "training"),
        ("ablation", "methods", "tasks", "values", "variants", "scale"),
        optional=("per_seed",),
    ),
    "intervals": Figure(
        interval_figures.intervals, ("intervals", "improvement"), ("methods", "tasks", "variants", "scale")
    ),
    "performance_profiles": Figure(
        interval_figures.performance_profiles, ("profiles", "per_problem"), ("methods", "tasks", "variants", "scale")
    ),
    "pool_quality": Figure(interval_figures.pool_quality, ("intervals",), ("methods", "tasks", "variants", "scale")),
    "lcb_case_study": Figure(
        lcb_case_study, ("summary", "per_seed", "curves"), ("methods", "variants", "scale"), optional=("per_seed",)
    ),
}

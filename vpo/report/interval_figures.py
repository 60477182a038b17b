"""Figures of the bootstrap intervals (vpo/report/intervals.py): intervals per method, performance
profiles, and the pool-quality measures. Methods keep their colours and markers (vpo/report/kit.py)."""

from __future__ import annotations

import pandas as pd

from vpo.report.kit import finish, method_style, panel_grid
from vpo.report.labels import method_label, task_label

_POOL_TITLES = {
    "hypervolume": "hypervolume",
    "expected_utility": "expected utility",
    "nondominated": "non-dominated vectors",
}


def _draw_interval_panel(ax, rows: pd.DataFrame, methods: list[str], value: str = "point", estimators=("iqm", "mean")):
    """One horizontal line per method: each estimator's point (IQM filled, mean open) with its 95%
    interval. rows: intervals.csv rows of one task, metric and k (or improvement.csv rows, value
    'probability', estimators ("",))."""
    for y, method in enumerate(methods):
        style = method_style(method)
        for offset, estimator in zip((-0.15, 0.15), estimators):
            row = (
                rows[(rows.method == method) & (rows.estimator == estimator)]
                if estimator
                else rows[rows.other == method]
            )
            if row.empty:
                continue
            row = row.iloc[0]
            ax.errorbar(
                row[value],
                y + (offset if len(estimators) > 1 else 0),
                xerr=[[row[value] - row.low], [row.high - row[value]]],
                color=style["color"],
                marker=style["marker"],
                mfc=style["color"] if estimator != "mean" else "white",
                ms=5,
                capsize=2,
                lw=1.4,
                ls="none",
            )
    ax.set_yticks(range(len(methods)), [method_label(m) for m in methods])
    ax.set_ylim(len(methods) - 0.5, -0.5)
    ax.grid(axis="x", alpha=0.3)


def _add_marker_legend(ax, methods: list[str]) -> None:
    """One legend entry per method (its colour and marker, no line) for the shared legend of finish()."""
    for method in methods:
        style = {k: v for k, v in method_style(method).items() if k != "ls"}
        ax.plot([], [], ls="none", label=method_label(method), **style)


def _seeds(frame: pd.DataFrame) -> set[int]:
    return {int(n) for n in frame.n_seeds.unique()}


def intervals(
    *,
    intervals: pd.DataFrame,
    improvement: pd.DataFrame,
    methods: list[str],
    tasks: list[str],
    out,
    scale: str | None = None,
):
    """Per task: best@K and pass@K (K the task's largest k), IQM (filled) and mean (open) with 95%
    stratified-bootstrap intervals over seeds x problems, and the probability that VPO beats each method."""
    fig, axes = panel_grid(3 * len(tasks))
    for t, task in enumerate(tasks):
        mine = intervals[intervals.task == task]
        for ax, metric in zip(axes[3 * t : 3 * t + 2], ("best_at_k", "pass_at_k")):
            rows = mine[mine.metric == metric]
            k = rows.k.max()
            _draw_interval_panel(ax, rows[rows.k == k], methods)
            ax.set(title=f"{task_label(task)}: {metric.split('_at_')[0]}@{int(k)}", xlabel="IQM (filled), mean (open)")
        ax = axes[3 * t + 2]
        better = improvement[(improvement.task == task) & (improvement.metric == "best_at_k")]
        reference = better.method.iloc[0] if len(better) else "vpo"
        better = better[better.k == better.k.max()]
        others = [m for m in methods if m != reference]
        _draw_interval_panel(ax, better, others, value="probability", estimators=("",))
        ax.axvline(0.5, color="0.5", lw=0.8, ls="--")
        ax.set(
            title=f"{task_label(task)}: P({method_label(reference)} > ·), "
            f"best@{int(better.k.max()) if len(better) else ''}",
            xlabel="probability of improvement",
        )
    _add_marker_legend(axes[0], methods)
    finish(
        fig,
        axes,
        out,
        title="Interval estimates over training seeds and problems",
        n_seeds=_seeds(intervals),
        note="95% stratified-bootstrap intervals over "
        f"{'/'.join(map(str, sorted(_seeds(intervals))))} training seeds x "
        "problems (seeds within problems, and problems)",
        scale=scale,
        integer_x=False,
    )
    return fig


def performance_profiles(
    *,
    profiles: pd.DataFrame,
    per_problem: pd.DataFrame,
    methods: list[str],
    tasks: list[str],
    out,
    scale: str | None = None,
):
    """Per task: the fraction of (training seed, problem) pairs whose best@K exceeds tau (seaborn's
    complementary ECDF of the scores), with the 95% bootstrap band over seeds and problems."""
    import seaborn as sns

    fig, axes = panel_grid(len(tasks))
    n_seeds: set[int] = set()
    for ax, task in zip(axes, tasks):
        bands = profiles[profiles.task == task]
        k = bands.k.max()
        scores = per_problem[(per_problem.task == task) & (per_problem.metric == "best_at_k") & (per_problem.k == k)]
        for method in methods:
            style = method_style(method)
            mine = scores[scores.method == method]
            n_seeds.add(int(mine.train_seed.nunique()))
            sns.ecdfplot(
                x=mine.value.to_numpy(),
                complementary=True,
                ax=ax,
                color=style["color"],
                ls=style["ls"],
                lw=1.6,
                label=method_label(method),
            )
            band = bands[bands.method == method]
            # four overlapping shaded bands read as one grey: a faint fill, and each band's edges as thin
            # lines of its method's colour, stepped as the profile is
            ax.fill_between(band.tau, band.low, band.high, color=style["color"], alpha=0.07, lw=0, step="post")
            for edge in (band.low, band.high):
                ax.step(band.tau, edge, where="post", color=style["color"], lw=0.6, alpha=0.7, ls=":")
        ax.set(
            title=f"{task_label(task)}: performance profile of best@{int(k)}",
            xlabel="τ (task scalar)",
            ylabel="fraction of seeds x problems > τ",
            ylim=(-0.02, 1.02),
        )
        ax.grid(alpha=0.3)
    finish(
        fig,
        axes,
        out,
        title="Performance profiles",
        n_seeds=n_seeds,
        note=f"line: over {'/'.join(map(str, sorted(n_seeds)))} training seeds x problems; band: 95% stratified "
        "bootstrap over seeds and problems",
        scale=scale,
        integer_x=False,
    )
    return fig


def pool_quality(*, intervals: pd.DataFrame, methods: list[str], tasks: list[str], out, scale: str | None = None):
    """Per task: the evaluation pool as a multi-objective set, per problem: hypervolume against 0,
    expected utility under Dirichlet(1) weights, distinct non-dominated vectors; mean (open) and IQM
    (filled) with 95% intervals over seeds x problems. A task whose every pool has hypervolume 0 (no
    vector above the reference point in every objective: maze, whose lava objective is 0 on most
    routes) gets no hypervolume panel, and the caption says so."""
    panels, left_out = [], []
    for task in tasks:
        for metric in _POOL_TITLES:
            rows = intervals[(intervals.task == task) & (intervals.metric == metric)]
            if metric == "hypervolume" and len(rows) and (rows.high == 0).all():
                left_out.append(task_label(task))
            else:
                panels.append((task, metric, rows))
    fig, axes = panel_grid(len(panels))
    for ax, (task, metric, rows) in zip(axes, panels):
        _draw_interval_panel(ax, rows, methods)
        ax.set(title=f"{task_label(task)}: {_POOL_TITLES[metric]}", xlabel="IQM (filled), mean (open)")
    omitted = (
        f"; hypervolume not drawn for {', '.join(left_out)}: 0 for every pool (no vector above the reference "
        "point 0 in every objective)"
        if left_out
        else ""
    )
    _add_marker_legend(axes[0], methods)
    finish(
        fig,
        axes,
        out,
        title="The evaluation pool as a multi-objective set",
        n_seeds=_seeds(intervals),
        note="per problem, then 95% stratified-bootstrap intervals over "
        f"{'/'.join(map(str, sorted(_seeds(intervals))))} "
        f"training seeds x problems{omitted}",
        scale=scale,
        integer_x=False,
    )
    return fig

"""Paper figures from the aggregated tables; one PDF per figure, named after what it shows.

`vpo plot curve --metric pass_at_k|best_at_k`: one panel per task, one line per method, x = number
of candidates k, line = mean over training seeds, band = ± one standard error.
`vpo plot diversity`: one panel per task, pool diversity against training step for the chosen
methods (paper Fig. 4), mean and standard-error band over training seeds.
`vpo plot mechanism`: the toy bandit of `vpo.mechanism`: each method's policy mass per arm over
steps, and the policy's E_w[best of m] and reward-space diversity over steps.
`vpo plot evolve` / `vpo plot case-study`: the evolutionary search (`vpo.evolve_figures`).
A method's colour is fixed across figures (its position in the method table).
"""

from __future__ import annotations

import argparse
import math
import os
import textwrap
from pathlib import Path

import numpy as np
import pandas as pd

from vpo.aggregate import training_curve_stats
from vpo.atomic import atomic_file
from vpo.data import read_csv_table
from vpo.tables import method_label, task_label

METHOD_ORDER = ["grpo", "gdpo", "maxrl", "max_at_k", "multi_rlvr", "vpo", "vpo_single", "goal_cond", "random_weight"]
SMOOTH_STEPS = 5  # moving-average window of the diversity-over-training lines
METRIC_LABELS = {"pass_at_k": "pass@k", "best_at_k": "best@k (task scalar)", "best_at_k_perm": "best@k (one permutation)"}


# One look per method in every figure: Okabe-Ito colours (told apart with the common colour-vision
# deficiencies), and a line style and marker of its own so that greyscale prints separate them too.
# VPO is blue and GRPO vermillion, as in the paper; VPO (m=1) is VPO's lighter blue, dashed.
METHOD_STYLES = {  # method: (colour, line style, marker)
    "grpo": ("#D55E00", "-", "o"),
    "gdpo": ("#CC79A7", "--", "v"),
    "maxrl": ("#8C6D00", "-.", "P"),
    "max_at_k": ("#E69F00", "--", "s"),
    "multi_rlvr": ("#009E73", "-.", "^"),
    "vpo": ("#0072B2", "-", "D"),
    "vpo_single": ("#56B4E9", "--", "d"),
    "goal_cond": ("#000000", ":", "X"),
    "random_weight": ("#999999", ":", "*"),
}


# Series that are not methods (bandit arms, k, weight samplers): the Okabe-Ito colours the methods use
# least, each with its own line style and marker, in this order.
SERIES_STYLES = [("#000000", "-", "o"), ("#CC79A7", "--", "s"), ("#E69F00", "-.", "^"), ("#999999", ":", "D"),
                 ("#56B4E9", (0, (5, 1)), "v"), ("#D55E00", (0, (3, 1, 1, 1)), "P")]


def series_style(i: int) -> dict:
    """matplotlib keywords of the i-th non-method series."""
    color, linestyle, marker = SERIES_STYLES[i % len(SERIES_STYLES)]
    return {"color": color, "ls": linestyle, "marker": marker}


def method_color(method: str) -> str:
    return METHOD_STYLES.get(method, ("#555555", "-", "o"))[0]


def method_style(method: str) -> dict:
    """matplotlib keywords of a method's line: colour, line style, marker."""
    color, linestyle, marker = METHOD_STYLES.get(method, ("#555555", "-", "o"))
    return {"color": color, "ls": linestyle, "marker": marker}


FONT_PT = 9  # every text in a figure
TEXT_WIDTH_IN = 6.75  # a paper's text width: figures are at most FONT_PT / MIN_FONT_PT times wider
MIN_FONT_PT = 7  # the smallest text once a figure is scaled to the text width
PANEL_IN = (4.2, 3.4)  # a panel's width and height when the figure is not limited by the text width


def use_figure_fonts() -> None:
    import matplotlib

    matplotlib.use("Agg")
    matplotlib.rcParams.update({"font.size": FONT_PT, "axes.titlesize": FONT_PT, "axes.labelsize": FONT_PT,
                                "xtick.labelsize": FONT_PT - 1, "ytick.labelsize": FONT_PT - 1,
                                "legend.fontsize": FONT_PT})


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
    width = min(PANEL_IN[0] * ncols, max_width_in())
    panel_height = PANEL_IN[1] * width / (PANEL_IN[0] * ncols)
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
    return pd.Series(np.asarray(values, dtype=float)).rolling(window or SMOOTH_STEPS, center=True, min_periods=1).mean().to_numpy()


def finish_default_note(n_seeds: set[int]) -> str:
    seeds = "/".join(str(n) for n in sorted(n_seeds))
    band = "band: ±1 standard error" if max(n_seeds) > 1 else "one seed: no error band"
    return f"mean over {seeds} training seed{'' if n_seeds == {1} else 's'}; {band}"


def seed_note(n_seeds: set[int], *, per_seed_lines: bool) -> str | None:
    """The suptitle's second line when seeds are drawn one by one (None: finish's default)."""
    if not per_seed_lines or max(n_seeds) >= MIN_SEEDS_FOR_BAND or max(n_seeds) < 2:
        return None
    return f"thick: mean over {'/'.join(map(str, sorted(n_seeds)))} training seeds; thin: each seed (too few for an error band)"


def finish(fig, axes, out: str | os.PathLike, *, title: str, n_seeds: set[int], note: str | None = None,
           scale: str | None = None) -> None:
    """Shared legend below the panels, a suptitle with the seed count (or `note`); save via a temporary name."""
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
    fig.legend(handles, labels, loc="lower center", ncol=ncol, frameon=False)
    width = int(width_in * 72 / (0.55 * FONT_PT))  # characters per title line
    note = textwrap.fill(note or finish_default_note(n_seeds), width=width)
    scale_line = textwrap.fill(scale, width=width) + "\n" if scale else ""
    title = textwrap.fill(title, width=width)
    fig.suptitle(f"{title}\n{scale_line}{note}", fontsize=FONT_PT)
    for ax in axes:
        if ax.get_xscale() == "linear":  # integer steps and k; log axes keep their own ticks
            ax.xaxis.set_major_locator(MaxNLocator(nbins=5, integer=True))
    line_in = 1.45 * FONT_PT / 72  # one line of text
    fig.tight_layout(rect=(0, (0.1 + line_in * legend_rows) / height_in, 1, 1))
    with atomic_file(out) as tmp:
        fig.savefig(tmp, format=Path(out).suffix.lstrip(".") or None)


def draw_curve_panel(ax, summary: pd.DataFrame, metric: str, methods: list[str], task: str,
                     per_seed: pd.DataFrame | None = None) -> set[int]:
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
            seeds = [(g.sort_values("k").k.to_numpy(), g.sort_values("k").value.to_numpy())
                     for _, g in mine.groupby("train_seed")]
        draw_band(ax, rows.k.to_numpy(), rows["mean"].to_numpy(), rows.stderr.to_numpy(), method=method,
                  mark_all=len(rows) <= 12, seeds=seeds)
    ax.set_title(task_label(task))
    budget = int(summary[(summary.task == task) & (summary.metric == metric)].k.max())
    ax.set_xscale("log", base=2)  # pass@k and best@k change most at small k
    ax.set_xticks([2 ** i for i in range(int(math.log2(budget)) + 1)] + ([budget] if budget & (budget - 1) else []))
    ax.xaxis.set_major_formatter(FuncFormatter(lambda v, _: f"{v:g}"))
    ax.set_xlabel("candidates k (log2 scale)")
    ax.set_ylabel(METRIC_LABELS.get(metric, metric))
    ax.grid(alpha=0.3)
    return n_seeds


def plot_curves(summary: pd.DataFrame, metric: str, methods: list[str], tasks: list[str], out,
                per_seed: pd.DataFrame | None = None, scale: str | None = None):
    """pass@k or best@k against k: one panel per task, every method (all must be present).
    per_seed: aggregate's per_seed.csv, for drawing each seed when there are too few for a band.

    Saves the figure to out and returns it (the caller closes it).
    """
    fig, axes = panel_grid(len(tasks))
    n_seeds = set()
    for ax, task in zip(axes, tasks):
        n_seeds |= draw_curve_panel(ax, summary, metric, methods, task, per_seed)
    finish(fig, axes, out, title=METRIC_LABELS.get(metric, metric).split(" ")[0] + " by number of candidates",
           n_seeds=n_seeds, note=seed_note(n_seeds, per_seed_lines=per_seed is not None), scale=scale)
    return fig


def plot_diversity(curves: pd.DataFrame, methods: list[str], tasks: list[str], out, scale: str | None = None):
    """Pool diversity against training step: one panel per task, mean and band over seeds.

    Saves the figure to out and returns it (the caller closes it).
    """
    stats = training_curve_stats(curves)
    fig, axes = panel_grid(len(tasks))
    n_seeds = set()
    for ax, task in zip(axes, tasks):
        for method in methods:
            rows = stats[(stats.task == task) & (stats.method == method)].sort_values("step")
            if rows.empty:
                raise ValueError(f"no training curve for task={task} method={method}; is pool_diversity logged?")
            n_seeds.add(int(rows.n_seeds.max()))
            mine = curves[(curves.task == task) & (curves.method == method)]
            seeds = [(g.sort_values("step").step.to_numpy(), smooth(g.sort_values("step").pool_diversity.to_numpy()))
                     for _, g in mine.groupby("seed")]
            ax.plot(rows.step, rows["mean"], ls="none", marker=".", ms=3, alpha=0.3, color=method_color(method))
            draw_band(ax, rows.step.to_numpy(), smooth(rows["mean"].to_numpy()), smooth(rows.stderr.to_numpy()),
                      method=method, seeds=seeds)
        ax.set_title(task_label(task))
        ax.set_xlabel("training step")
        ax.set_ylabel("pool diversity (pairwise L1)")
        ax.grid(alpha=0.3)
    note = seed_note(n_seeds, per_seed_lines=True) or finish_default_note(n_seeds)
    finish(fig, axes, out, title="Pool diversity over training", n_seeds=n_seeds, scale=scale,
           note=f"{note}; lines: moving average over {SMOOTH_STEPS} steps, dots: the mean at each step")
    return fig


def plot_mechanism(table: pd.DataFrame, out):
    """The bandit: one panel of arm masses per method, then E_w[best of m] and diversity against step.

    Lines are means over seeds; each seed is drawn thinly behind them. Saves and returns the figure.
    """
    from vpo.mechanism import ARMS, PARETO

    methods = [m for m in METHOD_ORDER if m in set(table.method)]
    fig, axes = panel_grid(len(methods) + 2)
    dominated = sorted(set(range(len(ARMS))) - set(PARETO))
    for ax, method in zip(axes, methods):
        rows = table[table.method == method]
        for i, arm in enumerate(sorted(PARETO) + dominated):
            if arm in PARETO:  # each Pareto arm its own look; the dominated ones one thin grey look
                style, lw, label = series_style(i), 1.8, f"arm {arm} {tuple(float(v) for v in ARMS[arm])}, Pareto"
            else:
                style, lw = {"color": "#BBBBBB", "ls": "-", "marker": ""}, 1.0
                label = f"dominated arms ({', '.join(map(str, dominated))})" if arm == dominated[0] else "_nolegend_"
            for _, seed_rows in rows.groupby("seed"):
                ax.plot(seed_rows.step, seed_rows[f"arm_{arm}"], color=style["color"], lw=0.6, alpha=0.35)
            mean = rows.groupby("step")[f"arm_{arm}"].mean()
            ax.plot(mean.index, mean.to_numpy(), lw=lw, markevery=max(1, len(mean) // 8), ms=3, label=label,
                    **style)
        ax.set_title(f"{method_label(method)}: policy mass per arm")
        ax.set_xlabel("step")
        ax.set_ylabel("probability")
        ax.set_ylim(-0.02, 1.02)
        ax.grid(alpha=0.3)
    for ax, column, ylabel in zip(axes[len(methods):], ("best_of_m", "diversity"),
                                  ("E_w[best of m] of the policy", "reward-space diversity")):
        for method in methods:
            rows = table[table.method == method]
            mean = rows.groupby("step")[column].mean()
            ax.plot(mean.index, mean.to_numpy(), lw=1.8, markevery=max(1, len(mean) // 8), ms=3,
                    label=method_label(method), **method_style(method))
        ax.set_xlabel("step")
        ax.set_ylabel(ylabel)
        ax.grid(alpha=0.3)
    finish(fig, axes, out, title="Toy vector-reward bandit trained with each estimator (m = 3 arms per rollout "
                                 "for Multi-RLVR and VPO)", n_seeds={int(table.seed.nunique())},
           note=f"thick: mean over {table.seed.nunique()} seeds; thin: each seed")
    return fig


def plot_mechanism_advantage(table: pd.DataFrame, out):
    """Three panels from `vpo mechanism advantage`: raw VPO score against objectives reached (per k),
    against alpha, and the advantage's spread over weight draws against the number of weights."""
    fig, axes = panel_grid(3)
    coverage = table[table.sweep == "coverage"]
    for i, (k, rows) in enumerate(coverage.groupby("k")):
        axes[0].plot(rows.covered, rows.raw_mean, ms=3, label=f"k = {k}", **series_style(i))
    axes[0].set(xlabel="objectives the rollout's answers reach", ylabel="E_w[best of its answers]",
                title="More of the simplex, higher score")
    alpha = table[table.sweep == "alpha"]
    ks = sorted(coverage.k.unique())
    k, covered = int(alpha.k.iloc[0]), int(alpha.covered.iloc[0])  # the sweep's k gets that k's look
    axes[1].plot(alpha.alpha, alpha.raw_mean, ms=3, label=f"k = {k}", **series_style(ks.index(k) if k in ks else 0))
    axes[1].set(xscale="log", xlabel="Dirichlet alpha", ylabel="E_w[best of its answers]",
                title=f"Alpha ({covered} of {k} reached)")
    sampler = table[table.sweep == "sampler"]
    for i, (name, rows) in enumerate(sampler.groupby("sampler")):
        axes[2].plot(rows.n_weights, rows.advantage_std, ms=3, label=f"{name} weights",
                     **series_style(len(ks) + i))
    axes[2].set(xscale="log", yscale="log", xlabel="weights per group", ylabel="advantage std over draws",
                title="Monte Carlo noise")
    for ax in axes:
        ax.grid(alpha=0.3)
    finish(fig, axes, out, title="How one rollout's VPO score responds (a group of 8 whose other rollouts "
                                 "each reach one objective)", n_seeds={1},
           note="one-hot answers; means and spreads over 200 independent weight draws")
    return fig


def add_arguments(parser: argparse.ArgumentParser) -> None:
    sub = parser.add_subparsers(dest="figure", required=True)
    curve = sub.add_parser("curve", help="pass@k or best@k against k (from summary.csv)")
    curve.add_argument("--metric", required=True, choices=sorted(METRIC_LABELS))
    curve.add_argument("--summary", required=True, help="results/aggregate/summary.csv")
    curve.add_argument("--per-seed", default=None, help="results/aggregate/per_seed.csv (each seed drawn when < 3)")
    diversity = sub.add_parser("diversity", help="pool diversity over training (from training_curves.csv)")
    diversity.add_argument("--training", required=True, help="results/aggregate/training_curves.csv")
    for p in (curve, diversity):
        p.add_argument("--methods", required=True, help="comma-separated methods (legend order)")
        p.add_argument("--tasks", required=True, help="comma-separated tasks (panel order)")
        p.add_argument("--scale", default=None, help="a line naming the preset and scale, shown under the title")
    mechanism = sub.add_parser("mechanism", help="the toy bandit (from `vpo mechanism bandit`'s CSV)")
    mechanism.add_argument("--bandit", required=True, help="results/mechanism/bandit.csv")
    advantage = sub.add_parser("advantage", help="the VPO advantage sweeps (from `vpo mechanism advantage`'s CSV)")
    advantage.add_argument("--sweeps", required=True, help="results/mechanism/advantage.csv")
    evolve = sub.add_parser("evolve", help="the evolutionary search on one task (from evolve_{task}.csv)")
    evolve.add_argument("--task", required=True)
    case = sub.add_parser("case-study", help="the LiveCodeBench case study (summary.csv and evolve_lcb.csv)")
    case.add_argument("--summary", required=True, help="results/aggregate/summary.csv")
    case.add_argument("--per-seed", default=None, help="results/aggregate/per_seed.csv (each seed drawn when < 3)")
    for p in (evolve, case):
        p.add_argument("--curves", required=True, help="results/aggregate/evolve_{task}.csv")
        p.add_argument("--methods", required=True, help="comma-separated methods (legend order)")
        p.add_argument("--scale", default=None, help="a line naming the preset and scale, shown under the title")
    for p in (curve, diversity, mechanism, advantage, evolve, case):
        p.add_argument("--out", required=True, nargs="+", help="figure files (.pdf, .png, .svg): one figure, each format")


def draw(args: argparse.Namespace, out: str):
    """The figure `args` asks for, saved to `out`; returns it."""
    if args.figure == "mechanism":
        return plot_mechanism(read_csv_table(args.bandit), out)
    if args.figure == "advantage":
        return plot_mechanism_advantage(read_csv_table(args.sweeps), out)
    if args.figure in ("evolve", "case-study"):
        from vpo.evolve_figures import plot_case_study, plot_evolve

        curves, methods = read_csv_table(args.curves), args.methods.split(",")
        if args.figure == "evolve":
            return plot_evolve(curves, args.task, methods, out, scale=args.scale)
        per_seed = read_csv_table(args.per_seed) if args.per_seed else None
        return plot_case_study(read_csv_table(args.summary), per_seed, curves, methods, out, scale=args.scale)
    methods, tasks = args.methods.split(","), args.tasks.split(",")
    if args.figure == "curve":
        per_seed = read_csv_table(args.per_seed) if args.per_seed else None
        return plot_curves(read_csv_table(args.summary), args.metric, methods, tasks, out, per_seed=per_seed,
                           scale=args.scale)
    return plot_diversity(read_csv_table(args.training), methods, tasks, out, scale=args.scale)


PNG_DPI = 150  # the HTML report's renderings (browsers show PNG where a PDF frame may stay blank)


def run(args: argparse.Namespace) -> int:
    import matplotlib.pyplot as plt

    first, *others = args.out
    fig = draw(args, first)
    for path in others:  # the same figure in other formats (the workflow's PNG for the report)
        with atomic_file(path) as tmp:
            fig.savefig(tmp, format=Path(path).suffix.lstrip("."), dpi=PNG_DPI)
    plt.close(fig)
    return 0

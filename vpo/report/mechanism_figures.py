"""The mechanism's figures (paper section 1.3; no trained model needed): the toy vector-reward bandit
trained with each estimator, and how one rollout's VPO score responds to coverage, alpha and the
number of weights. Their data come from `vpo mechanism`; `vpo.report.figures.FIGURES` names them.
"""

from __future__ import annotations

import pandas as pd

from vpo.mechanism import ARMS, PARETO
from vpo.report.kit import METHOD_ORDER, finish, method_style, panel_grid, series_style
from vpo.report.labels import method_label

# the bandit's Pareto arms: colours no method of the table has (Paul Tol's muted set), so an arm is never
# read as a method
_ARM_STYLES = [("#332288", "-", "o"), ("#999933", "--", "s"), ("#DDCC77", "-.", "^"), ("#661100", ":", "D")]


def mechanism_bandit(*, bandit: pd.DataFrame, out):
    """The toy bandit of `vpo.mechanism`: one panel of arm masses per method, then E_w[best of m] and
    diversity against step. Lines are means over seeds; each seed is drawn thinly behind them."""
    table = bandit

    methods = [m for m in METHOD_ORDER if m in set(table.method)]
    fig, axes = panel_grid(len(methods) + 2)
    dominated = sorted(set(range(len(ARMS))) - set(PARETO))
    for ax, method in zip(axes, methods):
        rows = table[table.method == method]
        for i, arm in enumerate(sorted(PARETO) + dominated):
            if arm in PARETO:  # each Pareto arm its own look; the dominated ones one thin grey look
                color, ls, marker = _ARM_STYLES[i % len(_ARM_STYLES)]
                style, lw = {"color": color, "ls": ls, "marker": marker}, 1.8
                label = f"arm {arm} {tuple(float(v) for v in ARMS[arm])}, Pareto"
            else:
                style, lw = {"color": "#BBBBBB", "ls": "-", "marker": ""}, 1.0
                label = f"dominated arms ({', '.join(map(str, dominated))})" if arm == dominated[0] else "_nolegend_"
            for _, seed_rows in rows.groupby("seed"):
                ax.plot(seed_rows.step, seed_rows[f"arm_{arm}"], color=style["color"], lw=0.6, alpha=0.35)
            mean = rows.groupby("step")[f"arm_{arm}"].mean()
            ax.plot(mean.index, mean.to_numpy(), lw=lw, markevery=max(1, len(mean) // 8), ms=3, label=label, **style)
        ax.set_title(f"{method_label(method)}: policy mass per arm")
        ax.set_xlabel("step")
        ax.set_ylabel("probability")
        ax.set_ylim(-0.02, 1.02)
        ax.grid(alpha=0.3)
    for ax, column, ylabel in zip(
        axes[len(methods) :],
        ("best_of_m", "diversity"),
        (r"$\mathbb{E}_w$[best of m] of the policy", "reward-space diversity"),
    ):
        for method in methods:
            rows = table[table.method == method]
            mean = rows.groupby("step")[column].mean()
            ax.plot(
                mean.index,
                mean.to_numpy(),
                lw=1.8,
                markevery=max(1, len(mean) // 8),
                ms=3,
                label=method_label(method),
                **method_style(method),
            )
        ax.set_xlabel("step")
        ax.set_ylabel(ylabel)
        ax.grid(alpha=0.3)
    finish(
        fig,
        axes,
        out,
        title="Toy vector-reward bandit trained with each estimator",
        n_seeds={int(table.seed.nunique())},
        note=f"m = 3 arms per rollout for Multi-RLVR and VPO; thick: mean over {table.seed.nunique()} seeds; "
        "thin: each seed",
    )
    return fig


def mechanism_advantage(*, sweeps: pd.DataFrame, out):
    """Three panels from `vpo mechanism advantage`: raw VPO score against objectives reached (per k),
    against alpha, and the advantage's spread over weight draws against the number of weights."""
    table = sweeps
    fig, axes = panel_grid(3)
    coverage = table[table.sweep == "coverage"]
    for i, (k, rows) in enumerate(coverage.groupby("k")):
        axes[0].plot(rows.covered, rows.raw_mean, ms=3, label=f"k = {k}", **series_style(i))
    axes[0].set(
        xlabel="objectives the rollout's answers reach",
        ylabel=r"$\mathbb{E}_w$[best of its answers]",
        title="More of the simplex, higher score",
    )
    alpha = table[table.sweep == "alpha"]
    ks = sorted(coverage.k.unique())
    k, covered = int(alpha.k.iloc[0]), int(alpha.covered.iloc[0])  # the sweep's k gets that k's look
    axes[1].plot(alpha.alpha, alpha.raw_mean, ms=3, label=f"k = {k}", **series_style(ks.index(k) if k in ks else 0))
    axes[1].set(
        xscale="log",
        xlabel="Dirichlet alpha",
        ylabel=r"$\mathbb{E}_w$[best of its answers]",
        title=f"Alpha ({covered} of {k} reached)",
    )
    sampler = table[table.sweep == "sampler"]
    for i, (name, rows) in enumerate(sampler.groupby("sampler")):
        axes[2].plot(rows.n_weights, rows.advantage_std, ms=3, label=f"{name} weights", **series_style(len(ks) + i))
    axes[2].set(
        xscale="log",
        yscale="log",
        xlabel="weights per group",
        ylabel="advantage std over draws",
        title="Monte Carlo noise",
    )
    for ax in axes:
        ax.grid(alpha=0.3)
    finish(
        fig,
        axes,
        out,
        title="How one rollout's VPO score responds",
        n_seeds={1},
        note="a group of 8 whose other rollouts each reach one objective; one-hot answers; means and spreads "
        "over 200 independent weight draws",
    )
    return fig

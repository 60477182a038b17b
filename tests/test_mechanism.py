"""The toy bandit (vpo.mechanism) shows the mechanism for fixed seeds: scalar RL collapses onto the
scalar-best arm, VPO keeps mass on both ends of the Pareto front; the figure draws."""

from __future__ import annotations

import numpy as np
import pytest

from vpo import mechanism as mech


@pytest.fixture(scope="module")
def table():
    return mech.run_all(mech.BanditSettings(steps=200), seeds=[0, 1])


def final_mass(table, method, seed):
    rows = table[(table.method == method) & (table.seed == seed)]
    return rows[rows.step == rows.step.max()][[f"arm_{i}" for i in range(len(mech.ARMS))]].to_numpy()[0]


@pytest.mark.parametrize("seed", [0, 1])
def test_grpo_collapses_and_vpo_keeps_two_pareto_arms(table, seed):
    grpo, vpo = final_mass(table, "grpo", seed), final_mass(table, "vpo", seed)
    assert grpo.max() > 0.9 and int(grpo.argmax()) == 2  # the mean-scalar optimum
    assert sum(vpo[a] >= 0.1 for a in mech.PARETO) >= 2
    assert final_mass(table, "multi_rlvr", seed).max() > 0.9


def test_policy_measures_by_hand():
    uniform = np.full(len(mech.ARMS), 1 / len(mech.ARMS))
    distance = sum(abs(a - b).sum() for a in mech.ARMS for b in mech.ARMS) / len(mech.ARMS) ** 2
    assert mech.diversity(uniform) == pytest.approx(distance)
    only_front = np.array([0.5, 0.5, 0, 0, 0, 0])
    assert mech.diversity(only_front) == pytest.approx(1.0)  # half the pairs are 2 apart
    rng = np.random.default_rng(0)
    sets, weights = rng.random((4000, 3)), rng.dirichlet([1, 1], size=400)
    # only arm 2 (0.6, 0.6): every weighting scores 0.6
    assert mech.expected_best_of_m(np.eye(len(mech.ARMS))[2], 3, sets, weights) == pytest.approx(0.6)
    # arms 0 and 1 half each: E[max(u, 1 - u)] = 3/4 when both are drawn, 1/2 otherwise -> 3/4 * 3/4 + 1/2 * 1/4
    assert mech.expected_best_of_m(only_front, 3, sets, weights) == pytest.approx(0.75 * 0.75 + 0.5 * 0.25, abs=0.01)


def test_figure_draws(table, tmp_path):
    import matplotlib.pyplot as plt

    from vpo.report.mechanism_figures import mechanism_bandit

    plt.close(mechanism_bandit(bandit=table, out=tmp_path / "mechanism_bandit.png"))
    assert (tmp_path / "mechanism_bandit.png").stat().st_size > 10_000


def test_advantage_sweeps_by_hand():
    table = mech.advantage_sweeps(seed=0, repeats=40)
    cov = table[table.sweep == "coverage"].set_index(["k", "covered"])
    # E_w[w_1] = 1/k for one objective; E[max(u, 1 - u)] = 3/4 for both of k = 2
    for k in (2, 3, 4, 5):
        assert cov.loc[(k, 1), "raw_mean"] == pytest.approx(1 / k, abs=0.01)
    assert cov.loc[(2, 2), "raw_mean"] == pytest.approx(0.75, abs=0.01)
    assert all(np.diff(cov.loc[5, "raw_mean"].to_numpy()) > 0)  # each objective reached adds score
    alpha = table[table.sweep == "alpha"].sort_values("alpha")
    assert alpha.raw_mean.iloc[0] > alpha.raw_mean.iloc[-1]  # concentrated weights (small alpha) reward coverage more
    spread = table[(table.sweep == "sampler") & (table.n_weights == 64)].set_index("sampler").advantage_std
    assert spread["sobol"] < spread["naive"] / 3

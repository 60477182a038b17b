"""Advantage estimators against brute-force loop references and hand-derived numbers."""

from __future__ import annotations

import hashlib
import math
from itertools import combinations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from vpo.advantage import (
    ESTIMATORS,
    advantage_draw_spread,
    gdpo_advantage,
    get_estimator,
    grpo_advantage,
    max_at_k_advantage,
    max_at_k_subset,
    maxrl_advantage,
    register_estimator,
    vpo_advantage,
    vpo_single_advantage,
)
from vpo.method_advantage import advantage_for_method, setting_keys
from vpo.methods import METHODS, get_method
from vpo.metrics import advantage_summary
from vpo.vpo_scores import vpo_raw_scores
from vpo.reward import weighted_scalar
from vpo.weights import draw_group_weights


# --------------------------------------------------------------------------------------------
# Brute-force VPO reference: explicit loops over groups, rollouts, weights and rows.


def vpo_reference(sub_scores, group_ids, group_weights, eps=1e-6):
    order = []
    for g in group_ids:
        if g not in order:
            order.append(g)
    raw = [0.0] * len(sub_scores)
    for gi, g in enumerate(order):
        w_set = group_weights[gi]
        for j, (s, gid) in enumerate(zip(sub_scores, group_ids)):
            if gid != g or s is None or len(s) == 0:
                continue
            total = 0.0
            for w in w_set:
                best = -math.inf
                for row in s:
                    best = max(best, sum(float(a) * float(b) for a, b in zip(row, w)))
                total += best
            raw[j] = total / len(w_set)
    adv = [0.0] * len(sub_scores)
    for g in order:
        members = [j for j, gid in enumerate(group_ids) if gid == g]
        vals = [raw[j] for j in members]
        mean = sum(vals) / len(vals)
        std = math.sqrt(sum((v - mean) ** 2 for v in vals) / len(vals))
        for j in members:
            adv[j] = 0.0 if std < eps else (raw[j] - mean) / (std + eps)
    return np.array(adv), raw


def ragged_batch(rng, n_groups=6, with_empty=True):
    """Groups of varying size, k per group, m per rollout; some rollouts empty."""
    subs, ids, ks = [], [], []
    for g in range(n_groups):
        k = int(rng.integers(1, 6))
        ks.append(k)
        for _ in range(int(rng.integers(1, 6))):
            m = int(rng.integers(0 if with_empty else 1, 5))
            subs.append(
                None if m == 0 and rng.random() < 0.5 else rng.random((m, k)).round(2) if m else np.zeros((0, k))
            )
            ids.append(f"p{g}")
    perm = rng.permutation(len(subs))  # interleave groups in the batch
    return [subs[i] for i in perm], [ids[i] for i in perm]


def group_ks_in_order(subs, ids):
    order, ks = [], {}
    for s, g in zip(subs, ids):
        if g not in order:
            order.append(g)
        if s is not None and len(s):
            ks[g] = np.asarray(s).shape[1]
    return [ks.get(g, -1) for g in order]


@pytest.mark.parametrize("seed", range(8))
@pytest.mark.parametrize("sampler", ["naive", "sobol"])
def test_vpo_matches_brute_force_on_ragged_batches(seed, sampler):
    rng = np.random.default_rng(seed)
    subs, ids = ragged_batch(rng)
    adv, diag = vpo_advantage(subs, ids, n_weights=7, sampler=sampler, rng=123)
    weights = draw_group_weights(group_ks_in_order(subs, ids), 7, sampler=sampler, rng=123)
    ref, raw = vpo_reference(subs, ids, weights)
    np.testing.assert_allclose(adv, ref, rtol=1e-9, atol=1e-9)
    # the authors' definition: the mean over prompt groups of the group's mean raw score
    groups = {g: [r for r, h in zip(raw, ids) if h == g] for g in ids}
    assert diag["vpo/own_pool_expected_max_mean"] == pytest.approx(np.mean([np.mean(v) for v in groups.values()]))
    assert diag["vpo/sampler_code"] == (0.0 if sampler == "naive" else 1.0)


def test_vpo_explicit_weights_and_pool_diagnostics():
    # Group a: k = 2, weights (1,0) and (0,1). Rollout 0 rows (1,0),(0,1): max 1 under both -> raw 1.
    # Rollout 1 row (0.5, 0.5): raw 0.5. Rollout 2 empty: raw 0.
    subs = [[[1, 0], [0, 1]], [[0.5, 0.5]], None, [[0.2, 0.4, 0.6]], [[0.2, 0.4, 0.6]]]
    ids = ["a", "a", "a", "b", "b"]
    w = {"a": np.array([[1.0, 0.0], [0.0, 1.0]]), "b": np.array([[1 / 3, 1 / 3, 1 / 3]])}
    adv, diag = vpo_advantage(subs, ids, weights=w)
    raw = np.array([1.0, 0.5, 0.0])
    std = raw.std()
    np.testing.assert_allclose(adv[:3], (raw - 0.5) / (std + 1e-6))
    assert adv[3] == 0.0 and adv[4] == 0.0  # identical rollouts: zero std -> zero advantage
    # per group as the authors log it: group a pools 2 + 1 + 0 answers, group b 1 + 1
    assert diag["vpo/pool_size_mean"] == pytest.approx((3 + 2) / 2)
    assert diag["vpo/rows_per_rollout_mean"] == pytest.approx((2 + 1 + 0 + 1 + 1) / 5)
    assert diag["vpo/own_pool_expected_max_mean"] == pytest.approx((np.mean(raw) + 0.4) / 2)
    assert diag["vpo/zero_std_group_frac"] == 0.5
    # pool best: group a -> 1 under each weight; group b -> 0.4
    assert diag["vpo/pool_expected_best_mean"] == pytest.approx((1.0 + 0.4) / 2)
    assert diag["vpo/group_std_mean"] == pytest.approx(std / 2)


def test_vpo_json_text_and_vectors_are_read():
    adv_text, _ = vpo_advantage(["[[1, 0]]", "[[0, 1]]", ""], ["g", "g", "g"], rng=0)
    adv_list, _ = vpo_advantage([[[1, 0]], [0, 1], None], ["g", "g", "g"], rng=0)
    np.testing.assert_array_equal(adv_text, adv_list)


def test_vpo_rejects_mixed_k_and_nan():
    with pytest.raises(ValueError, match="^group 'g' mixes reward vectors of 2 and 3"):
        vpo_advantage([[[1, 0]], [[1, 0, 0]]], ["g", "g"])
    with pytest.raises(ValueError, match="^sub_scores contain NaN or inf; the reward function must return finite"):
        vpo_advantage([[[np.nan, 0]], [[1, 0]]], ["g", "g"])
    with pytest.raises(ValueError, match="group_ids"):
        vpo_advantage([[[1, 0]]], ["g", "h"])


def test_vpo_rejects_weights_it_cannot_use_naming_the_groups_and_shapes():
    subs, ids = [[[1, 0]], [[0, 1]], [[1, 1, 0]]], ["a", "a", "b"]
    good = {"a": np.full((4, 2), 0.5), "b": np.full((4, 3), 1 / 3)}
    with pytest.raises(ValueError, match=r"weights has no entry for groups \['b'\]; give one \(W, k\) array"):
        vpo_raw_scores(subs, ids, weights={"a": good["a"]})
    many = [[[1.0, 0.0]]] * 7
    with pytest.raises(ValueError, match=r"no entry for groups \[1, 2, 3, 4, 5\];"):  # the first five named
        vpo_raw_scores(many, list(range(7)), weights={0: good["a"]})
    with pytest.raises(ValueError, match=r"weights of groups with k = 2 must be \(W, 2\) arrays of one W, got \(4,\)"):
        vpo_raw_scores(subs, ids, weights={**good, "a": np.full(4, 0.5)})
    with pytest.raises(ValueError, match=r"k = 3 must be \(W, 3\) arrays of one W, got \(4, 2\)"):
        vpo_raw_scores(subs, ids, weights={**good, "b": np.full((4, 2), 0.5)})


def test_vpo_raw_scores_defaults_are_100_naive_dirichlet_1_weights_and_take_given_weights():
    subs, ids = ragged_batch(np.random.default_rng(5), with_empty=False)
    np.testing.assert_array_equal(
        vpo_raw_scores(subs, ids, rng=3), vpo_raw_scores(subs, ids, n_weights=100, alpha=1.0, sampler="naive", rng=3)
    )
    # one weight per group that puts all mass on the first objective: the raw score is the best first objective
    first = {g: np.eye(np.asarray(s).shape[1])[:1] for s, g in zip(subs, ids)}
    expected = [max(row[0] for row in np.asarray(s)) for s in subs]
    np.testing.assert_allclose(vpo_raw_scores(subs, ids, weights=first), expected)
    # a one-objective group takes its given weight too
    np.testing.assert_allclose(
        vpo_raw_scores([[[0.3]], [[0.9]]], ["a", "a"], weights={"a": np.full((2, 1), 0.5)}), [0.15, 0.45]
    )


@settings(max_examples=40, deadline=None)
@given(seed=st.integers(0, 10_000), shift=st.floats(-5, 5), scale=st.floats(0.1, 10))
def test_vpo_invariants(seed, shift, scale):
    rng = np.random.default_rng(seed)
    n, m, k = 6, 3, 4
    subs = [rng.random((m, k)) for _ in range(n)]
    ids = ["g"] * n
    base, _ = vpo_advantage(subs, ids, rng=seed)
    # Permuting rollouts permutes advantages (weights are per group, drawn from the same rng state).
    perm = rng.permutation(n)
    permuted, _ = vpo_advantage([subs[i] for i in perm], ids, rng=seed)
    np.testing.assert_allclose(permuted, base[perm], atol=1e-9)
    # Affine maps of every reward of the group (c > 0) leave advantages unchanged (weights sum to 1);
    # exactly so only when eps, added to the std, is negligible, hence eps = 1e-12 here.
    tight, _ = vpo_advantage(subs, ids, rng=seed, eps=1e-12)
    moved, _ = vpo_advantage([s * scale + shift for s in subs], ids, rng=seed, eps=1e-12)
    np.testing.assert_allclose(moved, tight, atol=1e-8)
    # An all-equal group gives exact zeros, never NaN.
    flat, diag = vpo_advantage([np.full((m, k), shift)] * n, ids, rng=seed)
    assert np.all(flat == 0.0) and diag["vpo/zero_std_group_frac"] == 1.0


def test_vpo_identical_rollouts_share_raw_scores():
    rng = np.random.default_rng(5)
    same = rng.random((3, 4))
    subs = [same, rng.random((3, 4)), same.copy(), rng.random((2, 4))]
    adv, _ = vpo_advantage(subs, ["g"] * 4, rng=9, sampler="sobol")
    assert adv[0] == pytest.approx(adv[2], abs=1e-12)
    assert adv[0] != pytest.approx(adv[1])


def test_vpo_k2_alpha1_matches_closed_form():
    # r = (a, b): w = (u, 1-u), u ~ U[0, 1]. Two rows (1, 0) and (0, 1): E[max(u, 1-u)] = 3/4.
    # One row (0.2, 0.6): E[0.2u + 0.6(1-u)] = 0.4.  So raw scores are 0.75 and 0.4.
    subs = [[[1.0, 0.0], [0.0, 1.0]], [[0.2, 0.6]]]
    ids = ["g", "g"]
    for sampler, tol, reps in (("naive", 0.03, 200), ("sobol", 0.003, 200)):
        draws = []
        for r in range(reps):
            _, diag = vpo_advantage(subs, ids, n_weights=100, sampler=sampler, rng=r)
            draws.append(diag["vpo/own_pool_expected_max_mean"])
        draws = np.array(draws)
        # mean of the two raw scores is (0.75 + 0.4) / 2 = 0.575 in expectation
        assert abs(draws.mean() - 0.575) < tol / 3
        assert np.all(np.abs(draws - 0.575) < tol * 2), (sampler, np.abs(draws - 0.575).max())
    # The max part alone: (1/W) sum max(u, 1-u) has MC error sd sqrt(Var[max(u, 1-u)] / W), and
    # max(u, 1-u) is uniform on [1/2, 1], so Var = 1/48. Naive weights match that error; Sobol
    # weights must do much better.
    sd = math.sqrt(1 / 48 / 100)
    for sampler, lo, hi in (("naive", 0.6 * sd, 1.4 * sd), ("sobol", 0.0, 0.2 * sd)):
        errors = []
        for r in range(200):
            w = draw_group_weights([2], 100, sampler=sampler, rng=r)[0]
            errors.append(np.mean(np.maximum(w[:, 0], w[:, 1])) - 0.75)
        rms = math.sqrt(np.mean(np.square(errors)))
        assert lo <= rms <= hi, (sampler, rms, sd)


def test_vpo_single_is_vpo_on_one_row():
    subs = [[0.1, 0.9], [0.7, 0.3], [0.5, 0.5]]
    a, _ = vpo_single_advantage(subs, [1, 1, 1], rng=3)
    b, _ = vpo_advantage([[s] for s in subs], [1, 1, 1], rng=3)
    np.testing.assert_array_equal(a, b)
    with pytest.raises(ValueError, match="one answer per rollout"):
        vpo_single_advantage([[[1, 0], [0, 1]]], [1])


# --------------------------------------------------------------------------------------------
# Scalar estimators: hand-derived numbers


def test_grpo_hand_numbers():
    # group a: [1, 3] mean 2, unbiased std sqrt(2); group b: singleton 5 -> mean 0, std 1.
    adv = grpo_advantage([1.0, 5.0, 3.0], ["a", "b", "a"])
    s2 = math.sqrt(2)
    np.testing.assert_allclose(adv, [-1 / (s2 + 1e-6), 5 / (1 + 1e-6), 1 / (s2 + 1e-6)])
    np.testing.assert_allclose(grpo_advantage([1.0, 5.0, 3.0], ["a", "b", "a"], norm_by_std=False), [-1, 5, 1])
    # veRL convention check: unbiased std of [0, 1, 1, 1] = 0.5
    np.testing.assert_allclose(
        grpo_advantage([0, 1, 1, 1], [0] * 4), np.array([-0.75, 0.25, 0.25, 0.25]) / (0.5 + 1e-6)
    )


def test_maxrl_hand_numbers():
    # group: [0, 1, 1, 0] mean 0.5 -> (r - 0.5) / 0.5 = [-1, 1, 1, -1]; all-zero group -> 0.
    adv = maxrl_advantage([0, 1, 1, 0, 0, 0], [0, 0, 0, 0, 1, 1])
    np.testing.assert_allclose(adv, np.array([-0.5, 0.5, 0.5, -0.5, 0, 0]) / np.array([0.5 + 1e-6] * 4 + [1, 1]))
    assert adv[4] == 0.0 and adv[5] == 0.0


def test_gdpo_hand_numbers():
    # Two groups of 2, two channels. Each channel z-score in a group of two values a < b is
    # (-1/sqrt2, +1/sqrt2) * |b-a| / (|b-a|/sqrt2 + eps) ~ (-0.7071, 0.7071); equal values give 0.
    ch = [[1, 0], [0, 0], [1, 1], [1, 0]]
    ids = ["x", "x", "y", "y"]
    z = 1 / math.sqrt(2)
    # x: channel 0 moves (+z, -z), channel 1 is flat; y: channel 0 flat, channel 1 moves.
    summed = np.array([z, -z, z, -z]) / (1 + 1e-6 * math.sqrt(2))
    expected = (summed - summed.mean()) / math.sqrt(summed.var(ddof=1) + 1e-8)
    np.testing.assert_allclose(gdpo_advantage(ch, ids), expected, rtol=1e-6)
    # weights scale channels before summing: weight 0 on channel 1 leaves only channel 0.
    only0 = np.array([z, -z, 0, 0])
    exp0 = (only0 - only0.mean()) / math.sqrt(only0.var(ddof=1) + 1e-8)
    np.testing.assert_allclose(gdpo_advantage(ch, ids, channel_weights=[1, 0]), exp0, rtol=1e-5)


def max_at_k_reference(r, k):
    """d/dlogpi of the unbiased estimator: each rollout's share of E[max of a k-subset], by enumeration."""
    n = len(r)
    share = np.zeros(n)
    subsets = list(combinations(range(n), k))
    # A_i = sum over subsets containing i of the subset's max, divided by C(n, k) ... minus nothing:
    # the closed form counts for rank i: subsets where i is the max (C(i-1, k-1) r_i) plus subsets
    # containing i whose max is a larger j (C(j-2, k-2) r_j).
    for sub in subsets:
        best = max(r[j] for j in sub)
        for i in sub:
            share[i] += best
    return share / math.comb(n, k)


@pytest.mark.parametrize("k", [1, 2, 3, 5])
def test_max_at_k_matches_subset_enumeration(k):
    rng = np.random.default_rng(k)
    r = rng.random(6).round(3)
    raw = max_at_k_reference(list(r), k)
    expected = (raw - raw.mean()) / (raw.std(ddof=1) + 1e-6)
    np.testing.assert_allclose(max_at_k_advantage(r, [0] * 6, k=k), expected, atol=1e-9)


def test_max_at_k_hand_numbers_and_default_k():
    # n = 4, k = 2 (default max(2, 4 // 2)). Sorted r = [0.1, 0.3, 0.5, 0.9], C(4,2) = 6:
    # A_1 = (0*0.1 + 0.3 + 0.5 + 0.9) / 6 = 1.7/6; A_2 = (1*0.3 + 0.5 + 0.9)/6 = 1.7/6;
    # A_3 = (2*0.5 + 0.9)/6 = 1.9/6; A_4 = 3*0.9/6 = 2.7/6.
    r = [0.1, 0.5, 0.3, 0.9]
    raw = np.array([1.7, 1.9, 1.7, 2.7]) / 6
    expected = (raw - raw.mean()) / (raw.std(ddof=1) + 1e-6)
    np.testing.assert_allclose(max_at_k_advantage(r, ["g"] * 4), expected, atol=1e-9)
    with pytest.raises(ValueError, match="1 <= k <= n - 1"):
        max_at_k_advantage(r, ["g"] * 4, k=4)


def test_max_at_k_mixed_group_sizes_and_ties():
    r = np.array([0.2, 0.2, 0.7, 0.4, 0.4, 0.4])
    ids = ["a", "b", "a", "b", "a", "b"]
    adv = max_at_k_advantage(r, ids, k=2)
    a_raw = max_at_k_reference([0.2, 0.7, 0.4], 2)
    np.testing.assert_allclose(adv[[0, 2, 4]], (a_raw - a_raw.mean()) / (a_raw.std(ddof=1) + 1e-6), atol=1e-9)
    np.testing.assert_allclose(adv[[1, 3, 5]], 0.0, atol=1e-8)  # tied group: equal shares


def test_scalarisations():
    assert weighted_scalar([1, 0, 0.5], [0.2, 0.3, 0.5]) == pytest.approx(0.45)


# --------------------------------------------------------------------------------------------
# Registry and the method-facing entry point


def test_registry_contents_and_refusal():
    assert {"vpo", "vpo_single", "grpo", "maxrl", "gdpo", "max_at_k"} <= set(ESTIMATORS)
    assert get_estimator("grpo") is grpo_advantage
    assert register_estimator("grpo")(grpo_advantage) is grpo_advantage  # same function: no-op
    with pytest.raises(ValueError, match="already registered"):
        register_estimator("grpo")(lambda *a, **k: None)
    with pytest.raises(ValueError, match="registered: vpo"):
        get_estimator("grpo_typo")
    for method in METHODS.values():
        assert method.estimator in ESTIMATORS


def test_advantage_for_method_dispatch():
    ids = ["a", "a", "b", "b"]
    scores = [0.2, 0.8, 0.5, 0.5]
    subs = [[[1, 0]], [[0, 1]], [[1, 1]], [[0, 0]]]
    adv, diag = advantage_for_method("grpo", scores=scores, sub_scores=None, group_ids=ids, settings={"m": 3})
    np.testing.assert_allclose(adv, grpo_advantage(scores, ids))
    assert diag == {}  # GRPO's estimator has no diagnostics of its own
    adv, _ = advantage_for_method("multi_rlvr", scores=scores, sub_scores=subs, group_ids=ids)
    np.testing.assert_allclose(adv, grpo_advantage(scores, ids))
    adv, _ = advantage_for_method(
        "max_at_k", scores=[0.1, 0.5, 0.3, 0.9], sub_scores=None, group_ids=[0] * 4, settings={"k": 3}
    )
    np.testing.assert_allclose(adv, max_at_k_advantage([0.1, 0.5, 0.3, 0.9], [0] * 4, k=3))
    adv, _ = advantage_for_method("maxrl", scores=scores, sub_scores=None, group_ids=ids)
    np.testing.assert_allclose(adv, maxrl_advantage(scores, ids))
    adv, _ = advantage_for_method("gdpo", scores=None, sub_scores=subs, group_ids=ids)
    np.testing.assert_allclose(adv, gdpo_advantage(np.array([[1, 0], [0, 1], [1, 1], [0, 0]]), ids))
    adv, diag = advantage_for_method(
        "vpo",
        scores=None,
        sub_scores=subs,
        group_ids=ids,
        settings={"alpha": 1.0, "sampler": "sobol", "n_weights": 16, "m": 3},
        rng=4,
    )
    ref, _ = vpo_advantage(subs, ids, alpha=1.0, sampler="sobol", n_weights=16, rng=4)
    np.testing.assert_allclose(adv, ref)
    assert diag["vpo/sampler_code"] == 1.0
    adv, _ = advantage_for_method(
        "vpo_single", scores=None, sub_scores=[[1, 0], [0, 1], [1, 1], [0, 0]], group_ids=ids, rng=4
    )
    assert adv.shape == (4,)
    with pytest.raises(ValueError, match="needs sub_scores"):
        advantage_for_method("vpo", scores=scores, sub_scores=None, group_ids=ids)
    with pytest.raises(ValueError, match="unknown method"):
        advantage_for_method("vpoo", scores=scores, sub_scores=None, group_ids=ids)


def test_group_ids_as_numpy_object_array():
    ids = np.array(["u1", "u2", "u1", "u2"], dtype=object)
    np.testing.assert_allclose(grpo_advantage([1, 2, 3, 5], ids), grpo_advantage([1, 2, 3, 5], list(ids)))


def test_vpo_raw_scores_are_the_unnormalised_scores():
    rng = np.random.default_rng(3)
    subs, ids = ragged_batch(rng)
    raw = vpo_raw_scores(subs, ids, n_weights=9, sampler="sobol", rng=8)
    weights = draw_group_weights(group_ks_in_order(subs, ids), 9, sampler="sobol", rng=8)
    np.testing.assert_allclose(raw, vpo_reference(subs, ids, weights)[1], rtol=1e-12, atol=1e-12)


def test_vpo_single_hand_numbers():
    # weights (1, 0) and (0.5, 0.5): raw (0.2, 0.6) = (0.2 + 0.4) / 2 = 0.3; raw (0.6, 0.2) = (0.6 + 0.4) / 2 = 0.5.
    # population std 0.1 -> advantages -0.1 / (0.1 + eps) and +0.1 / (0.1 + eps).
    w = {"g": np.array([[1.0, 0.0], [0.5, 0.5]])}
    adv, _ = vpo_single_advantage([[0.2, 0.6], [0.6, 0.2]], ["g", "g"], weights=w)
    np.testing.assert_allclose(adv, [-0.1 / (0.1 + 1e-6), 0.1 / (0.1 + 1e-6)])


def test_vpo_all_empty_group_and_k1_group():
    adv, diag = vpo_advantage([None, "", [[0.3]], [[0.9]], [[0.3]]], ["e", "e", "k1", "k1", "k1"], rng=0)
    assert adv[0] == 0.0 and adv[1] == 0.0
    # k = 1: w = 1, raw = the single channel: [0.3, 0.9, 0.3], mean 0.5, population std sqrt(0.08)
    std = math.sqrt(((0.2**2) * 2 + 0.4**2) / 3)
    np.testing.assert_allclose(adv[2:], np.array([-0.2, 0.4, -0.2]) / (std + 1e-6))
    assert diag["vpo/zero_std_group_frac"] == 0.5


# ---- vpo/advantage_draw_std: the advantage's Monte Carlo noise over weight draws ---------------
def _batch(seed=0, groups=8, size=8, m=3, k=4):
    rng = np.random.default_rng(seed)
    return [rng.random((m, k)).round(1) for _ in range(groups * size)], np.repeat(np.arange(groups), size)


def test_draw_spread_is_zero_when_weights_cannot_matter():
    # k = 1: every weight is [1], so each draw gives the same advantages
    subs = [np.array([[0.2], [0.9]]), np.array([[0.5]]), np.array([[0.1]]), np.array([[0.7], [0.3]])]
    _, diag = vpo_advantage(subs, [0, 0, 1, 1], n_weights=10, rng=3)
    assert diag["vpo/advantage_draw_std"] == 0.0


def test_draw_spread_shrinks_like_one_over_root_w_and_sobol_is_smaller():
    subs, gid = _batch()
    spread = {
        (s, w): np.mean(
            [vpo_advantage(subs, gid, n_weights=w, sampler=s, rng=r)[1]["vpo/advantage_draw_std"] for r in range(5)]
        )
        for s in ("naive", "sobol")
        for w in (25, 400)
    }
    # i.i.d. Monte Carlo: 16x the weights, a quarter of the spread (ratio 4; over 30 seeds one seed's ratio
    # was 3.3 to 4.7). An unchanged spread gives 1, a spread like 1/W 16, like W^-1/4 2.
    assert 3.2 < spread["naive", 25] / spread["naive", 400] < 4.8
    assert spread["sobol", 25] < spread["naive", 25] and spread["sobol", 400] < spread["naive", 400]


def test_draw_spread_does_not_advance_the_training_draw():
    subs, gid = _batch(seed=2)
    used, fresh = np.random.default_rng(5), np.random.default_rng(5)
    raw = vpo_raw_scores(subs, gid, n_weights=50, rng=fresh)
    _, diag = vpo_advantage(subs, gid, n_weights=50, rng=used)
    assert used.random() == fresh.random()  # the diagnostic drew from its own generator
    again = advantage_draw_spread(subs, gid, raw, n_weights=50, alpha=1.0, sampler="naive")
    assert again == diag["vpo/advantage_draw_std"] > 0  # seeded by the raw scores: reproducible


def test_given_weights_report_no_draw_spread():
    subs, gid = _batch(groups=2, size=3, k=2)
    weights = {g: np.full((4, 2), 0.5) for g in (0, 1)}
    _, diag = vpo_advantage(subs, gid, weights=weights)
    assert "vpo/advantage_draw_std" not in diag


def test_draw_spread_equals_its_definition():
    # the advantages of 4 redraws (seeded by the raw scores' digest), their ddof-1 std per rollout, averaged
    subs, gid = _batch(seed=4, groups=3, size=4, k=3)
    raw = vpo_raw_scores(subs, gid, n_weights=20, rng=0)
    seed = int.from_bytes(
        hashlib.blake2b(np.asarray(raw, dtype=np.float64).tobytes(), digest_size=8).digest(), "little"
    )
    rng = np.random.default_rng(seed)
    draws = [
        vpo_reference(subs, list(gid), draw_group_weights(group_ks_in_order(subs, gid), 20, rng=rng))[0]
        for _ in range(4)
    ]
    expected = np.mean([np.std([d[j] for d in draws], ddof=1) for j in range(len(subs))])
    got = advantage_draw_spread(subs, gid, raw, n_weights=20, alpha=1.0, sampler="naive")
    assert got == pytest.approx(expected, rel=1e-9)
    assert advantage_draw_spread([], [], np.zeros(0), n_weights=20, alpha=1.0, sampler="naive") == 0.0


def test_a_group_whose_std_is_exactly_eps_is_still_normalised():
    # raw scores 0 and 2e-6: population std 1e-6 == eps, not below it: (raw - mean) / (2 eps) = -0.5, 0.5
    adv, _ = vpo_advantage([[[0.0]], [[2e-6]]], [0, 0], n_weights=3, rng=0)
    np.testing.assert_allclose(adv, [-0.5, 0.5])


def test_score_errors_name_the_rollouts_and_the_fix():
    with pytest.raises(ValueError, match=r"^scores must be one number per rollout, shape \(B,\); got shape \(2, 1\)$"):
        grpo_advantage([[1.0], [2.0]], [0, 0])
    with pytest.raises(ValueError, match=r"^scores has 3 entries but group_ids has 2; pass one id per rollout$"):
        maxrl_advantage([1.0, 2.0, 3.0], [0, 0])
    with pytest.raises(ValueError, match=r"^scores contains NaN or inf at rollouts \[1, 3\]$"):
        grpo_advantage([0.5, None, 0.2, float("inf")], [0, 0, 1, 1])  # None: a missing score
    many = [float("nan")] * 12
    with pytest.raises(ValueError, match=r"at rollouts \[0, 1, 2, 3, 4, 5, 6, 7, 8, 9\]$"):
        max_at_k_advantage(many, [0] * 12, k=2)


def test_gdpo_through_the_method_table_reads_channels_settings_and_lengths():
    ids = ["a", "a", "a", "b", "b", "b"]
    subs = [[[1, 0]], [[0, 1]], [[1, 1]], [[0, 0]], "[[1, 0]]", [0.5]]  # a shorter vector pads with 0
    channels = np.array([[1, 0], [0, 1], [1, 1], [0, 0], [1, 0], [0.5, 0]])
    lengths = [3, 1, 7, 2, 5, 4]
    adv, _ = advantage_for_method(
        "gdpo",
        scores=None,
        sub_scores=subs,
        group_ids=ids,
        settings={"channel_weights": [2.0, 1.0]},
        response_lengths=lengths,
    )
    np.testing.assert_allclose(adv, gdpo_advantage(channels, ids, channel_weights=[2.0, 1.0], response_lengths=lengths))
    assert not np.allclose(adv, gdpo_advantage(channels, ids, channel_weights=[2.0, 1.0]))
    for rows, message in (
        ([[[1, 0]], [[1, 0], [0, 1], [1, 1]], [[1, 0], [0, 1]]], "rollout 1 has 3"),
        ([[[1, 0]], [[1, 0], [0, 1]]], "rollout 1 has 2"),
    ):
        with pytest.raises(ValueError, match=f"^gdpo expects one answer per rollout, {message}$"):
            advantage_for_method("gdpo", scores=None, sub_scores=rows, group_ids=[0] * len(rows))


def test_batch_diagnostics_by_hand():
    # GRPO on groups a = (1, 0), b = (0.5, 0.5) and c = (0.3): a's unbiased std is 1/sqrt(2), b does not
    # move, c alone keeps its score (mean 0, std 1)
    ids = ["a", "a", "b", "b", "c"]
    adv, _ = advantage_for_method("grpo", scores=[1.0, 0.0, 0.5, 0.5, 0.3], sub_scores=None, group_ids=ids)
    half, alone = 0.5 / (math.sqrt(0.5) + 1e-6), 0.3 / (1 + 1e-6)
    np.testing.assert_allclose(adv, [half, -half, 0.0, 0.0, alone])
    mean = alone / 5
    std = math.sqrt((2 * half**2 + alone**2) / 5 - mean**2)
    # the metrics line's summary of them (vpo.metrics.advantage_summary; its edge cases: tests/test_metrics.py)
    assert advantage_summary(adv, ids) == pytest.approx(
        {
            "advantage/mean": mean,
            "advantage/std": std,
            "advantage/abs_max": half,
            "advantage/zero_group_frac": 1 / 3,
            "advantage/max": half,
            "advantage/min": -half,
            "advantage/zero_frac": 2 / 5,
        }
    )
    with pytest.raises(ValueError, match=r"^method 'grpo' needs scores \(one scalar per rollout\)$"):
        advantage_for_method("grpo", scores=None, sub_scores=[[[1.0]]], group_ids=[0])


def test_registry_message_lists_the_names():
    with pytest.raises(ValueError, match=r"registered: vpo, vpo_single, grpo, maxrl, gdpo, max_at_k"):
        get_estimator("nope")


def test_max_at_k_default_subset_and_setting_keys():
    assert [max_at_k_subset(n) for n in (2, 3, 4, 5, 9, 16)] == [2, 2, 2, 2, 4, 8]
    assert isinstance(max_at_k_subset(9), int) and max_at_k_subset(9, 3) == 3
    assert setting_keys("grpo") == {"norm_by_std", "eps"}
    assert setting_keys("goal_cond") == {"norm_by_std", "eps", "alpha"}  # weighted rows: alpha draws their weights
    assert setting_keys(get_method("vpo")) == {"n_weights", "alpha", "sampler", "eps"}
    assert setting_keys("max_at_k") == {"k", "eps"}


# ---- keyed methods (set RL) through advantage_for_method ------------------------------------------
@pytest.mark.parametrize("method, estimator", [("poly_epo", "set_rl"), ("grpo_div", "grpo_div")])
def test_a_keyed_method_hands_its_estimator_the_keys_and_the_correct_flags(method, estimator):
    """What a keyed method reads: scores, strategy keys and whether each rollout solved the problem (the
    diagnostics count solving rollouts by the flags: a partial score is not a solve)."""
    from vpo.advantage import get_estimator
    from vpo.method_advantage import advantage_for_method, setting_keys

    scores, groups = [0.5, 0.5, 0.0, 0.5, 1.0, 0.0], ["g"] * 6
    keys, correct = ["a", "b", "a", "c", "b", "c"], [True, False, False, True, True, False]
    call = dict(scores=scores, sub_scores=None, group_ids=groups, strategy_keys=keys)
    adv, diag = advantage_for_method(method, **call, correct=correct)
    direct, direct_diag = get_estimator(estimator)(scores, groups, strategy_keys=keys, correct=correct)
    np.testing.assert_allclose(adv, direct)
    assert {key: diag[key] for key in direct_diag} == direct_diag
    _, by_sign = advantage_for_method(method, **call)
    assert {key: by_sign[key] for key in direct_diag} != direct_diag  # the flags were read, not the signs
    assert "judge" in setting_keys(method) and "alpha" not in setting_keys(method)
    with pytest.raises(ValueError, match=f"method '{method}' needs scores and strategy_keys"):
        advantage_for_method(method, scores=scores, sub_scores=None, group_ids=groups)

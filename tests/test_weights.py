"""Dirichlet weight samplers: simplex, marginals (Beta), reproducibility, variance of Sobol vs naive."""

from __future__ import annotations

import numpy as np
import pytest
from scipy import stats

from vpo.weights import canonical_sampler, draw_bucket_weights, draw_group_weights, sample_weight_sets, sample_weights


@pytest.mark.parametrize("sampler", ["naive", "sobol"])
@pytest.mark.parametrize("alpha", [0.05, 0.5, 1.0, 3.0])
@pytest.mark.parametrize("k", [2, 4, 16])
def test_weights_lie_on_the_simplex(sampler, alpha, k):
    w = sample_weight_sets(k, 5, 100, alpha=alpha, sampler=sampler, rng=1)
    assert w.shape == (5, 100, k)
    assert np.all(np.isfinite(w)) and np.all(w >= 0)
    np.testing.assert_allclose(w.sum(axis=-1), 1.0, atol=1e-12)


@pytest.mark.parametrize("sampler", ["naive", "sobol"])
@pytest.mark.parametrize("alpha,k", [(1.0, 2), (1.0, 4), (0.5, 3), (3.0, 4)])
def test_marginals_are_beta(sampler, alpha, k):
    # A Dirichlet(alpha * 1_k) coordinate is Beta(alpha, (k - 1) * alpha).
    w = sample_weight_sets(k, 40, 100, alpha=alpha, sampler=sampler, rng=2)
    for j in range(k):
        p = stats.kstest(w[..., j].ravel(), stats.beta(alpha, (k - 1) * alpha).cdf).pvalue
        assert p > 1e-3, (sampler, alpha, k, j, p)


def test_k1_gives_weight_one_and_shapes():
    np.testing.assert_array_equal(sample_weights(1, 3, sampler="sobol"), np.ones((3, 1)))
    assert sample_weights(4, 7, rng=0).shape == (7, 4)
    assert sample_weight_sets(4, 0, 7).shape == (0, 7, 4)


@pytest.mark.parametrize("sampler", ["naive", "sobol", "qmc", "sobol_qmc"])
def test_reproducible_from_an_explicit_generator(sampler):
    a = sample_weights(5, 50, sampler=sampler, rng=np.random.default_rng(11))
    b = sample_weights(5, 50, sampler=sampler, rng=np.random.default_rng(11))
    c = sample_weights(5, 50, sampler=sampler, rng=np.random.default_rng(12))
    np.testing.assert_array_equal(a, b)
    assert not np.allclose(a, c)
    # one generator advances: consecutive draws differ
    g = np.random.default_rng(3)
    assert not np.allclose(sample_weights(5, 50, sampler=sampler, rng=g), sample_weights(5, 50, sampler=sampler, rng=g))


def test_sobol_sets_are_independently_shifted():
    w = sample_weight_sets(3, 4, 64, sampler="sobol", rng=0)
    for a in range(4):
        for b in range(a + 1, 4):
            assert not np.allclose(w[a], w[b])


@pytest.mark.parametrize("alpha", [1.0, 0.5])
def test_sobol_has_lower_variance_than_naive(alpha):
    # Monte-Carlo estimate of E_w[max(w . r1, w . r2)] with W = 100, repeated over 200 sets.
    r = np.array([[1.0, 0.2, 0.0, 0.5], [0.1, 0.9, 0.6, 0.0]])
    est = {}
    for sampler in ("naive", "sobol"):
        w = sample_weight_sets(4, 200, 100, alpha=alpha, sampler=sampler, rng=5)
        est[sampler] = (w @ r.T).max(axis=-1).mean(axis=-1)
    assert abs(est["naive"].mean() - est["sobol"].mean()) < 4 * est["naive"].std() / np.sqrt(200)
    assert est["naive"].var() > 2 * est["sobol"].var()


def test_bad_arguments_raise_clear_errors():
    with pytest.raises(ValueError, match="unknown weight sampler 'halton'"):
        sample_weights(3, 5, sampler="halton")
    with pytest.raises(ValueError, match="alpha"):
        sample_weights(3, 5, alpha=0.0)
    with pytest.raises(ValueError, match="positive integer"):
        sample_weights(0, 5)
    with pytest.raises(ValueError, match="positive integer"):
        sample_weights(3, 0)
    assert canonical_sampler("QMC") == "sobol"


def test_defaults_are_dirichlet_one_drawn_iid():
    np.testing.assert_array_equal(
        sample_weights(4, 50, rng=3), sample_weights(4, 50, alpha=1.0, sampler="naive", rng=3)
    )
    np.testing.assert_array_equal(
        sample_weight_sets(4, 2, 50, rng=3), sample_weight_sets(4, 2, 50, alpha=1.0, sampler="naive", rng=3)
    )
    assert all(w.shape == (100, 3) for w in draw_group_weights([3, 3], rng=0))  # 100 weights per group


@pytest.mark.parametrize("sampler", ["naive", "sobol"])
def test_one_set_is_sample_weight_sets_with_one_set(sampler):
    # the same weights, and the generator left where sample_weight_sets(k, 1, n) leaves it
    g1, g2 = np.random.default_rng(4), np.random.default_rng(4)
    np.testing.assert_array_equal(
        sample_weights(3, 20, sampler=sampler, rng=g1), sample_weight_sets(3, 1, 20, sampler=sampler, rng=g2)[0]
    )
    assert g1.random() == g2.random()


def test_sobol_in_one_dimension_is_a_net_with_its_own_jitter():
    # k = 2, alpha = 1: w[..., 0] is the shifted Sobol coordinate itself; 64 points of a digitally shifted
    # net in one dimension put exactly one point in each interval [i/64, (i+1)/64), in every set.
    w = sample_weight_sets(2, 6, 64, sampler="sobol", rng=9)
    for first in w[..., 0]:
        np.testing.assert_array_equal(np.bincount((first * 64).astype(int), minlength=64), np.ones(64))
    # inside the finest dyadic cell (2**-30) each point has its own uniform jitter
    jitter = (w[..., 0] * 2**30) % 1.0
    assert len(np.unique(jitter)) == jitter.size
    assert 0.25 < jitter.std() < 0.33  # uniform on [0, 1): 0.289


def test_each_call_scrambles_its_own_net():
    # A digital shift XORs every point of a set with one number: two sets of one call come from one net, so
    # their points XOR to a constant. Calls with other generator states scramble another net: no constant.
    def cells(w):
        return (w[..., 0] * 2**30).astype(np.int64)

    one_call = cells(sample_weight_sets(2, 2, 16, sampler="sobol", rng=1))
    assert len(np.unique(one_call[0] ^ one_call[1])) == 1
    other = cells(sample_weight_sets(2, 1, 16, sampler="sobol", rng=2))
    assert len(np.unique(one_call[0] ^ other[0])) > 1


@pytest.mark.parametrize("k", [2, 3])
def test_sobol_with_a_tiny_alpha_gives_corners(k):
    # Dir(0.001) puts almost all mass on one coordinate; the inverse Gamma CDF rounds whole rows to 0 here
    w = sample_weight_sets(k, 4, 100, alpha=1e-3, sampler="sobol", rng=0)
    assert np.all(np.isfinite(w)) and np.all(w >= 0)
    np.testing.assert_allclose(w.sum(axis=-1), 1.0, atol=1e-12)
    assert (w.max(axis=-1) > 0.999).mean() > 0.95
    # every corner is taken about equally often
    counts = np.bincount(w.argmax(axis=-1).ravel(), minlength=k)
    assert counts.min() > 400 / k * 0.6


def test_group_weights_follow_the_documented_draw_order():
    # groups visited by ascending k, then by group order, one vectorised draw per distinct k; k < 1 gets None
    got = draw_group_weights([2, 0, 3, 2, -1], 5, alpha=0.5, sampler="naive", rng=7)
    rng = np.random.default_rng(7)
    twos = sample_weight_sets(2, 2, 5, alpha=0.5, rng=rng)
    threes = sample_weight_sets(3, 1, 5, alpha=0.5, rng=rng)
    assert got[1] is None and got[4] is None
    np.testing.assert_array_equal(got[0], twos[0])
    np.testing.assert_array_equal(got[3], twos[1])
    np.testing.assert_array_equal(got[2], threes[0])
    buckets = draw_bucket_weights(np.array([2, 0, 3, 2, -1]), 5, alpha=0.5, sampler="naive", rng=7)
    assert [(k, list(sel)) for k, sel, _ in buckets] == [(2, [0, 3]), (3, [2])]
    np.testing.assert_array_equal(buckets[0][2], twos)
    np.testing.assert_array_equal(buckets[1][2], threes)
    assert draw_group_weights([0, 0], 5, rng=1) == [None, None]
    np.testing.assert_array_equal(draw_group_weights([1, 0], 5, rng=1)[0], np.ones((5, 1)))  # one objective: w = 1
    sobol = draw_group_weights([4], 8, sampler="sobol", rng=3)[0]
    np.testing.assert_array_equal(sobol, sample_weight_sets(4, 1, 8, sampler="sobol", rng=3)[0])


def test_counts_are_checked():
    assert sample_weights(3, 1, rng=0).shape == (1, 3)  # one weight is allowed
    with pytest.raises(ValueError, match="number of weight sets must be a non-negative integer, got -1"):
        sample_weight_sets(3, -1, 5)
    with pytest.raises(ValueError, match="number of weight sets must be a non-negative integer, got 1.5"):
        sample_weight_sets(3, 1.5, 5)
    with pytest.raises(ValueError, match="got 2.5"):
        sample_weights(2.5, 5)
    with pytest.raises(ValueError, match="alpha"):
        sample_weights(3, 5, alpha=float("inf"))


@pytest.mark.parametrize("k", [1, 4, 16])
def test_eval_weights_are_100_dirichlet_1_draws_of_the_evaluation_seed(k):
    """E_w[best-of-m]'s weights: 100 Dirichlet(1) vectors drawn from the evaluation seed alone, as gamma
    draws normalised per vector (numpy's standard_gamma of shape 1, the same stream the naive sampler reads)."""
    from vpo.weights import N_EVAL_WEIGHTS, eval_weights

    gammas = np.random.default_rng(7).standard_gamma(1.0, (N_EVAL_WEIGHTS, k))
    expected = gammas / gammas.sum(axis=1, keepdims=True)
    got = eval_weights(k, 7)
    assert N_EVAL_WEIGHTS == 100 and got.shape == (100, k)
    np.testing.assert_allclose(got, expected, rtol=1e-12)
    np.testing.assert_array_equal(eval_weights(k, 7), got)
    assert k == 1 or not np.allclose(eval_weights(k, 8), got)

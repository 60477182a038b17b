"""Dirichlet weight samplers: simplex, marginals (Beta), reproducibility, variance of Sobol vs naive."""

from __future__ import annotations

import numpy as np
import pytest
from scipy import stats

from vpo.weights import canonical_sampler, sample_weight_sets, sample_weights


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

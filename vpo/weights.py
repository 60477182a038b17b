"""Dirichlet weight samplers on the (k-1)-simplex: naive (i.i.d.) and Sobol (randomised quasi-Monte Carlo).

VPO scores a set of answers by its best member under many random weightings w ~ Dir(alpha * 1_k).
The weights are drawn once per prompt group; `sample_weight_sets` draws the weights of many
groups that share k in one vectorised call, `sample_weights` is the single-set convenience.

Samplers:
- "naive": i.i.d. Dirichlet draws (independent Gamma(alpha) coordinates, normalised).
- "sobol" (aliases "sobol_qmc", "qmc"): a scrambled Sobol point set. Every group gets its own
  uniformly random digital shift (XOR of the point bits with random bits, plus a uniform jitter
  inside the finest dyadic cell), so each group's points are exactly uniform marginally (unbiased
  estimates) while keeping the net's low discrepancy inside the group. One scrambled Sobol engine
  is built per call and shared by the groups of that call: building an engine per group costs
  ~1 ms each, which would dominate a batch of 128 groups.
  - alpha = 1: a (k-1)-dimensional point, sorted, padded with 0 and 1, successive differences:
    exactly uniform on the simplex.
  - alpha != 1: a k-dimensional point, clipped to [1e-12, 1 - 1e-12], Gamma(alpha) inverse CDF per
    coordinate, normalised.
- k = 1 always gives the weight 1.

Reproducibility: everything is drawn from the explicit `numpy.random.Generator` passed as `rng`
(an int seed or None are accepted too), so the same generator state gives the same weights.
"""

from __future__ import annotations

import math
from typing import Sequence

import numpy as np

_SAMPLERS: dict[str, str] = {"naive": "naive", "sobol": "sobol", "sobol_qmc": "sobol", "qmc": "sobol"}

# Sobol points are integers scaled by 2**-_SOBOL_BITS (scipy's default resolution).
_SOBOL_BITS = 30
# Below this concentration, normalised Gamma draws underflow to all-zero rows; numpy's
# dirichlet switches to a stick-breaking method there, so we defer to it.
_SMALL_ALPHA = 0.1


def canonical_sampler(sampler: str) -> str:
    """Map a sampler name or alias to "naive" or "sobol"; unknown names raise ValueError."""
    try:
        return _SAMPLERS[str(sampler).lower()]
    except KeyError:
        raise ValueError(f"unknown weight sampler {sampler!r}; use one of {sorted(_SAMPLERS)}") from None


def _check(k: int, n_sets: int, n: int, alpha: float) -> None:
    if int(k) != k or k < 1:
        raise ValueError(f"k (number of reward dimensions) must be a positive integer, got {k!r}")
    if int(n) != n or n < 1:
        raise ValueError(f"number of weights must be a positive integer, got {n!r}")
    if int(n_sets) != n_sets or n_sets < 0:
        raise ValueError(f"number of weight sets must be a non-negative integer, got {n_sets!r}")
    if not (np.isfinite(alpha) and alpha > 0):
        raise ValueError(f"Dirichlet concentration alpha must be a positive finite number, got {alpha!r}")


def _naive(k: int, n_sets: int, n: int, alpha: float, rng: np.random.Generator) -> np.ndarray:
    if alpha < _SMALL_ALPHA:
        return rng.dirichlet(np.full(k, alpha), size=(n_sets, n))
    gam = rng.standard_gamma(alpha, (n_sets, n, k))  # numpy draws an exponential when alpha == 1
    gam /= gam.sum(axis=-1, keepdims=True)
    return gam


def _sobol_uniforms(dim: int, n_sets: int, n: int, rng: np.random.Generator) -> np.ndarray:
    """(n_sets, n, dim) uniforms: one scrambled Sobol net, an independent random digital shift per set."""
    from scipy.stats import qmc

    engine = qmc.Sobol(dim, rng=rng)  # scrambled: scipy's default
    # Draw a power-of-two prefix (scipy's balance requirement) and keep the first n points.
    points = engine.random_base2(math.ceil(math.log2(n)))[:n]
    scale = float(2**_SOBOL_BITS)
    ints = np.rint(points * scale).astype(np.int64)  # exact: Sobol points are multiples of 2**-30
    shifts = rng.integers(2**_SOBOL_BITS, size=(n_sets, 1, dim))
    points = rng.random((n_sets, n, dim))  # the jitter inside the finest cell, then the shifted point
    points += ints[None] ^ shifts
    points *= 1.0 / scale
    return points


def _sobol(k: int, n_sets: int, n: int, alpha: float, rng: np.random.Generator) -> np.ndarray:
    if alpha == 1.0:
        u = _sobol_uniforms(k - 1, n_sets, n, rng)
        u.sort(axis=-1)
        gaps = np.empty((n_sets, n, k))  # successive differences of 0, u_(1), ..., u_(k-1), 1
        gaps[..., 0] = u[..., 0]
        np.subtract(u[..., 1:], u[..., :-1], out=gaps[..., 1:-1])
        gaps[..., -1] = 1.0 - u[..., -1]
        return gaps
    from scipy.special import gammaincinv

    # u is 0 or 1 only by rounding (probability below 2**-50), where the inverse CDF would be 0 or inf
    u = np.clip(_sobol_uniforms(k, n_sets, n, rng), 1e-12, 1.0 - 1e-12)
    gam = gammaincinv(alpha, u)
    total = gam.sum(axis=-1, keepdims=True)
    # For tiny alpha every coordinate can round to 0; such rows become the corner of their largest u.
    weights = np.zeros_like(u)
    np.put_along_axis(weights, u.argmax(axis=-1)[..., None], 1.0, axis=-1)
    return np.divide(gam, total, out=weights, where=total > 0)


def sample_weight_sets(
    k: int,
    n_sets: int,
    n: int,
    *,
    alpha: float = 1.0,
    sampler: str = "naive",
    rng: np.random.Generator | int | None = None,
) -> np.ndarray:
    """Draw `n_sets` independent sets of `n` Dirichlet(alpha * 1_k) weights.

    Returns: float64 array (n_sets, n, k); every row is non-negative and sums to 1.
    """
    _check(k, n_sets, n, alpha)
    kind = canonical_sampler(sampler)
    rng = np.random.default_rng(rng)
    if n_sets == 0:
        return np.zeros((0, n, k))
    if k == 1:
        return np.ones((n_sets, n, 1))
    if kind == "naive":
        return _naive(k, n_sets, n, float(alpha), rng)
    return _sobol(k, n_sets, n, float(alpha), rng)


def sample_weights(
    k: int,
    n: int,
    *,
    alpha: float = 1.0,
    sampler: str = "naive",
    rng: np.random.Generator | int | None = None,
) -> np.ndarray:
    """Draw `n` Dirichlet(alpha * 1_k) weight vectors.

    Returns: float64 array (n, k); every row is non-negative and sums to 1.
    """
    return sample_weight_sets(k, 1, n, alpha=alpha, sampler=sampler, rng=rng)[0]


def draw_bucket_weights(
    group_ks: np.ndarray, n_weights: int, *, alpha: float, sampler: str, rng: np.random.Generator | int | None
) -> list[tuple[int, np.ndarray, np.ndarray]]:
    """[(k, group indices with that k, weights (G_k, W, k))] by ascending k: one draw per distinct k."""
    rng = np.random.default_rng(rng)
    ks = np.asarray(group_ks)
    out = []
    for k in np.unique(ks[ks > 0]):
        sel = np.flatnonzero(ks == k)
        out.append(
            (int(k), sel, sample_weight_sets(int(k), len(sel), n_weights, alpha=alpha, sampler=sampler, rng=rng))
        )
    return out


def draw_group_weights(
    group_ks: Sequence[int] | np.ndarray,
    n_weights: int = 100,
    *,
    alpha: float = 1.0,
    sampler: str = "naive",
    rng: np.random.Generator | int | None = None,
) -> list[np.ndarray | None]:
    """The weights `vpo.advantage.vpo_advantage` draws: one (n_weights, k_g) set per group, None where k_g < 1.

    group_ks: (G,) k of each group in first-appearance order. Groups are visited by ascending k,
    then by group order, with one vectorised draw per distinct k; the same rng state gives the
    same weights as `vpo_advantage`.
    """
    out: list[np.ndarray | None] = [None] * len(group_ks)
    for _, sel, sets in draw_bucket_weights(np.asarray(group_ks), n_weights, alpha=alpha, sampler=sampler, rng=rng):
        for g, w in zip(sel, sets):
            out[g] = w
    return out


N_EVAL_WEIGHTS = 100  # Dirichlet(1) weights of E_w[best-of-m], drawn with the eval seed


def eval_weights(k: int, eval_seed: int) -> np.ndarray:
    """(N_EVAL_WEIGHTS, k) Dirichlet(1) weights of E_w[best-of-m] for problems with k objectives: drawn
    from the evaluation seed alone, so evaluation's pool metrics and the per-problem aggregate use the same."""
    return sample_weights(k, N_EVAL_WEIGHTS, rng=np.random.default_rng(eval_seed))  # alpha 1, the naive sampler

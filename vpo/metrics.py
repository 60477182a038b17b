"""Search metrics of a candidate pool: pass@k, best@k, E_w[best-of-m], reward-space diversity, the
non-dominated set and its hypervolume.

A pool is the set of candidate solutions sampled for one problem (k counts candidates, not
generations: one multi-answer chain with m = 3 contributes 3). Every function is defined for
the edge cases evaluation meets:
- k > n (budget larger than the pool): the metric of the whole pool (pass@n, best@n);
- an empty pool: 0.0 (no candidate, nothing solved, no diversity).
Everything returns plain Python floats (curves: lists of floats).
"""

from __future__ import annotations

from typing import Any, Sequence

import numpy as np

from vpo.rollouts import as_matrix, group_codes
from vpo.strategy_judge import UNJUDGED


def _check_k(k: int) -> int:
    if int(k) != k or k < 1:
        raise ValueError(f"k (number of candidates) must be a positive integer, got {k!r}")
    return int(k)


def _scores(scores: Sequence[float] | np.ndarray) -> np.ndarray:
    x = np.asarray(scores, dtype=np.float64).ravel()
    if not np.all(np.isfinite(x)):
        raise ValueError("scores contain NaN or inf; score unparseable candidates as 0 before computing metrics")
    return x


def pass_at_k(n: int, c: int, k: int) -> float:
    """Unbiased pass@k: 1 - C(n - c, k) / C(n, k) for n candidates of which c are correct.

    Computed as 1 - prod_{i = n-c+1..n} (1 - k / i). k > n gives pass@n (1 if c > 0);
    n = 0 gives 0.
    """
    k = _check_k(k)
    if int(n) != n or int(c) != c or n < 0 or not 0 <= c <= n:
        raise ValueError(f"pass_at_k needs integers 0 <= c <= n, got n={n!r}, c={c!r}")
    if c == 0:
        return 0.0
    if n - c < k:
        return 1.0
    i = np.arange(n - c + 1, n + 1)
    return float(1.0 - np.prod(1.0 - k / i))


def pass_at_k_curve(n: int, c: int, max_k: int) -> list[float]:
    """[pass@1, ..., pass@max_k] for one pool."""
    return [pass_at_k(n, c, k) for k in range(1, _check_k(max_k) + 1)]


def _best_at_k_sorted(ascending: np.ndarray, k: int) -> float:
    n = len(ascending)
    if n == 0:
        return 0.0
    k = min(k, n)
    from scipy.special import gammaln

    # P(the i-th smallest is the max of a random k-subset) = C(i-1, k-1) / C(n, k), i = k..n
    i = np.arange(k, n + 1)
    log_num = gammaln(i) - gammaln(k) - gammaln(i - k + 1)
    log_den = gammaln(n + 1) - gammaln(k + 1) - gammaln(n - k + 1)
    return float(np.dot(np.exp(log_num - log_den), ascending[k - 1 :]))


def best_at_k(scores: Sequence[float] | np.ndarray, k: int) -> float:
    """Exact E[max of a uniformly random k-subset of the n scores] (variance-free).

    sum_{i=k..n} C(i-1, k-1) / C(n, k) * r_(i) over ascending r_(1) <= ... <= r_(n).
    scores: (n,).  k > n gives the pool max; an empty pool gives 0.
    """
    return _best_at_k_sorted(np.sort(_scores(scores)), _check_k(k))


def best_at_k_curve(scores: Sequence[float] | np.ndarray, max_k: int) -> list[float]:
    """[best@1, ..., best@max_k] (exact) for one pool."""
    ascending = np.sort(_scores(scores))
    return [_best_at_k_sorted(ascending, k) for k in range(1, _check_k(max_k) + 1)]


def best_at_k_permutation_curve(
    scores: Sequence[float] | np.ndarray, max_k: int, *, rng: np.random.Generator | int | None = None
) -> list[float]:
    """Running max over one random order of the pool: [best@1, ..., best@max_k] for that order.

    The estimator upstream reports (one permutation per problem): evaluation's best_at_k_perm, for
    parity with its numbers.
    k > n repeats the pool max; an empty pool gives zeros.
    """
    max_k = _check_k(max_k)
    x = _scores(scores)
    if len(x) == 0:
        return [0.0] * max_k
    running = np.maximum.accumulate(x[np.random.default_rng(rng).permutation(len(x))])
    return [float(running[min(k, len(x)) - 1]) for k in range(1, max_k + 1)]


def expected_best_of_m(matrix: Any, weights: Any) -> float:
    """E_w[max over the pool of w . r]: mean over weight rows of the best row's weighted score.

    matrix: (m, k) reward vectors (a (k,) vector is a pool of one; empty pool gives 0);
    weights: (W, k), e.g. vpo.weights.sample_weights(k, 100, rng=eval_seed).
    """
    m = np.asarray(matrix)
    if m.size == 0:
        return 0.0
    if m.ndim == 1:
        m = m[None]
    if m.ndim != 2:
        raise ValueError(f"a pool of reward vectors must be (m, k), got shape {m.shape}")
    w = np.asarray(weights)
    if w.ndim != 2 or w.shape[1] != m.shape[1]:
        raise ValueError(f"weights must be (W, {m.shape[1]}) to match the pool's k, got {w.shape}")
    return float((m @ w.T).max(axis=0).mean())


def diversity(vectors: Any) -> float:
    """Mean pairwise L1 distance between the reward vectors of a pool; 0 for fewer than 2.

    vectors: (n, k).  Uses sum_{i<j} |x_j - x_i| = sum_j x_(j) (2j - n + 1) per dimension (sorted, 0-based).
    """
    v = np.asarray(vectors)
    if v.size == 0:
        return 0.0
    if v.ndim != 2:
        raise ValueError(f"diversity needs reward vectors (n, k), got shape {v.shape}")
    n = v.shape[0]
    if n < 2:
        return 0.0
    coef = 2.0 * np.arange(n) - n + 1
    total = float((np.sort(v, axis=0) * coef[:, None]).sum())
    return total / (n * (n - 1) / 2)


def nondominated_distinct(vectors: Any) -> np.ndarray:
    """The distinct reward vectors of a pool that no other member dominates (higher is better).

    vectors: (n, k).  Returns (d, k), d <= n, rows in lexicographic order; (0, k) for an empty pool.
    """
    v = np.asarray(vectors, dtype=np.float64)
    if v.ndim != 2:
        raise ValueError(f"a pool of reward vectors must be (n, k), got shape {v.shape}")
    unique = np.unique(v, axis=0)
    geq = (unique[:, None, :] >= unique[None, :, :]).all(axis=-1)
    gt = (unique[:, None, :] > unique[None, :, :]).any(axis=-1)
    return unique[~(geq & gt).any(axis=0)]


EXACT_HYPERVOLUME_MAX_K = 8  # above this, continuous vectors get moocore's deterministic approximation


def hypervolume(vectors: Any, reference: float = 0.0) -> float:
    """Hypervolume of the pool's non-dominated set against the reference point (reference, ...,
    reference), maximising: the volume of the union of the boxes [reference, r] over the pool. With
    the reference at 0 a vector with a zero coordinate spans no volume: for pass/fail objectives the
    hypervolume is 1 when some candidate passes every objective and 0 otherwise, and objectives that
    exclude each other (a maze path that takes the gold leaves the diamond) give 0 for every pool; a
    reference below 0 counts those vectors too.

    vectors: (n, k).  Exact (moocore) for k <= EXACT_HYPERVOLUME_MAX_K or a front of one vector (0/1
    vectors against 0: only the all-ones vector is left); else moocore's deterministic Rphi-FWE+
    approximation (exact volume is exponential in k).  Empty pool: 0.
    """
    import moocore

    front = nondominated_distinct(vectors)
    front = front[(front > reference).all(axis=1)]
    if len(front) == 0:
        return 0.0
    ref = np.full(front.shape[1], float(reference))
    if front.shape[1] <= EXACT_HYPERVOLUME_MAX_K or len(front) == 1:  # one box: its volume is exact
        return float(moocore.hypervolume(front, ref=ref, maximise=True))
    return float(moocore.hv_approx(front, ref=ref, maximise=True, method="Rphi-FWE+"))


def group_pool_diversity(sub_scores: Sequence[Any], group_ids: Sequence[Any]) -> float:
    """Training metric: mean over prompt groups of the diversity of all answers of the group.

    sub_scores: B items, each (m_i, k) (JSON text accepted; None or empty contributes no answer);
    group_ids: (B,).  Returns 0 for an empty batch.
    """
    if len(sub_scores) != len(group_ids):
        raise ValueError(f"sub_scores has {len(sub_scores)} entries but group_ids has {len(group_ids)}")
    if len(sub_scores) == 0:
        return 0.0
    codes, n_groups = group_codes(group_ids)
    pools: list[list[np.ndarray]] = [[] for _ in range(n_groups)]
    for code, item in zip(codes, sub_scores):
        mat = as_matrix(item)
        if mat.size:
            pools[code].append(mat)
    return float(np.mean([diversity(np.concatenate(p)) if p else 0.0 for p in pools]))


def group_strategies(keys: Sequence[Any], group_ids: Sequence[Any], degenerate: str = "degenerate") -> float:
    """Training metric: mean over prompt groups of the distinct strategy keys among the group's rollouts
    (`Task.strategy_key` or a judge's; the degenerate key, a rollout without an answer, is none, and so is
    the key of a group whose judge call failed).

    keys: (B,);  group_ids: (B,).  Returns 0 for an empty batch."""
    if len(keys) != len(group_ids):
        raise ValueError(f"keys has {len(keys)} entries but group_ids has {len(group_ids)}")
    codes, n_groups = group_codes(group_ids)
    found: list[set] = [set() for _ in range(n_groups)]
    for code, key in zip(codes, keys):
        if key is not None and key != degenerate and key != UNJUDGED:  # a failed judge call shows none either
            found[code].add(key)
    return float(np.mean([len(s) for s in found])) if n_groups else 0.0


_ADVANTAGE_KEYS = tuple(
    f"advantage/{name}" for name in ("mean", "std", "abs_max", "zero_group_frac", "max", "min", "zero_frac")
)


def advantage_summary(advantages: Sequence[float] | np.ndarray, group_ids: Sequence[Any]) -> dict[str, float]:
    """Training metrics of one batch's advantages: their mean, population std, largest magnitude, the share
    of groups in which no advantage moves past 1e-6 (no learning signal), the extremes, and the share of
    rollouts within 1e-12 of 0 (docs/metrics.md).

    advantages: (B,);  group_ids: (B,).  Every value is 0 for an empty batch."""
    adv = np.asarray(advantages).ravel()
    if len(adv) != len(group_ids):
        raise ValueError(f"advantages has {len(adv)} entries but group_ids has {len(group_ids)}")
    if not len(adv):
        return dict.fromkeys(_ADVANTAGE_KEYS, 0.0)
    codes, _ = group_codes(group_ids)
    moving = np.bincount(codes, weights=np.abs(adv) > 1e-6)
    return {
        "advantage/mean": float(adv.mean()),
        "advantage/std": float(adv.std()),
        "advantage/abs_max": float(np.abs(adv).max()),
        "advantage/zero_group_frac": float((moving == 0).mean()),
        "advantage/max": float(adv.max()),
        "advantage/min": float(adv.min()),
        "advantage/zero_frac": float(np.mean(np.abs(adv) < 1e-12)),
    }

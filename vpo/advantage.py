"""Advantage estimators: VPO and every baseline, as pure numpy functions of (rewards, group ids, settings).

One advantage per rollout; the trainer broadcasts it over the rollout's response tokens. A group is
the set of rollouts that share a prompt (equal `group_ids`). All functions are vectorised over
groups: the only per-rollout Python work is reading the ragged input list.

Registry: `ESTIMATORS` maps a method-facing name to its function; `register_estimator(name)`
refuses a second, different function under an existing name. The trainers call them through
`vpo.method_advantage.advantage_for_method`, which picks the estimator and its input from the method
table.
"""

from __future__ import annotations

import hashlib
import math
from functools import lru_cache
from typing import Any, Callable, Mapping, Sequence

import numpy as np

from vpo.rollouts import as_matrix, group_codes, group_slots
from vpo.set_rl import DEGENERATE_KEY, key_codes, rollout_novelty, set_rl, strategy_diagnostics
from vpo.vpo_scores import vpo_scores
from vpo.weights import canonical_sampler

ESTIMATORS: dict[str, Callable[..., Any]] = {}


def register_estimator(name: str) -> Callable[[Callable[..., Any]], Callable[..., Any]]:
    """Decorator: add a function to ESTIMATORS under `name` (re-registering the same function is a no-op)."""

    def add(fn: Callable[..., Any]) -> Callable[..., Any]:
        if name in ESTIMATORS and ESTIMATORS[name] is not fn:
            raise ValueError(f"estimator {name!r} is already registered to {ESTIMATORS[name].__qualname__}")
        ESTIMATORS[name] = fn
        return fn

    return add


def get_estimator(name: str) -> Callable[..., Any]:
    """The registered estimator function called `name`; unknown names raise ValueError."""
    try:
        return ESTIMATORS[name]
    except KeyError:
        raise ValueError(f"unknown advantage estimator {name!r}; registered: {', '.join(ESTIMATORS)}") from None


# ---------------------------------------------------------------------------------------------
# Input handling shared by the estimators


def _scores_vector(scores: Sequence[float] | np.ndarray, group_ids: Sequence[Any], what: str = "scores") -> np.ndarray:
    x = np.asarray(scores, dtype=np.float64)
    if x.ndim != 1:
        raise ValueError(f"{what} must be one number per rollout, shape (B,); got shape {x.shape}")
    if len(x) != len(group_ids):
        raise ValueError(f"{what} has {len(x)} entries but group_ids has {len(group_ids)}; pass one id per rollout")
    if not np.all(np.isfinite(x)):
        raise ValueError(f"{what} contains NaN or inf at rollouts {np.flatnonzero(~np.isfinite(x))[:10].tolist()}")
    return x


def _group_mean_std(x: np.ndarray, codes: np.ndarray, ddof: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Per-group count, mean and std (ddof 0: population, 1: unbiased; groups of one get std 0).
    codes: (B,) from `group_codes`: every group in [0, G) has a rollout, so the counts have length G."""
    count = np.bincount(codes)
    mean = np.bincount(codes, weights=x) / np.maximum(count, 1)
    sq = np.bincount(codes, weights=(x - mean[codes]) ** 2)
    std = np.sqrt(sq / np.maximum(count - ddof, 1))
    return count, mean, std


# ---------------------------------------------------------------------------------------------
# VPO (raw scores: vpo.vpo_scores)


@register_estimator("vpo")
def vpo_advantage(
    sub_scores: Sequence[Any],
    group_ids: Sequence[Any] | np.ndarray,
    *,
    n_weights: int = 100,
    alpha: float = 1.0,
    sampler: str = "naive",
    rng: np.random.Generator | int | None = None,
    eps: float = 1e-6,
    weights: Mapping[Any, np.ndarray] | None = None,
) -> tuple[np.ndarray, dict[str, float]]:
    """VPO: each rollout's set is scored by its best answer under random weightings.

    sub_scores: B items, each (m_i, k) (a (k,) vector is one answer; JSON text is parsed); k fixed
                inside a group, may differ between groups; None or empty means raw score 0.
    group_ids:  (B,) hashable ids; equal id = same prompt group.
    weights:    optional {group id: (W, k_g)} to use instead of drawing (tests, replays).
    raw_j = mean over the group's W weights w of max_rows(R_j w);  A_j = (raw_j - mean_g) / (std_g + eps)
    with the population std; a group with std_g < eps gets 0 everywhere.
    Returns: advantages float64 (B,), diagnostics dict of floats.
    """
    raw, pool_best, rows, codes, n_groups = vpo_scores(sub_scores, group_ids, n_weights, alpha, sampler, rng, weights)
    adv, mean, std = _z_normalise(raw, codes, eps)
    flat = std < eps
    # Means over prompt groups, as the authors log them (docs/metrics.md defines every key).
    diagnostics = {
        "vpo/pool_size_mean": float(np.bincount(codes, weights=rows, minlength=n_groups).mean()) if n_groups else 0.0,
        "vpo/rows_per_rollout_mean": float(rows.mean()) if len(rows) else 0.0,
        "vpo/group_std_mean": float(std.mean()) if n_groups else 0.0,
        "vpo/own_pool_expected_max_mean": float(mean.mean()) if n_groups else 0.0,
        "vpo/pool_expected_best_mean": float(pool_best.mean()) if n_groups else 0.0,
        "vpo/zero_std_group_frac": float(flat.mean()) if n_groups else 0.0,
        "vpo/sampler_code": 0.0 if canonical_sampler(sampler) == "naive" else 1.0,
    }
    if weights is None:  # given weights are not a draw: no spread to measure
        diagnostics["vpo/advantage_draw_std"] = advantage_draw_spread(
            sub_scores, group_ids, raw, n_weights=n_weights, alpha=alpha, sampler=sampler, eps=eps
        )
    return adv, diagnostics


def _z_normalise(raw: np.ndarray, codes: np.ndarray, eps: float) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(B,) raw scores -> (advantages (B,), group means (G,), population stds (G,)); a group with std < eps gets 0."""
    _, mean, std = _group_mean_std(raw, codes, ddof=0)
    return np.where((std < eps)[codes], 0.0, (raw - mean[codes]) / (std[codes] + eps)), mean, std


_DRAW_REPEATS = 4  # independent weight draws behind vpo/advantage_draw_std


def advantage_draw_spread(
    sub_scores: Sequence[Any],
    group_ids: Sequence[Any] | np.ndarray,
    raw: np.ndarray,
    *,
    n_weights: int,
    alpha: float,
    sampler: str,
    eps: float = 1e-6,
    repeats: int = _DRAW_REPEATS,
) -> float:
    """How much a batch's VPO advantages depend on which weights were drawn: the advantages computed
    with `repeats` independent draws of each group's n_weights weights, their standard deviation
    (ddof=1) over the draws per rollout, averaged over the B rollouts. The Monte Carlo noise the
    Sobol sampler is meant to reduce.

    raw: (B,) the batch's raw scores from the training draw; they seed the draws here (the 8-byte
    blake2b digest of their float64 bytes, read little-endian), so the training draw's generator is
    not advanced and a rerun measures the same.
    Returns: a float (0 for an empty batch).
    """
    if len(raw) == 0:
        return 0.0
    seed = int.from_bytes(hashlib.blake2b(np.ascontiguousarray(raw).tobytes(), digest_size=8).digest(), "little")
    rng = np.random.default_rng(seed)
    draws = []
    for _ in range(repeats):
        redrawn = vpo_scores(sub_scores, group_ids, n_weights, alpha, sampler, rng, None)
        draws.append(_z_normalise(redrawn.raw, redrawn.codes, eps)[0])
    return float(np.std(np.stack(draws), axis=0, ddof=1).mean())


@register_estimator("vpo_single")
def vpo_single_advantage(
    sub_scores: Sequence[Any],
    group_ids: Sequence[Any] | np.ndarray,
    *,
    n_weights: int = 100,
    alpha: float = 1.0,
    sampler: str = "naive",
    rng: np.random.Generator | int | None = None,
    eps: float = 1e-6,
    weights: Mapping[Any, np.ndarray] | None = None,
) -> tuple[np.ndarray, dict[str, float]]:
    """VPO on one answer per rollout: each item is a (k,) vector or a (1, k) matrix.

    Same settings and returns as `vpo_advantage`; a matrix with more than one row raises ValueError.
    """
    mats = [as_matrix(s) for s in sub_scores]
    multi = [i for i, m in enumerate(mats) if m.shape[0] > 1]
    if multi:
        raise ValueError(
            f"vpo_single expects one answer per rollout, but rollout {multi[0]} has {mats[multi[0]].shape[0]} rows; "
            "use the vpo estimator for multi-answer rollouts"
        )
    return vpo_advantage(
        mats, group_ids, n_weights=n_weights, alpha=alpha, sampler=sampler, rng=rng, eps=eps, weights=weights
    )


# ---------------------------------------------------------------------------------------------
# Scalar baselines


@register_estimator("grpo")
def grpo_advantage(
    scores: Sequence[float] | np.ndarray,
    group_ids: Sequence[Any] | np.ndarray,
    *,
    norm_by_std: bool = True,
    eps: float = 1e-6,
) -> np.ndarray:
    """GRPO: (r - group mean) / (unbiased group std + eps), or r - mean without `norm_by_std`.

    scores: (B,) float;  group_ids: (B,).  A group of one uses mean 0 and std 1 (veRL's convention).
    Returns: advantages float64 (B,).
    """
    x = _scores_vector(scores, group_ids)
    codes, _ = group_codes(group_ids)
    count, mean, std = _group_mean_std(x, codes, ddof=1)
    single = count == 1
    mean = np.where(single, 0.0, mean)
    std = np.where(single, 1.0, std)
    centred = x - mean[codes]
    return centred / (std[codes] + eps) if norm_by_std else centred


@register_estimator("maxrl")
def maxrl_advantage(
    scores: Sequence[float] | np.ndarray, group_ids: Sequence[Any] | np.ndarray, *, eps: float = 1e-6
) -> np.ndarray:
    """MaxRL: (r - group mean) / (group mean + eps); 0 for a group whose mean is 0.

    scores: (B,) float, non-negative (success rates);  group_ids: (B,).  Returns: float64 (B,).
    """
    x = _scores_vector(scores, group_ids)
    codes, _ = group_codes(group_ids)
    _, mean, _ = _group_mean_std(x, codes, ddof=0)
    m = mean[codes]
    return np.where(m == 0.0, 0.0, (x - m) / (m + eps))


@register_estimator("gdpo")
def gdpo_advantage(
    channels: Sequence[Sequence[float]] | np.ndarray,
    group_ids: Sequence[Any] | np.ndarray,
    *,
    channel_weights: Sequence[float] | None = None,
    response_lengths: Sequence[int] | np.ndarray | None = None,
    eps: float = 1e-6,
) -> np.ndarray:
    """GDPO: a GRPO z-score per reward channel, weighted sum over channels, then whitening over the
    batch's response tokens, as veRL 0.9.1's `gdpo` estimator computes it.

    channels: (B, k) float;  group_ids: (B,);  channel_weights: (k,), default all 1 (veRL's
    gdpo_reward_weights);
    response_lengths: (B,) response tokens of each rollout (veRL's response_mask row sums); None
    counts each rollout as one token.
    Whitening (veRL's masked_whiten): every token of rollout b carries A_b, so with L_b tokens,
    N = sum L_b, mean = sum L_b A_b / (N + 1e-8), var = sum L_b (A_b - mean)^2 / (N + 1e-8) * N / (N - 1),
    A'_b = (A_b - mean) / sqrt(var + 1e-8); a rollout without tokens gets 0. With fewer than two
    tokens in the batch the sum is only centred.  Returns: float64 (B,).
    """
    x = np.asarray(channels, dtype=np.float64)
    if x.ndim != 2:
        raise ValueError(f"gdpo needs one reward vector per rollout, shape (B, k); got shape {x.shape}")
    w = np.ones(x.shape[1]) if channel_weights is None else np.asarray(channel_weights, dtype=np.float64)
    if w.shape != (x.shape[1],):
        raise ValueError(f"gdpo channel weights have shape {w.shape}, expected ({x.shape[1]},)")
    lengths = np.ones(len(x)) if response_lengths is None else np.asarray(response_lengths, dtype=np.float64)
    if lengths.shape != (len(x),) or np.any(lengths < 0):
        raise ValueError(f"gdpo response_lengths must be {len(x)} non-negative token counts, got shape {lengths.shape}")
    total = np.zeros(len(x))
    for j in range(x.shape[1]):  # loop over channels (k <= 16), vectorised over rollouts
        total += w[j] * grpo_advantage(x[:, j], group_ids, eps=eps)
    tokens = lengths.sum()
    mean = (lengths * total).sum() / (tokens + 1e-8)
    centred = total - mean
    if tokens >= 2:
        var = (lengths * centred**2).sum() / (tokens + 1e-8) * tokens / (tokens - 1)
        centred = centred / np.sqrt(var + 1e-8)
    return np.where(lengths > 0, centred, 0.0)


@lru_cache(maxsize=256)
def _max_at_k_coefficients(n: int, k: int) -> np.ndarray:
    """(n, n) matrix C with A_sorted = C @ r_sorted for ascending r (ranks 1..n)."""
    total = math.comb(n, k)
    coef = np.zeros((n, n))
    for i in range(1, n + 1):
        coef[i - 1, i - 1] = math.comb(i - 1, k - 1) / total
        if k >= 2:
            for j in range(i + 1, n + 1):
                coef[i - 1, j - 1] = math.comb(j - 2, k - 2) / total
    return coef


def max_at_k_subset(n: int, k: int | None = None) -> int:
    """Max@k's subset size for a group of n rollouts: k when set, else max(2, n // 2)."""
    return max(2, n // 2) if k is None else int(k)


@register_estimator("max_at_k")
def max_at_k_advantage(
    scores: Sequence[float] | np.ndarray,
    group_ids: Sequence[Any] | np.ndarray,
    *,
    k: int | None = None,
    eps: float = 1e-6,
) -> np.ndarray:
    """Max@k: unbiased per-rollout weight of E[max reward of a size-k subset], then GRPO normalisation.

    With a group's rewards sorted ascending, rank i gets
    A_i = [C(i-1, k-1) r_i + sum_{j>i} C(j-2, k-2) r_j] / C(n, k); then (A - mean) / (unbiased std + eps).
    scores: (B,);  group_ids: (B,);  k: subset size, default max(2, n // 2) per group, 1 <= k <= n - 1.
    Returns: float64 (B,).
    """
    x = _scores_vector(scores, group_ids)
    codes, n_groups = group_codes(group_ids)
    sizes = np.bincount(codes, minlength=n_groups)
    raw = np.zeros(len(x))
    for n in np.unique(sizes).tolist():  # one batched pass per group size
        k_n = max_at_k_subset(n, k)
        if not 1 <= k_n <= n - 1:
            raise ValueError(
                f"max_at_k needs 1 <= k <= n - 1, got k={k_n} for a group of n={n} rollouts; set k or the group size"
            )
        gsel = np.flatnonzero(sizes == n)
        rsel, lg, slot, _ = group_slots(codes, n_groups, gsel)
        grid = np.zeros((len(gsel), n))
        grid[lg, slot] = x[rsel]
        rank = np.argsort(grid, axis=1, kind="stable")
        ordered = np.take_along_axis(grid, rank, axis=1)
        values = np.empty_like(grid)
        np.put_along_axis(values, rank, ordered @ _max_at_k_coefficients(n, k_n).T, axis=1)
        raw[rsel] = values[lg, slot]
    _, mean, std = _group_mean_std(raw, codes, ddof=1)
    return (raw - mean[codes]) / (std[codes] + eps)


# ---------------------------------------------------------------------------------------------
# Set RL (Poly-EPO, vpo/set_rl.py) and its per-rollout rival: rewards with a strategy key per rollout


def _strategy_inputs(scores, group_ids, strategy_keys, correct) -> tuple[np.ndarray, np.ndarray]:
    """(rewards clipped to [0, 1], correct flags (B,) bool: given, else reward > 0 as the authors count)."""
    x = _scores_vector(scores, group_ids)
    if strategy_keys is None or len(strategy_keys) != len(x):
        raise ValueError(f"this estimator needs one strategy key per rollout ({len(x)}); the trainer passes them")
    flags = x > 0 if correct is None else np.asarray(correct, dtype=bool)
    return np.clip(x, 0.0, 1.0), flags  # the product form assumes rewards in [0, 1]


@register_estimator("set_rl")
def set_rl_advantage(
    scores: Sequence[float] | np.ndarray,
    group_ids: Sequence[Any] | np.ndarray,
    *,
    strategy_keys: Sequence[Any] | None = None,
    correct: Sequence[bool] | None = None,
    set_size: int = 4,
    aggregation: str = "mean",
    homogeneous: str = "paper",
    degenerate_key: str = DEGENERATE_KEY,
    n_sets: int | None = None,
    rng: np.random.Generator | int | None = None,
) -> tuple[np.ndarray, dict[str, float]]:
    """Poly-EPO's set-RL advantage (vpo/set_rl.py): f(S) = mean reward x distinct strategies / n over the
    group's n-subsets, A(S) = f(S) - mean f, a rollout's advantage the mean (or sum) of A over its sets.

    scores: (B,) rewards, clipped to [0, 1];  group_ids: (B,);  strategy_keys: (B,) hashable;  correct:
    (B,) bool for the diagnostics (default reward > 0).  Returns: float64 (B,), diagnostics.
    """
    x, flags = _strategy_inputs(scores, group_ids, strategy_keys, correct)
    adv, found = set_rl(
        x, group_ids, list(strategy_keys), set_size=set_size, aggregation=aggregation, homogeneous=homogeneous,
        degenerate_key=degenerate_key, n_sets=n_sets, rng=rng,
    )  # fmt: skip
    diagnostics = strategy_diagnostics(group_ids, found["codes"], flags, adv)
    diagnostics.update(set_diversity=found["diversity"], skipped_groups=float(found["skipped"]))
    return adv, {f"set_rl/{key}": value for key, value in diagnostics.items()}


@register_estimator("grpo_div")
def grpo_div_advantage(
    scores: Sequence[float] | np.ndarray,
    group_ids: Sequence[Any] | np.ndarray,
    *,
    strategy_keys: Sequence[Any] | None = None,
    correct: Sequence[bool] | None = None,
    diversity_weight: float = 0.5,
    degenerate_key: str = DEGENERATE_KEY,
    norm_by_std: bool = True,
    eps: float = 1e-6,
) -> tuple[np.ndarray, dict[str, float]]:
    """GRPO+DIV: GRPO on r + lambda d(y), d(y) the share of the group's other rollouts whose strategy differs
    from y's (the additive bonus the polychromic papers compare with).

    scores: (B,) rewards, clipped to [0, 1];  group_ids: (B,);  strategy_keys: (B,);  correct: (B,) bool.
    Returns: float64 (B,), diagnostics.
    """
    x, flags = _strategy_inputs(scores, group_ids, strategy_keys, correct)
    codes = key_codes(list(strategy_keys), degenerate_key)
    novelty = rollout_novelty(group_ids, codes)
    adv = grpo_advantage(x + diversity_weight * novelty, group_ids, norm_by_std=norm_by_std, eps=eps)
    diagnostics = strategy_diagnostics(group_ids, codes, flags, adv)
    diagnostics["novelty"] = float(novelty.mean()) if len(novelty) else 0.0
    return adv, {f"grpo_div/{key}": value for key, value in diagnostics.items()}

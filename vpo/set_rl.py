"""Set reinforcement learning with the polychromic objective (Poly-EPO), and its per-rollout rival GRPO+DIV.

Sources (facts, not code): "Polychromic Objectives for Reinforcement Learning" (Hamid et al., arXiv 2509.25424)
and "Poly-EPO: Training Exploratory Reasoning Models" (Orney, Hamid et al., arXiv 2604.17654), with the
authors' public code (GitHub ifdita-hasan/polyepo, `compute_polyepo_advantage`).

A group holds the N rollouts of one prompt, each with a reward r in [0, 1] and a strategy key (the task's
`Task.strategy_key`: maze, the route walked; a parsed answer elsewhere). A set S is n rollouts of the group.

    d(S) = (distinct keys in S, the degenerate key not counted) / n
           paper rule: 0 when S holds at most one distinct key; code rule: no such factor
    f(S) = mean_{y in S} r(y) * d(S)                       (the polychromic product, no weight)
    A(S) = f(S) - mean over the group's sets of f          (the baseline includes S itself)
    A(y) = mean (code) or sum (paper) over the sets holding y of A(S)

All C(N, n) sets, or K of them drawn uniformly without replacement; then the mean form divides each
rollout's sum by K n / N (the expected number of sampled sets holding it) and the sum form multiplies
that by C(N - 1, n - 1), so that both keep the expectation of the all-sets estimate. No std normalisation
(it replaces the GRPO advantage); groups of N <= n, and groups whose judge call failed (`vpo.strategy_judge`,
key UNJUDGED), get 0.

Everything here is pure numpy over (groups, N) grids; `vpo.advantage` registers the estimators.
"""

from __future__ import annotations

import math
from functools import lru_cache
from itertools import combinations
from typing import Any, Sequence

import numpy as np

from vpo.rollouts import group_codes, group_slots
from vpo.strategy_judge import UNJUDGED  # the key of a group whose judge call failed: the group is skipped
from vpo.task import DEGENERATE_STRATEGY as DEGENERATE_KEY  # a task's key for output that shows no strategy

_AGGREGATIONS = ("mean", "sum")  # code, paper
_HOMOGENEOUS_RULES = ("paper", "code")  # a set of one distinct key scores 0 (paper) or 1/n (code)


@lru_cache(maxsize=64)
def all_sets(group_size: int, set_size: int) -> np.ndarray:
    """(C(N, n), n) int: every n-subset of range(N), in lexicographic order."""
    return np.array(list(combinations(range(group_size), set_size)), dtype=np.int64).reshape(-1, set_size)


def key_codes(keys: Sequence[Any], degenerate_key: str = DEGENERATE_KEY) -> np.ndarray:
    """(B,) int: equal keys get equal codes >= 0, the degenerate key (and None) -1, UNJUDGED -2."""
    seen: dict[Any, int] = {UNJUDGED: -2}
    codes = (-1 if k is None or k == degenerate_key else seen.setdefault(k, len(seen) - 1) for k in keys)
    return np.fromiter(codes, dtype=np.int64, count=len(keys))


def _distinct_counts(codes: np.ndarray) -> np.ndarray:
    """(..., n) int codes -> (...,) number of distinct codes >= 0 along the last axis."""
    ordered = np.sort(codes)  # along the last axis
    first = ordered[..., :1] >= 0
    changes = (ordered[..., 1:] != ordered[..., :-1]) & (ordered[..., 1:] >= 0)
    return first.sum(axis=-1) + changes.sum(axis=-1)


def set_diversity(codes: np.ndarray, set_size: int, homogeneous: str) -> np.ndarray:
    """(..., n) key codes of sets -> (...,) d(S)."""
    distinct = _distinct_counts(codes)
    if homogeneous == "paper":
        distinct = np.where(distinct > 1, distinct, 0)
    return distinct / set_size


def chosen_sets(group_size: int, set_size: int, n_sets: int | None, rng: np.random.Generator) -> np.ndarray:
    """(K, n): all sets when n_sets is None or at least C(N, n), else n_sets of them without replacement."""
    every = all_sets(group_size, set_size)
    return every if n_sets is None else every[np.sort(rng.permutation(len(every))[:n_sets])]


def polychromic(set_size: int, homogeneous: str):
    """f(S) = mean reward x d(S) as a set score: (G, K, n) rewards and key codes of sets -> (G, K)."""

    def score(rewards: np.ndarray, codes: np.ndarray) -> np.ndarray:
        return rewards.mean(axis=-1) * set_diversity(codes, set_size, homogeneous)

    return score


def group_set_advantages(
    rewards: np.ndarray,
    codes: np.ndarray,
    set_score,
    *,
    set_size: int,
    aggregation: str,
    n_sets: int | None,
    rng: np.random.Generator,
) -> np.ndarray:
    """Set-RL advantages of groups of one size N > n under any symmetric set score.

    rewards: (G, N);  codes: (G, N) key codes (-1 degenerate);  set_score: (G, K, n) rewards and codes of
    the sets -> (G, K) f(S).  Returns: advantages (G, N)."""
    size = rewards.shape[1]
    sets = chosen_sets(size, set_size, n_sets, rng)  # (K, n), shared by the groups of this size
    score = set_score(rewards[:, sets], codes[:, sets])  # (G, K)
    advantage = score - score.mean(axis=1, keepdims=True)
    holds = np.zeros((len(sets), size))
    np.put_along_axis(holds, sets, 1.0, axis=1)  # (K, N): which rollouts each set holds
    per_rollout = (advantage @ holds) / (len(sets) * set_size / size)  # mean over its sets, in expectation
    return per_rollout * math.comb(size - 1, set_size - 1) if aggregation == "sum" else per_rollout


def set_rl(
    rewards: np.ndarray,
    group_ids: Sequence[Any] | np.ndarray,
    keys: Sequence[Any],
    *,
    set_size: int,
    aggregation: str,
    homogeneous: str,
    degenerate_key: str,
    n_sets: int | None,
    rng: np.random.Generator | int | None,
) -> tuple[np.ndarray, dict[str, Any]]:
    """Set-RL advantages of a batch and what the diagnostics read.

    rewards: (B,) in [0, 1];  group_ids: (B,);  keys: (B,) hashable strategy keys.
    Returns: advantages (B,), {"diversity": mean d over all sets used, "skipped": groups of N <= n,
    "codes": (B,) key codes}."""
    if aggregation not in _AGGREGATIONS:
        raise ValueError(f"set_rl aggregation {aggregation!r} is not one of {_AGGREGATIONS}")
    if homogeneous not in _HOMOGENEOUS_RULES:
        raise ValueError(f"set_rl homogeneous {homogeneous!r} is not one of {_HOMOGENEOUS_RULES}")
    if set_size < 1 or (n_sets is not None and n_sets < 1):
        raise ValueError(f"set_rl needs set_size >= 1 and n_sets >= 1 (or null), got {set_size} and {n_sets}")
    rng = np.random.default_rng(rng)  # a Generator passes through as itself
    codes = key_codes(keys, degenerate_key)
    groups, n_groups = group_codes(group_ids)
    sizes = np.bincount(groups)  # every group code in [0, n_groups) has a rollout
    unjudged = np.bincount(groups, weights=codes == -2, minlength=n_groups) > 0  # a failed judge call
    advantages, diversities = np.zeros(len(rewards)), []
    for size in np.unique(sizes[~unjudged]).tolist():
        if size <= set_size:
            continue
        chosen = np.flatnonzero((sizes == size) & ~unjudged)
        rows, local, slot, _ = group_slots(groups, n_groups, chosen)
        grid_r, grid_c = np.zeros((len(chosen), size)), np.full((len(chosen), size), -1)
        grid_r[local, slot], grid_c[local, slot] = rewards[rows], codes[rows]
        score = polychromic(set_size, homogeneous)
        adv = group_set_advantages(
            grid_r, grid_c, score, set_size=set_size, aggregation=aggregation, n_sets=n_sets, rng=rng
        )
        advantages[rows] = adv[local, slot]
        diversities.append(set_diversity(grid_c[:, all_sets(size, set_size)], set_size, homogeneous).ravel())
    return advantages, {
        "diversity": float(np.concatenate(diversities).mean()) if diversities else 0.0,
        "skipped": int(((sizes <= set_size) | unjudged).sum()),
        "codes": codes,
    }


def rollout_novelty(group_ids: Sequence[Any] | np.ndarray, codes: np.ndarray) -> np.ndarray:
    """(B,) in [0, 1]: the share of the other rollouts of a rollout's group whose key differs from its own;
    0 for a degenerate rollout or a group of one (GRPO+DIV's per-rollout d)."""
    groups, _ = group_codes(group_ids)
    others = np.bincount(groups)[groups] - 1  # the other rollouts of each rollout's group
    _, inverse, counts = np.unique(np.stack([groups, codes], axis=1), axis=0, return_inverse=True, return_counts=True)
    differ = others - (counts[inverse.ravel()] - 1)  # those whose key is not its own
    novelty = differ / np.maximum(others, 1)  # a group of one: 0 / 1
    return np.where(codes < 0, 0.0, novelty)


def strategy_diagnostics(
    group_ids: Sequence[Any] | np.ndarray, codes: np.ndarray, correct: np.ndarray, advantages: np.ndarray
) -> dict[str, float]:
    """Mean distinct keys per group (all, correct, incorrect rollouts; the degenerate key not counted) and the
    share of incorrect rollouts with a positive advantage (where a method rewards a failed but novel try)."""
    groups, n_groups = group_codes(group_ids)

    def distinct(mask: np.ndarray) -> float:
        kept = mask & (codes >= 0)
        pairs = np.unique(np.stack([groups[kept], codes[kept]]), axis=1).shape[1]  # (2, 0) for none
        present = np.unique(groups[mask]).size
        return pairs / present if present else 0.0

    incorrect = ~correct
    return {
        "distinct_keys": distinct(np.ones(len(codes), dtype=bool)),
        "distinct_keys_correct": distinct(correct),
        "distinct_keys_incorrect": distinct(incorrect),
        "incorrect_positive_share": float((advantages[incorrect] > 1e-12).mean()) if incorrect.any() else 0.0,
    }

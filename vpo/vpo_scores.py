"""VPO's raw scores: for every rollout, E_w[max over its answers of w . r] with the weights w drawn
once per prompt group, computed for the whole batch in one pass per distinct k (no loop over
rollouts). `vpo.advantage` z-normalises them within groups; the diagnostics read the rest.

Shapes: B rollouts in G groups; rollout j holds an (m_j, k_g) matrix; W weights per group.
"""

from __future__ import annotations

from typing import Any, Mapping, NamedTuple, Sequence

import numpy as np

from vpo.rollouts import as_matrix, group_codes, group_slots
from vpo.weights import draw_bucket_weights


class VPOScores(NamedTuple):
    raw: np.ndarray  # (B,) each rollout's E_w[best of its answers]; 0 for an empty rollout
    pool_best: np.ndarray  # (G,) E_w[best answer of the whole group]
    rows: np.ndarray  # (B,) answers per rollout
    codes: np.ndarray  # (B,) group index by first appearance
    n_groups: int


def vpo_scores(
    sub_scores: Sequence[Any],
    group_ids: Sequence[Any] | np.ndarray,
    n_weights: int,
    alpha: float,
    sampler: str,
    rng: np.random.Generator | int | None,
    weights: Mapping[Any, np.ndarray] | None,
) -> VPOScores:
    if len(sub_scores) != len(group_ids):
        raise ValueError(f"sub_scores has {len(sub_scores)} entries but group_ids has {len(group_ids)}")
    mats = [as_matrix(s) for s in sub_scores]
    rows = np.fromiter((m.shape[0] for m in mats), dtype=np.int64, count=len(mats))
    cols = np.fromiter((m.shape[1] for m in mats), dtype=np.int64, count=len(mats))
    codes, n_groups = group_codes(group_ids)
    has = rows > 0

    k_hi = np.full(n_groups, -1, dtype=np.int64)
    k_lo = np.full(n_groups, np.iinfo(np.int64).max, dtype=np.int64)
    np.maximum.at(k_hi, codes[has], cols[has])
    np.minimum.at(k_lo, codes[has], cols[has])
    bad = np.flatnonzero((k_hi >= 0) & (k_hi != k_lo))
    if len(bad):
        g = int(bad[0])
        raise ValueError(
            f"group {np.asarray(group_ids, dtype=object)[codes == g][0]!r} mixes reward vectors of "
            f"{k_lo[g]} and {k_hi[g]} dimensions; k must be the same for every rollout of a prompt"
        )
    if weights is None:
        buckets = draw_bucket_weights(k_hi, n_weights, alpha=alpha, sampler=sampler, rng=rng)
    else:
        ids = [group_ids[i] for i in np.unique(codes, return_index=True)[1]]
        buckets = []
        for k in np.unique(k_hi[k_hi > 0]).tolist():
            sel = np.flatnonzero(k_hi == k)
            missing = [ids[g] for g in sel if ids[g] not in weights]
            if missing:
                raise ValueError(f"weights has no entry for groups {missing[:5]}; give one (W, k) array per group id")
            w_stack = np.stack([np.asarray(weights[ids[g]], dtype=np.float64) for g in sel])
            if w_stack.ndim != 3 or w_stack.shape[2] != k:
                raise ValueError(
                    f"weights of groups with k = {k} must be (W, {k}) arrays of one W, got {w_stack.shape[1:]}"
                )
            buckets.append((k, sel, w_stack))

    raw = np.zeros(len(mats))
    pool_best = np.zeros(n_groups)
    for k, gsel, w_stack in buckets:  # one batched pass per distinct k
        rsel, lg, slot, count = group_slots(codes, n_groups, gsel)
        m_r = rows[rsel]
        full = m_r > 0
        stacked = np.concatenate([mats[i] for i in rsel[full]])
        if not np.all(np.isfinite(stacked)):
            raise ValueError("sub_scores contain NaN or inf; the reward function must return finite scores")
        start = np.cumsum(m_r) - m_r  # first row of each rollout in `stacked`
        n_max, m_max = int(count.max()), int(m_r.max())
        # Gather each rollout's rows into a (G_k, n_max, m_max) grid of row indices. Missing rows repeat
        # the rollout's first row and missing rollouts the group's first row: a repeated row never
        # changes a max, so no masking of the scored array is needed.
        group_first = np.full(len(gsel), len(stacked), dtype=np.int64)
        np.minimum.at(group_first, lg[full], start[full])
        src = np.broadcast_to(group_first[:, None, None], (len(gsel), n_max, m_max)).copy()
        src[lg[full], slot[full]] = start[full, None] + np.minimum(np.arange(m_max), m_r[full, None] - 1)
        grid = stacked[src].reshape(len(gsel), n_max * m_max, k)
        scored = np.matmul(grid, w_stack.transpose(0, 2, 1)).reshape(len(gsel), n_max, m_max, -1)
        own = scored.max(axis=2)  # (G_k, n_max, W): best answer of each rollout under each weight
        raw[rsel[full]] = own[lg[full], slot[full]].mean(axis=1)
        pool_best[gsel] = own.max(axis=1).mean(axis=1)

    return VPOScores(raw, pool_best, rows, codes, n_groups)


def vpo_raw_scores(
    sub_scores: Sequence[Any],
    group_ids: Sequence[Any] | np.ndarray,
    *,
    n_weights: int = 100,
    alpha: float = 1.0,
    sampler: str = "naive",
    rng: np.random.Generator | int | None = None,
    weights: Mapping[Any, np.ndarray] | None = None,
) -> np.ndarray:
    """VPO's raw score per rollout before group normalisation: mean over the group's weights of
    the best answer's weighted score.  Same inputs as `vpo_advantage`.  Returns: float64 (B,).
    """
    return vpo_scores(sub_scores, group_ids, n_weights, alpha, sampler, rng, weights).raw

"""Reading rollouts: the one place a reward matrix, a group id or a reward dict is interpreted.

`vpo.reward.compute_score` returns, per response, a dict whose `sub_scores` is the JSON text of the
(m, k) reward matrix (JSON because k varies per problem and veRL's extras must stay 1-D). The
trainers, the evaluation, the veRL plug-in and the metrics read those values only through:

    as_matrix(item)            one rollout's matrix as float64 (m, k), from JSON text, nested
                               lists or an array; None / "" / [] -> (0, 0)
    group_codes(group_ids)     integer group index per rollout, by first appearance
    group_slots(codes, ...)    the rollouts of chosen groups laid out by group and slot

Only numpy is needed here.
"""

from __future__ import annotations

import json
from typing import Any, Sequence

import numpy as np


def as_matrix(item: Any) -> np.ndarray:
    """One rollout's reward matrix as float64 (m, k); None, "" and empty become (0, 0).

    item: an (m, k) array or nested list, a (k,) vector (one answer), or JSON text of either.
    """
    if item is None:
        return np.zeros((0, 0))
    if isinstance(item, (str, bytes)):
        item = json.loads(item) if item.strip() else None
        if item is None:
            return np.zeros((0, 0))
    mat = np.asarray(item, dtype=np.float64)
    if mat.ndim == 1:
        mat = mat[None]
    if mat.ndim != 2:
        raise ValueError(f"a rollout's sub_scores must be an (m, k) matrix, got shape {mat.shape}")
    return mat if mat.size else np.zeros((0, 0))


def group_codes(group_ids: Sequence[Any] | np.ndarray) -> tuple[np.ndarray, int]:
    """Integer group index per rollout, numbered by first appearance.

    group_ids: (B,) hashable ids.  Returns: codes (B,) int64 in [0, G), and G.
    """
    index: dict[Any, int] = {}
    codes = np.fromiter((index.setdefault(g, len(index)) for g in group_ids), dtype=np.int64)
    return codes, len(index)


def group_slots(
    codes: np.ndarray, n_groups: int, gsel: np.ndarray
) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """The rollouts of groups `gsel`: batch index (R,), group position in gsel (R,), slot inside
    the group (R,) in batch order, and the group sizes (len(gsel),)."""
    rsel = np.flatnonzero(np.isin(codes, gsel))
    local = np.empty(n_groups, dtype=np.int64)
    local[gsel] = np.arange(len(gsel))
    lg = local[codes[rsel]]
    count = np.bincount(lg, minlength=len(gsel))
    order = np.argsort(lg, stable=True)  # slots in batch order
    slot = np.empty(len(rsel), dtype=np.int64)
    slot[order] = np.arange(len(rsel)) - (np.cumsum(count) - count)[lg[order]]
    return rsel, lg, slot, count

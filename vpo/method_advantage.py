"""The one call every trainer makes: a batch's advantages for a method of the method table.

`advantage_for_method` reads the method's row (vpo.methods): its estimator (vpo.advantage's registry)
and what that estimator reads (each rollout's (m, k) reward matrix, its single-answer channels, or one
scalar per rollout), passes the settings the estimator takes, and returns the advantages with the
estimator's diagnostics (`vpo.metrics.advantage_summary` sums the advantages up for the metrics line).
`setting_keys` says which method_settings keys a method takes (config checks read it).
"""

from __future__ import annotations

import inspect
from typing import Any, Mapping, Sequence

import numpy as np

from vpo.advantage import get_estimator
from vpo.methods import Method, get_method
from vpo.rollouts import as_matrix


def _channels(sub_scores: Sequence[Any]) -> np.ndarray:
    """(B, k_max) single-answer channels from sub_scores; shorter vectors and empty rows pad with 0."""
    mats = [as_matrix(s) for s in sub_scores]
    multi = [i for i, m in enumerate(mats) if m.shape[0] > 1]
    if multi:
        raise ValueError(f"gdpo expects one answer per rollout, rollout {multi[0]} has {mats[multi[0]].shape[0]}")
    # a batch without any channel: 0 or 1 zero columns give gdpo's same zero advantages
    width = max((m.shape[1] for m in mats), default=0)
    out = np.zeros((len(mats), width))
    for i, m in enumerate(mats):
        out[i, : m.shape[1]] = m.ravel()
    return out


_SUPPLIED = ("rng", "weights", "response_lengths", "strategy_keys", "correct")  # given by the caller, never configured


def _estimator_knobs(name: str) -> set[str]:
    """The settings an estimator takes from config.yaml's method_settings: its keyword parameters after
    the two data arguments (scores or sub_scores, group_ids), less those the caller supplies."""
    return set(list(inspect.signature(get_estimator(name)).parameters)[2:]) - set(_SUPPLIED)


def setting_keys(method: str | Method) -> set[str]:
    """Every method_settings key a method takes: its estimator's knobs, `alpha` (the Dirichlet
    concentration of the weights in its rows) when its reward is weighted, and `judge` (the served model
    that gives strategy keys, vpo.strategy_judge) when it reads strategy keys."""
    meth = get_method(method)
    read_by_caller = {"weighted": {"alpha"}, "keyed": {"judge"}}.get(meth.reward, set())  # rows' weights; keys
    return _estimator_knobs(meth.estimator) | read_by_caller


def advantage_for_method(
    method: str | Method,
    *,
    scores: Sequence[float] | np.ndarray | None,
    sub_scores: Sequence[Any] | None,
    group_ids: Sequence[Any] | np.ndarray,
    settings: Mapping[str, Any] | None = None,
    rng: np.random.Generator | int | None = None,
    response_lengths: Sequence[int] | np.ndarray | None = None,
    strategy_keys: Sequence[Any] | None = None,
    correct: Sequence[bool] | None = None,
) -> tuple[np.ndarray, dict[str, float]]:
    """Advantages of one batch for a method of the method table.

    The method's `reward` kind says what its estimator reads:
    matrix (vpo, vpo_single) and channels (gdpo) read `sub_scores`, B items each (m_i, k);
    scalar, sum and weighted read `scores`, (B,) the method's scalar from the reward function.
    settings: the method's config settings; keys the estimator does not take are ignored, and
    `rng` / `weights` are never taken from settings (weights are drawn, not configured).
    response_lengths: (B,) response tokens per rollout, for estimators that whiten over tokens (gdpo).
    strategy_keys, correct: (B,) each rollout's strategy key and whether it solved the problem (the reward's
    `strategy` and `acc`), for keyed methods (poly_epo, grpo_div).
    Returns: advantages float64 (B,), the estimator's diagnostics dict of floats (empty for most).
    """
    meth = get_method(method)
    fn = get_estimator(meth.estimator)
    params = inspect.signature(fn).parameters
    knobs = _estimator_knobs(meth.estimator)
    kwargs = {key: value for key, value in dict(settings or {}).items() if key in knobs}
    if "rng" in params:
        kwargs["rng"] = rng
    if "response_lengths" in params:
        kwargs["response_lengths"] = response_lengths
    diagnostics: dict[str, float] = {}
    if meth.reward in ("matrix", "channels"):
        if sub_scores is None:
            raise ValueError(f"method {meth.name!r} needs sub_scores (each rollout's (m, k) reward matrix)")
        if meth.reward == "matrix":
            adv, diagnostics = fn(sub_scores, group_ids, **kwargs)
        else:
            adv = fn(_channels(sub_scores), group_ids, **kwargs)
    elif meth.reward == "keyed":
        if scores is None or strategy_keys is None:
            raise ValueError(f"method {meth.name!r} needs scores and strategy_keys (the reward's `strategy`)")
        adv, diagnostics = fn(scores, group_ids, strategy_keys=strategy_keys, correct=correct, **kwargs)
    else:
        if scores is None:
            raise ValueError(f"method {meth.name!r} needs scores (one scalar per rollout)")
        adv = fn(scores, group_ids, **kwargs)
    return np.asarray(adv), diagnostics

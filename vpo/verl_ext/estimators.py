"""The advantage estimators veRL 0.9.1 runs for VPO and its baselines, and the rollouts they read.

veRL passes an estimator only `token_level_rewards (B, T)`, `response_mask (B, T)`, `index (B,)`
(the prompt uid) and the `algorithm` config. Each rollout's reward matrix and scalar come from the
reward function's `reward_extra_info`, which the `vpo_sync` trainer (vpo.verl_ext.trainer) stages,
row-aligned, around veRL's advantage step; every estimator then calls
`vpo.method_advantage.advantage_for_method`, so both trainers compute the same numbers.

    ESTIMATOR_METHODS     veRL estimator name -> method of vpo.methods
    stage_from_extra_info / staged    the staged rollouts of one advantage computation
    register_estimators   adds them to veRL's registry (called by vpo.verl_ext.plugin)
    judge_strategies      a served judge's strategy keys in place of the task's (keyed methods' `judge:`)
    response_rows / rollout_metrics   the step's rollout keys (vpo.backend.rollout_record, docs/metrics.md)

Importing this module needs numpy only; veRL and torch are imported when an estimator runs.
"""

from __future__ import annotations

import contextlib
import contextvars
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from vpo.backend import rollout_record
from vpo.method_advantage import advantage_for_method
from vpo.methods import get_method
from vpo.rollouts import as_matrix
from vpo.strategy_judge import judge_from_settings
from vpo.verl_ext import TRAINER_MODE

# veRL estimator name -> vpo method whose advantage it computes. grpo, goal_cond and random_weight
# train with veRL's own `grpo` estimator (same z-score); their differences live in the reward and
# the prompt, not in the estimator.
ESTIMATOR_METHODS: dict[str, str] = {
    "vpo": "vpo",
    "vpo_single": "vpo_single",
    "maxrl": "maxrl",
    "max_at_k": "max_at_k",
    "multi_rlvr": "multi_rlvr",
    "gdpo_v1": "gdpo",
    "poly_epo": "poly_epo",
    "grpo_div": "grpo_div",
}


def estimator_for_method(method: str) -> str:
    """The `algorithm.adv_estimator` value that trains `method` (a key of vpo.methods.METHODS)."""
    for estimator, name in ESTIMATOR_METHODS.items():
        if name == method:
            return estimator

    return get_method(method).estimator  # grpo, goal_cond, random_weight -> veRL's "grpo"


# ---------------------------------------------------------------------------------------------
# Staged rollouts: what the trainer fetched for the batch whose advantages are being computed.
# ---------------------------------------------------------------------------------------------


@dataclass
class _StagedRollouts:
    """Per-rollout reward extras for one advantage computation, in the batch's row order."""

    sub_scores: list[np.ndarray | None]  # B matrices (m_i, k_i) decoded from JSON; None if absent
    scores: np.ndarray | None  # (B,) float64 `score` from the reward function, or None if absent
    extras: list[dict]  # B raw reward_extra_info dicts (channels for metrics)
    step: int = 0  # global step, seeds the weight sampler together with algorithm.vpo.seed
    diagnostics: dict[str, float] = field(default_factory=dict)  # filled by the estimator


_STAGED: contextvars.ContextVar[_StagedRollouts | None] = contextvars.ContextVar("vpo_staged", default=None)


def _decode_sub_scores(value: Any) -> np.ndarray | None:
    """JSON text (or nested list) of an (m, k) matrix -> float64 array (m, k); None when empty."""
    matrix = as_matrix(value)
    return matrix if matrix.size else None


def stage_from_extra_info(extra_infos: Sequence[dict | None], step: int = 0) -> _StagedRollouts:
    """Build the staged rollouts from B reward_extra_info dicts (None = no reward extras)."""
    extras = [dict(info or {}) for info in extra_infos]
    sub_scores = [_decode_sub_scores(info.get("sub_scores")) for info in extras]
    have_scores = all("score" in info for info in extras) and extras
    scores = np.array([float(info["score"]) for info in extras], dtype=np.float64) if have_scores else None
    return _StagedRollouts(sub_scores=sub_scores, scores=scores, extras=extras, step=int(step))


@contextlib.contextmanager
def staged(rollouts: _StagedRollouts) -> Iterator[_StagedRollouts]:
    """Make `rollouts` visible to the registered estimators for the duration of the block."""
    token = _STAGED.set(rollouts)
    try:
        yield rollouts
    finally:
        _STAGED.reset(token)


# ---------------------------------------------------------------------------------------------
# Estimators
# ---------------------------------------------------------------------------------------------


def _config_get(config: Any, key: str, default: Any = None) -> Any:
    if config is None:
        return default
    getter = getattr(config, "get", None)
    return getter(key, default) if getter is not None else getattr(config, key, default)


def method_settings_from_config(config: Any) -> tuple[dict, int]:
    """(settings dict, seed) from the `algorithm` config node's `vpo` block."""
    block = _config_get(config, "vpo", None)
    settings = _config_get(block, "settings", None) or {}
    try:  # DictConfig -> plain dict
        from omegaconf import OmegaConf

        if OmegaConf.is_config(settings):
            settings = OmegaConf.to_container(settings, resolve=True)
    except ImportError:
        pass
    return dict(settings), int(_config_get(block, "seed", 0) or 0)


def _advantages_for_batch(method: str, token_level_rewards, response_mask, index, config=None):
    """Run vpo.advantage for `method` on one veRL batch; returns ((B, T), (B, T)) torch tensors.

    token_level_rewards (B, T) with the score at the last response token; response_mask (B, T);
    index (B,) prompt uids. Reward scores and sub_scores come from the staged rollouts when the
    trainer staged them, else the scores are the row sums of token_level_rewards.
    """
    import torch

    batch_size = token_level_rewards.shape[0]
    rollouts = _STAGED.get()
    if rollouts is not None and len(rollouts.extras) != batch_size:
        raise RuntimeError(
            f"staged reward extras cover {len(rollouts.extras)} rollouts but the batch has {batch_size}; "
            "the staged rows must be the batch's rows in order"
        )
    if rollouts is not None and rollouts.scores is not None:
        scores = rollouts.scores
    else:
        scores = (token_level_rewards * response_mask).sum(dim=-1).detach().cpu().double().numpy()
    sub_scores = rollouts.sub_scores if rollouts is not None else None
    keyed = method in ("poly_epo", "grpo_div")  # they read each rollout's strategy key and verdict too
    if rollouts is None and (keyed or method in ("vpo", "vpo_single", "gdpo")):
        raise RuntimeError(
            f"estimator for {method!r} needs each rollout's reward extras (sub_scores, strategy), but none were "
            f"staged; run veRL with trainer.v1.trainer_mode={TRAINER_MODE} (the vpo.verl_ext trainer)"
        )
    settings, seed = method_settings_from_config(config)
    step = rollouts.step if rollouts is not None else 0
    rng = np.random.default_rng([seed, step])
    group_ids = [str(uid) for uid in (index if index is not None else range(batch_size))]
    lengths = response_mask.sum(dim=-1).detach().cpu().double().numpy()
    advantages, diagnostics = advantage_for_method(
        method,
        scores=scores,
        sub_scores=sub_scores,
        group_ids=group_ids,
        settings=settings,
        rng=rng,
        response_lengths=lengths,
        strategy_keys=[info.get("strategy") for info in rollouts.extras] if keyed else None,
        correct=[float(info.get("acc", 0.0)) > 0 for info in rollouts.extras] if keyed else None,
    )
    if rollouts is not None:
        rollouts.diagnostics.update({k: float(v) for k, v in diagnostics.items() if np.isscalar(v)})
    per_rollout = torch.as_tensor(np.asarray(advantages), dtype=token_level_rewards.dtype)
    per_rollout = per_rollout.to(token_level_rewards.device)
    token_advantages = per_rollout.unsqueeze(-1) * response_mask.to(token_level_rewards.dtype)
    return token_advantages, token_advantages


def _make_estimator(method: str):
    """A veRL advantage-estimator function computing `method`'s advantages."""

    def estimator(token_level_rewards, response_mask, index=None, config=None, **kwargs):
        return _advantages_for_batch(method, token_level_rewards, response_mask, index, config)

    estimator.__name__ = f"{method}_advantage_for_verl"
    estimator.__qualname__ = estimator.__name__
    return estimator


ESTIMATORS = {name: _make_estimator(method) for name, method in ESTIMATOR_METHODS.items()}


def register_estimators() -> None:
    """Register every estimator of ESTIMATORS with veRL (idempotent)."""
    from verl.trainer.ppo import core_algos

    for name, fn in ESTIMATORS.items():
        core_algos.register_adv_est(name)(fn)


def judge_strategies(
    rollouts: _StagedRollouts, group_ids: Sequence, questions: Sequence[str], responses: Sequence[str], config=None
) -> dict[str, float]:
    """With a keyed method whose settings name a `judge` (vpo.strategy_judge), replace each staged
    rollout's `strategy` by the judge's key; returns the judge's metrics (none without a judge)."""
    block = _config_get(config, "vpo", None)
    method = _config_get(block, "method", None)
    settings, _ = method_settings_from_config(config)
    judge = judge_from_settings(settings) if method and get_method(method).reward == "keyed" else None
    if judge is None:
        return {}
    task_keys = [str(info.get("strategy", "")) for info in rollouts.extras]
    keys, metrics = judge(questions, responses, [str(uid) for uid in group_ids], task_keys)
    for info, key in zip(rollouts.extras, keys):
        info["strategy"] = key
    return metrics


# ---------------------------------------------------------------------------------------------
# The step's rollout metrics (logged by veRL's tracking, e.g. the file logger)
# ---------------------------------------------------------------------------------------------


def response_rows(
    advantages: Sequence[np.ndarray],
    masks: Sequence[np.ndarray],
    responses: Sequence[np.ndarray],
    *,
    eos_token_id: int,
    max_length: int,
) -> tuple[np.ndarray, np.ndarray, list[bool]]:
    """Per rollout of a veRL batch: the advantage its response's tokens carry, its response tokens, and
    whether it stopped before the token limit (its last token is the end-of-sequence token, or it is
    shorter than `max_length`, veRL's `data.max_response_length`).

    advantages, masks, responses: B 1-D arrays, a response's per-token advantages, mask and token ids
    (veRL's nested rows after the advantage step). Returns (B,) advantages, (B,) lengths, B bools."""
    adv, lengths, ended = [], [], []
    for values, mask, tokens in zip(advantages, masks, responses, strict=True):
        on = np.asarray(mask) > 0
        n = int(on.sum())
        adv.append(float(np.asarray(values)[on][0]) if n else 0.0)  # an outcome advantage: every token's the same
        lengths.append(n)
        ended.append(n > 0 and (n < max_length or int(np.asarray(tokens)[on][-1]) == eos_token_id))
    return np.asarray(adv, dtype=np.float64), np.asarray(lengths, dtype=np.float64), ended


def rollout_metrics(
    rollouts: _StagedRollouts,
    group_ids: Sequence,
    *,
    objectives: Sequence[str],
    advantages: np.ndarray,
    lengths: np.ndarray,
    ended: Sequence[bool],
    judged: dict | None = None,
) -> dict[str, float]:
    """The step's rollout keys, built as every backend builds them (`vpo.backend.rollout_record`) from the
    staged reward extras and `response_rows`, under a `vpo/` prefix the launcher's `convert_metrics` drops.
    judged: a served judge's metrics (`judge_strategies`)."""
    record = rollout_record(
        rollouts.extras,
        [str(uid) for uid in group_ids],
        objectives=objectives,
        sub_scores=rollouts.sub_scores,
        strategies=None,  # the reward's (or the judge's, written over them) in the extras
        advantages=advantages,
        diagnostics={**rollouts.diagnostics, **(judged or {})},
        lengths=lengths,
        ended=ended,
    )
    return {f"vpo/{key}": value for key, value in record.items()}

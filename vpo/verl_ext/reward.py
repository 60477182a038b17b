"""The reward function veRL calls: `reward.custom_reward_function.path=pkg://vpo.verl_ext.reward`.

veRL's naive reward manager calls `compute_score(data_source, solution_str, ground_truth,
extra_info, **kwargs)` once per response; a dict result becomes the rollout's `reward_extra_info`
(every key) and its `score` the token-level reward. The scoring itself is `vpo.reward.compute_score`,
the same function the local trainer and evaluation use; this wrapper only drops the keyword
arguments veRL adds for model-based rewards.
"""

from __future__ import annotations

from typing import Any

from vpo.reward import compute_score as score_response


def compute_score(
    data_source: str, solution_str: str, ground_truth: Any, extra_info: dict | None = None, **verl_kwargs: Any
) -> dict:
    """Score one response; returns vpo.reward.compute_score's dict (score, sub_scores, channels, acc).

    verl_kwargs (`reward_router_address`, `reward_model_tokenizer`, reward_kwargs) are unused:
    every task's reward is rule-based.
    """
    return score_response(data_source, solution_str, ground_truth, extra_info)

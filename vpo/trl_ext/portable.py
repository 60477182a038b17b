"""VPO in any TRL release: each completion's VPO score as a plain TRL reward function.

`EstimatorGRPOTrainer` (vpo.trl_ext.trainer) replaces TRL 1.16's advantages and needs that release.
Every TRL `GRPOTrainer` takes reward functions and, with `scale_rewards="group"`, z-scores their sum
within each prompt's group of completions. `VPOScore` is such a function: a completion's VPO score
E_w[max over its answers of w . r] with the group's weights w ~ Dirichlet(alpha) (n_weights draws,
shared by the group: drawn from the seed, the optimizer step and the prompt's text, so completions of
one prompt on different processes share them). TRL's group scaling of these scores is the project's VPO
advantage up to a constant and an epsilon: TRL divides by the unbiased standard deviation + 1e-4, the
project (veRL) by the population one + 1e-6, so TRL's = sqrt((N - 1) / N) x the project's for groups of
N, but for those epsilons (tests/test_trl_ext.py measures it). Use it as
`GRPOTrainer(..., reward_funcs=[VPOScore(scorer)], args=GRPOConfig(scale_rewards="group", ...))`.

Importing this module needs numpy only, not TRL.
"""

from __future__ import annotations

import hashlib
import json
from typing import Any, Callable

import numpy as np

from vpo.rollouts import as_matrix
from vpo.vpo_scores import vpo_scores
from vpo.weights import sample_weights

# what TRL passes a reward function besides the dataset's columns (TRL 1.16; older releases pass fewer)
TRL_KEYWORDS = {"prompts", "completions", "completion_ids", "trainer_state", "log_extra", "log_metric", "environments"}


def prompt_key(prompt: Any) -> str:
    """A prompt's text as one string (a conversation as JSON): completions with equal keys are one group."""
    return prompt if isinstance(prompt, str) else json.dumps(prompt, sort_keys=True, default=str)


class VPOScore:
    """A TRL reward function: `scorer(completion_text, **row_columns) -> {"sub_scores": (m, k) as JSON
    or a list, ...}` gives each completion's reward matrix; returns each completion's VPO score. `last`
    keeps the last call's group keys, matrices, weights and scores."""

    __name__ = "vpo_score"  # TRL names the reward's metrics after it

    def __init__(
        self, scorer: Callable[..., dict], *, n_weights: int = 100, alpha: float = 1.0, sampler: str = "naive",
        seed: int = 0,
    ):  # fmt: skip
        self.scorer, self.n_weights, self.alpha, self.sampler, self.seed = scorer, n_weights, alpha, sampler, seed
        self.calls = 0
        self.last: dict[str, Any] = {}

    def group_weights(self, key: str, k: int, step: int) -> np.ndarray:
        """(n_weights, k) Dirichlet weights of one prompt's group at one optimizer step."""
        digest = int.from_bytes(hashlib.sha256(key.encode()).digest()[:8], "little")
        rng = np.random.default_rng([self.seed, step, digest])
        return sample_weights(k, self.n_weights, alpha=self.alpha, sampler=self.sampler, rng=rng)

    def __call__(self, prompts, completions, **columns) -> list[float]:
        texts = [c[-1]["content"] if isinstance(c, list) else c for c in completions]  # conversational or plain
        names = [key for key in columns if key not in TRL_KEYWORDS]
        results = [self.scorer(text, **{key: columns[key][i] for key in names}) for i, text in enumerate(texts)]
        matrices = [as_matrix(result["sub_scores"]) for result in results]
        keys = [prompt_key(prompt) for prompt in prompts]
        state = columns.get("trainer_state")
        step = int(state.global_step) if state is not None else self.calls
        self.calls += 1
        widths = {key: matrix.shape[1] for key, matrix in zip(keys, matrices) if matrix.size}
        weights = {key: self.group_weights(key, widths.get(key, 1), step) for key in dict.fromkeys(keys)}
        scores = vpo_scores(matrices, keys, self.n_weights, self.alpha, self.sampler, None, weights)[0]
        self.last = {"keys": keys, "matrices": matrices, "weights": weights, "scores": scores}
        return [float(s) for s in scores]

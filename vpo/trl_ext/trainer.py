"""`EstimatorGRPOTrainer`: TRL's GRPOTrainer whose advantages come from the project's estimators.

TRL scores each completion with one scalar per reward function and normalises within groups of
`num_generations` consecutive completions. Here one reward function, `MatrixReward`, calls a scorer that
returns the completion's scalar score and its (m, k) reward matrix (the project's task reward,
`task_scorer`, or your own); TRL records the scalar as its reward and the trainer keeps the matrices.
After TRL has generated, scored and computed its log-probabilities, the trainer replaces TRL's advantages
with `vpo.method_advantage.advantage_for_method` of the whole generation batch (gathered over processes, every
process drawing the same Dirichlet weights from one seeded generator), grouped as TRL groups it, and
logs the estimator's diagnostics and the pool diversity beside TRL's own metrics.

The update that matches veRL's (the local trainer and veRL 0.9.1's `ppo_loss`), set by `grpo_arguments`:
- `loss_type="bnpo"`: token-mean over each optimizer step's own tokens (veRL's `token-mean`; TRL's
  "dapo" divides by the generation batch's mean tokens per step instead);
- `epsilon = epsilon_high = clip_ratio` and `delta = clip_ratio_c`: TRL's upper bound on the ratio,
  with delta > 1 + epsilon, is veRL's dual clip (for A < 0 both give -A min(max(r, clip(r)), c); for
  A > 0 both give -A min(r, clip(r)));
- `beta = kl_coef` with TRL's k3 estimator (veRL's low_var_kl, without its clamp to [-10, 10]);
- `steps_per_generation = ppo_mini_batches`, `num_iterations = 1`: each generation batch of
  prompts_per_step x rollouts_per_prompt completions is split into that many optimizer steps, each
  with the old log-probabilities of the policy before the first (TRL shuffles the batch before
  splitting; veRL keeps its order);
- `scale_rewards="none"`: TRL's own normalisation is not used (the estimator's replaces it).
"""

from __future__ import annotations

import time
from typing import Any, Callable

import numpy as np

from vpo.strategy_judge import judge_from_settings, row_question
from vpo.trl_ext import SUPPORTED_TRL, require_supported_trl
from vpo.trl_ext.portable import TRL_KEYWORDS  # what TRL passes a reward function besides the row's columns

require_supported_trl()

import torch  # noqa: E402
from trl import GRPOTrainer  # noqa: E402

from vpo.backend import prepare_rows
from vpo.data import read_rows
from vpo.method_advantage import advantage_for_method
from vpo.methods import get_method
from vpo.metrics import advantage_summary, group_pool_diversity
from vpo.reward import compute_score
from vpo.rollouts import as_matrix


def task_scorer(
    completion: str, *, data_source: str, reward_model: dict, extra_info: dict | None = None, **_: Any
) -> dict:
    """The project's reward (`vpo.reward.compute_score`) of one completion of a prepared row
    (`vpo.prompts.prepare_row`): {"score": float, "sub_scores": (m, k) as JSON, ...}."""
    return compute_score(data_source, completion, reward_model["ground_truth"], extra_info)


class MatrixReward:
    """A TRL reward function around `scorer(completion_text, **row_columns) -> {"score", "sub_scores"}`:
    returns the scores to TRL and keeps this process's results of the last call in `results`."""

    __name__ = "vpo_score"  # TRL names the reward's metrics after it

    def __init__(self, scorer: Callable[..., dict]):
        self.scorer = scorer
        self.results: list[dict] = []
        self.texts: list[tuple[str, str]] = []  # (question, completion) of each result

    def __call__(self, prompts, completions, **columns) -> list[float]:
        texts = [c[-1]["content"] if isinstance(c, list) else c for c in completions]  # conversational or plain
        names = [key for key in columns if key not in TRL_KEYWORDS]
        self.results = [self.scorer(text, **{key: columns[key][i] for key in names}) for i, text in enumerate(texts)]
        self.texts = [(_question(prompt), text) for prompt, text in zip(prompts, texts)]  # what a judge reads
        return [float(result["score"]) for result in self.results]


def _question(prompt) -> str:
    """A TRL prompt's problem: a conversation's last user message (`row_question`), or the plain text."""
    return row_question({"prompt": prompt}) if isinstance(prompt, list) else str(prompt)


def grpo_arguments(settings, *, max_new_tokens: int, output_dir: str, seed: int, **changes):
    """A `trl.GRPOConfig` that takes the update the local trainer and veRL take (module docstring) with
    `settings` (`vpo.settings.LocalTrainerSettings`) on CPU; `changes` override any field."""
    from trl import GRPOConfig

    rollouts = settings.prompts_per_step * settings.rollouts_per_prompt
    fields = dict(
        output_dir=output_dir,
        seed=seed,
        use_cpu=True,
        bf16=False,
        report_to=[],
        logging_steps=1,
        num_generations=settings.rollouts_per_prompt,  # generation batch: per-device batch x steps_per_generation
        per_device_train_batch_size=rollouts // settings.ppo_mini_batches,
        gradient_accumulation_steps=1,
        steps_per_generation=settings.ppo_mini_batches,
        num_iterations=1,
        max_steps=settings.steps * settings.ppo_mini_batches,  # optimizer steps: ppo_mini_batches per RL step
        max_completion_length=max_new_tokens,
        temperature=settings.temperature,
        top_p=settings.top_p,
        learning_rate=settings.lr,
        lr_scheduler_type="constant",
        warmup_steps=0,
        weight_decay=settings.weight_decay,
        adam_beta1=0.9,
        adam_beta2=0.999,
        adam_epsilon=1e-8,
        max_grad_norm=settings.grad_clip,
        loss_type="bnpo",
        epsilon=settings.clip_ratio,
        epsilon_high=settings.clip_ratio,
        delta=settings.clip_ratio_c,
        beta=settings.kl_coef,
        entropy_coef=settings.entropy_coef,
        scale_rewards="none",
        mask_truncated_completions=False,
    )
    return GRPOConfig(**{**fields, **changes})


class EstimatorGRPOTrainer(GRPOTrainer):
    """GRPOTrainer with the advantages of `method` (a name of `vpo.methods.METHODS`).

    model, args (a `trl.GRPOConfig` with scale_rewards="none"), train_dataset and every other keyword
    go to GRPOTrainer; the reward function is `MatrixReward(scorer)`, so `reward_funcs` is not taken.
    method_settings: the estimator's knobs (alpha, n_weights, sampler, k); estimator_seed seeds its draws.
    """

    def __init__(
        self,
        model,
        *,
        method: str,
        args,
        scorer: Callable[..., dict] = task_scorer,
        method_settings: dict | None = None,
        estimator_seed: int = 0,
        **kwargs,
    ):

        if "reward_funcs" in kwargs:
            raise TypeError("EstimatorGRPOTrainer scores with `scorer`; it takes no reward_funcs")
        if args.scale_rewards != "none":
            raise ValueError(
                f"GRPOConfig(scale_rewards={args.scale_rewards!r}): the {method} estimator "
                "normalises the rewards itself; set scale_rewards='none'"
            )
        self.method = get_method(method)
        self.method_settings = dict(method_settings or {})
        self.estimator_rng = np.random.default_rng([estimator_seed, 1])  # the local trainer's stream
        self.matrix_reward = MatrixReward(scorer)
        keyed = self.method.reward == "keyed"
        self.judge = judge_from_settings(self.method_settings) if keyed else None  # vpo.strategy_judge
        self.last_batch: dict = {}  # the last generation batch's results, advantages and diagnostics
        super().__init__(model, reward_funcs=[self.matrix_reward], args=args, **kwargs)

    def _generate_and_score_completions(self, inputs):
        from accelerate.utils import gather_object

        started = time.time()
        output = super()._generate_and_score_completions(inputs)
        results = gather_object(self.matrix_reward.results)  # the whole generation batch, in TRL's order
        lengths = self.accelerator.gather(output["completion_mask"].sum(1)).cpu().numpy()
        ended = (output["completion_ids"] == self.processing_class.eos_token_id).any(1)  # not cut by the limit
        mode = "train" if self.model.training else "eval"
        n = self.num_generations if mode == "train" else self.num_generations_eval
        group_ids = np.arange(len(results)) // n  # TRL's sampler repeats each prompt n times in a row
        subs = [as_matrix(result["sub_scores"]) for result in results]
        # a scorer of the user's own may give no strategy key: then a keyed method stops, naming it
        keys = [r["strategy"] for r in results] if all("strategy" in r for r in results) else None
        judged = {}
        if self.judge is not None and keys is not None:  # the served judge's keys replace the task's
            questions, texts = zip(*gather_object(self.matrix_reward.texts))
            keys, judged = self.judge(questions, texts, group_ids, keys)
        advantages, diagnostics = advantage_for_method(
            self.method,
            scores=np.array([float(r["score"]) for r in results]),
            sub_scores=subs,
            group_ids=group_ids,
            settings=self.method_settings,
            rng=self.estimator_rng,
            response_lengths=lengths,
            strategy_keys=keys,
            correct=[float(r.get("acc", 0.0)) > 0 for r in results],
        )
        local = slice(self.accelerator.process_index * len(inputs), (self.accelerator.process_index + 1) * len(inputs))
        output["advantages"] = torch.as_tensor(
            advantages[local], dtype=torch.float32, device=output["advantages"].device
        )
        self._log_advantages(advantages)
        diagnostics = {**diagnostics, **judged}
        for key, value in {**advantage_summary(advantages, group_ids), **diagnostics}.items():  # TRL's own log
            if np.isscalar(value):
                self._metrics[mode][key].append(float(value))
        diversity = group_pool_diversity(subs, group_ids)
        self._metrics[mode]["pool_diversity"].append(diversity)
        # what vpo.trl_ext.run records of the batch in metrics.jsonl
        self.last_batch = {
            "results": results,
            "advantages": advantages,
            "strategies": keys,  # the task's strategy keys, or the judge's
            "diagnostics": diagnostics,
            "lengths": lengths,
            "seconds": time.time() - started,
            "ended": self.accelerator.gather(ended).cpu().numpy(),
        }
        return output

    def _log_advantages(self, advantages: np.ndarray) -> None:
        """The completions table (`log_completions`, what W&B shows) with the advantages the loss uses:
        TRL has just logged its own for the whole generation batch; they are replaced in place."""
        logged = getattr(self, "_logs", {}).get("advantages")
        if logged is None or len(logged) < len(advantages):
            raise RuntimeError(
                f"TRL {SUPPORTED_TRL}.x keeps the completions table's advantages in `_logs['advantages']`; this TRL "
                "does not: its internals moved (see vpo/trl_ext/__init__.py)"
            )
        for _ in range(len(advantages)):
            logged.pop()
        logged.extend(float(a) for a in advantages)


def task_dataset(data_dir: str, method: str, *, m: int = 3, seed: int = 0, alpha: float | None = 1.0):
    """A task's train split (`vpo preprocess`) as a `datasets.Dataset` of the rows `method` trains on
    (`vpo.prompts.prepare_row`: the prompt rewritten for m answers or a goal, as chat messages, and the
    columns `task_scorer` reads)."""
    from datasets import Dataset

    return Dataset.from_list(prepare_rows(read_rows(data_dir, "train"), method, m, seed, alpha=alpha))

"""The embedded RL loop: veRL's GRPO-family semantics on a tiny model, in one CPU process.

Each step takes the next `prompts_per_step` prompts of a shuffled epoch, samples
`rollouts_per_prompt` responses per prompt (the group) at temperature 1 with the KV cache, scores
them with `vpo.reward.compute_score`, turns the scores into one advantage per rollout with the
estimator the method table names (`vpo.method_advantage.advantage_for_method`), and takes
`ppo_mini_batches` AdamW steps on the dual-clip PPO loss (token-mean) plus the low-variance KL to
the base model. Methods differ only in the estimator and in the prompt rewrite (`prepare_row`).
"""

from __future__ import annotations

import json
import logging
import time
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from vpo import tracking
from vpo.backend import (
    RunSpec,
    TrainResult,
    check_base_model,
    prepare_rows,
    rollout_record,
    run_record,
    save_pretrained_atomic,
    trained_in_process,
    truncate_metrics,
)
from vpo.data import read_rows
from vpo.generate import SamplingSettings, load_pretrained, render_prompts, sample_responses
from vpo.llama_sampler import supports
from vpo.local import checkpoint as ckpt
from vpo.local.group_forward import StepBatch
from vpo.local.rl import optimizer_for, policy_update
from vpo.method_advantage import advantage_for_method
from vpo.methods import get_method
from vpo.progress import Progress
from vpo.reward import compute_score
from vpo.rollouts import as_matrix
from vpo.settings import LocalTrainerSettings
from vpo.strategy_judge import judge_from_settings, row_question
from vpo.task import resolve

log = logging.getLogger("vpo.local.trainer")


def batch_indices(n_rows: int, batch: int, step: int, seed: int) -> list[int]:
    """Row indices of 1-based `step`: consecutive slices of per-epoch shuffles (no repeats in an epoch).

    Depends only on (n_rows, batch, step, seed), so a resumed run sees the same prompts.
    """
    if batch > n_rows:
        raise ValueError(f"prompts_per_step ({batch}) exceeds the {n_rows} training rows")
    per_epoch = n_rows // batch  # drop_last, as veRL's dataloader
    epoch, slot = divmod(step - 1, per_epoch)
    order = np.random.default_rng([seed, 0, epoch]).permutation(n_rows)
    return [int(i) for i in order[slot * batch : (slot + 1) * batch]]


def _score_rollouts(rows: list[dict], texts: list[str]) -> list[dict]:
    """compute_score of every rollout (its score, sub_scores, channels, acc and num_answers)."""
    return [
        compute_score(row["data_source"], text, row["reward_model"]["ground_truth"], row.get("extra_info"))
        for row, text in zip(rows, texts)
    ]


@dataclass
class Learner:
    """What one RL step reads and updates: the models, the optimizer, the prompts and the estimator."""

    policy: object  # the model being trained (vpo.tiny_llama.TinyLlama or LlamaForCausalLM)
    reference: object  # the frozen base model (the KL term's reference)
    optimizer: object  # the policy's AdamW
    tokenizer: object  # the models' tokenizer
    rows: list  # the prepared training rows (vpo.prompts.prepare_row)
    prompt_ids: list  # each row's rendered prompt as token ids
    method: object  # vpo.methods.Method
    task: object  # vpo.task.Task
    settings: LocalTrainerSettings  # config.yaml's local_trainer block
    method_settings: dict  # estimator knobs (alpha, sampler, n_weights, k)
    sampling: object  # vpo.generate.SamplingSettings of the rollouts
    rng: np.random.Generator  # the estimator's draws (weights, goals)
    judge: object = None  # vpo.strategy_judge.StrategyJudge of a keyed method's `judge:` setting, or None

    def step(self, step: int, seed: int) -> dict:
        """RL step `step` (1-based) of a run with data seed `seed`: sample, score, estimate, update;
        returns its metrics record."""
        import torch

        cfg, tokenizer, n = self.settings, self.tokenizer, self.settings.rollouts_per_prompt
        t_step = time.time()
        picked = batch_indices(len(self.rows), cfg.prompts_per_step, step, seed)
        prompts = [self.prompt_ids[i] for i in picked]
        responses = sample_responses(self.policy, tokenizer, prompts, n, self.sampling, batch_size=cfg.generation_batch)
        t_gen = time.time() - t_step
        texts = [tokenizer.decode(r, skip_special_tokens=True) for r in responses]
        group_ids = np.repeat(np.arange(len(picked)), n)
        results = _score_rollouts([self.rows[i] for i in picked for _ in range(n)], texts)
        scores = np.array([float(r["score"]) for r in results])
        subs = [as_matrix(r["sub_scores"]) for r in results]
        batch = StepBatch(prompts, responses, n, tokenizer.pad_token_id)
        mask = batch.mask
        keys, judged = [r["strategy"] for r in results], {}
        if self.judge is not None:  # the served judge's strategy keys replace the task's
            questions = [row_question(self.rows[i]) for i in picked for _ in range(n)]
            keys, judged = self.judge(questions, texts, group_ids, keys)
        advantages, diagnostics = advantage_for_method(
            self.method,
            scores=scores,
            sub_scores=subs,
            group_ids=group_ids,
            settings=self.method_settings,
            rng=self.rng,
            response_lengths=mask.sum(1).numpy(),
            strategy_keys=keys,
            correct=[r["acc"] > 0 for r in results],
        )
        adv = torch.as_tensor(np.asarray(advantages, dtype=np.float32))
        with torch.no_grad():
            ref_logp, _ = batch.logprobs(self.reference, temperature=cfg.temperature)
        stats = policy_update(self.policy, self.optimizer, batch, adv, ref_logp, cfg)
        return {
            "step": step,
            **rollout_record(
                results,
                group_ids,
                objectives=self.task.objective_names,
                sub_scores=subs,
                strategies=keys,
                advantages=advantages,
                diagnostics={**diagnostics, **judged},
                lengths=mask.sum(1).numpy(),
                ended=[bool(r) and r[-1] == tokenizer.eos_token_id for r in responses],
            ),
            **{key: float(np.mean(values)) for key, values in stats.items()},
            "generation_s": round(t_gen, 4),
            "step_s": round(time.time() - t_step, 4),
        }


@dataclass
class Models:
    """What a run trains from: the policy and its frozen reference, their tokenizer, the run's rows and
    their prompts as token ids, and the rollouts' token limit."""

    policy: object
    reference: object
    tokenizer: object
    rows: list
    prompt_ids: list
    max_new_tokens: int


def load_models(spec: RunSpec, method, m: int) -> Models:
    """The base model (twice: policy and reference) and the prepared rows; ValueError when the base was
    built for another prompt form, is no model the local forward computes, or the prompts do not fit."""
    check_base_model(spec, method, m)
    rows = prepare_rows(
        read_rows(spec.data_dir, "train"), spec.method, m, spec.seed, alpha=spec.method_settings.get("alpha")
    )
    policy, tokenizer = load_pretrained(spec.base_model)
    reference, _ = load_pretrained(spec.base_model)
    reference.eval().requires_grad_(False)
    if not supports(policy):
        raise ValueError(
            f"{spec.base_model} is not a float32 Llama as `vpo base-model` builds it: the local "
            "trainer's forward (vpo/local/group_forward.py) computes only that network"
        )
    prompt_ids = [
        tokenizer(t, add_special_tokens=False)["input_ids"]
        for t in render_prompts(tokenizer, [r["prompt"] for r in rows])
    ]
    max_new = spec.settings.max_new_tokens_for(method.prompt)
    longest = max(len(p) for p in prompt_ids) + max_new
    if longest > policy.config.max_position_embeddings:
        raise ValueError(
            f"prompt ({longest - max_new} tokens) + max_new_tokens ({max_new}) exceeds the model's "
            f"{policy.config.max_position_embeddings} positions; raise local_trainer.max_positions and rebuild the "
            "base model"
        )
    return Models(policy, reference, tokenizer, rows, prompt_ids, max_new)


def resume(ckpt_root: Path, record: dict, models: Models, optimizer, np_rng, cfg) -> tuple[object, int]:
    """(optimizer, step) after the newest checkpoint this run made (models.policy replaced by its model,
    the generators restored), or the optimizer given and step 0."""
    import torch

    latest, state = ckpt.resumable_checkpoint(ckpt_root, record)
    if latest is None:
        return optimizer, 0
    models.policy, _ = load_pretrained(latest / "model")
    optimizer = optimizer_for(models.policy, cfg)
    optimizer.load_state_dict(state["optimizer"])
    torch.set_rng_state(state["torch_rng"])
    np_rng.bit_generator.state = state["numpy_rng"]
    log.warning("resuming %s from checkpoint step %d", ckpt_root.parent, int(state["step"]))
    return optimizer, int(state["step"])


def train_local(spec: RunSpec) -> TrainResult:
    """Run (or resume) one cell: the local backend's entry (`vpo.train.BACKENDS`)."""
    import torch

    cfg, method, task = spec.settings, get_method(spec.method), resolve(spec.task)
    m = spec.answers
    out = Path(spec.out_dir)
    ckpt_root, metrics_path = out / "checkpoints", out / "metrics.jsonl"
    if cfg.threads:
        torch.set_num_threads(cfg.threads)
    models = load_models(spec, method, m)
    optimizer = optimizer_for(models.policy, cfg)
    np_rng = np.random.default_rng([spec.seed, 1])
    torch.manual_seed(spec.seed)
    record = run_record(spec, "local")
    optimizer, start_step = resume(ckpt_root, record, models, optimizer, np_rng, cfg)
    out.mkdir(parents=True, exist_ok=True)
    truncate_metrics(metrics_path, start_step)
    models.policy.train()
    tracker = _start_tracking(spec, m, out)
    learner = _learner_for(spec, models, optimizer, method, task, np_rng)
    t_run = time.time()
    progress = Progress(cfg.steps, "step", start_done=start_step)
    for step in range(start_step + 1, cfg.steps + 1):
        metrics = learner.step(step, spec.seed)
        metrics["wall_time_s"] = round(time.time() - t_run, 4)
        with open(metrics_path, "a") as fh:
            fh.write(json.dumps(metrics) + "\n")
        tracking.log_step(tracker, metrics, step)
        progress.update(
            step,
            f"score {metrics['score_mean']:.3f} diversity {metrics['pool_diversity']:.3f} "
            f"{metrics['step_s']:.2f} s/step",
        )
        if step % cfg.checkpoint_every == 0 or step == cfg.steps:
            ckpt.save_checkpoint(
                ckpt_root,
                step,
                models.policy,
                models.tokenizer,
                optimizer,
                np_rng,
                record=record,
                keep=cfg.keep_checkpoints,
            )
    save_pretrained_atomic(models.policy, models.tokenizer, ckpt_root / "final")
    tracking.finish(tracker)
    return trained_in_process(spec, start_step, t_run)


def _start_tracking(spec: RunSpec, m: int, out: Path):
    """The cell's W&B run (none when wandb.mode is disabled), with the run's settings as its config."""
    config = {
        "method_settings": spec.method_settings,
        "m": m,
        "preset": spec.preset,
        "config_hash": spec.config_hash,
        **spec.settings.to_dict(),
    }
    return tracking.start_run(
        spec.wandb, task=spec.task, method=spec.method, seed=spec.seed, out_dir=out, config=config
    )


def _learner_for(spec: RunSpec, models: Models, optimizer, method, task, np_rng) -> Learner:
    """The run's Learner: the models and optimizer given, rollouts sampled at the settings' temperature
    and top-p up to the prompt form's token limit, batches drawn from np_rng."""
    cfg = spec.settings
    sampling = SamplingSettings(
        temperature=cfg.temperature, top_p=cfg.top_p, max_new_tokens=models.max_new_tokens, seed=None
    )
    return Learner(
        models.policy,
        models.reference,
        optimizer,
        models.tokenizer,
        models.rows,
        models.prompt_ids,
        method,
        task,
        cfg,
        spec.method_settings,
        sampling,
        np_rng,
        judge_from_settings(spec.method_settings) if method.reward == "keyed" else None,
    )

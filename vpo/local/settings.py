"""Typed settings of the embedded CPU backend (config.yaml block `local_trainer`).

Defaults are the cpu preset's sizes (DESIGN section 5; measured on a shared 2-core machine: width 64
keeps an RL step of 64 rollouts near 2 s on one thread). The RL knobs mirror veRL's
(`actor.clip_ratio`, `kl_loss_coef`, `ppo_mini_batch_size`, `rollout.n`); only the scale is smaller.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field

from vpo.local.model import TinyModelSettings


@dataclass(frozen=True)
class LocalTrainerSettings:
    # -- tiny model (the base model step builds it) --
    hidden_size: int = 64  # model width
    num_layers: int = 2  # transformer blocks
    num_heads: int = 4  # attention heads
    intermediate_size: int = 128  # MLP width
    max_positions: int = 1024  # longest prompt + response the model can see
    # -- warm start: supervised training on the task's synthetic demonstrations --
    warm_start_steps: int = 500  # optimizer steps
    warm_start_batch: int = 16  # sequences per step
    warm_start_lr: float = 3e-3  # AdamW learning rate (cosine decay to 10%)
    warm_start_multi_fraction: float = 0.5  # share of multi-answer demonstrations (rest single/goal)
    warm_start_goal_fraction: float = 0.15  # share of goal-conditioned prompts among single-answer ones
    # -- RL loop --
    steps: int = 30  # RL steps (one batch of prompts each)
    prompts_per_step: int = 8  # prompts per step (veRL train_batch_size)
    rollouts_per_prompt: int = 8  # group size G (veRL rollout.n)
    ppo_mini_batches: int = 2  # optimizer updates per step (batch / ppo_mini_batch_size)
    lr: float = 5e-4  # AdamW learning rate, constant, no warmup (tiny models take large steps)
    weight_decay: float = 0.01  # AdamW weight decay
    grad_clip: float = 1.0  # max gradient norm
    clip_ratio: float = 0.2  # PPO clip, low and high
    clip_ratio_c: float = 3.0  # dual-clip bound for negative advantages
    kl_coef: float = 1e-3  # low-variance KL to the reference (base) model
    entropy_coef: float = 0.0  # entropy bonus (0 as in the paper)
    temperature: float = 1.0  # rollout sampling temperature
    top_p: float = 1.0  # rollout nucleus sampling
    max_new_tokens: dict = field(default_factory=lambda: {"single": 40, "multi": 120, "goal": 40})
    # ^ response token limit per prompt kind (multi must fit m answers)
    checkpoint_every: int = 10  # steps between checkpoints (and at the last step)
    keep_checkpoints: int = 2  # how many step_N directories to keep
    generation_batch: int = 256  # sequences per generation forward
    threads: int = 1  # torch intra-op threads (1: parallel jobs do not oversubscribe); 0 = torch's default

    def model_settings(self) -> TinyModelSettings:
        return TinyModelSettings(
            hidden_size=self.hidden_size, num_layers=self.num_layers, num_heads=self.num_heads,
            intermediate_size=self.intermediate_size, max_positions=self.max_positions,
        )

    def max_new_tokens_for(self, prompt_kind: str) -> int:
        if prompt_kind not in self.max_new_tokens:
            raise ValueError(
                f"local_trainer.max_new_tokens has no entry for prompt kind {prompt_kind!r}; "
                f"add it next to {sorted(self.max_new_tokens)} in config.yaml"
            )
        return int(self.max_new_tokens[prompt_kind])

    @classmethod
    def from_dict(cls, values: dict | None) -> "LocalTrainerSettings":
        """Build from config's `local_trainer` block; an unknown key is an error naming it."""
        values = dict(values or {})
        known = {f.name for f in dataclasses.fields(cls)}
        unknown = sorted(set(values) - known)
        if unknown:
            raise ValueError(f"unknown local_trainer key(s) {unknown}; known keys: {sorted(known)}")
        if "max_new_tokens" in values:
            values["max_new_tokens"] = {**cls().max_new_tokens, **dict(values["max_new_tokens"])}
        settings = cls(**values)
        if settings.prompts_per_step % settings.ppo_mini_batches:
            raise ValueError(
                f"local_trainer.prompts_per_step ({settings.prompts_per_step}) must be divisible by "
                f"ppo_mini_batches ({settings.ppo_mini_batches})"
            )
        if settings.rollouts_per_prompt < 2:
            raise ValueError("local_trainer.rollouts_per_prompt must be >= 2 (group-normalised advantages)")
        return settings

    def to_dict(self) -> dict:
        return dataclasses.asdict(self)

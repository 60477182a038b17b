"""Typed settings of config.yaml's trainer blocks: `local_trainer` (the embedded CPU trainer) and
`verl` (the veRL launcher). config.yaml holds every value and its comment; these classes say what each
field is, the config check validates with them (the `local_trainer` schema is built from its class,
so the two cannot drift), and the trainers read them. Only the standard library is needed here.

The local trainer's RL knobs mirror veRL's (`actor.clip_ratio`, `kl_loss_coef`,
`ppo_mini_batch_size`, `rollout.n`); only the scale is smaller (width 64 keeps an RL step of 64
rollouts under half a second on one thread: benchmarks/rl_step.py).
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from typing import Any, Mapping

# The values that make sense, as JSON Schema keywords: the config schema enforces them, so a nonsense
# value (a negative learning rate) stops the plan before any job runs.
POSITIVE, NON_NEGATIVE = {"exclusiveMinimum": 0}, {"minimum": 0}
LIMITS = {
    "hidden_size": POSITIVE,
    "num_layers": POSITIVE,
    "num_heads": POSITIVE,
    "intermediate_size": POSITIVE,
    "max_positions": POSITIVE,
    "warm_start_steps": NON_NEGATIVE,
    "warm_start_batch": POSITIVE,
    "warm_start_lr": POSITIVE,
    "steps": POSITIVE,
    "max_new_tokens": {"additionalProperties": {"type": "integer", "minimum": 1}},  # per prompt kind
    "prompts_per_step": POSITIVE,
    "rollouts_per_prompt": {"minimum": 2},  # a group of one has no within-group baseline
    "ppo_mini_batches": POSITIVE,
    "lr": POSITIVE,
    "weight_decay": NON_NEGATIVE,
    "grad_clip": POSITIVE,
    "clip_ratio": POSITIVE,
    "clip_ratio_c": {"exclusiveMinimum": 1},  # dual clip: a bound above 1 + clip
    "kl_coef": NON_NEGATIVE,
    "entropy_coef": NON_NEGATIVE,
    "temperature": POSITIVE,
    "top_p": {"exclusiveMinimum": 0, "maximum": 1},
    "checkpoint_every": POSITIVE,
    "keep_checkpoints": POSITIVE,
    "generation_batch": POSITIVE,
    "threads": NON_NEGATIVE,
}


@dataclass(frozen=True)
class LocalTrainerSettings:
    """The `local_trainer` block of config.yaml, where every value is set (and commented)."""

    # -- tiny model (the base model step builds it) --
    hidden_size: int  # model width
    num_layers: int  # transformer blocks
    num_heads: int  # attention heads
    intermediate_size: int  # MLP width
    max_positions: int  # longest prompt + response the model can see
    # -- warm start: supervised training on the task's synthetic demonstrations --
    warm_start_steps: int  # optimizer steps
    warm_start_batch: int  # sequences per step
    warm_start_lr: float  # AdamW learning rate (cosine decay to 10%)
    # -- RL loop --
    steps: int  # RL steps (one batch of prompts each)
    prompts_per_step: int  # prompts per step (veRL train_batch_size)
    rollouts_per_prompt: int  # group size G (veRL rollout.n)
    ppo_mini_batches: int  # optimizer updates per step (batch / ppo_mini_batch_size)
    lr: float  # AdamW learning rate, constant, no warmup
    weight_decay: float  # AdamW weight decay
    grad_clip: float  # max gradient norm
    clip_ratio: float  # PPO clip, low and high
    clip_ratio_c: float  # dual-clip bound for negative advantages
    kl_coef: float  # low-variance KL to the reference (base) model
    entropy_coef: float  # entropy bonus
    temperature: float  # rollout sampling temperature
    top_p: float  # rollout nucleus sampling
    max_new_tokens: dict  # response token limit per prompt kind (single, multi, goal)
    checkpoint_every: int  # steps between checkpoints (and at the last step)
    keep_checkpoints: int  # how many step_N directories to keep
    generation_batch: int  # sequences per generation forward
    threads: int  # torch intra-op threads; 0 = torch's default

    def model_settings(self):
        """The tiny model's architecture (vpo.tiny_llama.TinyModelSettings)."""
        from vpo.tiny_llama import TinyModelSettings

        return TinyModelSettings(
            hidden_size=self.hidden_size,
            num_layers=self.num_layers,
            num_heads=self.num_heads,
            intermediate_size=self.intermediate_size,
            max_positions=self.max_positions,
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
        missing = sorted(known - set(values))
        if missing:
            raise ValueError(f"local_trainer is missing {missing}; config.yaml's local_trainer block sets every key")
        values["max_new_tokens"] = dict(values["max_new_tokens"])
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


# ---- verl ------------------------------------------------------------------------------------
@dataclass(frozen=True)
class BatchPreset:
    """Per-step sizes (paper section 6.1); prompts, not rollouts, unless said otherwise."""

    train_batch_size: int  # prompts per training step
    rollout_n: int  # rollouts per prompt (the group size)
    ppo_mini_batch_size: int  # prompts per optimizer step
    micro_batch_per_gpu: int  # rollouts per forward pass per GPU (training and log-probs)


@dataclass(frozen=True)
class VerlSettings:
    """The `verl` block of config.yaml (its schema: workflow/schemas/config.schema.yaml)."""

    device: str  # cuda: GPU nodes with vLLM | cpu: veRL's own trainer on CPU with the tiny base model
    batch_presets: dict[str, BatchPreset]  # named per-step sizes
    batch_preset: str  # one of batch_presets, or auto (by GPU count and model size)
    gpus: int | None  # GPUs per training job; None: task_settings.<task>.gpus
    logger: tuple[str, ...]  # veRL's loggers (file writes the run's metrics.jsonl)
    save_freq: int  # checkpoint every N steps
    test_freq: int  # validate every N steps
    min_tokens_per_answer: int  # preflight: max_response_length / m must leave this many tokens per answer
    overrides: tuple[str, ...]  # extra Hydra overrides passed verbatim to veRL

    @classmethod
    def from_dict(cls, values: Mapping[str, Any] | None) -> "VerlSettings":
        """Build from config's `verl` block; an unknown or missing key is an error naming it."""
        values = dict(values or {})
        known = {f.name for f in dataclasses.fields(cls)}
        unknown, missing = sorted(set(values) - known), sorted(known - set(values))
        if unknown or missing:
            raise ValueError(
                f"verl: unknown key(s) {unknown}, missing {missing}; config.yaml's verl block sets every key"
            )
        presets = {name: BatchPreset(**dict(sizes)) for name, sizes in dict(values["batch_presets"]).items()}
        return cls(
            **{
                **values,
                "batch_presets": presets,
                "logger": tuple(values["logger"]),
                "overrides": tuple(str(o) for o in values["overrides"] or ()),
            }
        )

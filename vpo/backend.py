"""What every training backend does to a cell, said once: the cell's spec (`RunSpec`) and what training it
returns (`TrainResult`), its rows, the base-model check, the record a checkpoint must match to be resumed
(`run_record`), the part of a metrics.jsonl line the rollouts give (docs/metrics.md), the metrics'
truncation to a resumed checkpoint, and the atomic save of a model. Every backend's entry has one shape,
`train(spec: RunSpec) -> TrainResult` (`vpo.train.BACKENDS` names them), and `vpo train` writes train.json
from the result.

The backends sit side by side (`vpo/local`, `vpo/trl_ext`, `vpo/verl_ext`): none imports another's package
(tests/test_architecture.py); what two of them share lives here. `rollout_record` builds a step's
rollout keys for all three: the local trainer and TRL from their rollouts, veRL's `vpo_sync` trainer from
the staged reward extras and the advantages veRL wrote back (`vpo.verl_ext.estimators.rollout_metrics`,
under a `vpo/` prefix the launcher's `convert_metrics` drops), so a key means one thing whichever backend
wrote it (tests/test_metrics_keys.py, tests/test_verl_advantage.py).
"""

from __future__ import annotations

import json
import os
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Sequence

import numpy as np

from vpo.atomic import atomic_dir, write_text_atomic
from vpo.config import answers_per_rollout, cell_digest, file_digest, method_settings
from vpo.methods import get_method
from vpo.metrics import advantage_summary, group_pool_diversity, group_strategies
from vpo.prompts import prepare_row
from vpo.settings import LocalTrainerSettings


@dataclass
class RunSpec:
    """One training cell, as every backend takes it."""

    task: str  # task name (vpo.task registry)
    method: str  # method name (vpo.methods.METHODS)
    seed: int  # training seed: data order, rollouts, weight draws, goal weights
    data_dir: str  # directory with train.parquet
    base_model: str | None  # warm-started model directory (`vpo base-model`); veRL on GPUs: None, the task's model
    out_dir: str  # the run directory
    settings: LocalTrainerSettings  # config.yaml's local_trainer block (the local and TRL backends)
    method_settings: dict = field(default_factory=dict)  # estimator knobs (alpha, sampler, n_weights, k)
    m: int = 3  # answers per rollout for multi-answer methods
    preset: str = "cpu"  # recorded in train.json
    config_hash: str = ""  # recorded in train.json and in the run record
    wandb: dict | None = None  # config.yaml's wandb block (vpo.tracking); None: no W&B run
    config: dict = field(default_factory=dict)  # the resolved config: veRL builds the cell's command from it
    print_command: bool = False  # veRL: print the command and train nothing

    @property
    def answers(self) -> int:
        """Answers per rollout the cell's responses hold: m for a multi-answer method, else 1."""
        return self.m if get_method(self.method).multi_answer else 1

    @classmethod
    def for_cell(
        cls, cfg: dict, task: str, method: str, seed: int, *, data_dir, out_dir, base_model=None, print_command=False
    ) -> RunSpec:
        """The spec of a cell of the resolved config `cfg`."""
        return cls(
            task=task,
            method=method,
            seed=int(seed),
            data_dir=str(data_dir),
            base_model=str(base_model) if base_model else None,
            out_dir=str(out_dir),
            settings=LocalTrainerSettings.from_dict(cfg["local_trainer"]),
            method_settings=dict(method_settings(cfg, method)),
            m=answers_per_rollout(cfg, task, method),
            preset=cfg["preset"],
            config_hash=cell_digest(cfg, task, method),
            wandb=cfg.get("wandb"),
            config=dict(cfg),
            print_command=print_command,
        )


@dataclass
class TrainResult:
    """What a backend's `train(spec)` returns; `vpo train` writes train.json from it when `trained`."""

    status: int = 0  # the job's exit status: 0 trained (or the command printed), else the failure's
    trained: bool = True  # whether a finished training run is there to record
    steps: int = 0  # training steps done
    record: dict = field(default_factory=dict)  # the backend's own train.json keys


def trained_in_process(spec: RunSpec, resumed_from_step: int, loop_started: float) -> TrainResult:
    """The result of a cell the local or TRL backend trained in this process: its steps, the step it
    resumed from, the RL loop's seconds, the base model and the settings, as train.json records them."""
    return TrainResult(
        steps=spec.settings.steps,
        record={
            "resumed_from_step": int(resumed_from_step),
            "train_loop_s": round(time.time() - loop_started, 3),
            "base_model": str(spec.base_model),
            "settings": spec.settings.to_dict(),
        },
    )


def run_record(spec: RunSpec, backend: str, *, model: str | None = None, data: str | Path | None = None) -> dict:
    """What produces a run's checkpoints, stored beside them by every backend: a checkpoint whose record
    differs is never resumed. The backend, the settings' hash, the cell, its answers per rollout, the model
    (digests of a warm-started base model's weights and build, else the model's name `model`) and a digest
    of the training split (`data`, default the spec's train.parquet)."""
    base = Path(spec.base_model) if spec.base_model else None
    if base is not None and (base / "model.safetensors").is_file():
        build = base / "base.json"
        source = {
            "base_model": file_digest(base / "model.safetensors"),
            "base_build": file_digest(build) if build.is_file() else None,
        }
    else:
        source = {"model": model}
    return {
        "backend": backend,
        "config_hash": spec.config_hash,
        "method": spec.method,
        "seed": int(spec.seed),
        "m": spec.answers,
        **source,
        "data": file_digest(Path(data) if data else Path(spec.data_dir) / "train.parquet"),
    }


def prepare_rows(rows: list[dict], method: str, m: int, seed: int, alpha: float | None = 1.0) -> list[dict]:
    """The data rows as `method` trains on them (`vpo.prompts.prepare_row`: m answers, goal weights)."""
    return [prepare_row(row, method, m, seed, alpha=alpha) for row in rows]


def check_base_model(spec: RunSpec, method, m: int) -> None:
    """Raise ValueError unless `spec.base_model` was warm-started on the prompt form (and m) of `method`."""
    base = Path(spec.base_model)
    built = json.loads((base / "base.json").read_text()) if (base / "base.json").is_file() else {}
    if built.get("mode", method.prompt) != method.prompt:
        raise ValueError(
            f"{spec.method} answers {method.prompt} prompts but {base} was warm-started on "
            f"{built['mode']} prompts; pass results/<preset>/base/{spec.task}/{method.prompt} "
            f"(vpo base-model --mode {method.prompt})"
        )
    if method.prompt == "multi" and built.get("m", m) != m:
        raise ValueError(
            f"{spec.method} writes m = {m} answers but {base} was warm-started on {built['m']}; "
            f"build its base with `vpo base-model --mode multi --m {m}`"
        )


def rollout_record(
    results: Sequence[dict],
    group_ids: Sequence[Any],
    *,
    objectives: Sequence[str],
    sub_scores: Sequence[Any],
    strategies: Sequence[Any] | None,
    advantages: np.ndarray,
    diagnostics: dict,
    lengths: Sequence[float],
    ended: Sequence[bool],
) -> dict[str, float]:
    """The rollout keys of one step's metrics.jsonl line (docs/metrics.md), in their order.

    results: (B,) the reward's dicts (vpo.reward: score, acc, num_answers, each objective);
    group_ids: (B,); sub_scores: (B,) reward matrices; strategies: (B,) the strategy keys the estimator
    read (the task's or a judge's; None: the reward's); advantages: (B,); diagnostics: the estimator's
    (and the judge's) scalars; lengths: (B,) response tokens; ended: (B,) whether a response stopped
    before the token limit."""
    scores = np.array([float(r["score"]) for r in results])
    keys = strategies if strategies is not None else [r.get("strategy") for r in results]
    return {
        "score_mean": float(scores.mean()),
        "score_max": float(scores.max()),
        **{f"reward/{name}": float(np.mean([r[name] for r in results])) for name in objectives},
        "acc": float(np.mean([r["acc"] for r in results])),  # some answer solved (the reward's verdict)
        "pool_diversity": group_pool_diversity(sub_scores, group_ids),
        "strategies_per_group": group_strategies(keys, group_ids),
        **advantage_summary(advantages, group_ids),
        **{k: float(v) for k, v in dict(diagnostics).items() if np.isscalar(v)},
        "parse_failure_rate": float(np.mean([r["num_answers"] == 0 for r in results])),
        "response_length_mean": float(np.mean(lengths)),
        "truncated_share": float(np.mean([not e for e in ended])),  # stopped by the token limit
    }


def truncate_metrics(path: str | os.PathLike, last_step: int) -> int:
    """Keep only the lines of `metrics.jsonl` with step <= last_step (rewritten atomically).

    A run killed after its last checkpoint may have logged later steps; the resumed run logs them
    again, so they are dropped first. Returns the number of lines kept.
    """
    path = Path(path)
    if not path.is_file():
        return 0
    kept = []
    for line in path.read_text().splitlines():
        try:
            record = json.loads(line)
        except json.JSONDecodeError:
            continue  # a line cut short by the kill
        if record.get("step", 0) <= last_step:
            kept.append(line)
    write_text_atomic(path, "".join(line + "\n" for line in kept))
    return len(kept)


def save_pretrained_atomic(model, tokenizer, out_dir: str | os.PathLike) -> Path:
    """Save model + tokenizer to `out_dir` through vpo.atomic.atomic_dir: a killed writer leaves
    only a hidden temporary sibling, never a half-written `out_dir`."""
    with atomic_dir(out_dir) as tmp:
        model.save_pretrained(tmp)
        tokenizer.save_pretrained(tmp)
    return Path(out_dir)

"""`vpo train --backend trl`: one cell through TRL's GRPOTrainer (`EstimatorGRPOTrainer`), on the
tiny base model (a transformers Llama) and the `local_trainer` settings, leaving the run directory the
local trainer leaves: `metrics.jsonl` (one record per RL step), `checkpoints/checkpoint-<N>` (TRL's, N
in optimizer steps, each with the run's `record.json` and the estimator's generator, written last),
`checkpoints/final` (the model in Hugging Face layout, what `vpo merge` copies).

A checkpoint is resumed only when its `record.json` matches this run (config, method, seed, m, base
model, data); a checkpoint without one (a kill while TRL was writing it) is skipped. metrics.jsonl keeps
the local trainer's keys, read from TRL's log where TRL computes them: `pg_loss` is TRL's `loss` less
kl_coef x `kl` (plus entropy_coef x `entropy`), `clipfrac` TRL's `clip_ratio/region_mean`, both the mean
of the step's optimizer steps; `generation_s` is TRL's generate-and-score call (generation, scoring,
old and reference log-probabilities); TRL logs no `ppo_kl`, so the record has none.
"""

from __future__ import annotations

import json
import logging
import re
import shutil
import time
from pathlib import Path

import numpy as np

from vpo.atomic import set_aside
from vpo.backend import (
    RunSpec,
    TrainResult,
    check_base_model,
    rollout_record,
    run_record,
    save_pretrained_atomic,
    trained_in_process,
    truncate_metrics,
)
from vpo.methods import get_method
from vpo.progress import Progress
from vpo.rollouts import as_matrix
from vpo.task import resolve

log = logging.getLogger("vpo.trl_ext.run")
_CHECKPOINT_DIR = re.compile(r"^checkpoint-(\d+)$")
RECORD = "record.json"  # the run's provenance, written into a TRL checkpoint once it is complete
_ESTIMATOR_STATE = "estimator_rng.json"  # the estimator's numpy generator at the checkpoint


def resumable(root: Path, record: dict) -> Path | None:
    """The newest whole checkpoint of this unfinished run under `root`, or None to train from step 0.

    A finished run (`final/` present: a forced retrain) or a checkpoint of other settings sets every
    checkpoint aside and starts afresh, as the local trainer does; a newest checkpoint that is cut off (no
    record) or damaged (a file that does not load) is named, moved to `damaged-<name>`, and the one before it
    is tried."""
    if (root / "final").exists():
        aside = set_aside(root)
        log.warning("starting from step 0: the checkpointed run had finished; old checkpoints moved to %s", aside)
        return None
    found = sorted((int(m.group(1)), p) for p in root.glob("checkpoint-*") if (m := _CHECKPOINT_DIR.match(p.name)))
    for _, path in reversed(found):
        try:
            stored = json.loads((path / RECORD).read_text())
        except (OSError, ValueError):
            stored = None
        if stored is not None and stored != record:
            why = f"{path.name} was made by other settings, data, base model or method"
            log.warning("starting from step 0: %s; old checkpoints moved to %s", why, set_aside(root))
            return None
        damage = f"{path / RECORD} is missing or cut off" if stored is None else _checkpoint_damage(path)
        if damage is None:
            return path
        aside = path.with_name(f"damaged-{path.name}")  # out of TRL's checkpoint-* names: never resumed or rotated
        if aside.exists():
            shutil.rmtree(aside)
        path.rename(aside)
        log.warning(
            "checkpoint %s cannot be resumed (%s); moved to %s, trying the one before", path, damage, aside.name
        )
    return None


def _checkpoint_damage(path: Path) -> str | None:
    """What keeps a TRL checkpoint from being resumed (the file, and why), or None: every file a resume reads
    is read here, the way TRL's Trainer reads it."""
    import torch
    from safetensors.torch import load_file
    from transformers.trainer_pt_utils import safe_globals

    readers = {
        "config.json": lambda f: json.loads(f.read_text()),
        "trainer_state.json": lambda f: json.loads(f.read_text()),
        _ESTIMATOR_STATE: lambda f: json.loads(f.read_text()),
        "model.safetensors": load_file,
        "optimizer.pt": lambda f: torch.load(f, map_location="cpu", weights_only=True),
        "scheduler.pt": lambda f: torch.load(f, weights_only=True),
    }
    for name, read in readers.items():
        try:
            read(path / name)
        except Exception as err:
            return f"{path / name}: {' '.join(str(err).split())[:200]}"
    try:
        with safe_globals():
            torch.load(path / "rng_state.pth", weights_only=True)
    except Exception as err:
        return f"{path / 'rng_state.pth'}: {' '.join(str(err).split())[:200]}"
    return None


def _step_record(batch: dict, logs: list[dict], *, step: int, objectives, settings) -> dict:
    """The metrics.jsonl record of RL step `step`: the generation batch's (from EstimatorGRPOTrainer's
    `last_batch`) and the mean of its optimizer steps' TRL logs."""
    results = batch["results"]

    def mean_of(key):
        return float(np.mean([row[key] for row in logs if key in row]))

    kl, entropy = mean_of("kl") if settings.kl_coef else 0.0, mean_of("entropy")
    return {
        "step": step,
        **rollout_record(
            results,
            np.arange(len(results)) // settings.rollouts_per_prompt,  # TRL repeats each prompt n times in a row
            objectives=objectives,
            sub_scores=[as_matrix(r["sub_scores"]) for r in results],
            strategies=batch.get("strategies"),
            advantages=batch["advantages"],
            diagnostics=batch["diagnostics"],
            lengths=batch["lengths"],
            ended=batch["ended"],
        ),
        "pg_loss": mean_of("loss") - settings.kl_coef * kl + settings.entropy_coef * entropy,
        "kl": kl,
        "entropy": entropy,
        "clipfrac": mean_of("clip_ratio/region_mean"),
        "grad_norm": mean_of("grad_norm"),
        "generation_s": round(batch["seconds"], 4),
    }


def train_trl(spec: RunSpec) -> TrainResult:
    """Run (or resume) one cell with TRL: the trl backend's entry (`vpo.train.BACKENDS`)."""
    import torch
    from transformers import TrainerCallback

    cfg, method = spec.settings, get_method(spec.method)
    m = spec.answers
    out, base = Path(spec.out_dir), Path(spec.base_model)
    root, metrics_path = out / "checkpoints", out / "metrics.jsonl"
    check_base_model(spec, method, m)
    if cfg.threads:
        torch.set_num_threads(cfg.threads)
    record = run_record(spec, "trl")
    latest = resumable(root, record) if root.is_dir() else None
    per_step = cfg.ppo_mini_batches  # optimizer steps per RL step
    start_step = 0 if latest is None else int(_CHECKPOINT_DIR.match(latest.name).group(1)) // per_step
    out.mkdir(parents=True, exist_ok=True)
    truncate_metrics(metrics_path, start_step)

    trainer, tokenizer = _build_trainer(spec, method, m, base, root)
    if latest is not None:
        trainer.estimator_rng.bit_generator.state = json.loads((latest / _ESTIMATOR_STATE).read_text())
        log.warning("resuming %s from %s (step %d)", out, latest.name, start_step)
    objectives = resolve(spec.task).objective_names
    progress = Progress(cfg.steps, "step", start_done=start_step)
    t_run = time.time()

    class Recorder(TrainerCallback):
        """One metrics.jsonl line per RL step; a checkpoint's run record and generator, written last."""

        def __init__(self):
            self.logs, self.t_step = [], time.time()

        def on_log(self, args, state, control, logs=None, **kwargs):
            if "loss" not in (logs or {}):  # the end-of-training summary
                return
            self.logs.append(logs)
            if state.global_step % per_step:
                return
            step = state.global_step // per_step
            row = _step_record(trainer.last_batch, self.logs, step=step, objectives=objectives, settings=cfg)
            row.update(step_s=round(time.time() - self.t_step, 4), wall_time_s=round(time.time() - t_run, 4))
            with open(metrics_path, "a") as fh:
                fh.write(json.dumps(row) + "\n")
            progress.update(step, f"score {row['score_mean']:.3f} diversity {row['pool_diversity']:.3f}")
            self.logs, self.t_step = [], time.time()

        def on_save(self, args, state, control, **kwargs):
            saved = root / f"checkpoint-{state.global_step}"
            (saved / _ESTIMATOR_STATE).write_text(json.dumps(trainer.estimator_rng.bit_generator.state))
            (saved / RECORD).write_text(json.dumps(record))

    trainer.add_callback(Recorder())
    if start_step < cfg.steps:
        trainer.train(resume_from_checkpoint=str(latest) if latest is not None else None)
        model = trainer.model
    else:  # killed after its last checkpoint: TRL would train one optimizer step past max_steps on resuming
        from transformers import AutoModelForCausalLM

        model = AutoModelForCausalLM.from_pretrained(latest)
    done = max(start_step * per_step, trainer.state.global_step)
    if done != cfg.steps * per_step:
        raise RuntimeError(f"TRL ended {out} after {done} optimizer steps; the settings ask for {cfg.steps * per_step}")
    save_pretrained_atomic(model, tokenizer, root / "final")
    return trained_in_process(spec, start_step, t_run)


def _build_trainer(spec, method, m: int, base: Path, root: Path):
    """(TRL trainer, tokenizer) of a cell: the base model and its tokenizer (left padding), the local
    trainer's settings as TRL's arguments, checkpoints every `checkpoint_every` RL steps under `root`."""
    from transformers import AutoModelForCausalLM, AutoTokenizer

    from vpo.trl_ext.trainer import EstimatorGRPOTrainer, grpo_arguments, task_dataset

    cfg = spec.settings
    tokenizer = AutoTokenizer.from_pretrained(base)
    tokenizer.padding_side = "left"
    args = grpo_arguments(
        cfg,
        max_new_tokens=cfg.max_new_tokens_for(method.prompt),
        output_dir=str(root),
        seed=spec.seed,
        save_strategy="steps",
        save_steps=cfg.checkpoint_every * cfg.ppo_mini_batches,  # optimizer steps per RL step
        save_total_limit=cfg.keep_checkpoints,
        disable_tqdm=True,
        dataloader_pin_memory=False,
    )
    trainer = EstimatorGRPOTrainer(
        AutoModelForCausalLM.from_pretrained(base),
        method=spec.method,
        args=args,
        processing_class=tokenizer,
        train_dataset=task_dataset(
            spec.data_dir, spec.method, m=m, seed=spec.seed, alpha=spec.method_settings.get("alpha")
        ),
        method_settings=spec.method_settings,
        estimator_seed=spec.seed,
    )
    return trainer, tokenizer

"""Checkpoints and run files of the local trainer.

`<run>/checkpoints/step_<N>/` holds `model/` (Hugging Face format, tokenizer included),
`trainer_state.pt` (step, optimizer state, torch and numpy RNG states) and `record.json`, what
produced it (the cell's settings digest, the base model's identity, method, seed, the training data's
digest). A checkpoint is written to a temporary sibling and renamed, so a directory named
`step_<N>` is always complete.

A restart resumes only from a checkpoint whose record equals the new run's, and only while the
checkpointed run is unfinished (no `final/`): a rerun after a finished run, or with other settings,
data or base model, trains from step 0, and the old checkpoints are moved aside, not deleted.
A newest checkpoint that cannot be loaded gives way to the one before it.
"""

from __future__ import annotations

import json
import logging
import os
import re
import shutil
from pathlib import Path
from typing import Any

from vpo.atomic import atomic_dir, set_aside

_STEP_DIR = re.compile(r"^step_(\d+)$")
RECORD = "record.json"
log = logging.getLogger(__name__)


def resumable_checkpoint(checkpoint_root: str | os.PathLike, record: dict[str, Any]) -> tuple[Path | None, dict | None]:
    """The newest loadable checkpoint this run may resume from, with its trainer state; (None, None)
    to start fresh, in which case any old checkpoints have been moved aside and the log says why."""
    root = Path(checkpoint_root)
    steps = checkpoint_steps(root)
    if not steps and not (root / "final").exists():
        return None, None
    reason = None
    if (root / "final").exists():
        reason = "the checkpointed run had finished, so this run retrains from step 0"
    else:
        for step in reversed(steps):
            path = root / f"step_{step}"
            try:
                stored = json.loads((path / RECORD).read_text())
            except (OSError, ValueError):
                stored = None
            if stored != record:
                reason = f"{path.name} was made by other settings, data, base model or method ({stored} != {record})"
                break
            try:
                return path, _load_trainer_state(path)
            except Exception as err:  # a damaged newest checkpoint: fall back to the one before
                log.warning("checkpoint %s cannot be loaded (%s); trying the previous one", path, err)
        else:
            reason = "no checkpoint could be loaded"
    aside = set_aside(root)
    log.warning("starting from step 0: %s; old checkpoints moved to %s", reason, aside)
    return None, None


def checkpoint_steps(checkpoint_root: str | os.PathLike) -> list[int]:
    """Steps of the complete checkpoints under `checkpoint_root`, ascending."""
    root = Path(checkpoint_root)
    if not root.is_dir():
        return []
    steps = []
    for child in root.iterdir():
        match = _STEP_DIR.match(child.name)
        if match and (child / "trainer_state.pt").is_file() and (child / "model" / "config.json").is_file():
            steps.append(int(match.group(1)))
    return sorted(steps)


def save_checkpoint(
    checkpoint_root, step: int, model, tokenizer, optimizer, np_rng, *, record: dict[str, Any], keep: int = 2
) -> Path:
    """Write `step_<step>` (with `record`) atomically, then delete all but the newest `keep` checkpoints."""
    import torch

    root = Path(checkpoint_root)
    final = root / f"step_{step}"
    with atomic_dir(final) as tmp:
        model.save_pretrained(tmp / "model")
        tokenizer.save_pretrained(tmp / "model")
        state = {
            "step": step,
            "optimizer": optimizer.state_dict(),
            "torch_rng": torch.get_rng_state(),
            "numpy_rng": np_rng.bit_generator.state,
        }
        torch.save(state, tmp / "trainer_state.pt")
        (tmp / RECORD).write_text(json.dumps(record, sort_keys=True))
    for old in checkpoint_steps(root)[:-keep] if keep > 0 else []:
        shutil.rmtree(root / f"step_{old}", ignore_errors=True)
    return final


def _load_trainer_state(checkpoint_dir: str | os.PathLike) -> dict:
    """The trainer state of a checkpoint, after checking every file a resume reads: the model's config
    and weights (each tensor read) as well as the state itself; any damage raises, naming the file."""
    import torch
    from safetensors.torch import load_file

    checkpoint_dir = Path(checkpoint_dir)
    for name in ("config.json", "model.safetensors"):
        path = checkpoint_dir / "model" / name
        try:
            json.loads(path.read_text()) if name.endswith(".json") else load_file(path)
        except Exception as err:
            raise ValueError(f"{path}: {' '.join(str(err).split())[:200]}") from err
    # tensors, the optimizer's plain state and the numpy generator's state dict: safe to load as weights only
    return torch.load(checkpoint_dir / "trainer_state.pt", weights_only=True)

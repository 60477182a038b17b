"""Checkpoints and run files of the local trainer.

`<run>/checkpoints/step_<N>/` holds `model/` (Hugging Face format, tokenizer included) and
`trainer_state.pt` (step, optimizer state, torch and numpy RNG states). A checkpoint is written to
a temporary sibling and renamed, so a directory named `step_<N>` is always complete; a restart
continues from the highest one.
"""

from __future__ import annotations

import json
import os
import re
import shutil
from pathlib import Path

from vpo.atomic import atomic_dir, write_text_atomic

STEP_DIR = re.compile(r"^step_(\d+)$")


def checkpoint_steps(checkpoint_root: str | os.PathLike) -> list[int]:
    """Steps of the complete checkpoints under `checkpoint_root`, ascending."""
    root = Path(checkpoint_root)
    if not root.is_dir():
        return []
    steps = []
    for child in root.iterdir():
        match = STEP_DIR.match(child.name)
        if match and (child / "trainer_state.pt").is_file() and (child / "model" / "config.json").is_file():
            steps.append(int(match.group(1)))
    return sorted(steps)


def latest_checkpoint(checkpoint_root: str | os.PathLike) -> Path | None:
    steps = checkpoint_steps(checkpoint_root)
    return Path(checkpoint_root) / f"step_{steps[-1]}" if steps else None


def save_checkpoint(checkpoint_root, step: int, model, tokenizer, optimizer, np_rng, *, keep: int = 2) -> Path:
    """Write `step_<step>` atomically, then delete all but the newest `keep` checkpoints."""
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
    for old in checkpoint_steps(root)[:-keep] if keep > 0 else []:
        shutil.rmtree(root / f"step_{old}", ignore_errors=True)
    return final


def load_trainer_state(checkpoint_dir: str | os.PathLike) -> dict:
    import torch

    return torch.load(Path(checkpoint_dir) / "trainer_state.pt", weights_only=False)


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

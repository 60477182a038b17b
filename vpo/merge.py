"""`vpo merge --run <out>`: turn a trained cell's checkpoints into a Hugging Face model at `<out>/model/`.

The backend comes from `<out>/train.json` (written last by `vpo train`):

- local and trl: the trainer already saved a Hugging Face model in `checkpoints/final/`; it is copied;
- verl: veRL's own model merger (`python -m verl.model_merger merge --backend fsdp`) gathers the
  sharded FSDP state of the latest `checkpoints/global_step_N/actor` into one bf16 model, with the
  config and tokenizer veRL saved next to the shards (`actor/huggingface/`).

Either way the model is written under a temporary name and renamed, so a killed merge never leaves
a `model/` that looks complete.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

from vpo.atomic import atomic_dir
from vpo.cell_lock import writing_cell


class MergeError(RuntimeError):
    """A run that cannot be merged; the message names what is missing and what to do."""


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--run", required=True, help="the cell's run directory (holds train.json and checkpoints/)")
    parser.add_argument("--out", default=None, help="where to write the model (default: <run>/model)")


def _read_backend(run_dir: Path) -> str:
    marker = run_dir / "train.json"
    if not marker.is_file():
        raise MergeError(f"{marker} does not exist: the run has not finished training (run `vpo train` first)")
    try:
        backend = json.loads(marker.read_text())["backend"]
    except (json.JSONDecodeError, KeyError) as err:
        raise MergeError(f"{marker} is not a train.json with a 'backend' key: {err}") from err
    if backend not in ("local", "trl", "verl"):
        raise MergeError(f"{marker}: backend {backend!r} is not 'local', 'trl' or 'verl'")
    return backend


def latest_actor_dir(checkpoints: Path) -> Path:
    """`checkpoints/global_step_N/actor` of the latest step (veRL's tracker file, else the largest N)."""
    tracker = checkpoints / "latest_checkpointed_iteration.txt"
    steps = []
    if tracker.is_file() and tracker.read_text().strip().isdigit():
        steps = [int(tracker.read_text().strip())]
    if not steps or not (checkpoints / f"global_step_{steps[0]}" / "actor").is_dir():
        steps = sorted(
            (
                int(m.group(1))
                for p in checkpoints.glob("global_step_*")
                if (m := re.fullmatch(r"global_step_(\d+)", p.name)) and (p / "actor").is_dir()
            ),
            reverse=True,
        )
    if not steps:
        raise MergeError(
            f"no veRL checkpoint under {checkpoints} (expected global_step_N/actor); "
            "check trainer.save_freq and that training reached its first save"
        )
    actor = checkpoints / f"global_step_{steps[0]}" / "actor"
    for needed in ("fsdp_config.json", "huggingface"):
        if not (actor / needed).exists():
            raise MergeError(f"{actor} has no {needed}: not a complete FSDP checkpoint written by veRL")
    return actor


def _merge_fsdp(actor_dir: Path, target: Path) -> Path:
    """veRL's FSDP merger from `actor_dir` into `target` (via a temporary directory)."""
    env = dict(os.environ)
    env.setdefault("CUDA_VISIBLE_DEVICES", "")  # the merge is CPU work; keep it off a shared GPU
    with atomic_dir(target) as tmp:
        tmp.rmdir()  # the merger creates its target directory itself
        command = [
            sys.executable,
            "-m",
            "verl.model_merger",
            "merge",
            "--backend",
            "fsdp",
            "--local_dir",
            str(actor_dir),
            "--target_dir",
            str(tmp),
        ]
        result = subprocess.run(command, env=env)
        if result.returncode != 0 or not (tmp / "config.json").is_file():
            raise MergeError(
                f"veRL's model merger failed (status {result.returncode}) on {actor_dir}; see its output above"
            )
    return target


def _copy_local(final_dir: Path, target: Path) -> Path:
    if not (final_dir / "config.json").is_file():
        raise MergeError(f"{final_dir} has no config.json: the local trainer did not save its final model")
    with atomic_dir(target) as tmp:
        shutil.copytree(final_dir, tmp, dirs_exist_ok=True)
    return target


def merge_run(run_dir, out=None) -> Path:
    """Merge one run; returns the model directory."""
    run_dir = Path(run_dir)
    target = Path(out) if out else run_dir / "model"
    target.parent.mkdir(parents=True, exist_ok=True)
    if _read_backend(run_dir) in ("local", "trl"):
        return _copy_local(run_dir / "checkpoints" / "final", target)
    return _merge_fsdp(latest_actor_dir(run_dir / "checkpoints"), target)


def run(args: argparse.Namespace) -> int:
    try:
        with writing_cell(args.run, what=f"vpo merge {args.run}", output="model"):
            model = merge_run(args.run, args.out)
    except MergeError as err:
        print(f"error: {err}", file=sys.stderr)
        return 1
    print(f"merged model: {model}")
    return 0

"""W&B runs of both trainers, named alike: project `vpo_<task>`, run `<method>_<task>_seed<seed>`.

The run id is derived from the task and run name, so a resumed job continues its own run. The mode
(`wandb.mode` in config.yaml) is offline by default: the run is written under `<cell>/logs/wandb/`
and `wandb sync <cell>/logs/wandb/offline-run-*` uploads it later; `disabled` writes nothing.
The veRL launcher passes the same names and id to veRL's own W&B logger through the environment.
"""

from __future__ import annotations

import hashlib
from pathlib import Path
from typing import Any, Mapping


def run_name(task: str, method: str, seed: int) -> str:
    return f"{method}_{task}_seed{seed}"


def project(task: str) -> str:
    return f"vpo_{task}"


def run_id(task: str, method: str, seed: int) -> str:
    """Stable across resumes of one cell (16 hex characters)."""
    return hashlib.md5(f"{project(task)}/{run_name(task, method, seed)}".encode()).hexdigest()[:16]


def start_run(wandb_settings: Mapping[str, Any] | None, *, task: str, method: str, seed: int, out_dir,
              config: Mapping[str, Any]):
    """A W&B run for one cell of the CPU trainer; None when `wandb.mode` is disabled or no settings
    are given (the trainer called from code rather than from config.yaml)."""
    if wandb_settings is None or wandb_settings.get("mode") == "disabled":
        return None
    mode = str(wandb_settings.get("mode") or "offline")
    import wandb

    logs = Path(out_dir) / "logs"
    logs.mkdir(parents=True, exist_ok=True)
    return wandb.init(project=project(task), name=run_name(task, method, seed), id=run_id(task, method, seed),
                      entity=(wandb_settings or {}).get("entity"), dir=str(logs), mode=mode, resume="allow",
                      config=dict(config), settings=wandb.Settings(silent=True, console="off"))

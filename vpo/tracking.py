"""W&B runs of both trainers, named alike: project `vpo_<task>`, run `<method>_<task>_seed<seed>`.

The run id is derived from the run name and the cell's directory (so the same cell of two presets or
two checkouts never shares a run), and a resumed job continues its own run. The mode
(`wandb.mode` in config.yaml) is offline by default: the run is written under `<cell>/logs/wandb/`
and `wandb sync <cell>/logs/wandb/offline-run-*` uploads it later; `disabled` writes nothing.
The veRL launcher passes the same names and id to veRL's own W&B logger through the environment.
"""

from __future__ import annotations

import hashlib
import logging
from pathlib import Path
from typing import Any, Mapping

log = logging.getLogger(__name__)


def _one_line(err: Exception) -> str:
    return " ".join(str(err).split())


def run_name(task: str, method: str, seed: int) -> str:
    return f"{method}_{task}_seed{seed}"


def project(task: str) -> str:
    return f"vpo_{task}"


def run_id(task: str, method: str, seed: int, out_dir) -> str:
    """Stable across resumes of one cell directory (16 hex characters)."""
    where = Path(out_dir).resolve()
    return hashlib.md5(f"{project(task)}/{run_name(task, method, seed)}/{where}".encode()).hexdigest()[:16]


def start_run(
    wandb_settings: Mapping[str, Any] | None, *, task: str, method: str, seed: int, out_dir, config: Mapping[str, Any]
):
    """A W&B run for one cell of the CPU trainer; None when `wandb.mode` is disabled, no settings are
    given (the trainer called from code rather than from config.yaml), or W&B fails to start: the
    run's metrics.jsonl holds every step either way, and tracking never stops training."""
    if wandb_settings is None or wandb_settings.get("mode") == "disabled":
        return None
    mode = str(wandb_settings.get("mode") or "offline")
    logs = Path(out_dir) / "logs"
    logs.mkdir(parents=True, exist_ok=True)
    try:
        import wandb

        return wandb.init(
            project=project(task),
            name=run_name(task, method, seed),
            id=run_id(task, method, seed, out_dir),
            entity=wandb_settings.get("entity"),
            dir=str(logs),
            mode=mode,
            resume="allow",
            config=dict(config),
            settings=wandb.Settings(silent=True, console="off"),
        )
    except Exception as err:  # W&B's own failures (service, network, a run id still held): warn, train on
        log.warning("W&B run not started (%s); %s/metrics.jsonl has every step", _one_line(err), out_dir)
        return None


def log_step(run, record: Mapping[str, Any], step: int) -> None:
    """Log one step to `run` (None: nothing); a W&B failure is a warning, never a failed training job."""
    if run is None:
        return
    try:
        run.log(dict(record), step=step)
    except Exception as err:
        log.warning("W&B log of step %d failed (%s)", step, _one_line(err))


def finish(run) -> None:
    if run is not None:
        try:
            run.finish()
        except Exception as err:
            log.warning("W&B run did not finish cleanly (%s)", _one_line(err))

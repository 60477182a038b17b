"""Run one (task, method, seed) cell of config.yaml as a veRL 0.9.1 training job.

`train_verl` is what `vpo train --backend verl` calls (`vpo.train.BACKENDS`). It builds the cell's command
(`vpo.verl_ext.command`), runs a preflight that fails in seconds on a bad cell (unknown method,
missing data or model, batch sizes that do not divide the GPUs, m answers that cannot fit the
response length, an estimator veRL does not know, a config veRL's own validate_config rejects),
claims the checkpoints, runs veRL and converts its metrics into `<out>/metrics.jsonl`; it returns
what `vpo train` records in `<out>/train.json`, which `vpo.train` writes last.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from dataclasses import asdict
from pathlib import Path
from typing import Any, Mapping

from vpo.atomic import set_aside, write_text_atomic
from vpo.backend import RunSpec, TrainResult, run_record
from vpo.tracking import run_name
from vpo.verl_ext.command import PreflightError, build_command
from vpo.verl_ext.preflight import check_cell, preflight

# ---------------------------------------------------------------------------------------------
# Running and recording
# ---------------------------------------------------------------------------------------------


# the keys of docs/metrics.md that veRL computes itself (its actor's update), by veRL 0.9.1's name for them
VERL_NAMES = {
    "pg_loss": "actor/pg_loss",
    "kl": "actor/kl_loss",
    "entropy": "actor/entropy",
    "clipfrac": "actor/pg_clipfrac",
    "grad_norm": "actor/grad_norm",
    "ppo_kl": "actor/ppo_kl",
}


def convert_metrics(out_dir) -> int:
    """veRL's file-logger JSONL files (one per attempt) -> `<out>/metrics.jsonl`; returns the steps.

    Each line holds the keys of docs/metrics.md: `step`, the rollout keys the `vpo_sync` trainer logged
    under a `vpo/` prefix (built by `vpo.backend.rollout_record`, as the other backends build them), the
    update's keys veRL computes itself (`VERL_NAMES`), `wall_time_s` (the sum of `timing_s/step`), and
    veRL's own metrics under their names.
    """
    out_dir = Path(out_dir)
    merged: dict[int, dict] = {}
    for path in sorted((out_dir / "logs").glob("verl_metrics.*.jsonl")):
        for line in path.read_text().splitlines():
            try:
                record = json.loads(line)
            except json.JSONDecodeError:
                continue  # a line cut by a killed job
            merged.setdefault(int(record["step"]), {}).update(record.get("data") or {})
    rows, wall = [], 0.0
    for step in sorted(merged):
        data = merged[step]
        if "vpo/pool_diversity" not in data:
            continue  # validation-only record
        wall += float(data.get("timing_s/step", 0.0))
        row = {"step": step, **{key[len("vpo/") :]: value for key, value in data.items() if key.startswith("vpo/")}}
        row.update({ours: data[theirs] for ours, theirs in VERL_NAMES.items() if theirs in data})
        row["wall_time_s"] = wall
        row.update({key: value for key, value in data.items() if not key.startswith("vpo/")})
        rows.append(row)
    write_text_atomic(out_dir / "metrics.jsonl", "".join(json.dumps(r, default=float) + "\n" for r in rows))
    return len(rows)


RECORD = "vpo_record.json"  # in the checkpoint directory: what produced its checkpoints
FINISHED = "vpo_finished"  # in the checkpoint directory: the run completed


def claim_checkpoints(checkpoint_dir: Path, provenance: Mapping[str, Any]) -> str | None:
    """Let veRL resume from `checkpoint_dir` only if its checkpoints were made by this very run
    (same record) and that run is unfinished; otherwise move them aside so veRL starts at step 0.
    Writes this run's record; returns why the old checkpoints were set aside, or None."""
    reason = None
    if checkpoint_dir.is_dir() and any(checkpoint_dir.iterdir()):
        try:
            stored = json.loads((checkpoint_dir / RECORD).read_text())
        except (OSError, ValueError):
            stored = None
        if (checkpoint_dir / FINISHED).exists():
            reason = "the checkpointed run had finished, so this run retrains from step 0"
        elif stored != dict(provenance):
            reason = (
                f"the checkpoints were made by other settings, data, model or method ({stored} != {dict(provenance)})"
            )
        if reason:
            print(
                f"[vpo] starting from step 0: {reason}; old checkpoints moved to {set_aside(checkpoint_dir)}",
                file=sys.stderr,
            )
    checkpoint_dir.mkdir(parents=True, exist_ok=True)
    write_text_atomic(checkpoint_dir / RECORD, json.dumps(dict(provenance), sort_keys=True))
    return reason


def train_verl(spec: RunSpec) -> TrainResult:
    """Train one cell with veRL (the reason of a failure on stderr): the verl backend's entry
    (`vpo.train.BACKENDS`). Status 2: the preflight rejected the cell; another non-zero: veRL's.

    spec.print_command: print the veRL command line (environment first) and return without running
    or checking the GPU-side files.
    """
    cfg, task, method, seed = spec.config, spec.task, spec.method, spec.seed
    try:
        check_cell(cfg, task, method)
        command = build_command(cfg, task, method, int(seed), spec.out_dir, spec.data_dir, model=spec.base_model)
        if spec.print_command:
            print(command.shell())
            return TrainResult(0, trained=False)
        preflight(cfg, task, method, command)
    except PreflightError as err:
        print(f"error: preflight failed for {run_name(task, method, seed)}: {err}", file=sys.stderr)
        return TrainResult(2, trained=False)
    out = command.out_dir
    claim_checkpoints(out / "checkpoints", run_record(spec, "verl", model=command.model, data=command.data_files[0]))
    for sub in ("logs", "checkpoints", ".cache/datasets"):
        (out / sub).mkdir(parents=True, exist_ok=True)
    ray_tmp = Path(command.env["RAY_TMPDIR"])
    ray_tmp.mkdir(mode=0o700, parents=True, exist_ok=True)
    if ray_tmp.stat().st_uid != os.getuid():
        print(f"error: {ray_tmp} belongs to another user; remove it or set TMPDIR", file=sys.stderr)
        return TrainResult(2, trained=False)
    ray_tmp.chmod(0o700)
    print(
        f"[vpo] veRL cell {run_name(task, method, seed)}: {command.gpus} GPU(s), batch preset "
        f"{command.batch_preset} {asdict(command.batch)}, estimator {command.estimator}",
        flush=True,
    )
    result = subprocess.run(command.argv, env={**os.environ, **command.env}, cwd=str(out))
    if result.returncode != 0:
        print(
            f"[vpo] veRL exited with status {result.returncode}; checkpoints are kept in {out / 'checkpoints'} "
            "and the next run resumes from them",
            file=sys.stderr,
        )
        return TrainResult(result.returncode, trained=False)
    shutil.rmtree(command.env["RAY_TMPDIR"], ignore_errors=True)  # kept after a failure, for its logs
    steps = convert_metrics(out)
    latest = out / "checkpoints" / "latest_checkpointed_iteration.txt"
    if latest.is_file():
        steps = max(steps, int(latest.read_text().strip() or 0))
    (out / "checkpoints" / FINISHED).touch()
    return TrainResult(
        0,
        trained=True,
        steps=steps,
        record={
            "estimator": command.estimator,
            "gpus": command.gpus,
            "batch_preset": command.batch_preset,
            "model": command.model,
        },
    )

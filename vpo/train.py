"""`vpo train`: train one (task, method, seed) cell with the local CPU trainer, with TRL or with veRL.

Every backend leaves the same run directory (docs/architecture.md); `train.json` is written last, so
its presence means the cell finished. The local backend resumes from `checkpoints/step_<N>`, TRL
from `checkpoints/checkpoint-<N>`, veRL from its own checkpoints.
"""

from __future__ import annotations

import argparse
import importlib
import json
import logging
import sys
import time
from pathlib import Path

from vpo import joblog
from vpo.atomic import write_json_atomic
from vpo.backend import RunSpec
from vpo.cell_lock import CellBusy, writing_cell
from vpo.config import cell_digest, load_config
from vpo.data import rebuild_hint
from vpo.methods import get_method
from vpo.plan import backend_missing
from vpo.provenance import collect
from vpo.task import resolve


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--backend",
        choices=("local", "trl", "verl"),
        default=None,
        help="local (in-process CPU trainer), trl (TRL's GRPOTrainer, vpo/trl_ext) or verl (GPU); "
        "default: the config's `backend`",
    )
    parser.add_argument("--task", required=True, help="task name, e.g. maze")
    parser.add_argument("--method", required=True, help="method name, e.g. vpo (see vpo.methods)")
    parser.add_argument("--seed", type=int, required=True, help="training seed")
    parser.add_argument("--preset", default=None, help="config preset (default: the config file's `preset`)")
    parser.add_argument("--data", required=True, help="directory with train.parquet / test.parquet")
    parser.add_argument(
        "--base-model",
        default=None,
        help="the `vpo base-model` directory (local backend; veRL on CPU: replaces the task's model)",
    )
    parser.add_argument("--out", required=True, help="run directory, e.g. results/cpu/runs/maze/vpo/seed0")
    parser.add_argument("--config", default=None, help="config.yaml path (default: ./config.yaml)")
    parser.add_argument("--print-command", action="store_true", help="verl backend: print the command only")
    parser.add_argument(
        "--log",
        default=None,
        help="the job's log file: written from when the cell is held, kept through a refused rerun "
        "(vpo/joblog.py); default: stdout and stderr as they are",
    )


def _write_train_json(
    out_dir, cfg: dict, *, backend: str, task: str, method: str, seed: int, steps: int, started: float, **extra
) -> Path:
    """The cell's completion marker, written last and atomically by both backends: the keys below
    (`provenance`: vpo.provenance.collect()) plus the backend's own (`extra`)."""
    payload = {
        "backend": backend,
        "task": task,
        "method": method,
        "seed": int(seed),
        "preset": cfg["preset"],
        "steps": int(steps),
        "wall_time_s": round(time.time() - started, 2),
        "config_hash": cell_digest(cfg, task, method),
        "provenance": collect(),
        **extra,
    }
    return write_json_atomic(Path(out_dir) / "train.json", payload)


def _check_inputs(args, backend: str) -> None:
    """Fail in seconds, before any model loads, on missing data / base model or unknown names."""
    if not (Path(args.data) / "train.parquet").is_file():
        # the workflow writes it with the preset's data settings (`vpo preprocess` alone writes the defaults)
        raise SystemExit(
            f"error: {args.data}/train.parquet not found; "
            f"{rebuild_hint(Path(args.data) / 'train.parquet').replace('rebuild it', 'build it')} "
            f"(or `vpo preprocess --task {args.task} --out {args.data}` with your own data settings)"
        )
    if backend in ("local", "trl"):
        if not args.base_model:
            raise SystemExit(f"error: --backend {backend} needs --base-model (build it with `vpo base-model`)")
        if not (Path(args.base_model) / "config.json").is_file():
            raise SystemExit(
                f"error: {args.base_model} is not a model directory; run `vpo base-model --task "
                f"{args.task} --data {args.data} --out {args.base_model}` first"
            )


def run(args: argparse.Namespace) -> int:
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(name)s %(message)s", stream=sys.stderr)

    resolve(args.task)  # an unknown task fails before the config is read
    cfg = load_config(args.config, args.preset)
    get_method(args.method)  # after the config, which registers its method variants
    backend = args.backend or cfg["backend"]

    if missing := backend_missing(backend):  # before the cell is touched
        raise SystemExit(f"vpo train: {missing}")
    _check_inputs(args, backend)

    log = args.log
    try:
        with writing_cell(args.out, what=f"vpo train {args.task}/{args.method}/seed{args.seed}"):
            if log:
                joblog.start(log)
            failed = True
            try:
                if not args.print_command:
                    # the cell is rewritten from here on, whoever started this: its finished-marker goes
                    # first, so a kill leaves no marker beside another run's metrics, and merge and
                    # aggregate see the cell as unfinished until this run writes its own
                    (Path(args.out) / "train.json").unlink(missing_ok=True)
                status = _train_cell(args, cfg, backend)
                failed = status != 0
                return status
            finally:
                if log:
                    joblog.finish(log, failed)
    except CellBusy:
        running = joblog.show_running(log) if log else None
        if running:
            print(
                f"vpo train: {log} is the running job's log again ({running}); this job wrote nothing there",
                file=sys.stderr,
            )
        raise


# every backend's entry, one shape: train(RunSpec) -> TrainResult (vpo/backend.py); imported only when
# chosen (TRL and veRL are heavy, and optional)
BACKENDS = {
    "local": ("vpo.local.trainer", "train_local"),
    "trl": ("vpo.trl_ext.run", "train_trl"),
    "verl": ("vpo.verl_ext.launcher", "train_verl"),
}


def _train_cell(args: argparse.Namespace, cfg: dict, backend: str) -> int:
    """Train the cell of `args` with `backend`, holding its lock (vpo/cell_lock.py); train.json written
    when it trained. Returns the exit status."""
    module, function = BACKENDS[backend]
    train = getattr(importlib.import_module(module), function)
    started = time.time()
    spec = RunSpec.for_cell(
        cfg,
        args.task,
        args.method,
        args.seed,
        data_dir=args.data,
        out_dir=args.out,
        base_model=args.base_model,
        print_command=args.print_command,
    )
    result = train(spec)
    if result.trained:
        path = _write_train_json(
            args.out,
            cfg,
            backend=backend,
            task=args.task,
            method=args.method,
            seed=args.seed,
            steps=result.steps,
            started=started,
            **result.record,
        )
        payload = json.loads(path.read_text())
        shown = ("method", "seed", "steps", "resumed_from_step", "wall_time_s")
        print(json.dumps({key: payload[key] for key in shown if key in payload}))
    return result.status

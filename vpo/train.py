"""`vpo train`: train one (task, method, seed) cell with the local CPU trainer or with veRL.

Both backends leave the same run directory (DESIGN section 4); `train.json` is written last, so
its presence means the cell finished. The local backend resumes from `checkpoints/step_<N>`.
"""

from __future__ import annotations

import argparse
import json
import logging
import platform
import sys
import time
from pathlib import Path


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--backend", choices=("local", "verl"), default=None,
                        help="local (in-process CPU trainer) or verl (GPU); default: the config's `backend`")
    parser.add_argument("--task", required=True, help="task name, e.g. maze")
    parser.add_argument("--method", required=True, help="method name, e.g. vpo (see vpo.methods)")
    parser.add_argument("--seed", type=int, required=True, help="training seed")
    parser.add_argument("--preset", default=None, help="config preset (default: the config file's `preset`)")
    parser.add_argument("--data", required=True, help="directory with train.parquet / test.parquet")
    parser.add_argument("--base-model", default=None, help="local backend: the `vpo base-model` directory")
    parser.add_argument("--out", required=True, help="run directory, e.g. results/runs/maze/vpo/seed0")
    parser.add_argument("--config", default=None, help="config.yaml path (default: ./config.yaml)")
    parser.add_argument("--print-command", action="store_true", help="verl backend: print the command only")


def load_run_config(config_path, preset, *, task: str, method: str | None = None):
    """(resolved config, LocalTrainerSettings, config hash of what determines the cell)."""
    from vpo.config import cell_settings, load_config, settings_digest, task_settings
    from vpo.local.settings import LocalTrainerSettings

    cfg = load_config(config_path, preset)
    settings = LocalTrainerSettings.from_dict(cfg.get("local_trainer"))
    if method is None:
        digest = settings_digest({"task": task_settings(cfg, task), "trainer": cfg.get("local_trainer", {})})
    else:
        digest = settings_digest(cell_settings(cfg, task, method))
    return cfg, settings, digest


def versions() -> dict:
    import importlib.metadata as md

    out = {"python": platform.python_version()}
    for name in ("vpo-pipeline", "torch", "transformers", "tokenizers", "numpy", "verl"):
        try:
            out[name] = md.version(name)
        except md.PackageNotFoundError:
            pass
    return out


def check_inputs(args, backend: str) -> None:
    """Fail in seconds, before any model loads, on missing data / base model or unknown names."""
    if not (Path(args.data) / "train.parquet").is_file():
        raise SystemExit(f"error: {args.data}/train.parquet not found; run `vpo preprocess --task {args.task} "
                         f"--out {args.data}` first")
    if backend == "local":
        if not args.base_model:
            raise SystemExit("error: --backend local needs --base-model (build it with `vpo base-model`)")
        if not (Path(args.base_model) / "config.json").is_file():
            raise SystemExit(f"error: {args.base_model} is not a model directory; run `vpo base-model --task "
                             f"{args.task} --data {args.data} --out {args.base_model}` first")


def run(args: argparse.Namespace) -> int:
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(name)s %(message)s", stream=sys.stderr)
    from vpo.config import method_settings, task_settings
    from vpo.methods import get_method
    from vpo.task import resolve

    resolve(args.task)  # unknown names fail before the config is read
    get_method(args.method)
    cfg, settings, digest = load_run_config(args.config, args.preset, task=args.task, method=args.method)
    backend = args.backend or cfg["backend"]
    check_inputs(args, backend)
    if backend == "verl":
        from vpo.verl_ext.launcher import train_cell

        return int(train_cell(cfg, args.task, args.method, args.seed, args.out, args.data,
                              print_command=args.print_command) or 0)

    from vpo.atomic import write_json_atomic
    from vpo.local.trainer import RunSpec, train_local

    t0 = time.time()
    spec = RunSpec(
        task=args.task, method=args.method, seed=args.seed, data_dir=args.data, base_model=args.base_model,
        out_dir=args.out, settings=settings, method_settings=dict(method_settings(cfg, args.method)),
        m=int(task_settings(cfg, args.task).get("m", 3)), preset=cfg["preset"], config_hash=digest,
    )
    result = train_local(spec)
    payload = {
        "backend": "local", "task": args.task, "method": args.method, "seed": args.seed, "preset": cfg["preset"],
        "steps": result["steps"], "resumed_from_step": result["resumed_from_step"],
        "wall_time_s": round(time.time() - t0, 2), "train_loop_s": result["wall_time_s"],
        "config_hash": digest, "versions": versions(), "base_model": str(args.base_model),
        "settings": settings.to_dict(),
    }
    write_json_atomic(Path(args.out) / "train.json", payload)
    print(json.dumps({k: payload[k] for k in ("method", "seed", "steps", "resumed_from_step", "wall_time_s")}))
    return 0

"""Turn one (task, method, seed) cell of config.yaml into a veRL 0.9.1 training job, and run it.

`train_cell` is what `vpo train --backend verl` calls. It builds the full command
(`python -m verl.trainer.main_ppo --config-path <repo>/verl/config --config-name vpo_trainer ...`),
a per-job environment (own RAY_TMPDIR, free MASTER_PORT, own datasets cache, W&B offline unless
configured, veRL's file logger), runs a preflight that fails in seconds on a bad cell (unknown
method, missing data or model, batch sizes that do not divide the GPUs, m answers that cannot fit
the response length, an estimator veRL does not know, a config veRL's own validate_config
rejects), then runs veRL, converts its metrics into `<out>/metrics.jsonl` and writes
`<out>/train.json` last.
"""

from __future__ import annotations

import hashlib
import json
import os
import re
import shlex
import shutil
import socket
import subprocess
import sys
import tempfile
import time
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any, Mapping

from vpo import tracking
from vpo.atomic import write_text_atomic
from vpo.tracking import run_name  # one naming for both trainers' W&B runs
from vpo.verl_ext import CONFIG_NAME, PLUGIN_MODULE, TRAINER_MODE, VERL_CONFIG_DIR
from vpo.verl_ext.preflight import PreflightError, check_cell, preflight



@dataclass(frozen=True)
class BatchPreset:
    """Per-step sizes (paper section 6.1); prompts, not rollouts, unless said otherwise."""

    train_batch_size: int  # prompts per training step
    rollout_n: int  # rollouts per prompt (the group size)
    ppo_mini_batch_size: int  # prompts per optimizer step
    micro_batch_per_gpu: int  # rollouts per forward pass per GPU (training and log-probs)


@dataclass
class CellCommand:
    """Everything needed to run one cell under veRL."""

    argv: list[str]  # python -m verl.trainer.main_ppo ... (Hydra overrides included)
    env: dict[str, str]  # variables set on top of the caller's environment
    overrides: list[str]  # the Hydra overrides alone (for composing in-process)
    estimator: str  # algorithm.adv_estimator
    batch_preset: str  # name of the batch preset used
    batch: BatchPreset
    gpus: int
    model: str
    out_dir: Path
    data_files: tuple[Path, Path]  # train, test parquet

    def shell(self) -> str:
        """The command as one shell line, environment first."""
        env = " ".join(f"{k}={shlex.quote(v)}" for k, v in sorted(self.env.items()))
        return f"{env} {shlex.join(self.argv)}"


def model_billions(model: str) -> float | None:
    """Parameter count in billions read from a model name ('Qwen/Qwen3-8B' -> 8.0), else None."""
    found = re.findall(r"(\d+(?:\.\d+)?)[bB](?![a-zA-Z])", Path(str(model)).name)
    return float(found[-1]) if found else None


def choose_batch_preset(settings: Mapping[str, Any], model: str, gpus: int) -> tuple[str, BatchPreset]:
    name = settings["batch_preset"]
    if name == "auto":
        size = model_billions(model)
        name = "smoke_1gpu" if gpus == 1 else ("7b_8b" if size is not None and size >= 6 else "up_to_4b")
    presets = settings["batch_presets"]
    if name not in presets:
        raise PreflightError(f"verl.batch_preset {name!r} is not one of {sorted(presets)} (or auto)")
    return name, BatchPreset(**presets[name])


def _free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def _override_value(value: Any) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    if value is None:
        return "null"
    if isinstance(value, (list, tuple)):
        return "[" + ",".join(_override_value(v) for v in value) + "]"
    return str(value)


def _quoted(text: str) -> str:
    """A Hydra override value that stays a string."""
    if "'" in text:
        raise PreflightError(f"a path or value with a single quote cannot be passed to veRL: {text!r}")
    return f"'{text}'"




# On CPU (verl.device: cpu): the platform and rollout of vpo/verl_ext/cpu, one worker, Ray's pools fed
# with fake GPU slots, one TransferQueue storage unit (more stall on 2 cores), no flash attention or
# remove-padding kernels. Facts and veRL line numbers: verl/README.md, "CPU mode".
CPU_ENV = {"VERL_PLATFORM": "cpu", "VERL_ENGINE_DEVICE": "cuda"}  # cuda: veRL's FSDP engine, which runs on CPU


def cpu_overrides(gpus: int) -> list[str]:
    return [
        f"+ray_kwargs.ray_init.num_gpus={gpus}",
        # logical CPUs: 3 per worker bundle (veRL's max_colocate_count), the task runner, TransferQueue's
        # controller and storage unit, the rollout servers take none
        f"++ray_kwargs.ray_init.num_cpus={3 * gpus + 6}",
        "trainer.device=cpu",
        # FSDP2: FSDP1's sync_module_states needs GPU tensors
        "actor_rollout_ref.actor.strategy=fsdp2",
        "actor_rollout_ref.actor.fsdp_config.strategy=fsdp2",
        "actor_rollout_ref.ref.strategy=fsdp2",
        "actor_rollout_ref.ref.fsdp_config.strategy=fsdp2",
        "actor_rollout_ref.rollout.name=transformers",
        "actor_rollout_ref.rollout.tensor_model_parallel_size=1",
        "actor_rollout_ref.model.use_remove_padding=false",
        "actor_rollout_ref.model.enable_gradient_checkpointing=false",
        "+actor_rollout_ref.model.override_config.attn_implementation=sdpa",
        "transfer_queue.backend.SimpleStorage.num_data_storage_units=1",
        "data.dataloader_num_workers=0",
    ]


def build_command(cfg: Mapping[str, Any], task: str, method: str, seed: int, out_dir, data_dir,
                  model: str | None = None) -> CellCommand:
    """The veRL command and environment of one cell (no checks beyond what building needs).

    model: a local model directory that replaces the task's `model` (the CPU device trains the
    tiny base model of the method's prompt form)."""
    from vpo.config import method_settings, task_settings, verl_settings
    from vpo.methods import get_method
    from vpo.verl_ext.estimators import estimator_for_method

    spec = get_method(method)
    settings = verl_settings(cfg)
    tset = task_settings(cfg, task)
    out_dir, data_dir = Path(out_dir).resolve(), Path(data_dir).resolve()
    gpus = int(settings["gpus"] or tset.get("gpus") or 1)
    model = str(model or tset["model"])
    cpu = settings["device"] == "cpu"
    if model.startswith(("~", ".", "/")) or Path(model).expanduser().exists():  # a local directory
        model = str(Path(model).expanduser().resolve())
    preset_name, batch = choose_batch_preset(settings, model, gpus)
    estimator = estimator_for_method(method)
    m = int(tset["m"]) if spec.multi_answer else 1
    prompt_len = int(tset["max_prompt_length"][spec.length_kind])
    response_len = int(tset["max_response_length"][spec.length_kind])
    name = run_name(task, method, seed)
    train_file, test_file = data_dir / "train.parquet", data_dir / "test.parquet"

    overrides = [
        f"data.train_files={train_file}",
        f"data.val_files={test_file}",
        f"data.max_prompt_length={prompt_len}",
        f"data.max_response_length={response_len}",
        f"data.train_batch_size={batch.train_batch_size}",
        f"data.seed={seed}",
        f"data.vpo.method={method}",
        f"data.vpo.m={m}",
        f"data.vpo.seed={seed}",
        f"data.vpo.alpha={float(method_settings(cfg, method).get('alpha', 1.0))}",  # as the local trainer
        f"actor_rollout_ref.model.path={model}",
        f"actor_rollout_ref.rollout.n={batch.rollout_n}",
        f"actor_rollout_ref.actor.ppo_mini_batch_size={batch.ppo_mini_batch_size}",
        f"actor_rollout_ref.actor.ppo_micro_batch_size_per_gpu={batch.micro_batch_per_gpu}",
        f"actor_rollout_ref.rollout.log_prob_micro_batch_size_per_gpu={batch.micro_batch_per_gpu}",
        f"actor_rollout_ref.ref.log_prob_micro_batch_size_per_gpu={batch.micro_batch_per_gpu}",
        f"algorithm.adv_estimator={estimator}",
        f"algorithm.vpo.method={method}",
        f"algorithm.vpo.seed={seed}",
    ]
    for key, value in sorted(method_settings(cfg, method).items()):
        overrides.append(f"++algorithm.vpo.settings.{key}={_override_value(value)}")
    overrides += [
        f"trainer.n_gpus_per_node={gpus}",
        "trainer.nnodes=1",
        f"trainer.total_epochs={int(tset.get('epochs', 1))}",
        f"trainer.project_name={tracking.project(task)}",
        f"trainer.experiment_name={name}",
        f"trainer.default_local_dir={out_dir / 'checkpoints'}",
        f"trainer.logger={_override_value(list(settings['logger']))}",
        f"trainer.save_freq={int(settings['save_freq'])}",
        f"trainer.test_freq={int(settings['test_freq'])}",
        "trainer.resume_mode=auto",
        f"trainer.v1.trainer_mode={TRAINER_MODE}",
    ]

    digest = hashlib.md5(f"{out_dir}".encode()).hexdigest()[:10]
    wandb = cfg.get("wandb") or {}
    env = {
        # registration of the estimators and the trainer in every process, Ray actors included
        "VERL_USE_EXTERNAL_MODULES": PLUGIN_MODULE,
        "VERL_FILE_LOGGER_PATH": str(out_dir / "logs" / f"verl_metrics.{time.strftime('%Y%m%dT%H%M%S')}.jsonl"),
        # per-job scratch: short path (Ray's socket names must stay under ~107 characters)
        "RAY_TMPDIR": str(Path(tempfile.gettempdir()) / f"vpo-ray-{os.getuid()}-{digest}"),  # made 0700 below
        "MASTER_PORT": str(_free_port()),
        "HF_DATASETS_CACHE": str(out_dir / ".cache" / "datasets"),
        "TOKENIZERS_PARALLELISM": "false",
        "WANDB_MODE": str(wandb.get("mode") or "offline"),
        "WANDB_DIR": str(out_dir / "logs"),
        "WANDB_RUN_ID": tracking.run_id(task, method, seed, out_dir),
        "WANDB_RESUME": "allow",
    }
    if wandb.get("entity"):
        env["WANDB_ENTITY"] = str(wandb["entity"])
    for key in ("VERL_USE_EXTERNAL_MODULES", "VERL_FILE_LOGGER_PATH", "WANDB_MODE", "WANDB_DIR", "WANDB_RUN_ID",
                "WANDB_RESUME", "HF_DATASETS_CACHE", "TOKENIZERS_PARALLELISM"):
        # quoted: Ray accepts only strings, and Hydra would turn `false` or `1e5` into a bool or float
        overrides.append(f"++ray_kwargs.ray_init.runtime_env.env_vars.{key}={_quoted(env[key])}")
    if cpu:
        overrides += cpu_overrides(gpus)
        env.update(CPU_ENV)
        for key, value in CPU_ENV.items():
            overrides.append(f"++ray_kwargs.ray_init.runtime_env.env_vars.{key}={_quoted(value)}")
    overrides += [str(o) for o in settings.get("overrides") or []]

    argv = [sys.executable, "-m", "verl.trainer.main_ppo", f"--config-path={VERL_CONFIG_DIR}",
            f"--config-name={CONFIG_NAME}", *overrides]
    return CellCommand(argv=argv, env=env, overrides=overrides, estimator=estimator, batch_preset=preset_name,
                       batch=batch, gpus=gpus, model=model, out_dir=out_dir, data_files=(train_file, test_file))


# ---------------------------------------------------------------------------------------------
# Running and recording
# ---------------------------------------------------------------------------------------------


def convert_metrics(out_dir) -> int:
    """veRL's file-logger JSONL files (one per attempt) -> `<out>/metrics.jsonl`; returns the steps.

    Each line gets the local trainer's names for the same quantities (docs/metrics.md): `step`,
    `pool_diversity`, `score_mean`, `acc`, `reward/<objective>`, the estimator's `advantage/*` and
    `vpo/*` diagnostics, `parse_failure_rate`, `entropy`, `wall_time_s`, and veRL's own metrics
    under their names.
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
        row = {"step": step, "pool_diversity": data["vpo/pool_diversity"],
               "score_mean": data.get("vpo/score_mean", data.get("critic/score/mean")),
               "acc": data.get("vpo/acc"), "parse_failure_rate": data.get("vpo/parse_failure_rate"),
               "entropy": data.get("actor/entropy"), "wall_time_s": wall}
        for key, value in data.items():
            if key.startswith("vpo/reward/"):
                row["reward/" + key[len("vpo/reward/"):]] = value
            elif key.startswith("vpo/adv/"):
                row[key[len("vpo/adv/"):]] = value
            elif not key.startswith("vpo/"):
                row[key] = value
        rows.append(row)
    write_text_atomic(out_dir / "metrics.jsonl", "".join(json.dumps(r, default=float) + "\n" for r in rows))
    return len(rows)


RECORD = "vpo_record.json"  # in the checkpoint directory: what produced its checkpoints
FINISHED = "vpo_finished"  # in the checkpoint directory: the run completed


def claim_checkpoints(checkpoint_dir: Path, provenance: Mapping[str, Any]) -> str | None:
    """Let veRL resume from `checkpoint_dir` only if its checkpoints were made by this very run
    (same record) and that run is unfinished; otherwise move them aside so veRL starts at step 0.
    Writes this run's record; returns why the old checkpoints were set aside, or None."""
    from vpo.atomic import set_aside

    reason = None
    if checkpoint_dir.is_dir() and any(checkpoint_dir.iterdir()):
        try:
            stored = json.loads((checkpoint_dir / RECORD).read_text())
        except (OSError, ValueError):
            stored = None
        if (checkpoint_dir / FINISHED).exists():
            reason = "the checkpointed run had finished, so this run retrains from step 0"
        elif stored != dict(provenance):
            reason = f"the checkpoints were made by other settings, data, model or method ({stored} != {dict(provenance)})"
        if reason:
            print(f"[vpo] starting from step 0: {reason}; old checkpoints moved to {set_aside(checkpoint_dir)}",
                  file=sys.stderr)
    checkpoint_dir.mkdir(parents=True, exist_ok=True)
    write_text_atomic(checkpoint_dir / RECORD, json.dumps(dict(provenance), sort_keys=True))
    return reason


def train_cell(cfg: Mapping[str, Any], task: str, method: str, seed: int, out_dir, data_dir,
               print_command: bool = False, model: str | None = None) -> int:
    """Train one cell with veRL; returns the exit status (0 = trained, train.json written; 2 = the
    preflight rejected the cell, with the reason on stderr; else veRL's status).

    print_command: print the veRL command line (environment first) and return 0 without running
    or checking the GPU-side files.
    """
    from vpo.config import cell_digest, file_digest
    from vpo.train import write_train_json

    started = time.time()
    try:
        check_cell(cfg, task, method)
        command = build_command(cfg, task, method, int(seed), out_dir, data_dir, model=model)
        if print_command:
            print(command.shell())
            return 0
        preflight(cfg, task, method, command)
    except PreflightError as err:
        print(f"error: preflight failed for {run_name(task, method, seed)}: {err}", file=sys.stderr)
        return 2
    out = command.out_dir
    claim_checkpoints(out / "checkpoints", {
        "config_hash": cell_digest(cfg, task, method), "method": method, "seed": int(seed), "model": command.model,
        "data": file_digest(command.data_files[0])})
    for sub in ("logs", "checkpoints", ".cache/datasets"):
        (out / sub).mkdir(parents=True, exist_ok=True)
    ray_tmp = Path(command.env["RAY_TMPDIR"])
    ray_tmp.mkdir(mode=0o700, parents=True, exist_ok=True)
    if ray_tmp.stat().st_uid != os.getuid():
        print(f"error: {ray_tmp} belongs to another user; remove it or set TMPDIR", file=sys.stderr)
        return 2
    ray_tmp.chmod(0o700)
    print(f"[vpo] veRL cell {run_name(task, method, seed)}: {command.gpus} GPU(s), batch preset "
          f"{command.batch_preset} {asdict(command.batch)}, estimator {command.estimator}", flush=True)
    result = subprocess.run(command.argv, env={**os.environ, **command.env}, cwd=str(out))
    if result.returncode != 0:
        print(f"[vpo] veRL exited with status {result.returncode}; checkpoints are kept in {out / 'checkpoints'} "
              "and the next run resumes from them", file=sys.stderr)
        return result.returncode
    shutil.rmtree(command.env["RAY_TMPDIR"], ignore_errors=True)  # kept after a failure, for its logs
    steps = convert_metrics(out)
    latest = out / "checkpoints" / "latest_checkpointed_iteration.txt"
    if latest.is_file():
        steps = max(steps, int(latest.read_text().strip() or 0))
    (out / "checkpoints" / FINISHED).touch()
    write_train_json(out, cfg, backend="verl", task=task, method=method, seed=seed, steps=steps, started=started,
                     estimator=command.estimator, batch_preset=command.batch_preset, gpus=command.gpus,
                     model=command.model)
    return 0

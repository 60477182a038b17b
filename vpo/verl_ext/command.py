"""The veRL 0.9.1 command of one (task, method, seed) cell: `python -m verl.trainer.main_ppo
--config-path <repo>/verl/config --config-name vpo_trainer` with the cell's Hydra overrides, its
batch preset, and the per-job environment (own RAY_TMPDIR, free MASTER_PORT, own datasets cache,
W&B offline unless configured, veRL's file logger). Building checks nothing beyond what it needs;
`preflight` checks the result and `launcher` runs it."""

from __future__ import annotations

import hashlib
import os
import re
import shlex
import socket
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Mapping

from vpo import tracking
from vpo.config import answers_per_rollout, method_settings, task_settings, verl_settings
from vpo.methods import get_method
from vpo.settings import BatchPreset, VerlSettings
from vpo.tracking import run_name  # one naming for both trainers' W&B runs
from vpo.verl_ext import CONFIG_NAME, PLUGIN_MODULE, TRAINER_MODE, VERL_CONFIG_DIR
from vpo.verl_ext.estimators import estimator_for_method


class PreflightError(ValueError):
    """A cell that cannot train; the message names the problem and the fix."""


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


def _model_billions(model: str) -> float | None:
    """Parameter count in billions read from a model name ('Qwen/Qwen3-8B' -> 8.0), else None."""
    found = re.findall(r"(\d+(?:\.\d+)?)[bB](?![a-zA-Z])", Path(str(model)).name)
    return float(found[-1]) if found else None


def _choose_batch_preset(settings: VerlSettings, model: str, gpus: int) -> tuple[str, BatchPreset]:
    name = settings.batch_preset
    if name == "auto":
        size = _model_billions(model)
        name = "smoke_1gpu" if gpus == 1 else ("7b_8b" if size is not None and size >= 6 else "up_to_4b")
    if name not in settings.batch_presets:
        raise PreflightError(f"verl.batch_preset {name!r} is not one of {sorted(settings.batch_presets)} (or auto)")
    return name, settings.batch_presets[name]


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
    if isinstance(value, dict):  # a block such as the strategy judge's: its texts quoted (URLs hold ':' and '/')
        return (
            "{"
            + ",".join(f"{k}:{_quoted(v) if isinstance(v, str) else _override_value(v)}" for k, v in value.items())
            + "}"
        )
    return str(value)


def _quoted(text: str) -> str:
    """A Hydra override value that stays a string."""
    if "'" in text:
        raise PreflightError(f"a path or value with a single quote cannot be passed to veRL: {text!r}")
    return f"'{text}'"


# On CPU (verl.device: cpu): the platform and rollout of vpo/verl_ext/cpu, one worker, Ray's pools fed
# with fake GPU slots, one TransferQueue storage unit (more stall on 2 cores), no flash attention or
# remove-padding kernels. Facts and veRL line numbers: verl/README.md, "CPU mode".
_CPU_ENV = {"VERL_PLATFORM": "cpu", "VERL_ENGINE_DEVICE": "cuda"}  # cuda: veRL's FSDP engine, which runs on CPU
# Ray's raylet starts one idle worker per logical CPU (9 here) when the driver connects, more than the
# job's few actors take: tests/test_verl_cpu_run.py's two runs used 203 CPU seconds with them, 193 without
# (164 s against 154 s, one run each). The raylet reads this from the driver's environment.
_RAY_CPU_ENV = {"RAY_prestart_worker_first_driver": "0"}


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
        # one reward process, not veRL's 8: each is a Ray actor that loads Python, torch and veRL (about 7 CPU
        # seconds) to score a handful of rollouts with a rule (the workers only spread the scoring)
        "reward.num_workers=1",
        # one agent loop worker (veRL starts 8 by default: 8 Ray processes that each import veRL)
        "actor_rollout_ref.rollout.agent.num_workers=1",
    ]


def build_command(
    cfg: Mapping[str, Any], task: str, method: str, seed: int, out_dir, data_dir, model: str | None = None
) -> CellCommand:
    """The veRL command and environment of one cell (no checks beyond what building needs).

    model: a local model directory that replaces the task's `model` (the CPU device trains the
    tiny base model of the method's prompt form)."""
    settings, tset = verl_settings(cfg), task_settings(cfg, task)
    out_dir, data_dir = Path(out_dir).resolve(), Path(data_dir).resolve()
    gpus = int(settings.gpus or tset["gpus"] or 1)
    model = str(model or tset["model"])
    if model.startswith(("~", ".", "/")) or Path(model).expanduser().exists():  # a local directory
        model = str(Path(model).expanduser().resolve())
    preset_name, batch = _choose_batch_preset(settings, model, gpus)
    estimator = estimator_for_method(method)
    train_file, test_file = data_dir / "train.parquet", data_dir / "test.parquet"
    overrides = _run_overrides(
        cfg, task, method, seed, model, batch, estimator, (train_file, test_file)
    ) + _trainer_overrides(settings, tset, task, method, seed, gpus, out_dir)
    env = _job_env(cfg, task, method, seed, out_dir)
    for key in (
        "VERL_USE_EXTERNAL_MODULES",
        "VERL_FILE_LOGGER_PATH",
        "WANDB_MODE",
        "WANDB_DIR",
        "WANDB_RUN_ID",
        "WANDB_RESUME",
        "HF_DATASETS_CACHE",
        "TOKENIZERS_PARALLELISM",
    ):
        # quoted: Ray accepts only strings, and Hydra would turn `false` or `1e5` into a bool or float
        overrides.append(f"++ray_kwargs.ray_init.runtime_env.env_vars.{key}={_quoted(env[key])}")
    if settings.device == "cpu":
        overrides += cpu_overrides(gpus)
        env.update(_CPU_ENV | _RAY_CPU_ENV)
        for key, value in _CPU_ENV.items():
            overrides.append(f"++ray_kwargs.ray_init.runtime_env.env_vars.{key}={_quoted(value)}")
    overrides += list(settings.overrides)
    argv = [
        sys.executable,
        "-m",
        "verl.trainer.main_ppo",
        f"--config-path={VERL_CONFIG_DIR}",
        f"--config-name={CONFIG_NAME}",
        *overrides,
    ]
    return CellCommand(
        argv=argv,
        env=env,
        overrides=overrides,
        estimator=estimator,
        batch_preset=preset_name,
        batch=batch,
        gpus=gpus,
        model=model,
        out_dir=out_dir,
        data_files=(train_file, test_file),
    )


def _run_overrides(
    cfg: Mapping[str, Any],
    task: str,
    method: str,
    seed: int,
    model: str,
    batch,
    estimator: str,
    files: tuple[Path, Path],
) -> list[str]:
    """The cell's data, model, batch and estimator overrides, then the method's estimator settings."""
    spec, tset = get_method(method), task_settings(cfg, task)
    m = answers_per_rollout(cfg, task, method) if spec.multi_answer else 1
    overrides = [
        f"data.train_files={files[0]}",
        f"data.val_files={files[1]}",
        f"data.max_prompt_length={int(tset['max_prompt_length'][spec.length_kind])}",
        f"data.max_response_length={int(tset['max_response_length'][spec.length_kind])}",
        f"data.train_batch_size={batch.train_batch_size}",
        f"data.seed={seed}",
        # a variant runs as its method (veRL's workers read no config); its name stays in the run's paths
        f"data.vpo.method={spec.base or method}",
        f"data.vpo.m={m}",
        f"data.vpo.seed={seed}",
        f"data.vpo.alpha={_override_value(method_settings(cfg, method).get('alpha'))}",  # null: no weights
        f"actor_rollout_ref.model.path={model}",
        f"actor_rollout_ref.rollout.n={batch.rollout_n}",
        f"actor_rollout_ref.actor.ppo_mini_batch_size={batch.ppo_mini_batch_size}",
        f"actor_rollout_ref.actor.ppo_micro_batch_size_per_gpu={batch.micro_batch_per_gpu}",
        f"actor_rollout_ref.rollout.log_prob_micro_batch_size_per_gpu={batch.micro_batch_per_gpu}",
        f"actor_rollout_ref.ref.log_prob_micro_batch_size_per_gpu={batch.micro_batch_per_gpu}",
        f"algorithm.adv_estimator={estimator}",
        f"algorithm.vpo.method={spec.base or method}",
        f"algorithm.vpo.seed={seed}",
        f"algorithm.vpo.task={task}",
    ]
    return overrides + [
        f"++algorithm.vpo.settings.{key}={_override_value(value)}"
        for key, value in sorted(method_settings(cfg, method).items())
    ]


def _trainer_overrides(
    settings, tset: Mapping[str, Any], task: str, method: str, seed: int, gpus: int, out_dir: Path
) -> list[str]:
    """veRL's trainer block of the cell: GPUs, epochs, names, checkpoints, logging, resume."""
    return [
        f"trainer.n_gpus_per_node={gpus}",
        "trainer.nnodes=1",
        f"trainer.total_epochs={int(tset['epochs'])}",
        f"trainer.project_name={tracking.project(task)}",
        f"trainer.experiment_name={run_name(task, method, seed)}",
        f"trainer.default_local_dir={out_dir / 'checkpoints'}",
        f"trainer.logger={_override_value(list(settings.logger))}",
        f"trainer.save_freq={settings.save_freq}",
        f"trainer.test_freq={settings.test_freq}",
        "trainer.resume_mode=auto",
        f"trainer.v1.trainer_mode={TRAINER_MODE}",
    ]


def _job_env(cfg: Mapping[str, Any], task: str, method: str, seed: int, out_dir: Path) -> dict[str, str]:
    """The environment of the cell's veRL process (its Ray actors get the same through runtime_env)."""
    digest = hashlib.md5(f"{out_dir}".encode()).hexdigest()[:10]
    wandb = cfg.get("wandb") or {}
    env = {
        # registration of the estimators and the trainer in every process, Ray actors included
        "VERL_USE_EXTERNAL_MODULES": PLUGIN_MODULE,
        "VERL_FILE_LOGGER_PATH": str(out_dir / "logs" / f"verl_metrics.{time.strftime('%Y%m%dT%H%M%S')}.jsonl"),
        # per-job scratch: short path (Ray's socket names must stay under ~107 characters)
        "RAY_TMPDIR": str(Path(tempfile.gettempdir()) / f"vpo-ray-{os.getuid()}-{digest}"),  # made 0700 by the launcher
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
    return env

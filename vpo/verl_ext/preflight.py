"""The checks that fail a bad veRL cell in seconds, before Ray starts: unknown method or task, missing
data or model, batch sizes that do not divide the GPUs, m answers that cannot fit the response
length, a GPU cell on a machine without its GPUs, an estimator veRL does not know, a config veRL's
own validate_config rejects. Each raises
PreflightError naming the problem and the fix."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any, Mapping

from vpo.config import answers_per_rollout, task_settings, verl_settings
from vpo.methods import METHODS, get_method
from vpo.verl_ext import CONFIG_NAME, VERL_CONFIG_DIR
from vpo.verl_ext.command import CellCommand, PreflightError

_HUB_ID = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]*/[A-Za-z0-9][A-Za-z0-9._-]*$")


def check_cell(cfg: Mapping[str, Any], task: str, method: str) -> None:
    """Cheap checks on names (no files, no veRL): method and task exist in the config."""
    if method not in METHODS:
        raise PreflightError(f"unknown method {method!r}; known methods: {', '.join(METHODS)}")
    if task not in (cfg.get("task_settings") or {}):
        raise PreflightError(
            f"unknown task {task!r}: config.yaml has task_settings for {', '.join(cfg['task_settings'])}"
        )
    base = METHODS[method].base or method  # a variant's settings are its method's
    if base not in (cfg.get("method_settings") or {}):
        raise PreflightError(f"method {base!r} has no method_settings entry in config.yaml; add `{base}: {{}}`")


def _check_files(command: CellCommand) -> None:
    for path in command.data_files:
        if not path.is_file():
            raise PreflightError(
                f"data file {path} does not exist: run `vpo preprocess --task <task> --out {path.parent}`"
            )
    model = command.model
    if model.startswith("/"):
        if not (Path(model) / "config.json").is_file():
            raise PreflightError(
                f"model directory {model} has no config.json (set task_settings.<task>.model "
                "to a Hugging Face model directory or a hub id)"
            )
    elif not _HUB_ID.match(model):
        raise PreflightError(f"model {model!r} is neither an existing directory nor a hub id like 'Qwen/Qwen3-4B'")


def _check_device(device: str, gpus: int) -> None:
    """A GPU cell on a machine whose torch sees fewer GPUs than it asks for fails here, not in Ray."""
    if device != "cuda":
        return
    import torch

    seen = torch.cuda.device_count()
    if seen < gpus:
        raise PreflightError(
            f"this cell asks for {gpus} GPU(s) but torch sees {seen} on this machine: run the "
            "paper preset on GPU nodes (--profile profiles/slurm or profiles/lsf), or run veRL's "
            "trainer here on CPU with `snakemake --config preset=verl_cpu`"
        )


def _check_sizes(command: CellCommand, m: int, response_len: int, min_tokens_per_answer: int) -> None:
    b, gpus = command.batch, command.gpus
    rollouts = b.train_batch_size * b.rollout_n
    if rollouts % gpus:
        raise PreflightError(
            f"batch preset {command.batch_preset}: {b.train_batch_size} prompts x {b.rollout_n} "
            f"rollouts = {rollouts} does not divide over {gpus} GPUs"
        )
    if b.ppo_mini_batch_size > b.train_batch_size or b.train_batch_size % b.ppo_mini_batch_size:
        raise PreflightError(
            f"batch preset {command.batch_preset}: ppo_mini_batch_size {b.ppo_mini_batch_size} "
            f"must divide train_batch_size {b.train_batch_size}"
        )
    mini_rollouts = b.ppo_mini_batch_size * b.rollout_n
    if mini_rollouts % gpus or (mini_rollouts // gpus) % b.micro_batch_per_gpu:
        raise PreflightError(
            f"batch preset {command.batch_preset}: a mini-batch of {mini_rollouts} rollouts over "
            f"{gpus} GPUs is not a multiple of micro_batch_per_gpu {b.micro_batch_per_gpu}"
        )
    if m > 1 and response_len // m < min_tokens_per_answer:
        raise PreflightError(
            f"m={m} answers do not fit max_response_length={response_len}: "
            f"{response_len // m} tokens per answer < verl.min_tokens_per_answer={min_tokens_per_answer}; "
            "raise task_settings.<task>.max_response_length.multi or lower m"
        )


def _check_with_verl(command: CellCommand) -> None:
    """The estimator is registered in veRL, and veRL composes and validates the job's config."""
    try:
        from verl.trainer.ppo import core_algos
        from verl.trainer.ppo.utils import need_critic, need_reference_policy
        from verl.utils.config import validate_config

        import vpo.verl_ext.plugin  # noqa: F401  (registers the estimators and the trainer)
    except ImportError as err:
        raise PreflightError(f"veRL is not importable ({err}); install the extra: pip install -e '.[verl]'") from err
    try:
        core_algos.get_adv_estimator_fn(command.estimator)
    except ValueError as err:
        raise PreflightError(f"estimator {command.estimator!r} is not registered in veRL: {err}") from err
    from hydra import compose, initialize_config_dir

    with initialize_config_dir(config_dir=str(VERL_CONFIG_DIR), version_base=None):
        config = compose(config_name=CONFIG_NAME, overrides=list(command.overrides))
    try:
        validate_config(config, use_reference_policy=need_reference_policy(config), use_critic=need_critic(config))
    except (AssertionError, ValueError) as err:
        raise PreflightError(f"veRL rejects the job's config: {err}") from err


def preflight(cfg: Mapping[str, Any], task: str, method: str, command: CellCommand, *, with_verl: bool = True) -> None:
    """Every check that can fail before Ray starts; raises PreflightError naming the problem."""
    spec = get_method(method)
    tset = task_settings(cfg, task)
    settings = verl_settings(cfg)
    if not VERL_CONFIG_DIR.joinpath(f"{CONFIG_NAME}.yaml").is_file():
        raise PreflightError(f"{VERL_CONFIG_DIR}/{CONFIG_NAME}.yaml is missing: run from a checkout of the project")
    _check_files(command)
    m = answers_per_rollout(cfg, task, method) if spec.multi_answer else 1
    _check_sizes(command, m, int(tset["max_response_length"][spec.length_kind]), settings.min_tokens_per_answer)
    _check_device(settings.device, command.gpus)  # after the checks of the cell itself
    if with_verl:
        _check_with_verl(command)

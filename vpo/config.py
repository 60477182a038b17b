"""Reading config.yaml: validate, apply the active preset, validate again.

Every part of the pipeline (the Snakefile, the trainers, evaluation, the veRL launcher) reads the
experiment through `load_config` / `resolve_config`, so a typo fails the same way everywhere: one
`ConfigError` that names the key and says what to change, before any work starts.

Needs only PyYAML and jsonschema.
"""

from __future__ import annotations

import copy
import functools
import hashlib
import json
import os
import re
import sys
from pathlib import Path
from typing import Any, Mapping

import yaml

from vpo.atomic import write_text_atomic
from vpo.config_checks import cross_key_problems
from vpo.methods import register_variant
from vpo.settings import LIMITS, LocalTrainerSettings, VerlSettings

_REPO_ROOT = Path(__file__).resolve().parent.parent
_SCHEMA_PATH = _REPO_ROOT / "workflow" / "schemas" / "config.schema.yaml"
_DEFAULT_CONFIG = "config.yaml"
# libyaml's loader where PyYAML has it: the same documents in about a seventh of the time (config.yaml and
# the schema: 0.059 -> 0.008 s), which every job pays reading the workflow's snapshot
_YAML_LOADER = getattr(yaml, "CSafeLoader", yaml.SafeLoader)


class ConfigError(ValueError):
    """config.yaml (or an override) is invalid; the message names the key and the fix."""


def deep_merge(base: Mapping[str, Any], override: Mapping[str, Any]) -> dict[str, Any]:
    """Return base with override merged in: mappings merge recursively, anything else replaces."""
    merged = copy.deepcopy(dict(base))
    for key, value in override.items():
        if isinstance(value, Mapping) and isinstance(merged.get(key), Mapping):
            merged[key] = deep_merge(merged[key], value)
        else:
            merged[key] = copy.deepcopy(value)
    return merged


def _key_path(parts) -> str:
    """['task_settings', 'maze', 'eval', 'seeds', 0] -> 'task_settings.maze.eval.seeds[0]'."""
    text = ""
    for part in parts:
        text += f"[{part}]" if isinstance(part, int) else (f".{part}" if text else str(part))
    return text or "<top level>"


@functools.cache
def _schema_validator():
    """The schema file's validator, with `local_trainer` built from the settings dataclass (so they cannot
    drift); made once per process (a config is validated before and after its preset is applied)."""
    import jsonschema

    if not _SCHEMA_PATH.exists():
        raise ConfigError(f"the config schema {_SCHEMA_PATH} is missing; run from a full checkout")
    with open(_SCHEMA_PATH) as fh:
        schema = yaml.load(fh, Loader=_YAML_LOADER)
    schema["properties"]["local_trainer"] = _local_trainer_schema()
    # an integer is an int: JSON Schema counts 4.0 as one, and `steps: 4.0` or `seeds: [1.0]` then reached the
    # code as floats (a float seed, a float step count)
    strict = jsonschema.Draft202012Validator.TYPE_CHECKER.redefine(
        "integer", lambda _, value: isinstance(value, int) and not isinstance(value, bool)
    )
    return jsonschema.validators.extend(jsonschema.Draft202012Validator, type_checker=strict)(schema)


def _local_trainer_schema() -> dict:
    import dataclasses

    kinds = {"int": {"type": "integer"}, "float": {"type": "number"}, "dict": {"type": "object"}}
    fields = dataclasses.fields(LocalTrainerSettings)
    return {
        "type": "object",
        "additionalProperties": False,
        "required": [f.name for f in fields],
        "properties": {f.name: {**kinds.get(str(f.type), {}), **LIMITS.get(f.name, {})} for f in fields},
    }


SHOWN = 5  # problems of other kinds than a missing key listed by one error


def validate(cfg: Mapping[str, Any], *, source: str = _DEFAULT_CONFIG, stage: str = "") -> None:
    """Check cfg against the schema; raise ConfigError listing every missing key and the first SHOWN of
    the other problems."""
    errors = sorted(_schema_validator().iter_errors(cfg), key=lambda e: (list(map(str, e.absolute_path)), e.message))
    lines = [f"{_key_path(e.absolute_path)}: {e.message}" for e in errors]
    # YAML's .nan and .inf pass every number rule of a schema
    lines += [f"{path}: {value} is not a finite number" for path, value in _non_finite(cfg)]
    if not lines:
        return
    where = f"{source}{' ' + stage if stage else ''}"
    # every missing key is named (a file missing three keys is fixed in one pass); other problems up to
    # SHOWN, and "... and N more" only for two or more left out
    missing = [line for line in lines if line.endswith("is a required property")]
    others = [line for line in lines if line not in missing]
    shown = others if len(others) <= SHOWN + 1 else others[:SHOWN]
    more = f"\n  ... and {len(others) - len(shown)} more" if len(shown) < len(others) else ""
    lines = missing + shown
    raise ConfigError(
        f"invalid config ({where}):\n  "
        + "\n  ".join(lines)
        + more
        + f"\n  (allowed keys and values: {_SCHEMA_PATH.relative_to(_REPO_ROOT)})"
    )


def _non_finite(value: Any, path: str = "") -> list[tuple[str, float]]:
    """(key path, value) of every NaN or infinite number in a config."""
    import math

    if isinstance(value, float) and not math.isfinite(value):
        return [(path, value)]
    if isinstance(value, Mapping):
        return [
            found for key, item in value.items() for found in _non_finite(item, f"{path}.{key}" if path else str(key))
        ]
    if isinstance(value, list):
        return [found for i, item in enumerate(value) for found in _non_finite(item, f"{path}[{i}]")]
    return []


def _check_cross_keys(cfg: Mapping[str, Any], source: str) -> None:
    """Rules spanning several keys, which the schema cannot express (vpo/config_checks.py)."""
    problems = cross_key_problems(cfg, _REPO_ROOT)
    if problems:
        raise ConfigError(f"invalid config ({source}, preset {cfg['preset']}):\n  " + "\n  ".join(problems))


_NUMBER = re.compile(r"^[+-]?(\d+|\d*\.\d+([eE][+-]?\d+)?|\d+[eE][+-]?\d+)$")


_WORDS = {"true": True, "false": False, "null": None}


def numbers_in_lists(value: Any) -> Any:
    """A copy where text inside lists and mappings that reads as a number, true, false or null becomes
    that value: Snakemake reads the structures of `--config` as text (`seeds=[0]` gives ["0"],
    `variants={"v": {"m": 2}}` gives "2"). No value of the config is text that reads as one of them."""

    def typed(v: Any) -> Any:
        if isinstance(v, str) and _NUMBER.match(v):
            return int(v) if re.fullmatch(r"[+-]?\d+", v) else float(v)
        return _WORDS[v] if isinstance(v, str) and v in _WORDS else numbers_in_lists(v)

    if isinstance(value, Mapping):
        return {k: typed(v) for k, v in value.items()}
    if isinstance(value, list):
        return [typed(v) for v in value]
    return value


def resolve_config(
    raw: Mapping[str, Any],
    preset: str | None = None,
    overrides: Mapping[str, Any] | None = None,
    *,
    source: str = _DEFAULT_CONFIG,
) -> dict[str, Any]:
    """Validate raw, merge presets[preset or raw['preset']] and overrides over it, validate again.

    The result keeps `presets` and names the applied preset in `preset`; resolving a resolved
    config again gives the same dict (merging a preset twice changes nothing).
    """
    if not isinstance(raw, Mapping):
        raise ConfigError(f"invalid config ({source}): expected a mapping of keys, got {type(raw).__name__}")
    raw = numbers_in_lists(raw)
    validate(raw, source=source)
    name = preset or raw["preset"]
    if name not in raw["presets"]:
        known = ", ".join(sorted(raw["presets"]))
        raise ConfigError(f"preset: '{name}' is not defined in presets ({source}); choose one of: {known}")
    cfg = deep_merge(raw, raw["presets"][name])
    cfg["preset"] = name
    if overrides:
        overrides = _ablations_on_the_grid(cfg, numbers_in_lists(dict(overrides)))
        cfg = deep_merge(cfg, overrides)
        for variant_name, variant in (overrides.get("variants") or {}).items():
            # a variant redefined to run another method loses the label of the old one ("VPO (m = 2)"
            # on Multi-RLVR runs); it gets its default label unless the override names one
            before = ((raw.get("variants") or {}).get(variant_name) or {}).get("method")
            if isinstance(variant, Mapping) and "label" not in variant and variant.get("method") not in (None, before):
                cfg["variants"][variant_name].pop("label", None)
        cfg["preset"] = name
        # folded into the stored preset, so resolving the result again (a job reading the snapshot)
        # keeps the overrides instead of re-applying the preset over them
        cfg["presets"] = {**raw["presets"], name: deep_merge(raw["presets"][name], overrides)}
    validate(cfg, source=source, stage=f"after applying preset '{name}'")
    _register_variants(cfg, source)
    _check_cross_keys(cfg, source)
    return cfg


def _ablations_on_the_grid(cfg: Mapping[str, Any], overrides: dict[str, Any]) -> dict[str, Any]:
    """Overrides that change the grid's tasks (`--config tasks=[mytask]`) and leave `ablations.tasks`
    alone keep the preset's ablations on the tasks of the new grid only; a note names the others."""
    if "tasks" not in overrides or "tasks" in (overrides.get("ablations") or {}):
        return overrides
    planned = list((cfg.get("ablations") or {}).get("tasks") or [])
    kept = [task for task in planned if task in overrides["tasks"]]
    if kept == planned:
        return overrides
    print(
        f"config: the ablations skip {[t for t in planned if t not in kept]}, not in tasks {overrides['tasks']} "
        "(set ablations.tasks to run them)",
        file=sys.stderr,
    )
    return deep_merge(overrides, {"ablations": {"tasks": kept}})


def _register_variants(cfg: Mapping[str, Any], source: str = _DEFAULT_CONFIG) -> None:
    """Add the config's method variants to the method table of this process (`vpo.methods`)."""
    for name, variant in (cfg.get("variants") or {}).items():
        try:
            register_variant(name, variant["method"], variant.get("label"))
        except ValueError as err:
            raise ConfigError(f"invalid config ({source}): variants.{name}: {err}") from None


def load_config(
    path: str | os.PathLike | None = None,
    preset: str | None = None,
    overrides: Mapping[str, Any] | None = None,
) -> dict[str, Any]:
    """Read a config file (default ./config.yaml; the workflow hands jobs its snapshot with --config)
    and resolve it. preset: None -> the file's own `preset` key.
    """
    path = Path(path or _DEFAULT_CONFIG)
    if not path.exists():
        raise ConfigError(f"config file {path} not found; run from the repository root or pass --config")
    with open(path) as fh:
        try:
            raw = yaml.load(fh, Loader=_YAML_LOADER)
        except yaml.YAMLError as err:
            raise ConfigError(f"{path} is not valid YAML: {err}") from err
    return resolve_config(raw, preset, overrides, source=str(path))


def absolute_data_paths(cfg: Mapping[str, Any], base: str | os.PathLike) -> dict[str, Any]:
    """A copy of cfg whose relative paths (`task_settings.<task>.data.path`, the same in data's
    sub-mappings (lcb's sources), the prompt templates), the presets' included so that re-resolving
    the copy keeps them, are made absolute against `base` (the project directory): jobs find them
    whatever directory they run in."""
    out = copy.deepcopy(dict(cfg))
    for block in [out, *(out.get("presets") or {}).values()]:
        for settings in (block.get("task_settings") or {}).values():
            data = settings.get("data") or {}
            for holder, key in [
                (data, "path"),
                *((v, "path") for v in data.values() if isinstance(v, dict)),
                *((settings.get("prompts") or {}, mode) for mode in ("single", "multi", "goal")),
            ]:
                path = holder.get(key)
                if path and not Path(str(path)).expanduser().is_absolute():
                    holder[key] = str((Path(base) / str(path)).resolve())
    return out


def task_settings(cfg: Mapping[str, Any], task: str) -> dict[str, Any]:
    """The resolved settings of one task (data, m, model, lengths, epochs, gpus, eval)."""
    try:
        return cfg["task_settings"][task]
    except KeyError:
        raise ConfigError(f"task_settings.{task} is missing; known: {', '.join(cfg['task_settings'])}") from None


def method_settings(cfg: Mapping[str, Any], method: str) -> dict[str, Any]:
    """The resolved estimator settings of one method (alpha, sampler, n_weights, ...); a variant's are
    its method's with the variant's `settings` merged over them."""
    variant = (cfg.get("variants") or {}).get(method)
    base = variant["method"] if variant else method
    if base not in cfg["method_settings"]:
        raise ConfigError(f"method_settings.{base} is missing; known: {', '.join(cfg['method_settings'])}")
    return deep_merge(cfg["method_settings"][base], (variant or {}).get("settings") or {})


def answers_per_rollout(cfg: Mapping[str, Any], task: str, method: str) -> int:
    """m of a cell: the variant's `m` if it sets one, else task_settings.<task>.m (multi-answer methods
    write m answers; single-answer methods one, whatever this says)."""
    variant = (cfg.get("variants") or {}).get(method) or {}
    return int(variant.get("m") or task_settings(cfg, task)["m"])


def verl_settings(cfg: Mapping[str, Any]):
    """The resolved `verl:` block as `vpo.settings.VerlSettings` (config.yaml is where they default)."""
    if "verl" not in cfg:
        raise ConfigError("the `verl:` block is missing from the config; copy it from the project's config.yaml")
    return VerlSettings.from_dict(cfg["verl"])


def cell_settings(cfg: Mapping[str, Any], task: str, method: str) -> dict[str, Any]:
    """Everything that determines one trained cell, so a change to it (and only it) retrains it.

    Evaluation settings are left out: changing them re-evaluates, it does not retrain.
    """
    trainer_block = "verl" if cfg["backend"] == "verl" else "local_trainer"
    settings = {
        "backend": cfg["backend"],
        "task": {
            **{key: value for key, value in task_settings(cfg, task).items() if key != "eval"},
            "m": answers_per_rollout(cfg, task, method),
        },
        "method": method_settings(cfg, method),
        "trainer": cfg.get(trainer_block, {}),
    }
    variant = (cfg.get("variants") or {}).get(method)
    if variant:  # the method a variant runs: grpo, max_at_k, maxrl... share their (empty) settings
        settings["variant_of"] = variant["method"]
    return settings


def cell_digest(cfg: Mapping[str, Any], task: str, method: str | None = None) -> str:
    """Hash of what determines a trained cell (method None: the task's CPU base model, which
    depends on the task's settings and the local trainer block only)."""
    if method is None:
        return settings_digest({"task": task_settings(cfg, task), "trainer": cfg.get("local_trainer", {})})
    return settings_digest(cell_settings(cfg, task, method))


def trains_tiny_base(cfg: Mapping[str, Any]) -> bool:
    """Cells train from the tiny CPU base models (`vpo base-model`): the local trainer, TRL, and veRL on CPU."""
    return cfg["backend"] in ("local", "trl") or cfg["verl"]["device"] == "cpu"


def scale_note(cfg: Mapping[str, Any]) -> str:
    """One line naming the preset and the scale a figure was made at (figure titles)."""
    if trains_tiny_base(cfg):
        t = cfg["local_trainer"]
        if cfg["backend"] in ("local", "trl"):
            by = " by TRL" if cfg["backend"] == "trl" else ""
            training = (
                f"trained{by} on CPU, {t['steps']} RL steps of {t['prompts_per_step']} x "
                f"{t['rollouts_per_prompt']} rollouts"
            )
        else:
            batch = cfg["verl"]["batch_presets"].get(cfg["verl"]["batch_preset"])
            training = "trained by veRL on CPU" + (
                f", {batch['train_batch_size']} x {batch['rollout_n']} rollouts per step" if batch else ""
            )
        side = task_settings(cfg, "maze")["data"]["size"] if "maze" in cfg["tasks"] else None
        maze = f", maze {side}x{side}" if side else ""
        seeds = len(cfg["seeds"])
        return (
            f"{cfg['preset']} preset: {t['num_layers']}-layer width-{t['hidden_size']} model {training}{maze}, "
            f"{seeds} seed{'s' if seeds != 1 else ''}"
        )
    models = sorted({str(task_settings(cfg, task)["model"]) for task in cfg["tasks"]})
    return f"{cfg['preset']} preset: veRL on {', '.join(models)}"


def file_digest(path: str | os.PathLike) -> str:
    """Short sha256 of a file's bytes (the identity of training data or of a model build)."""
    digest = hashlib.sha256()
    with open(path, "rb") as fh:
        for block in iter(lambda: fh.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()[:16]


def settings_digest(settings: Any) -> str:
    """Short stable hash of a JSON-able value (key order does not matter)."""
    text = json.dumps(settings, sort_keys=True, separators=(",", ":"), default=str)
    return hashlib.sha256(text.encode()).hexdigest()[:12]


def write_config(cfg: Mapping[str, Any], path: str | os.PathLike) -> bool:
    """Write cfg as YAML to path (temp name, then rename); skip if identical. Returns True if written."""
    path = Path(path)
    text = yaml.safe_dump(dict(cfg), sort_keys=False, default_flow_style=None, width=110)
    if path.exists() and path.read_text() == text:
        return False
    write_text_atomic(path, text)
    return True

"""What the user set over the project's config.yaml: the values that win over the active preset.

Snakemake hands the workflow one merged config (config.yaml, then each --configfile, then --config);
the preset is applied to it in `vpo.config.resolve_config`, and whatever the user set must then win
over the preset, equal to config.yaml's value or not. `user_overrides` finds those values,
`file_overrides` reads them from the user's own files, `preset_conflicts` names the keys where a
preset's value is overridden (one line each in Snakemake's output). `workflow_config` does all of it
for the workflow in one call (rules/common.smk).
"""

from __future__ import annotations

import sys
from pathlib import Path
from typing import IO, Any, Mapping

import yaml

from vpo.config import absolute_data_paths, deep_merge, numbers_in_lists, resolve_config


def user_overrides(
    raw: Mapping[str, Any], project: Mapping[str, Any], command_line: Mapping[str, Any] | None = None
) -> dict[str, Any]:
    """What the user set over the project's config.yaml, outside `preset`/`presets`: the leaves of raw
    (config.yaml + --configfile + --config, as Snakemake merged them) that differ from config.yaml or
    are new, and every leaf of command_line (Snakemake's --config mapping), even one equal to
    config.yaml's (`--config seeds=[0,1,2]` repeats config.yaml's seeds, and must still win over a
    preset's). The settings of a task config.yaml has none for are not overrides: they are that
    task's base values, under the presets as config.yaml's are."""

    found = changed(numbers_in_lists(dict(raw)), numbers_in_lists(dict(project)))
    # a task config.yaml lacks (a plugin's, from a second --configfile) gets its settings there as
    # config.yaml's tasks do: the base values, which a preset's `presets.<name>.task_settings` refine
    for task in [t for t in found.get("task_settings") or {} if t not in (project.get("task_settings") or {})]:
        del found["task_settings"][task]
    found = {k: v for k, v in found.items() if v != {}}
    found = deep_merge(found, numbers_in_lists(dict(command_line or {})))
    return {k: v for k, v in found.items() if k not in ("preset", "presets")}


def changed(a: Any, b: Any) -> Any:
    """The leaves of mapping `a` that differ from `b`'s or that `b` lacks ({} when none)."""
    if isinstance(a, Mapping) and isinstance(b, Mapping):
        out = {k: changed(v, b[k]) if k in b else v for k, v in a.items() if k not in b or v != b[k]}
        return {k: v for k, v in out.items() if v != {}}
    return a


def is_copy(data: Mapping[str, Any]) -> bool:
    """Whether a user's config file is a copy of config.yaml (`cp config.yaml my-run.yaml`, then edited): it
    holds a `presets:` block. A run file (`seeds: [0, 1, 2]`) holds none."""
    return "presets" in data


def file_overrides(files: list[Mapping[str, Any]], project: Mapping[str, Any]) -> dict[str, Any]:
    """What the user's own config files (`--configfile`, not config.yaml) set over the preset, as `--config`
    does: every leaf of a run file, even one equal to config.yaml's (`seeds: [0, 1, 2]` means it); of a copy
    of config.yaml (`is_copy`), only what it changes (its every leaf once cancelled the preset: a copy with
    other seeds planned the paper grid, backend veRL, into results/cpu). Left out: `preset` and `presets` (a
    file's presets are presets), and the settings of a task config.yaml has none for (that task's base values,
    which presets refine)."""
    merged: dict[str, Any] = {}
    for data in files:
        data = numbers_in_lists(dict(data or {}))
        merged = deep_merge(merged, changed(data, numbers_in_lists(dict(project))) if is_copy(data) else data)
    known = project.get("task_settings") or {}
    if "task_settings" in merged:
        merged["task_settings"] = {t: v for t, v in merged["task_settings"].items() if t in known}
    return {k: v for k, v in merged.items() if k not in ("preset", "presets") and v != {}}


def preset_conflicts(raw: Mapping[str, Any], overrides: Mapping[str, Any], preset: str | None = None) -> list[str]:
    """Key paths the preset sets to something else than the user's override (the override wins)."""
    name = preset or raw.get("preset")
    found: list[str] = []

    def walk(over: Any, pre: Any, path: list[str]) -> None:
        if isinstance(over, Mapping) and isinstance(pre, Mapping):
            for key, value in over.items():
                if key in pre:
                    walk(value, pre[key], path + [key])
        elif over != pre:
            found.append(".".join(path))

    walk(overrides, (raw.get("presets") or {}).get(name) or {}, [])
    return found


def _file_notes(named: list[tuple[str, Mapping[str, Any]]], project: Mapping[str, Any], preset: str) -> list[str]:
    """One line per user's config file (path, contents): the keys it sets over the preset, and how it is read."""
    lines = []
    for path, data in named:
        keys = sorted(file_overrides([data], project))
        how = "a copy of config.yaml (it holds presets:), so only what it changes counts" if is_copy(data) else ""
        sets = ", ".join(keys) if keys else "nothing"
        lines.append(f"config: {path} sets {sets} over preset '{preset}'" + (f"; {how}" if how else ""))
    return lines


def workflow_config(
    merged: Mapping[str, Any],
    project_dir: str | Path,
    configfiles: list[str | Path],
    command_line: Mapping[str, Any],
    notes: IO[str] = sys.stderr,
) -> dict[str, Any]:
    """The workflow's resolved config: Snakemake's merged config (`merged`: config.yaml, each --configfile,
    then --config) with the active preset applied under what the user set (their own config files, then
    --config), a relative data path made absolute under `project_dir`. Writes one line to `notes` per
    user's file (the keys it sets) and per preset key the user's value overrides. Raises ConfigError or
    TaskPluginError for a config the workflow cannot run."""
    project_config = (Path(project_dir) / "config.yaml").resolve()
    project = yaml.safe_load(project_config.read_text())
    files = [
        (str(path), yaml.safe_load(Path(path).read_text()) or {})
        for path in configfiles
        if Path(path).resolve() != project_config
    ]
    for line in _file_notes(files, project, merged.get("preset")):
        print(line, file=notes)
    overrides = user_overrides(
        merged, project, deep_merge(file_overrides([data for _, data in files], project), dict(command_line))
    )
    for key in preset_conflicts(merged, overrides):
        print(
            f"config: preset '{merged.get('preset')}' sets {key}, but your --configfile/--config value is used",
            file=notes,
        )
    cfg = resolve_config(merged, overrides=overrides, source="config (config.yaml + --configfile/--config)")
    return absolute_data_paths(cfg, project_dir)  # a relative data.path names a directory of the project

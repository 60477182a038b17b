"""A task plugin's data settings: its settings dataclass filled from config.yaml's `task_settings.<task>.data`
(re-exported by `vpo.task`, where plugins import it from)."""

from __future__ import annotations

import dataclasses
from typing import Any, Mapping

_SIMPLE_TYPES = {"int": (int,), "float": (int, float), "str": (str,), "bool": (bool,)}


def settings_from(cls: type, values: dict[str, Any] | None, task: str) -> Any:
    """A task's settings dataclass from a mapping; an unknown key, or a value not of its field's simple
    type (int, float, str, bool, or one of them or None; `true` is not an int), is an error naming it."""
    if values is not None and not isinstance(values, Mapping):
        raise ValueError(
            f"{task}: expected a mapping of setting names to values, got {values!r} ({type(values).__name__})"
        )
    values = dict(values or {})
    fields = {f.name: str(f.type) for f in dataclasses.fields(cls)}
    unknown = sorted(set(values) - set(fields))
    if unknown:
        raise ValueError(f"{task}: unknown setting(s) {unknown}; known: {sorted(fields)}")
    for name, value in values.items():
        allowed = [part.strip() for part in fields[name].split("|")]
        kinds = [_SIMPLE_TYPES.get(part) for part in allowed if part != "None"]
        if None in kinds or (value is None and "None" in allowed):  # a richer type: the task checks it
            continue
        if (isinstance(value, bool) and "bool" not in allowed) or not any(isinstance(value, k) for k in kinds):
            raise ValueError(f"{task}: setting {name} is {value!r} ({type(value).__name__}); expected {fields[name]}")
    for name in ("train_size", "test_size"):  # a count of rows: 0 wrote an empty split, -1 dropped the last row
        if isinstance(values.get(name), int) and values[name] < 1:
            raise ValueError(
                f"{task}: setting {name} must be at least 1 (leave it unset for every row), got {values[name]}"
            )
    return cls(**values)

"""How methods and tasks are named in figures and tables: the method table's and the task plugins'
labels, and the config's method variants registered for one figure or table."""

from __future__ import annotations

from vpo.methods import METHODS, register_variant
from vpo.task import TASKS


def method_label(name: str) -> str:
    """The method's label in the method table (vpo/methods.py); an unknown name as is."""
    method = METHODS.get(name)
    return (method.label or method.name) if method else name


def task_label(name: str) -> str:
    """The task plugin's label (`Task.label`); a name no installed plugin has, as is."""
    task = TASKS.get(name)
    return (task.label or task.name) if task else name


def use_variants(text: str | None) -> None:
    """Register the method variants a figure or table shows (JSON {name: {"method": base, "label":
    label}}, as the workflow passes them from config.yaml `variants`), so they get their labels and looks."""
    import json

    for name, variant in (json.loads(text) if text else {}).items():
        register_variant(name, variant["method"], variant.get("label"))

"""The grid of a resolved config: which (task, method) cells train. `methods` x `tasks`, and the
ablations' methods on the ablations' tasks (config.yaml `ablations`)."""

from __future__ import annotations

from typing import Any, Mapping

ABLATIONS = ("components", "alpha", "sampler", "m")  # config.yaml `ablations`: figures/ablation_<name>.pdf


def ablation_methods(cfg: Mapping[str, Any], name: str | None = None) -> list[str]:
    """The methods of one ablation (`ablations.<name>`), or of all of them in order without repeats;
    none when `ablations.tasks` is empty."""
    block = cfg.get("ablations") or {}
    if not block.get("tasks"):
        return []
    names = [name] if name else [n for n in ABLATIONS if block.get(n)]
    return list(dict.fromkeys(m for n in names for m in block.get(n) or []))


def grid_cells(cfg: Mapping[str, Any]) -> list[tuple[str, str]]:
    """Every (task, method) that trains: methods x tasks, then each ablation task's ablation methods
    that the grid does not hold already."""
    cells = [(task, method) for task in cfg["tasks"] for method in cfg["methods"]]
    extra = [
        (task, method) for task in (cfg.get("ablations") or {}).get("tasks") or [] for method in ablation_methods(cfg)
    ]
    return list(dict.fromkeys(cells + extra))

"""The config's rules that span several keys, which its schema cannot express: every task and method
of the grid has settings, the ablations compare known methods on the grid's tasks, the evaluation
budget holds whole groups of m, a method gets only the settings its estimator takes (and alpha where it
draws weights), Max@k's subset fits the group, the search's selection methods are in the grid, a task's
data settings and prompt templates are usable. `vpo.config` runs them on every resolved config and
reports them all at once.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any, Mapping

from vpo.advantage import max_at_k_subset
from vpo.grid import ABLATIONS, ablation_methods, grid_cells
from vpo.method_advantage import setting_keys
from vpo.methods import METHODS, get_method
from vpo.task import ENTRY_POINT_GROUP, TASKS
from vpo.templates import template_problems

# the task settings only veRL reads: the CPU backends (local, trl) train the tiny model and ignore them
_VERL_TASK_KEYS = ("model", "max_prompt_length", "max_response_length", "epochs", "gpus")


def cross_key_problems(cfg: Mapping[str, Any], project: Path) -> list[str]:
    """Every problem of a resolved config that spans several keys, one message each naming the key
    and the fix; `project` is the directory relative prompt-template paths are read from."""
    problems = []
    for task in cfg["tasks"]:
        if task not in cfg["task_settings"]:
            problems.append(
                f"tasks: '{task}' has no settings; add task_settings.{task} "
                "(data, m, eval; and for backend verl model, max_prompt_length, max_response_length, "
                "epochs, gpus) or remove it from tasks"
            )
    variants = cfg.get("variants") or {}
    for method in cfg["methods"]:
        if method not in METHODS:
            problems.append(
                f"methods: '{method}' is neither a method ({', '.join(m for m in METHODS if METHODS[m].base is None)}) "
                "nor a variant named under `variants`"
            )
        elif (variants.get(method) or {}).get("method", method) not in cfg["method_settings"]:
            base = (variants.get(method) or {}).get("method", method)
            problems.append(f"methods: '{method}' has no settings; add method_settings.{base} (may be {{}})")
    problems += _variant_problems(variants)
    for task in cfg["tasks"]:
        settings = cfg["task_settings"].get(task)
        if settings is None:
            continue
        budget = settings["eval"]["budget"]
        if cfg["report"]["best_at"] > budget:
            problems.append(
                f"report.best_at: {cfg['report']['best_at']} exceeds task_settings.{task}.eval.budget "
                f"({budget}); lower report.best_at or raise the budget"
            )
        missing = [key for key in _VERL_TASK_KEYS if key not in settings]
        if cfg["backend"] == "verl" and missing:  # the CPU backends train the tiny model and ignore them
            problems.append(
                f"task_settings.{task}: backend verl needs {missing} (the model, its prompt and "
                "response lengths per prompt kind, epochs and GPUs per training job)"
            )
        elif cfg["backend"] == "verl" and settings["gpus"] < 1:
            problems.append(f"task_settings.{task}.gpus: backend verl trains on GPUs, so it must be >= 1")
        if cfg["backend"] == "verl" and "gpus" not in settings["eval"]:  # the CPU backends evaluate in process
            problems.append(
                f"task_settings.{task}.eval.gpus: backend verl evaluates with vLLM and needs the GPUs of an "
                "evaluation job (0 on a machine without one)"
            )
    absent = [m for m in cfg["evolve"]["select_methods"] if m not in cfg["methods"]]
    if absent:
        problems.append(
            f"evolve.select_methods: {absent} are not in methods {cfg['methods']}, so they have no "
            "evaluation pools to choose the search's problems from; add them to methods or drop them"
        )
    return problems + _ablation_problems(cfg) + _method_problems(cfg) + _task_problems(cfg, project)


def _ablation_problems(cfg: Mapping[str, Any]) -> list[str]:
    """Ablation tasks outside the grid, lists of one, unknown names, and methods that lack the
    setting their ablation varies."""
    block = cfg.get("ablations") or {}
    problems = [
        f"ablations.tasks: '{task}' is not in tasks {cfg['tasks']}; ablations run on the grid's tasks"
        for task in block.get("tasks") or []
        if task not in cfg["tasks"]
    ]
    for name in ABLATIONS:
        methods = block.get(name) or []
        if len(methods) == 1:
            problems.append(f"ablations.{name}: {methods} compares nothing; name two or more methods, or none")
        for method in methods:
            if method not in METHODS:
                problems.append(
                    f"ablations.{name}: '{method}' is neither a method nor a variant named under `variants`"
                )
            elif name in ("alpha", "sampler") and name not in setting_keys(method):
                problems.append(
                    f"ablations.{name}: '{method}' takes no {name}; this ablation compares methods that "
                    "do (vpo and its variants)"
                )
            elif name == "m" and not get_method(method).multi_answer:
                problems.append(f"ablations.m: '{method}' writes one answer per rollout; m varies multi-answer methods")
    return problems


def _variant_problems(variants: Mapping[str, Any]) -> list[str]:
    """Variant settings their method does not take, and m on a method that writes one answer."""
    problems = []
    for name, variant in variants.items():
        takes = setting_keys(variant["method"])
        for key in sorted(set(variant.get("settings") or {}) - takes):
            problems.append(
                f"variants.{name}.settings.{key}: {variant['method']} does not take '{key}'; it takes "
                f"{', '.join(sorted(takes)) or 'nothing'}"
            )
        if "m" in variant and not get_method(variant["method"]).multi_answer:
            problems.append(
                f"variants.{name}.m: {variant['method']} writes one answer per rollout; m is for "
                "multi-answer methods (multi_rlvr, vpo)"
            )
    return problems


def _method_problems(cfg: Mapping[str, Any]) -> list[str]:
    """Settings a method's estimator does not take."""
    problems = []
    variants = cfg.get("variants") or {}
    for name in (m for m in dict.fromkeys([*cfg["methods"], *ablation_methods(cfg)]) if m in METHODS):
        base, changed = (
            (variants[name]["method"], variants[name].get("settings") or {}) if name in variants else (name, {})
        )
        takes, given = setting_keys(name), set(cfg["method_settings"].get(base) or {}) | set(changed)
        if "alpha" in takes - given:  # read without a default wherever it is used
            problems.append(
                f"method_settings.{name}.alpha: {name} draws Dirichlet weights; set their alpha (paper: 1.0)"
            )
        for key in sorted(given - takes):
            problems.append(
                f"method_settings.{name}.{key}: {name} does not take '{key}'; it takes "
                f"{', '.join(sorted(takes)) or 'nothing'}"
            )
    return problems + _max_at_k_problems(cfg) + _budget_problems(cfg)


def _max_at_k_problems(cfg: Mapping[str, Any]) -> list[str]:
    """A Max@k subset that does not fit the group size of the trainer (each veRL batch preset auto may pick)."""
    if "max_at_k" not in cfg["methods"]:
        return []
    if cfg["backend"] != "verl":
        groups = {"local_trainer.rollouts_per_prompt": cfg["local_trainer"]["rollouts_per_prompt"]}
    else:
        batch, presets = cfg["verl"]["batch_preset"], cfg["verl"]["batch_presets"]
        chosen = presets if batch == "auto" else {batch: presets.get(batch, {})}
        groups = {f"verl.batch_presets.{b}.rollout_n": p.get("rollout_n") for b, p in chosen.items()}
    k = (cfg["method_settings"].get("max_at_k") or {}).get("k")
    return [
        f"method_settings.max_at_k.k: a subset of {max_at_k_subset(n, k)} does not fit a group of {where} = {n} "
        "rollouts (needs 1 <= k <= n - 1)"
        for where, n in groups.items()
        if n is not None and not 1 <= max_at_k_subset(n, k) <= n - 1
    ]


def _budget_problems(cfg: Mapping[str, Any]) -> list[str]:
    """An evaluation budget that groups of m do not fill exactly: chains of m answers, or m samples per
    shown weight vector (goal-conditioned methods with eval.goal_weights per_chain)."""
    problems = []
    variants = cfg.get("variants") or {}
    for task in cfg["tasks"]:
        settings = cfg["task_settings"].get(task) or {}
        budget = settings.get("eval", {}).get("budget")
        per_chain = settings.get("eval", {}).get("goal_weights") == "per_chain"
        by_m: dict[int, list[str]] = {}  # each method's m (a variant's own, else the task's)
        for name in (n for t, n in grid_cells(cfg) if t == task and n in METHODS):
            if get_method(name).multi_answer or (per_chain and get_method(name).prompt == "goal"):
                by_m.setdefault(int((variants.get(name) or {}).get("m") or settings.get("m") or 1), []).append(name)
        for m, grouped in sorted(by_m.items()):
            if budget and budget % m:
                problems.append(
                    f"task_settings.{task}.eval.budget: {budget} candidates are not whole groups of "
                    f"m = {m} ({', '.join(grouped)} fill the pool m at a time); use a multiple of {m}"
                )
    return problems


def _task_problems(cfg: Mapping[str, Any], project: Path) -> list[str]:
    """Tasks that no installed plugin provides; data settings and prompt templates a task refuses."""
    problems = [
        f"tasks: no installed task plugin is called '{task}' (installed: {', '.join(sorted(TASKS))}); "
        f"install the package whose {ENTRY_POINT_GROUP!r} entry point provides it, or remove it"
        for task in cfg["tasks"]
        if task not in TASKS
    ]
    for task in (t for t in cfg["tasks"] if t in TASKS and t in cfg["task_settings"]):
        settings = cfg["task_settings"][task]
        problems += TASKS[task].data_problems(settings["data"]) + template_problems(TASKS[task], settings, project)
    return problems

"""Prompt rewrites per method, and `prepare_row`: the one place a data row becomes a method's row.

Preprocessors write single-answer prompts. A method then asks for
- "single": the prompt as written;
- "multi": m genuinely different answers in numbered tags, with the budget per answer; the task
  says what to replace (`Task.multi_rewrites`), and a missing anchor raises instead of silently
  leaving a single-answer prompt (a task whose format lives elsewhere appends with the pattern
  r"\\Z");
- "goal": objective weights w shown after the prompt, one line per objective description.

`prepare_row` is called by both trainers and by evaluation, so a method sees the same prompt,
the same m and the same weights everywhere.
"""

from __future__ import annotations

import copy
import re
from typing import Any, Sequence

import numpy as np

from vpo.methods import get_method
from vpo.task import Task, resolve
from vpo.templates import PROMPT_MODES, last_user_turn, templated_content

GOAL_HEADER = "Your objective weights (higher = more important to optimize):"
_GOAL_FOOTER = "Maximize your weighted score."


def goal_weights(seed: int, row_index: int, k: int, alpha: float = 1.0) -> np.ndarray:
    """w ~ Dirichlet(alpha * 1_k), fixed per (seed, row index) so a prompt keeps its w every epoch.

    Returns (k,) float64 summing to 1.
    """
    if k < 1 or alpha <= 0:
        raise ValueError(f"goal_weights needs k >= 1 and alpha > 0, got k={k}, alpha={alpha}")
    return np.random.default_rng([int(seed), int(row_index)]).dirichlet(np.full(k, float(alpha)))


def _task(task: Task | str) -> Task:
    return task if isinstance(task, Task) else resolve(task)


def _goal_suffix(task: Task, weights: Sequence[float]) -> str:
    lines = [f"- {description}: {w:.2f}" for (_, description), w in zip(task.objectives, weights)]
    return "\n\n" + "\n".join([GOAL_HEADER, *lines, _GOAL_FOOTER])


def rewrite_prompt(
    messages: Sequence[dict[str, Any]], *, mode: str, m: int, task: Task | str, weights: Sequence[float] | None = None
) -> list[dict[str, str]]:
    """A rewritten copy of a chat prompt (list of {role, content}); the last user turn changes.

    mode "multi" needs m >= 1; mode "goal" needs k weights.
    """
    task = _task(task)
    if mode not in PROMPT_MODES:
        raise ValueError(f"prompt mode {mode!r} is not one of {PROMPT_MODES}")
    out = [{"role": str(msg["role"]), "content": str(msg["content"])} for msg in messages]
    if mode == "single":
        return out
    i = last_user_turn(out)
    content = out[i]["content"]
    if mode == "multi":
        if int(m) < 1:
            raise ValueError(f"multi-answer prompt needs m >= 1, got {m}")
        for pattern, replacement in task.multi_rewrites(int(m)):
            content, n = re.subn(pattern, replacement, content, count=1)
            if n == 0:
                raise ValueError(
                    f"task {task.name!r}: the multi-answer rewrite did not find {pattern!r} in the prompt; "
                    "the row is not the task's single-answer prompt (already rewritten, or written by a "
                    "different preprocessor): rerun `vpo preprocess`"
                )
    else:
        if weights is None or len(weights) != task.k:
            raise ValueError(f"goal-conditioned prompt for task {task.name!r} needs {task.k} weights, got {weights!r}")
        content = content + _goal_suffix(task, weights)
    out[i]["content"] = content
    return out


def row_prompt(
    row: dict[str, Any], *, mode: str, m: int, task: Task | str, weights: Sequence[float] | None = None
) -> list[dict[str, str]]:
    """The row's prompt in `mode`: the template the row carries for it (`vpo.templates`, set by
    task_settings.<task>.prompts), else `rewrite_prompt`'s rewrite of the prompt as written."""
    task = _task(task)
    if mode == "goal" and (weights is None or len(weights) != task.k):
        raise ValueError(f"goal-conditioned prompt for task {task.name!r} needs {task.k} weights, got {weights!r}")
    content = None if mode == "single" else templated_content(task, row.get("extra_info") or {}, mode, int(m), weights)
    if content is None:
        return rewrite_prompt(row["prompt"], mode=mode, m=m, task=task, weights=weights)
    out = [{"role": str(msg["role"]), "content": str(msg["content"])} for msg in row["prompt"]]
    out[last_user_turn(out)]["content"] = content
    return out


def _to_plain(value: Any) -> Any:
    """Deep copy with numpy arrays and scalars turned into lists and Python numbers
    (what a parquet record read by pandas holds)."""
    if isinstance(value, dict):
        return {k: _to_plain(v) for k, v in value.items()}
    if isinstance(value, (list, tuple, np.ndarray)):
        return [_to_plain(v) for v in value]
    if isinstance(value, np.generic):
        return value.item()
    return copy.deepcopy(value)


def prepare_row(
    row: dict[str, Any], method: Any, m: int | None, seed: int, *, alpha: float | None = 1.0
) -> dict[str, Any]:
    """The row a method trains and evaluates on (a new dict; `row` is not changed).

    multi-answer methods: prompt asks for m answers, extra_info["num_solutions"] = m;
    other methods: extra_info["num_solutions"] = 1;
    goal_cond: w = goal_weights(seed, extra_info["index"]) shown in the prompt and put in
    reward_model.ground_truth["weights"]; random_weight: the same w, hidden from the prompt.
    """
    method = get_method(method)
    out = _to_plain(dict(row))
    task = resolve(out["data_source"])
    m = int(m if m is not None else task.default_m) if method.multi_answer else 1
    extra = out.get("extra_info") or {}
    out["extra_info"] = extra
    weights = None
    if method.reward == "weighted":
        if "index" not in extra:
            raise ValueError("prepare_row: weighted methods need extra_info['index'] to draw the row's weights")
        if alpha is None:
            raise ValueError(
                f"prepare_row: {method.name} draws Dirichlet weights; give their alpha "
                f"(method_settings.{method.name}.alpha)"
            )
        weights = goal_weights(seed, int(extra["index"]), task.k, float(alpha))
        out["reward_model"]["ground_truth"]["weights"] = [float(w) for w in weights]
    out["prompt"] = row_prompt(
        out, mode=method.prompt, m=m, task=task, weights=weights if method.prompt == "goal" else None
    )
    extra["num_solutions"] = m
    return out

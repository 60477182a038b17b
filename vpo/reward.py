"""The reward dispatcher veRL (and the local trainer, and evaluation) calls for every response.

`compute_score(data_source, solution_str, ground_truth, extra_info)` routes on `data_source` to the
task and picks the mode per row:

- multi-answer when `extra_info["num_solutions"]` (m) > 1: the task's (m, k) matrix; `score` is the
  Multi-RLVR scalar (sum over the rows of the task scalar);
- goal-conditioned (or hidden random weights) when `ground_truth["weights"]` is present:
  `score = w . channels` of the single answer (padded to k for variable-k tasks);
- otherwise single-answer: `score` is the task's fixed scalar.

A row asking for both m > 1 and weights is a configuration error and raises. Model text never
raises: unparseable output scores zero.

Returned keys (identical for every row of a task, whatever the mode):
    score        float, the method's scalar (above)
    sub_scores   JSON text of the (m, k) matrix (m = 1 outside multi-answer mode); JSON because k
                 varies per problem for some tasks (lcb: one channel per test) and veRL's
                 reward_extra_info must stay 1-D
    <objective>  one float per objective: the best row's values (best by the task scalar; first on
                 ties), i.e. the single answer's values outside multi-answer mode; padded with
                 zeros to the task's k
    acc          1.0 if some answer is solved (`Task.is_correct`), else 0.0
    num_answers  distinct parsed answers (0 = parse failure)
    strategy     the rollout's strategy key (`Task.strategy_key`: equal keys, one approach), text; what set RL
                 (Poly-EPO) and GRPO+DIV compare within a group
"""

from __future__ import annotations

import json
from typing import Any, Mapping

import numpy as np

from vpo.task import Task, resolve, task_code


def weighted_scalar(channels: Any, weights: Any) -> float:
    """goal_cond / random_weight reward: w . channels.  channels (k,), weights (k,)."""
    c, w = np.asarray(channels), np.asarray(weights)
    if c.shape != w.shape:
        raise ValueError(f"channels {c.shape} and weights {w.shape} must have the same length")
    return float(c @ w)


def _num_solutions(extra_info: Mapping[str, Any] | None) -> int:
    value = extra_info.get("num_solutions") if isinstance(extra_info, Mapping) else None
    if value is None:
        return 1
    m = int(value)
    if m != float(value) or m < 1:
        raise ValueError(f"extra_info['num_solutions'] must be a whole number >= 1, got {value!r}")
    return m


def _weights(ground_truth: Mapping[str, Any], task: Task) -> np.ndarray | None:
    value = ground_truth.get("weights")
    if value is None:
        return None
    w = np.asarray(value, dtype=float).ravel()
    if w.shape != (task.k,) or not np.all(np.isfinite(w)):
        raise ValueError(
            f"ground_truth['weights'] must be {task.k} finite floats for task {task.name!r}, got {value!r}"
        )
    return w


def compute_score(
    data_source: str,
    solution_str: Any,
    ground_truth: Mapping[str, Any],
    extra_info: Mapping[str, Any] | None = None,
    **_: Any,
) -> dict[str, Any]:
    """Score one response; see the module docstring for modes and keys."""
    task = resolve(str(data_source))
    m = _num_solutions(extra_info)
    weights = _weights(ground_truth, task)
    if m > 1 and weights is not None:
        raise ValueError(
            "a row cannot be both multi-answer (num_solutions > 1) and weighted "
            "(ground_truth['weights']); prepare the row for one method"
        )
    text = "" if solution_str is None else str(solution_str)

    matrix, num_answers = task.score_response(text, dict(ground_truth), m)
    scalars = [task.scalar(row) for row in matrix]
    best = int(np.argmax(scalars))
    if m > 1:
        score = float(sum(scalars))  # Multi-RLVR
    elif weights is not None:
        score = weighted_scalar(task.pad(matrix[0]), weights)
    else:
        score = scalars[0]
    result: dict[str, Any] = {"score": score, "sub_scores": json.dumps(matrix)}
    result.update({name: float(v) for name, v in zip(task.objective_names, task.pad(matrix[best]))})
    result["acc"] = float(any(task.is_correct(row) for row in matrix))
    result["num_answers"] = float(num_answers)
    with task_code(task, "reading a response's strategy", text):
        result["strategy"] = str(task.strategy_key(text, dict(ground_truth), matrix))
    return result

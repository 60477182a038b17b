"""The task plugin API: a `Task` base class and the registry the reward and trainers route through.

A task turns raw data into veRL rows (`preprocess`), splits a model response into answers, scores
one answer to a k-vector in [0, 1], and declares its prompt formats so that `vpo.prompts` can turn
a single-answer prompt into a multi-answer or goal-conditioned one. Adding a task is one file in
`vpo_tasks/` that calls `register(...)` at import time, plus one import line in
`vpo_tasks/__init__.py`.

Only numpy is needed here; parquet writing imports pandas inside the function that uses it.
"""

from __future__ import annotations

import os
import re
from typing import Any, Sequence

import numpy as np

Matrix = list[list[float]]


class Task:
    """One task. Subclasses set the class attributes and implement the four methods marked below.

    Attributes (class level):
        name:            registry key and the `--task` value.
        data_source:     the parquet `data_source` column; the reward dispatcher routes on it.
        objectives:      k (name, description) pairs; names are reward keys, descriptions are shown
                         to the model in goal-conditioned prompts.
        scalar_weights:  k weights of the fixed GRPO scalar (maze: the mean).
        default_m:       answers per rollout for multi-answer methods.
        eval_defaults:   evaluation settings (chains, temperature, top_p, max_tokens, budget).
        single_format_line: the exact output-format sentence of the single-answer prompt; the
                         multi-answer rewrite replaces it and fails loudly when it is missing.
    """

    name: str = ""
    data_source: str = ""
    objectives: tuple[tuple[str, str], ...] = ()
    scalar_weights: tuple[float, ...] = ()
    default_m: int = 3
    eval_defaults: dict[str, Any] = {}
    single_format_line: str = ""

    # ---- properties every task gets ---------------------------------------------------------
    @property
    def k(self) -> int:
        """Number of reward dimensions."""
        return len(self.objectives)

    @property
    def objective_names(self) -> list[str]:
        return [name for name, _ in self.objectives]

    def scalar(self, vector: Sequence[float]) -> float:
        """The fixed GRPO scalar of one answer's k-vector."""
        return float(np.dot(np.asarray(self.scalar_weights, dtype=float), np.asarray(vector, dtype=float)))

    def is_correct(self, vector: Sequence[float]) -> bool:
        """Whether one answer counts as solved (pass@k, `acc`). Default: every dimension is 1."""
        return bool(len(vector) and min(vector) >= 1.0)

    # ---- what a task implements ------------------------------------------------------------
    def preprocess(self, out_dir: str, settings: dict[str, Any] | None = None) -> tuple[str, str]:
        """Write `train.parquet` and `test.parquet` under out_dir; return their paths."""
        raise NotImplementedError

    def split_answers(self, text: str, m: int) -> list[str]:
        """Split a multi-answer response into at most m distinct, non-empty answers (in order)."""
        raise NotImplementedError

    def score_answer(self, answer: str, ground_truth: dict[str, Any]) -> list[float]:
        """Score one answer to k floats in [0, 1]; unparseable text gives k zeros."""
        raise NotImplementedError

    def demonstration(self, row: dict[str, Any], rng: Any, n_answers: int) -> str:
        """A synthetic well-formed response of mixed quality (warm start of the CPU trainer)."""
        raise NotImplementedError

    def parses(self, text: str) -> bool:
        """Whether a single-answer response holds an answer at all (parse-failure rate)."""
        return bool(self.split_answers(text, 1))

    def multi_rewrites(self, m: int) -> list[tuple[str, str]]:
        """(regex, replacement) pairs turning the single-answer prompt into the m-answer prompt.

        Every pattern must match the prompt; `vpo.prompts` raises when one does not.
        """
        return [(re.escape(self.single_format_line), self.multi_format(m))]

    def multi_format(self, m: int) -> str:
        """The output-format text of the m-answer prompt."""
        raise NotImplementedError

    # ---- scoring of whole responses (shared; a task may override) --------------------------
    def score_single(self, text: str, ground_truth: dict[str, Any]) -> list[float]:
        """The k-vector of a single-answer response."""
        return self._clean(self.score_answer(text, ground_truth))

    def score_multi(self, text: str, ground_truth: dict[str, Any], m: int) -> Matrix:
        """The (m, k) matrix of an m-answer response: answers in order, zero rows pad up to m."""
        rows = [self._clean(self.score_answer(a, ground_truth)) for a in self.split_answers(text, m)[:m]]
        rows += [[0.0] * self.k for _ in range(m - len(rows))]
        return rows

    def _clean(self, vector: Sequence[float]) -> list[float]:
        """Force k finite values in [0, 1] (a scorer bug must not leak NaN into training)."""
        values = [float(v) for v in vector]
        if len(values) != self.k:
            raise ValueError(f"task {self.name!r}: scorer returned {len(values)} values, expected k={self.k}")
        return [min(1.0, max(0.0, v)) if np.isfinite(v) else 0.0 for v in values]


# ---- the registry ---------------------------------------------------------------------------
TASKS: dict[str, Task] = {}


def register(task: Task) -> Task:
    """Add a task instance to the registry; a second task under a taken name is refused."""
    if not task.name:
        raise ValueError(f"{type(task).__name__} has no name; set the class attribute `name`")
    if task.name in TASKS:
        raise ValueError(f"a task named {task.name!r} is already registered ({type(TASKS[task.name]).__name__})")
    if len(task.scalar_weights) != len(task.objectives) or not task.objectives:
        raise ValueError(f"task {task.name!r}: scalar_weights must have one weight per objective")
    task.data_source = task.data_source or task.name
    TASKS[task.name] = task
    return task


def resolve(name: str) -> Task:
    """The registered task called `name`, or the task whose `data_source` is `name`."""
    if name in TASKS:
        return TASKS[name]
    for task in TASKS.values():
        if task.data_source == name:
            return task
    raise ValueError(f"unknown task {name!r}; known tasks: {', '.join(sorted(TASKS)) or '(none)'}")


def write_parquet_atomic(rows: list[dict[str, Any]], path: str) -> str:
    """Write rows (veRL schema) to `path` through a temporary name, so a killed job leaves no file."""
    import pandas as pd

    os.makedirs(os.path.dirname(os.path.abspath(path)), exist_ok=True)
    tmp = f"{path}.tmp.{os.getpid()}"
    try:
        pd.DataFrame(rows).to_parquet(tmp, index=False)
        os.replace(tmp, path)
    finally:
        if os.path.exists(tmp):
            os.remove(tmp)
    return path


# The plugins register themselves; importing them last lets them import this module's names.
import vpo_tasks  # noqa: E402,F401

"""The task plugin API: a `Task` base class and the registry the reward and trainers route through.

A task turns raw data into veRL rows (`preprocess`), splits a model response into answers, scores
one answer to a k-vector in [0, 1], and declares its prompt formats so that `vpo.prompts` can turn
a single-answer prompt into a multi-answer or goal-conditioned one.

Tasks are plugins found through the `vpo.tasks` entry-point group: an entry `name = module:OBJECT`
names a Task instance (or subclass) in any installed distribution, this project's own tasks
included (see pyproject.toml). The registry loads the group on first use, so importing this module
imports no task; `register` adds a task by hand (tests, notebooks).

Only numpy is needed here.
"""

from __future__ import annotations

import contextlib
import dataclasses
import numbers
import random
import re
import threading
from collections import UserDict
from importlib.metadata import entry_points
from typing import Any, Iterator, Mapping, Sequence

import numpy as np

from vpo.task_settings import settings_from  # noqa: F401 (tasks import it from here)

Matrix = list[list[float]]
DEGENERATE_STRATEGY = "degenerate"  # the strategy key of a rollout without an answer: counted as no strategy


class Task:
    """One task. Subclasses set the class attributes and implement the four methods marked below.

    Attributes (class level):
        name:            registry key and the `--task` value.
        data_source:     the parquet `data_source` column; the reward dispatcher routes on it.
        ability:         the rows' `ability` column (veRL's schema; nothing routes on it).
        objectives:      k (name, description) pairs; names are reward keys, descriptions are shown
                         to the model in goal-conditioned prompts.
        scalar_weights:  k weights of the fixed GRPO scalar (maze: the mean).
        default_m:       answers per rollout for multi-answer methods.
        single_format_line: the exact output-format sentence of the single-answer prompt; the
                         multi-answer rewrite replaces it and fails loudly when it is missing.
        variable_k:      rows may be shorter than k (lcb: one channel per test case of the problem);
                         `pad` lengthens them with zeros where a fixed k is needed (GDPO, weights).
        label:           its name in figures and tables ("": `name`).
        program_language: what an answer is written in, as the evolutionary search names it to its
                         LLM and in its fences (lcb: python; maze: text, a route).
        template_fields: the named pieces of a problem its rows carry (`extra_info.prompt_fields`,
                         JSON) for a user's prompt templates (`vpo.templates`).
        required_template_fields: those every template must use (without them the problem is unseen).
        settings_class:  the dataclass `preprocess` reads task_settings.<task>.data into; its
                         `from_dict` is run when the config is read, so bad data settings stop the plan.
        size_settings:   split -> the data setting that asks for that many rows (musique: test is
                         `eval_size`); `vpo preprocess` refuses a split with fewer rows than asked.
    """

    name: str = ""
    label: str = ""
    data_source: str = ""
    ability: str = ""
    objectives: tuple[tuple[str, str], ...] = ()
    scalar_weights: tuple[float, ...] = ()
    default_m: int = 3
    single_format_line: str = ""
    variable_k: bool = False
    program_language: str = "text"
    template_fields: tuple[str, ...] = ()
    required_template_fields: tuple[str, ...] = ()
    settings_class: type | None = None
    size_settings: Mapping[str, str] = {"train": "train_size", "test": "test_size"}

    # ---- what every task gets ---------------------------------------------------------------
    def row(self, prompt: str | list[dict], ground_truth: dict, *, split: str, index: int, **extra_info) -> dict:
        """One data row in veRL's schema, as `preprocess` writes them: `prompt` the user's message (or the
        chat turns), the rule reward's `ground_truth`, `extra_info` (split, index, then whatever is given)."""
        return {
            "data_source": self.data_source,
            "prompt": [{"role": "user", "content": prompt}] if isinstance(prompt, str) else list(prompt),
            "ability": self.ability,
            "reward_model": {"style": "rule", "ground_truth": ground_truth},
            "extra_info": {"split": split, "index": index, **extra_info},
        }

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

    def pad(self, vector: Sequence[float]) -> list[float]:
        """A row as k floats: a shorter row (variable_k tasks) gets zeros appended."""
        return [float(v) for v in vector] + [0.0] * (self.k - len(vector))

    def is_correct(self, vector: Sequence[float]) -> bool:
        """Whether one answer counts as solved (pass@k, `acc`). Default: every dimension is 1."""
        return bool(len(vector) and min(vector) >= 1.0)

    def data_problems(self, data: dict[str, Any] | None) -> list[str]:
        """What `preprocess` would refuse in these data settings, one message each (none: [])."""
        if self.settings_class is None:
            return []
        try:
            self.settings_class.from_dict(dict(data or {}))
        except (ValueError, TypeError) as err:
            return [f"task_settings.{self.name}.data: {err}"]
        return []

    def split_sizes(self, settings: dict[str, Any] | None) -> dict[str, tuple[str, int]]:
        """split -> (setting, rows it asks for) of the sizes these data settings ask for, defaults included
        (`settings_class`); a size that is unset, 0 or not a whole number asks for nothing ("all rows")."""
        values = dict(settings or {})
        if self.settings_class is not None:
            with contextlib.suppress(ValueError, TypeError):  # bad settings are refused elsewhere, naming them
                values = dataclasses.asdict(self.settings_class.from_dict(values))
        sizes = {}
        for split, name in self.size_settings.items():
            asked = values.get(name)
            if isinstance(asked, int) and not isinstance(asked, bool) and asked > 0:
                sizes[split] = (name, asked)
        return sizes

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
    def score_response(self, text: str, ground_truth: dict[str, Any], m: int) -> tuple[Matrix, int]:
        """The (m, k) matrix of a response and the number of distinct answers it gave, from one parse.

        m = 1: the single-answer parse of the whole text (one row; the count is `parses`); m > 1:
        the answers of `split_answers` in order, zero rows padding up to m.
        """
        with task_code(self, "scoring a response", text):
            if m == 1:
                return self.score_answers([text], ground_truth), int(self.parses(text))
            answers = self.split_answers(text, m)[:m]
            rows = self.score_answers(answers, ground_truth)
        return rows + [[0.0] * self.k for _ in range(m - len(rows))], len(answers)

    def score_answers(self, answers: Sequence[str], ground_truth: dict[str, Any]) -> Matrix:
        """The k-vectors of answers split from one response, each forced into [0, 1] (`_clean`): the one
        scoring of answers that training and the evolutionary search share (evaluation's candidates go
        through `score_candidate`, the same clean). A scorer returning the wrong number of values raises;
        callers run it inside `task_code`, which names what they were doing."""
        return [self._clean(self.score_answer(a, ground_truth)) for a in answers]

    # ---- strategies (set RL, GRPO+DIV: vpo/set_rl.py) ---------------------------------------
    def strategy_key(self, text: str, ground_truth: dict[str, Any], matrix: Matrix) -> str:
        """A rollout's strategy: rollouts with equal keys took one approach; DEGENERATE_STRATEGY for one that
        holds no answer. Default: its answers (`split_answers` of its len(matrix) rows), each in
        `canonical_answer`'s form, sorted and joined (matrix: the rows `score_response` gave it)."""
        answers = sorted({self.canonical_answer(a) for a in self.split_answers(str(text), len(matrix))} - {""})
        return "\n".join(answers) if answers else DEGENERATE_STRATEGY

    def canonical_answer(self, answer: str) -> str:
        """An answer in the form two answers of one strategy share ("" when it holds none; default: stripped)."""
        return str(answer).strip()

    # ---- evaluation candidates (docs/evaluation.md: the authors' `evaluate`, not the reward) ----
    def answer_slots(self, text: str, m: int) -> list[str]:
        """The m answer slots of a multi-answer response as the authors' evaluation reads them: in
        order, a repeated answer kept as a copy, a missing one "" (no dedup, unlike `split_answers`)."""
        raise NotImplementedError

    def eval_candidates(self, text: str, m: int) -> list[str]:
        """The candidates one evaluation chain adds to its problem's pool: a single-answer chain is its
        whole response (m = 1); a multi-answer chain its m slots."""
        if m == 1:
            return [str(text)]
        slots = list(self.answer_slots(str(text), m))[:m]
        return slots + [""] * (m - len(slots))

    def candidate_answer(self, candidate: str, m: int) -> str:
        """The answer an evaluation candidate holds ("" when it holds none): what the parse rate and the
        distinct-answer counts read, found by the parser training uses. A single-answer candidate (m = 1)
        is a whole response: its `split_answers(candidate, 1)`. A multi-answer candidate (m > 1) is a slot
        `answer_slots` already took out of its response, as `split_answers(response, m)` takes the
        answers training counts: a non-empty slot is an answer, its text stripped."""
        if m > 1:
            return str(candidate).strip()
        answers = self.split_answers(str(candidate), 1)
        return answers[0] if answers else ""

    def score_candidate(self, candidate: str, ground_truth: dict[str, Any]) -> list[float]:
        """The k-vector of one evaluation candidate; an empty one scores as the empty answer (zeros)."""
        if not str(candidate).strip():
            return [0.0] * self.k
        with task_code(self, "scoring an evaluation candidate", candidate):
            return self._clean(self.score_answer(str(candidate), ground_truth))

    def score_candidates(self, candidates: Sequence[str], ground_truth: dict[str, Any]) -> list[list[float]]:
        """`score_candidate` of each candidate of one problem (a task that runs programs batches them)."""
        return [self.score_candidate(c, ground_truth) for c in candidates]

    def _clean(self, vector: Sequence[float]) -> list[float]:
        """Force k finite values in [0, 1] (a scorer bug must not leak NaN into training)."""
        values = [float(v) for v in vector]
        if len(values) != self.k and not (self.variable_k and 0 < len(values) <= self.k):
            raise ValueError(f"task {self.name!r}: scorer returned {len(values)} values, expected k={self.k}")
        return [min(1.0, max(0.0, v)) if np.isfinite(v) else 0.0 for v in values]


class TaskCodeError(ValueError):
    """A task's own code raised; the message names the task, its class and module, what it was
    doing, the exception and an excerpt of the text it was given (one line, for `vpo`'s error output).
    A ValueError, as the tasks' own errors about bad data are."""


@contextlib.contextmanager
def task_code(task: "Task", doing: str, text: Any = None, excerpt: int = 80, passes: tuple = ()):
    """Run a task's own code (a plugin's parse, score, preprocess or demonstration): an exception it
    raises becomes a TaskCodeError naming the task (chained, so VPO_DEBUG=1 shows the original);
    exceptions of the types in `passes` are the task's deliberate errors and pass unchanged."""
    try:
        yield
    except (TaskCodeError, *passes):
        raise
    except Exception as err:
        cls = type(task)
        shown = "" if text is None else f" on the text {' '.join(str(text).split())[:excerpt]!r}"
        raise TaskCodeError(
            f"task {task.name!r} ({cls.__module__}.{cls.__qualname__}) raised "
            f"{type(err).__name__} while {doing}{shown}: {' '.join(str(err).split())[:200]}"
        ) from err


def as_random(rng: Any) -> random.Random:
    """A demonstration's generator as random.Random: given one, derived from a numpy Generator, or seeded."""
    if isinstance(rng, random.Random):
        return rng
    if isinstance(rng, np.random.Generator):
        return random.Random(int(rng.integers(2**62)))
    return random.Random(rng)


# ---- the registry ---------------------------------------------------------------------------
ENTRY_POINT_GROUP = "vpo.tasks"


class TaskPluginError(RuntimeError):
    """A task plugin that cannot be loaded: the message names its entry point and distribution, in one line."""


def declared(entry) -> str:
    """An entry point as a user finds it: `name = module:object (distribution <name> <version>)`."""
    dist = getattr(entry, "dist", None)
    where = f"distribution {dist.name} {dist.version}" if dist is not None else "no distribution"
    return f"{entry.name!r} = {entry.value} ({where})"


class TaskRegistry(UserDict):
    """name -> Task; every read first loads the `vpo.tasks` entry points (once per process).

    Thread-safe: veRL's reward workers score many responses at once in threads, and a thread that
    read the registry while another was still loading it used to find it empty."""

    _discovered = False
    _loading = False
    _lock = threading.RLock()

    def _discover(self) -> None:
        if self._discovered:
            return
        with self._lock:  # other threads wait here until the entry points are loaded
            if self._discovered or self._loading:
                return  # loaded meanwhile, or a plugin being loaded by this thread reads the registry
            self._loading = True
            try:
                self._load_entry_points()
            finally:
                self._loading = False
            self._discovered = True

    def _load_entry_points(self) -> None:
        entries = sorted(entry_points(group=ENTRY_POINT_GROUP), key=lambda e: e.name)
        by_name: dict[str, list] = {}
        for entry in entries:
            if all(declared(entry) != declared(other) for other in by_name.get(entry.name, [])):
                by_name.setdefault(entry.name, []).append(entry)
        for name, declaring in by_name.items():
            if len(declaring) > 1:
                raise TaskPluginError(
                    f"task plugin {name!r} is declared twice: {' and '.join(declared(e) for e in declaring)}; "
                    "uninstall one of the distributions"
                )
            entry = declaring[0]
            try:
                task = entry.load()
            except Exception as err:
                raise TaskPluginError(
                    f"task plugin {declared(entry)} failed to import: {err!r}; "
                    "fix or uninstall the distribution that declares it"
                ) from err
            if isinstance(task, type) and issubclass(task, Task):
                try:
                    task = task()
                except Exception as err:
                    raise TaskPluginError(
                        f"task plugin {declared(entry)}: creating {task.__name__} raised {err!r}; "
                        "fix or uninstall the distribution that declares it"
                    ) from err
            if not isinstance(task, Task):
                raise TypeError(
                    f"entry point {entry.name!r} = {entry.value} in group {ENTRY_POINT_GROUP!r} "
                    f"is a {type(task).__name__}, not a vpo.task.Task"
                )
            if task.name != entry.name:
                raise ValueError(
                    f"entry point {entry.name!r} = {entry.value} names a task called {task.name!r}; "
                    "the entry point's name must be the task's name"
                )
            if self.data.get(task.name) is not task:
                register(task)

    def __getitem__(self, name: str) -> Task:
        self._discover()
        return self.data[name]

    def __contains__(self, name: object) -> bool:
        self._discover()
        return name in self.data

    def __iter__(self) -> Iterator[str]:
        self._discover()
        return iter(self.data)

    def __len__(self) -> int:
        self._discover()
        return len(self.data)


TASKS = TaskRegistry()


def register(task: Task) -> Task:
    """Add a task instance to the registry; a second task under a taken name is refused."""
    if not task.name:
        raise ValueError(f"{type(task).__name__} has no name; set the class attribute `name`")
    if task.name in TASKS.data:
        raise ValueError(f"a task named {task.name!r} is already registered ({type(TASKS.data[task.name]).__name__})")
    if len(task.scalar_weights) != len(task.objectives) or not task.objectives:
        raise ValueError(f"task {task.name!r}: scalar_weights must have one weight per objective")
    if not all(isinstance(w, numbers.Real) and not isinstance(w, bool) and np.isfinite(w) for w in task.scalar_weights):
        raise ValueError(f"task {task.name!r}: scalar_weights must be finite numbers, got {task.scalar_weights}")
    task.data_source = task.data_source or task.name
    TASKS.data[task.name] = task
    return task


def resolve(name: str) -> Task:
    """The registered task called `name`, or the task whose `data_source` is `name`."""
    if name in TASKS:
        return TASKS[name]
    for task in TASKS.values():
        if task.data_source == name:
            return task
    raise ValueError(
        f"unknown task {name!r}; known tasks: {', '.join(sorted(TASKS)) or '(none)'}; "
        f"tasks are found through the {ENTRY_POINT_GROUP!r} entry-point group of installed packages"
    )

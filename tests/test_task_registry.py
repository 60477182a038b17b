"""The task plugin API: registry rules, maze's declaration, and a new task plugged in end to end."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

import vpo.task as task_module
from vpo.prompts import prepare_row
from vpo.reward import compute_score
from vpo.task import TASKS, Task, register, resolve


def test_maze_is_registered_with_its_declaration():
    maze = resolve("maze")
    assert TASKS["maze"] is maze and maze.data_source == "maze"
    assert maze.k == 4
    assert maze.objective_names == ["completion", "gold", "diamond", "avoid_lava"]
    assert all(isinstance(d, str) and d for _, d in maze.objectives)
    assert maze.scalar([1, 1, 0, 0.5]) == pytest.approx(0.625)  # the GRPO scalar is the mean
    assert maze.default_m == 3
    assert maze.eval_defaults["budget"] == 30 and maze.eval_defaults["n_chains"] == 10
    assert maze.is_correct([1, 0, 0, 0]) and not maze.is_correct([0, 1, 1, 1])


def test_unknown_and_duplicate_names_are_refused():
    with pytest.raises(ValueError, match=r"unknown task 'mase'; known tasks: .*maze"):
        resolve("mase")

    class SecondMaze(Task):
        name = "maze"
        objectives = (("x", "x"),)
        scalar_weights = (1.0,)

    with pytest.raises(ValueError, match="already registered"):
        register(SecondMaze())
    assert type(TASKS["maze"]).__name__ == "MazeTask"

    class Nameless(Task):
        objectives = (("x", "x"),)
        scalar_weights = (1.0,)

    with pytest.raises(ValueError, match="no name"):
        register(Nameless())

    class Lopsided(Task):
        name = "lopsided"
        objectives = (("x", "x"), ("y", "y"))
        scalar_weights = (1.0,)

    with pytest.raises(ValueError, match="one weight per objective"):
        register(Lopsided())
    assert "lopsided" not in TASKS


class WordsTask(Task):
    """A toy task (k = 2): does the answer contain 'red', does it contain 'blue'."""

    name = "words_test"
    data_source = "words_source"
    objectives = (("red", "Saying red"), ("blue", "Saying blue"))
    scalar_weights = (0.5, 0.5)
    default_m = 2
    single_format_line = "Answer inside <response></response>."

    def split_answers(self, text, m):
        found = [a.strip().lower() for a in re.findall(r"<response_\d+>(.*?)</response_\d+>", text, re.S)]
        return list(dict.fromkeys(a for a in found if a))[:m]

    def score_answer(self, answer, ground_truth):
        words = answer.lower().split()
        return [float("red" in words), float("blue" in words)]

    def multi_format(self, m):
        return f"Give {m} answers inside <response_1></response_1> to <response_{m}></response_{m}>."


@pytest.fixture
def words_task():
    task = register(WordsTask())
    try:
        yield task
    finally:
        del TASKS[task.name]


def test_a_new_task_plugs_into_reward_and_prompts(words_task):
    assert resolve("words_source") is words_task  # the dispatcher routes on data_source
    row = {"data_source": "words_source", "prompt": [{"role": "user", "content": "Colours? Answer inside <response></response>."}],
           "reward_model": {"style": "rule", "ground_truth": {}}, "extra_info": {"index": 4}}
    single = compute_score("words_source", "red and green", {}, {})
    assert json.loads(single["sub_scores"]) == [[1.0, 0.0]] and single["score"] == 0.5
    prepared = prepare_row(row, "vpo", None, seed=0)  # m = None -> the task's default m
    assert prepared["extra_info"]["num_solutions"] == 2
    assert prepared["prompt"][0]["content"] == "Colours? Give 2 answers inside <response_1></response_1> to <response_2></response_2>."
    multi = compute_score("words_source", "<response_1>red</response_1><response_2>red blue</response_2>", {}, prepared["extra_info"])
    assert json.loads(multi["sub_scores"]) == [[1.0, 0.0], [1.0, 1.0]]
    assert multi["score"] == pytest.approx(1.5) and multi["acc"] == 1.0
    assert (multi["red"], multi["blue"]) == (1.0, 1.0)  # the best row's channels
    goal = prepare_row(row, "goal_cond", None, seed=0)
    assert "- Saying red: " in goal["prompt"][0]["content"]
    assert set(single) == set(multi) == {"score", "sub_scores", "red", "blue", "acc", "num_answers"}


def test_a_scorer_that_misbehaves_cannot_leak_bad_values(words_task, monkeypatch):
    monkeypatch.setattr(WordsTask, "score_answer", lambda self, a, gt: [float("nan"), 7.0])
    assert json.loads(compute_score("words_source", "x", {}, {})["sub_scores"]) == [[0.0, 1.0]]
    monkeypatch.setattr(WordsTask, "score_answer", lambda self, a, gt: [1.0])
    with pytest.raises(ValueError, match="expected k=2"):
        compute_score("words_source", "x", {}, {})


def test_every_plugin_module_is_imported_by_the_package():
    """Adding a task is one file plus one import line: every vpo_tasks module that registers a task
    must be imported (helper modules such as the maze generator register nothing)."""
    package = Path(task_module.__file__).resolve().parent.parent / "vpo_tasks"
    init = (package / "__init__.py").read_text()
    plugins = [p.stem for p in package.glob("*.py") if re.search(r"^\w+ = register\(", p.read_text(), re.M)]
    assert "maze" in plugins
    for module in sorted(plugins):
        assert re.search(rf"^from vpo_tasks import {module}\b", init, re.M), f"vpo_tasks/__init__.py misses {module}"

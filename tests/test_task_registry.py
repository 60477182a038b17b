"""The task plugin API: registry rules, maze's declaration, and a new task plugged in end to end."""

from __future__ import annotations

import importlib
import json
import os
import re
import subprocess
import sys
from importlib.metadata import entry_points
from pathlib import Path

import pytest

from vpo.prompts import prepare_row
from vpo.reward import compute_score
from vpo.task import TASKS, Task, TaskCodeError, register, resolve

REPO = Path(__file__).resolve().parent.parent


def test_maze_is_registered_with_its_declaration():
    maze = resolve("maze")
    assert TASKS["maze"] is maze and maze.data_source == "maze"
    assert maze.k == 4
    assert maze.objective_names == ["completion", "gold", "diamond", "avoid_lava"]
    assert all(isinstance(d, str) and d for _, d in maze.objectives)
    assert maze.scalar([1, 1, 0, 0.5]) == pytest.approx(0.625)  # the GRPO scalar is the mean
    assert maze.default_m == 3
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
    row = {
        "data_source": "words_source",
        "prompt": [{"role": "user", "content": "Colours? Answer inside <response></response>."}],
        "reward_model": {"style": "rule", "ground_truth": {}},
        "extra_info": {"index": 4},
    }
    single = compute_score("words_source", "red and green", {}, {})
    assert json.loads(single["sub_scores"]) == [[1.0, 0.0]] and single["score"] == 0.5
    prepared = prepare_row(row, "vpo", None, seed=0)  # m = None -> the task's default m
    assert prepared["extra_info"]["num_solutions"] == 2
    assert (
        prepared["prompt"][0]["content"]
        == "Colours? Give 2 answers inside <response_1></response_1> to <response_2></response_2>."
    )
    multi = compute_score(
        "words_source", "<response_1>red</response_1><response_2>red blue</response_2>", {}, prepared["extra_info"]
    )
    assert json.loads(multi["sub_scores"]) == [[1.0, 0.0], [1.0, 1.0]]
    assert multi["score"] == pytest.approx(1.5) and multi["acc"] == 1.0
    assert (multi["red"], multi["blue"]) == (1.0, 1.0)  # the best row's channels
    goal = prepare_row(row, "goal_cond", None, seed=0)
    assert "- Saying red: " in goal["prompt"][0]["content"]
    assert set(single) == set(multi) == {"score", "sub_scores", "red", "blue", "acc", "num_answers", "strategy"}


def test_a_scorer_that_misbehaves_cannot_leak_bad_values(words_task, monkeypatch):
    monkeypatch.setattr(WordsTask, "score_answer", lambda self, a, gt: [float("nan"), 7.0])
    assert json.loads(compute_score("words_source", "x", {}, {})["sub_scores"]) == [[0.0, 1.0]]
    monkeypatch.setattr(WordsTask, "score_answer", lambda self, a, gt: [1.0])
    with pytest.raises(TaskCodeError, match="expected k=2"):
        compute_score("words_source", "x", {}, {})


def test_a_scorer_that_raises_reaches_the_user_as_one_line_naming_the_task(words_task, monkeypatch):
    """The error names the task, its class and module, what it did, the exception type and the text;
    through the command line it is one line (a plugin's preprocess raising ZeroDivisionError)."""
    from vpo import cli

    def divide(self, answer, ground_truth):
        return [len(answer) / sum(c.isalpha() for c in answer), 0.0]

    monkeypatch.setattr(WordsTask, "score_answer", divide)
    with pytest.raises(TaskCodeError) as err:
        compute_score("words_source", "1234 5678 " * 20, {}, {})
    message = str(err.value)
    assert message.startswith(
        "task 'words_test' (test_task_registry.WordsTask) raised ZeroDivisionError "
        "while scoring a response on the text '1234 5678 1234"
    )
    assert "division by zero" in message and "\n" not in message and len(message) < 500
    assert isinstance(err.value.__cause__, ZeroDivisionError)  # VPO_DEBUG=1 shows the original traceback

    monkeypatch.setattr(WordsTask, "preprocess", lambda self, out, settings=None: 1 / 0, raising=False)
    monkeypatch.delenv("VPO_DEBUG", raising=False)
    monkeypatch.setattr(sys, "argv", ["vpo", "preprocess", "--task", "words_test", "--out", "/tmp/unused"])
    with pytest.raises(SystemExit) as stop:  # `vpo preprocess` ends with its one-line message
        cli.entry()
    lines = str(stop.value).splitlines()
    assert len(lines) == 1 and lines[0] == (
        "vpo preprocess --task words_test: task 'words_test' "
        "(test_task_registry.WordsTask) raised ZeroDivisionError while "
        "preprocessing: division by zero"
    ), lines


def test_importing_the_api_imports_no_task():
    code = (
        "import sys, vpo.task, vpo.reward, vpo.prompts; "
        "print(sorted(m for m in sys.modules if m.startswith('vpo_tasks')))"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert out.strip() == "[]"


def test_every_task_instance_of_the_package_is_an_entry_point():
    """Adding one of this project's tasks is one module plus one line in pyproject.toml."""
    # this project's own entries (a plugin installed beside it, e.g. examples/vpo-colours-task, adds its own)
    declared = {e.name: e.value for e in entry_points(group="vpo.tasks") if e.dist and e.dist.name == "vpo-pipeline"}
    section = (REPO / "pyproject.toml").read_text().split('[project.entry-points."vpo.tasks"]\n')[1].split("\n[")[0]
    pyproject = dict(re.findall(r'^(\w+) = "([^"]+)"$', section, re.M))
    assert declared == pyproject and declared["maze"] == "vpo_tasks.maze:MAZE"
    for name, value in declared.items():
        module, attr = value.split(":")
        assert isinstance(getattr(importlib.import_module(module), attr), Task)
        assert TASKS[name] is getattr(importlib.import_module(module), attr)


TOY_PLUGIN = """
import os
import pandas as pd
from vpo.task import Task


class Colours(Task):
    name = "toy_colours"
    objectives = (("red", "Saying red"), ("blue", "Saying blue"))
    scalar_weights = (0.5, 0.5)
    single_format_line = "Answer in one line."

    def preprocess(self, out_dir, settings=None):
        os.makedirs(out_dir, exist_ok=True)
        paths = []
        for split in ("train", "test"):
            row = {"data_source": self.name,
                   "prompt": [{"role": "user", "content": "Name a colour. Answer in one line."}],
                   "ability": "toy", "reward_model": {"style": "rule", "ground_truth": {"colour": "any"}},
                   "extra_info": {"split": split, "index": 0}}
            paths.append(os.path.join(out_dir, f"{split}.parquet"))
            pd.DataFrame([row]).to_parquet(paths[-1], index=False)
        return tuple(paths)

    def split_answers(self, text, m):
        return [text.strip()] if text.strip() else []

    def score_answer(self, answer, ground_truth):
        words = answer.lower().split()
        return [float("red" in words), float("blue" in words)]

    def multi_format(self, m):
        return f"Answer in {m} lines."


COLOURS = Colours()
"""


def test_a_task_from_another_installed_distribution_is_found(tmp_path):
    """A separately installed distribution (package plus dist-info with a `vpo.tasks` entry point on
    the path) is found by `vpo preprocess --task` and by the reward, without touching this project."""
    site = tmp_path / "site"
    (site / "toy_colours_task").mkdir(parents=True)
    (site / "toy_colours_task" / "__init__.py").write_text(TOY_PLUGIN)
    info = site / "toy_colours_task-0.1.dist-info"
    info.mkdir()
    (info / "METADATA").write_text("Metadata-Version: 2.1\nName: toy-colours-task\nVersion: 0.1\n")
    (info / "entry_points.txt").write_text("[vpo.tasks]\ntoy_colours = toy_colours_task:COLOURS\n")
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(site), os.environ.get("PYTHONPATH", "")])}
    out = tmp_path / "data"
    done = subprocess.run(
        [sys.executable, "-m", "vpo.cli", "preprocess", "--task", "toy_colours", "--out", str(out)],
        capture_output=True,
        text=True,
        env=env,
        cwd=tmp_path,
    )
    assert done.returncode == 0, done.stderr
    assert sorted(p.name for p in out.iterdir()) == ["test.parquet", "train.parquet"]
    code = (
        "from vpo.reward import compute_score; from vpo.task import TASKS; "
        "print(sorted(TASKS), compute_score('toy_colours', 'red, or blue', {}, {})['sub_scores'])"
    )
    shown = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env, check=True).stdout
    assert shown.strip().endswith("'toy_colours'] [[0.0, 1.0]]") and "'maze'" in shown  # "red," is not the word red
    # without the distribution on the path the task is unknown, and the error says where tasks come from
    gone = subprocess.run(
        [sys.executable, "-m", "vpo.cli", "preprocess", "--task", "toy_colours", "--out", str(out)],
        capture_output=True,
        text=True,
        cwd=tmp_path,
    )
    assert gone.returncode != 0 and "unknown task 'toy_colours'" in gone.stderr and "vpo.tasks" in gone.stderr


def test_preprocess_refuses_rows_the_multi_answer_methods_cannot_use(words_task, monkeypatch, tmp_path):
    """A plugin whose prompts lack its single_format_line (the anchor of the multi-answer rewrite), or
    whose rows name another data_source, fails at `vpo preprocess`, naming the task and what is
    missing, and leaves no parquet behind; rows with the anchor pass."""
    from vpo import cli
    from vpo.atomic import write_parquet_atomic

    def writer(prompt, source="words_source"):
        def preprocess(self, out, settings=None):
            rows = [
                {
                    "data_source": source,
                    "prompt": [{"role": "user", "content": prompt}],
                    "reward_model": {"style": "rule", "ground_truth": {"answer": "red"}},
                    "extra_info": {"index": i},
                }
                for i in range(3)
            ]
            return (
                str(write_parquet_atomic(rows, Path(out) / "train.parquet")),
                str(write_parquet_atomic(rows, Path(out) / "test.parquet")),
            )

        return preprocess

    def run(out):
        monkeypatch.setattr(sys, "argv", ["vpo", "preprocess", "--task", "words_test", "--out", str(out)])
        return cli.entry()

    monkeypatch.setattr(WordsTask, "preprocess", writer("Colours? Answer in tags."), raising=False)
    with pytest.raises(SystemExit) as stop:
        run(tmp_path / "no_anchor")
    assert str(stop.value).startswith(
        "vpo preprocess --task words_test: train.parquet row 0: task 'words_test': "
        "the multi-answer rewrite did not find 'Answer\\\\ inside"
    )
    assert "single_format_line" in str(stop.value) and not list((tmp_path / "no_anchor").glob("*.parquet"))

    monkeypatch.setattr(
        WordsTask, "preprocess", writer("Colours? Answer inside <response></response>.", "maze"), raising=False
    )
    with pytest.raises(SystemExit, match="row 0: data_source 'maze' does not name task 'words_test'"):
        run(tmp_path / "other_source")

    monkeypatch.setattr(WordsTask, "preprocess", writer("Colours? Answer inside <response></response>."), raising=False)
    assert run(tmp_path / "good") == 0 and len(list((tmp_path / "good").glob("*.parquet"))) == 2


def test_a_data_setting_of_the_wrong_type_is_named_with_the_type_it_needs():
    """`--set train_size=true` once made 1 maze (True is an int to Python); a string where a number
    belongs gave Python's own message ("'<=' not supported ...")."""
    from vpo_tasks.maze import MazeSettings

    with pytest.raises(ValueError, match=r"maze: setting train_size is True \(bool\); expected int"):
        MazeSettings.from_dict({"train_size": True})
    with pytest.raises(ValueError, match=r"maze: setting size is 'seven' \(str\); expected int"):
        MazeSettings.from_dict({"size": "seven"})
    assert MazeSettings.from_dict({"train_size": 5, "score_mode": "linear"}).train_size == 5


def plugin_site(root, dist, module, source, entry):
    """A distribution on a path of its own: `module` (its source) and a dist-info declaring `entry`."""
    (root / module).mkdir(parents=True)
    (root / module / "__init__.py").write_text(source)
    info = root / f"{dist.replace('-', '_')}-0.1.dist-info"
    info.mkdir()
    (info / "METADATA").write_text(f"Metadata-Version: 2.1\nName: {dist}\nVersion: 0.1\n")
    (info / "entry_points.txt").write_text(f"[vpo.tasks]\n{entry}\n")
    return root


RAISING_PLUGIN = """
from vpo.task import Task


class Broken(Task):
    name = "broken_task"
    objectives = (("a", "a"),)
    scalar_weights = (1.0,)

    def __init__(self):
        raise RuntimeError("no settings file for broken_task")
"""


def run_with(paths, *args, cwd):
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([*map(str, paths), os.environ.get("PYTHONPATH", "")])}
    return subprocess.run([sys.executable, "-m", "vpo.cli", *args], capture_output=True, text=True, env=env, cwd=cwd)


def test_a_plugin_that_raises_when_created_or_is_declared_twice_is_named_in_one_line(tmp_path):
    """A task class raising in its constructor once reached the user as a traceback naming no plugin; two
    distributions declaring one task name were told apart by class name only."""
    site = plugin_site(
        tmp_path / "a", "broken-dist", "broken_plugin", RAISING_PLUGIN, "broken_task = broken_plugin:Broken"
    )
    done = run_with([site], "preprocess", "--task", "maze", "--out", str(tmp_path / "out"), cwd=tmp_path)
    err = done.stderr.strip().splitlines()
    assert done.returncode == 1 and len(err) == 1 and "Traceback" not in done.stderr
    assert (
        "task plugin 'broken_task' = broken_plugin:Broken (distribution broken-dist 0.1): creating Broken raised "
        "RuntimeError('no settings file for broken_task')" in err[0]
    )
    repo = Path(__file__).resolve().parents[1]
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(site), os.environ.get("PYTHONPATH", "")])}
    snakemake = Path(sys.executable).parent / "snakemake"
    plan = [
        str(snakemake),
        "-n",
        "--snakefile",
        str(repo / "workflow/Snakefile"),
        "--configfile",
        str(repo / "config.yaml"),
    ]
    planned = subprocess.run(plan, capture_output=True, text=True, env=env, cwd=tmp_path)
    assert planned.returncode != 0 and "broken_plugin:Broken (distribution broken-dist 0.1): creating Broken" in (
        planned.stdout + planned.stderr
    )
    assert "RuntimeError in file" not in planned.stdout + planned.stderr
    first = plugin_site(tmp_path / "b", "colours-one", "colours_one", TOY_PLUGIN, "toy_colours = colours_one:COLOURS")
    second = plugin_site(tmp_path / "c", "colours-two", "colours_two", TOY_PLUGIN, "toy_colours = colours_two:COLOURS")
    done = run_with([first, second], "preprocess", "--task", "maze", "--out", str(tmp_path / "out"), cwd=tmp_path)
    assert done.returncode == 1 and len(done.stderr.strip().splitlines()) == 1
    assert (
        "task plugin 'toy_colours' is declared twice: 'toy_colours' = colours_one:COLOURS (distribution colours-one "
        "0.1) and 'toy_colours' = colours_two:COLOURS (distribution colours-two 0.1)" in done.stderr
    )


@pytest.mark.parametrize("weights", [(float("nan"),), (float("inf"),), ("1",), (True,)])
def test_scalar_weights_that_are_not_finite_numbers_are_refused_at_registration(weights):
    from vpo.task import Task, register

    class Weighted(Task):
        name = "weighted_task"
        objectives = (("a", "a"),)
        scalar_weights = weights

    with pytest.raises(ValueError, match="scalar_weights must be finite numbers"):
        register(Weighted())

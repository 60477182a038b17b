"""Prompt templates (vpo/templates.py): a template file changes what `vpo preprocess` writes and what
training, evaluation and the search are shown; a bad one is refused naming the file and the
placeholder; substitution is one pass."""

from __future__ import annotations

import json
import re
import subprocess
import sys
from pathlib import Path

import pandas as pd
import pytest
import yaml

from vpo.data import read_rows
from vpo.evaluate import prompt_plan
from vpo.methods import get_method
from vpo.prompts import prepare_row
from vpo.templates import TemplateError, check_template, read_templates, render
from vpo_tasks.lcb import LCB
from vpo_tasks.maze import FORMAT_LINE, MAZE

REPO = Path(__file__).resolve().parents[1]
SINGLE = "Maze {size}x{size}, {max_steps} moves, {{literal braces}}:\n{grid}\n{format}"
MULTI = "Find {m} routes through\n{grid}\nwithin {max_steps} moves each.\n{multi_format}"
GOAL = "{grid}\n{max_steps} moves. Weigh:\n{weights}\n{format}"


def preprocess(tmp_path: Path, name: str, prompts: dict | None) -> Path:
    """`vpo preprocess --task maze` with the ci preset of a copy of config.yaml holding `prompts`."""
    cfg = yaml.safe_load((REPO / "config.yaml").read_text())
    if prompts:
        cfg["presets"]["ci"]["task_settings"]["maze"]["prompts"] = prompts
    config = tmp_path / f"{name}.yaml"
    config.write_text(yaml.safe_dump(cfg))
    out = tmp_path / name
    done = subprocess.run(
        [
            sys.executable,
            "-m",
            "vpo.cli",
            "preprocess",
            "--task",
            "maze",
            "--out",
            str(out),
            "--config",
            str(config),
            "--preset",
            "ci",
        ],
        capture_output=True,
        text=True,
        cwd=REPO,
    )
    assert done.returncode == 0, done.stderr
    return out


@pytest.fixture(scope="module")
def runs(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("templates")
    files = {}
    for mode, text in (("single", SINGLE), ("multi", MULTI), ("goal", GOAL)):
        files[mode] = tmp / f"maze_{mode}.txt"
        files[mode].write_text(text)
    return {
        "plain": read_rows(preprocess(tmp, "plain", None), "test"),
        "templated": read_rows(preprocess(tmp, "templated", {k: str(v) for k, v in files.items()}), "test"),
    }


def test_the_single_template_is_the_prompt_preprocess_writes(runs):
    for plain, templated in zip(runs["plain"], runs["templated"]):
        truth = templated["reward_model"]["ground_truth"]
        side = len(truth["grid_text"].splitlines())
        expected = (
            f"Maze {side}x{side}, {truth['max_steps']} moves, {{literal braces}}:\n{truth['grid_text']}\n{FORMAT_LINE}"
        )
        assert templated["prompt"] == [{"role": "user", "content": expected}]
        assert plain["prompt"][0]["content"] != expected and plain["reward_model"] == templated["reward_model"]


def test_multi_and_goal_templates_reach_training_and_evaluation(runs):
    row = runs["templated"][0]
    truth = row["reward_model"]["ground_truth"]
    multi = prepare_row(row, "vpo", 3, seed=0)["prompt"][0]["content"]
    assert multi == (
        f"Find 3 routes through\n{truth['grid_text']}\nwithin {truth['max_steps']} moves each.\n{MAZE.multi_format(3)}"
    )
    goal = prepare_row(row, "goal_cond", None, seed=5)
    weights = goal["reward_model"]["ground_truth"]["weights"]
    lines = "\n".join(f"- {d}: {w:.2f}" for (_, d), w in zip(MAZE.objectives, weights))
    assert (
        goal["prompt"][0]["content"]
        == f"{truth['grid_text']}\n{truth['max_steps']} moves. Weigh:\n{lines}\n{FORMAT_LINE}"
    )
    plan = prompt_plan(
        MAZE, runs["templated"], get_method("multi_rlvr"), m=3, budget=6, eval_seed=0, goal_weights="none", alpha=1.0
    )
    assert plan.prompts[0][0]["content"] == multi
    single = prompt_plan(
        MAZE, runs["templated"], get_method("grpo"), m=3, budget=6, eval_seed=0, goal_weights="none", alpha=1.0
    )
    assert single.prompts[0] == row["prompt"]


def test_rows_without_templates_keep_the_projects_wording(runs):
    row = runs["plain"][0]
    assert "<route_1>" in prepare_row(row, "vpo", 3, seed=0)["prompt"][0]["content"]
    assert "Find 3 routes" not in prepare_row(row, "vpo", 3, seed=0)["prompt"][0]["content"]


def test_substitution_is_one_pass():
    assert render("{a}|{b}|{{b}}", {"a": "{b}", "b": "x"}) == "{b}|x|{b}"


@pytest.mark.parametrize(
    "mode, text, words",
    [
        ("single", "Go from S to E in {max_steps} steps. {format}", "lacks {grid}"),
        ("multi", "{grid} {max_steps} {multi_format}", "lacks {m}"),
        ("goal", "{grid} {max_steps} {format}", "lacks {weights}"),
        ("single", "{grid} {max_steps} {colour}", "uses unknown {colour}"),
        ("single", "{grid} {max_steps} {m}", "uses unknown {m}"),  # m exists in multi templates only
    ],
)
def test_a_bad_template_is_refused_naming_the_file_and_placeholder(mode, text, words):
    with pytest.raises(TemplateError, match=r"maze_bad\.txt \(maze, " + mode + r"\) .*" + re.escape(words)):
        check_template(MAZE, mode, text, "prompts/maze_bad.txt")


def test_missing_file_and_unknown_mode_are_named(tmp_path):
    with pytest.raises(TemplateError, match=r"prompts.single: cannot read .*nowhere.txt"):
        read_templates(MAZE, {"single": str(tmp_path / "nowhere.txt")})
    with pytest.raises(TemplateError, match="prompts.chain: not a prompt mode"):
        read_templates(MAZE, {"chain": None})


def test_templates_that_are_not_text_too_large_or_unbalanced_are_refused(tmp_path):
    """A non-UTF-8 file once raised a bare UnicodeDecodeError; a lone brace was printed into every
    prompt; a 5 MB template cost 26 MB per row at preprocess."""
    latin = tmp_path / "latin.txt"
    latin.write_bytes("Caf\xe9 {grid} {max_steps} {format}".encode("latin-1"))
    with pytest.raises(TemplateError, match=r"prompts.single: .*latin.txt is not UTF-8 text \(byte 3\)"):
        read_templates(MAZE, {"single": str(latin)})
    lone = tmp_path / "lone.txt"
    lone.write_text("{grid} {max_steps} {format} and {oops")
    with pytest.raises(TemplateError, match=r"lone.txt has a lone '\{' at character 32; write \{\{"):
        read_templates(MAZE, {"single": str(lone)})
    large = tmp_path / "large.txt"
    large.write_text("{grid} {max_steps} {format}" + " " * 70000)
    with pytest.raises(TemplateError, match=r"large.txt has 70027 bytes; a prompt template may have 65536"):
        read_templates(MAZE, {"single": str(large)})
    fine = tmp_path / "fine.txt"
    fine.write_text("{{literal}} {grid} {max_steps} {format}")
    assert read_templates(MAZE, {"single": str(fine)}) == {"single": fine.read_text()}


def test_every_task_provides_the_fields_its_templates_need(tmp_path):
    LCB.preprocess(str(tmp_path), {"deepcoder": {"path": str(REPO / "tests" / "fixtures" / "deepcoder")}})
    rows = pd.read_parquet(tmp_path / "test.parquet")
    fields = json.loads(rows["extra_info"].iloc[1]["prompt_fields"])
    assert sorted(fields) == sorted(LCB.template_fields)
    assert (
        rows["prompt"].iloc[1][0]["content"] == f"{fields['question']}\n\n{fields['entry']}\n{LCB.single_format_line}"
    )

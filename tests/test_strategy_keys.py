"""Strategy keys (`Task.strategy_key`), what set RL and GRPO+DIV compare within a group: equal for two
rollouts of one approach, different otherwise, `degenerate` for a rollout without an answer; each task's rule
checked on hand-made responses, and the reward's `strategy` field."""

from __future__ import annotations

import json
from pathlib import Path

from vpo.reward import compute_score
from vpo.task import DEGENERATE_STRATEGY, Task, resolve

FIXTURE = json.loads((Path(__file__).parent / "fixtures" / "maze_5x5.json").read_text())
GT = {**FIXTURE["ground_truth"], "score_mode": "convex_bonus"}
ROUTE = {r["name"]: r["moves"] for r in FIXTURE["routes"]}


def maze_key(text, m=1):
    return compute_score("maze", text, GT, {"num_solutions": m})["strategy"]


def test_maze_keys_are_the_cells_walked():
    # F is A with a third RIGHT into the wall at (0, 3): it walks the same cells
    assert maze_key(ROUTE["A"]) == maze_key(ROUTE["F"]) == "0,0 0,1 0,2 1,2 1,3 1,4 2,4 3,4 4,4"
    assert maze_key(ROUTE["A"]) != maze_key(ROUTE["B"])
    assert maze_key("UP LEFT") == "0,0"  # moves that enter no cell: the walk is the start
    assert maze_key("no moves here") == DEGENERATE_STRATEGY
    both = maze_key(f"<route_1>{ROUTE['B']}</route_1><route_2>{ROUTE['A']}</route_2>", m=3)
    assert both == "\n".join(sorted([maze_key(ROUTE["A"]), maze_key(ROUTE["B"])]))


def test_text_tasks_key_the_canonical_answer():
    musique = resolve("musique")
    matrix = [[0.0] * musique.k]
    assert musique.strategy_key("<answer>The  Beatles!</answer>", {}, matrix) == musique.strategy_key(
        "<support>1</support><answer>beatles</answer>", {}, matrix
    )
    assert musique.strategy_key("no tags", {}, matrix) == DEGENERATE_STRATEGY
    eureqa = resolve("eureqa")
    chain = "".join(f"<entity_{x}>{name}</entity_{x}>" for x, name in zip("ABCDE", ["Paris", "France", "", "", ""]))
    assert eureqa.strategy_key(chain, {}, [[0.0] * 5]) == eureqa.strategy_key(chain.lower(), {}, [[0.0] * 5])
    assert eureqa.strategy_key(chain.replace("Paris", "Lyon"), {}, [[0.0] * 5]) != eureqa.strategy_key(
        chain, {}, [[0.0] * 5]
    )
    tool = resolve("tool")
    call = '<think>x</think><tool_call>{"name": "get", "parameters": {"b": 2, "a": 1}}</tool_call>'
    same = '<think>y</think><tool_call>{"parameters": {"a": 1, "b": 2}, "name": "get"}</tool_call>'
    assert tool.strategy_key(call, {}, [[0.0] * 4]) == tool.strategy_key(same, {}, [[0.0] * 4])
    assert tool.strategy_key("<think>x</think><response>Done.</response>", {}, [[0.0] * 4]) == "done"


def test_lcb_keys_are_the_pattern_of_passed_tests():
    lcb = resolve("lcb")
    program = "```python\nprint(1)\n```"
    assert lcb.strategy_key(program, {}, [[1.0, 0.0, 1.0]]) == "101"
    assert lcb.strategy_key(program, {}, [[1.0, 0.0, 1.0]]) != lcb.strategy_key(program, {}, [[1.0, 1.0, 1.0]])
    assert lcb.strategy_key("no program", {}, [[0.0, 0.0, 0.0]]) == DEGENERATE_STRATEGY


def test_a_plugin_inherits_the_canonical_parsed_answer():
    class Words(Task):
        name, objectives, scalar_weights, default_m, single_format_line = "words_keys", (("a", "a"),), (1.0,), 2, ""

        def split_answers(self, text, m):
            return [w for w in text.split(",") if w.strip()][:m]

    words = Words()
    assert words.strategy_key(" red ", {}, [[0.0]]) == "red"
    assert words.strategy_key("red, blue", {}, [[0.0], [0.0]]) == words.strategy_key("blue,red", {}, [[0.0], [0.0]])
    assert words.strategy_key("", {}, [[0.0]]) == DEGENERATE_STRATEGY

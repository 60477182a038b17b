"""maze: fixture routes, the authors' parsing rules (ryanboldi/vpo at 767db79 vpo_tasks/maze.py) one case each, the
simulator's edge rules, the authors' mazes from their seeds (1.2 fixtures), generator invariants
over 300+ mazes, determinism, and the warm-start demonstrations."""

from __future__ import annotations

import json
import random
import re
from collections import deque
from pathlib import Path

import numpy as np
import pytest

from vpo.reward import compute_score
from vpo_tasks.maze import MAZE, route_slots, score_moves
from vpo_tasks.maze_generator import generate_maze, generate_mazes

FIXTURE = json.loads((Path(__file__).parent / "fixtures" / "maze_5x5.json").read_text())
ROUTES = {r["name"]: r for r in FIXTURE["routes"]}
MODES = ("linear", "convex_bonus")


def gt(mode: str, **changes) -> dict:
    return {**FIXTURE["ground_truth"], "score_mode": mode, **changes}


def vectors(result: dict) -> list[list[float]]:
    return json.loads(result["sub_scores"])


# ---- fixture routes through compute_score ---------------------------------------------------
@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize("name", list(ROUTES))
def test_fixture_route_vectors(mode, name):
    route = ROUTES[name]
    truth = gt(mode, **({"max_steps": route["max_steps"]} if "max_steps" in route else {}))
    result = compute_score("maze", f"<answer>{route['moves']}</answer>", truth, {})
    assert vectors(result) == [pytest.approx(route[mode])]
    assert [result[k] for k in ("completion", "gold", "diamond", "avoid_lava")] == pytest.approx(route[mode])
    assert result["score"] == pytest.approx(sum(route[mode]) / 4)


@pytest.mark.parametrize("mode", MODES)
def test_fixture_multi_route_duplicate_is_dropped(mode):
    a, b = ROUTES["A"]["moves"], ROUTES["B"]["moves"]
    text = f"<route_1>{a}</route_1>\n<route_2>{a}</route_2>\n<route_3>{b}</route_3>"
    result = compute_score("maze", text, gt(mode), {"num_solutions": 3})
    expected = [ROUTES["A"][mode], ROUTES["B"][mode], [0, 0, 0, 0]]
    assert vectors(result) == [pytest.approx(row) for row in expected]
    assert result["score"] == pytest.approx(sum(map(sum, expected)) / 4)  # Multi-RLVR: sum of row means
    assert result["num_answers"] == 2


# ---- parsing -------------------------------------------------------------------------------
A = ROUTES["A"]["moves"]
A_LINEAR = ROUTES["A"]["linear"]


@pytest.mark.parametrize(
    "text, expected",
    [
        (f"<ANSWER>{A.lower()}</Answer>", A_LINEAR),  # tags and moves in any case
        (f"I think {A} works", A_LINEAR),  # no tag: the whole text
        (f"<answer>{A}</answer> then <answer>DOWN</answer>", A_LINEAR),  # first block only
        (f"<answer>RIGHT</answer> {A}", [0, 0, 0, 0]),  # first block, not the rest
        (A.replace(" ", ","), A_LINEAR),  # punctuation separates words
        ("UPRIGHT DOWNRIGHT", [0, 0, 0, 0]),  # not whole words
        ("<answer></answer>", [0, 0, 0, 0]),
        ("", [0, 0, 0, 0]),
    ],
)
def test_single_answer_parsing(text, expected):
    assert vectors(compute_score("maze", text, gt("linear"), {})) == [pytest.approx(expected)]


B = ROUTES["B"]["moves"]
C = ROUTES["C"]["moves"]
LIN = {name: route["linear"] for name, route in ROUTES.items()}
ZERO = [0, 0, 0, 0]


def multi(text: str, m: int = 3) -> list[list[float]]:
    return vectors(compute_score("maze", text, gt("linear"), {"num_solutions": m}))


@pytest.mark.parametrize(
    "text, expected",
    [
        # a route_i tag above m is never read, even when a lower slot is empty
        (f"<route_1>{A}</route_1><route_4>{B}</route_4>", [LIN["A"], ZERO, ZERO]),
        # duplicates are dropped after cutting to m slots: route 4 does not take the duplicate's row
        (
            f"<route_1>{A}</route_1><route_2>{A}</route_2><route_3>{B}</route_3><route_4>{C}</route_4>",
            [LIN["A"], LIN["B"], ZERO],
        ),
        # empty and moveless slots are zero rows; later routes keep their order
        (f"<route_1></route_1><route_2>{B}</route_2><route_3>no moves</route_3>", [LIN["B"], ZERO, ZERO]),
        # `---` parts are stripped and empty ones dropped: one real part is not a split, so the
        # response falls through to its two <answer> blocks
        (f"<answer>{A}</answer><answer>{B}</answer>\n---\n", [LIN["A"], LIN["B"], ZERO]),
        (f"---\n{A}\n---\n\n---\n{B}\n---", [LIN["A"], LIN["B"], ZERO]),
        # a route_i closed by another number is not a route_i block
        (f"<route_1>{A}</route_2><route_2>{B}</route_2>", [LIN["B"], ZERO, ZERO]),
        # the same number twice: only the first block is read
        (f"<route_1>{A}</route_1><route_1>{B}</route_1>", [LIN["A"], ZERO, ZERO]),
        # slot i runs to the first closer with its own number, whatever tags lie between: route 1 is
        # A then B's moves (the walk ends at E after A), and route 2 is B
        (f"<route_1>{A} <route_2>{B}</route_2></route_1>", [LIN["A"], LIN["B"], ZERO]),
        # nested <answer>: the first opener to the first closer, so both move lists are read
        (f"<answer>UP <answer>{A}</answer>", [LIN["A"], ZERO, ZERO]),  # UP bumps the border, A still fits
    ],
)
def test_multi_answer_parsing_rules(text, expected):
    assert multi(text) == [pytest.approx(row) for row in expected], text


def test_multi_answer_fallbacks_and_padding():
    cases = [
        (f"{A}\n---\n{B}", [LIN["A"], LIN["B"], ZERO]),  # --- split
        (f"<answer>{A}</answer> or <answer>{B}</answer>", [LIN["A"], LIN["B"], ZERO]),  # several <answer>
        (f"just {B}", [LIN["B"], ZERO, ZERO]),  # whole text is route 1
        (f"<ROUTE_1>{A}</ROUTE_1><route_2>{A.lower()}</route_2>", [LIN["A"], ZERO, ZERO]),  # case-blind dup
        (
            "".join(f"<route_{i}>{r}</route_{i}>" for i, r in enumerate([ROUTES[n]["moves"] for n in "ABCE"], 1)),
            [LIN["A"], LIN["B"], LIN["C"]],
        ),  # 4 routes, m = 3
        ("no moves at all --- none here", [ZERO, ZERO, ZERO]),
        (f"<route_1>LEFT <route_2>{B}</route_2>", [LIN["B"], ZERO, ZERO]),  # an unclosed tag is text
        ("<route_1>" * 3000 + "</route_1>", [ZERO, ZERO, ZERO]),  # many unclosed tags
        ("<answer>" * 3000 + "---" * 3000, [ZERO, ZERO, ZERO]),
    ]
    for text, expected in cases:
        assert multi(text) == [pytest.approx(row) for row in expected], text[:80]
    # more distinct routes than slots: m decides, and num_answers counts the surviving routes
    text = f"<route_1>{A}</route_1><route_2>{A}</route_2><route_3>{B}</route_3>"
    assert compute_score("maze", text, gt("linear"), {"num_solutions": 3})["num_answers"] == 2
    assert multi(text, m=2) == [pytest.approx(LIN["A"]), ZERO]


def test_single_answer_nested_tags_read_to_the_first_closer():
    text = "<answer>RIGHT RIGHT <answer>DOWN RIGHT RIGHT DOWN DOWN DOWN</answer> LEFT"
    assert vectors(compute_score("maze", text, gt("linear"), {})) == [pytest.approx(A_LINEAR)]


# ---- simulator rules ----------------------------------------------------------------------
def test_items_after_exit_do_not_count_and_budget_counts_bumps():
    # reach E at step 8 (route A), then wander over lava: nothing after E counts
    after = A + " LEFT LEFT UP UP"
    assert vectors(compute_score("maze", after, gt("linear"), {})) == [pytest.approx(A_LINEAR)]
    # 12 bumps into the top border use the whole budget: E is never reached
    assert vectors(compute_score("maze", "UP " * 12 + ROUTES["C"]["moves"], gt("linear"), {}))[0] == [0, 0, 0, 0]
    # 4 bumps leave exactly 8 steps for route C (budget 12)
    assert vectors(compute_score("maze", "UP " * 4 + ROUTES["C"]["moves"], gt("linear"), {}))[0] == [1, 0, 0, 1]


def test_convex_bonus_multiplier_and_no_lava_maze():
    # route E visits B and one of two golds: linear 0.5, convex 1.5 * 0.25
    assert MAZE.score_answer(ROUTES["E"]["moves"], gt("convex_bonus"))[1] == pytest.approx(0.375)
    # without any lava in the maze avoid_lava is 1
    no_lava = gt("linear", grid_text=FIXTURE["ground_truth"]["grid_text"].replace("L", "."), num_lava=0)
    assert MAZE.score_answer(ROUTES["B"]["moves"], no_lava) == [1, 0, 1, 1]


def test_unknown_score_mode_is_a_data_error():
    with pytest.raises(ValueError, match="score_mode"):
        compute_score("maze", A, gt("quadratic"), {})


# ---- generator invariants (independent BFS) ------------------------------------------------
def bfs(grid, a, blocked):
    dist, queue = {a: 0}, deque([a])
    while queue:
        r, c = queue.popleft()
        for nr, nc in ((r - 1, c), (r + 1, c), (r, c - 1), (r, c + 1)):
            if 0 <= nr < len(grid) and 0 <= nc < len(grid) and (nr, nc) not in dist and grid[nr][nc] not in blocked:
                dist[(nr, nc)] = dist[(r, c)] + 1
                queue.append((nr, nc))
    return dist


SEEDS = json.loads((Path(__file__).parent / "fixtures" / "maze_seeds.json").read_text())


@pytest.mark.parametrize("expected", SEEDS["mazes"], ids=lambda e: f"seed{e['seed']}")
def test_the_authors_mazes_come_out_of_their_seeds(expected):
    maze = generate_maze(expected["seed"])
    assert maze["grid_text"].split("\n") == expected["grid_rows"]
    for key in (
        "start",
        "end",
        "max_steps",
        "num_gold",
        "num_diamond",
        "num_lava",
        "via_gold",
        "via_diam",
        "via_center",
        "both_corners_detour",
        "d_safe",
    ):
        assert maze[key] == expected[key], key


def test_the_authors_rejected_seeds_are_rejected():
    for base, key in ((42, "rejected_train_seeds_42_to_81"), (4242, "rejected_test_seeds_4242_to_4281")):
        assert [s for s in range(base, base + 40) if generate_maze(s) is None] == SEEDS[key]


@pytest.fixture(scope="module")
def mazes():
    return generate_mazes(300, 42) + generate_mazes(20, 4242)


@pytest.fixture(scope="module", params=[9, 7])
def sized_mazes(request, mazes):
    size = request.param
    return size, (mazes if size == 9 else generate_mazes(150, 42, size=size))


def test_generator_invariants(sized_mazes):
    n, mazes = sized_mazes
    last, mid = n - 1, n // 2
    corners = {(0, 0), (0, last), (last, 0), (last, last)}
    for maze in mazes:
        grid = [line.split(" ") for line in maze["grid_text"].split("\n")]
        assert len(grid) == n and all(len(row) == n for row in grid)
        assert {t for row in grid for t in row} <= set(".#SEGDLB")
        start, end = tuple(maze["start"]), tuple(maze["end"])
        gold_c, diam_c = tuple(maze["gold_corner"]), tuple(maze["diam_corner"])
        assert grid[start[0]][start[1]] == "S" and grid[end[0]][end[1]] == "E"
        assert start in corners and start[0] == 0 and end == (last - start[0], last - start[1])  # S on the top row
        assert {start, end, gold_c, diam_c} == corners
        assert grid[mid][mid] == "B" and maze["bonus_cell"] == [mid, mid]
        assert sum(row.count("S") + row.count("E") + row.count("B") for row in grid) == 3
        cells = {t: [(r, c) for r in range(n) for c in range(n) if grid[r][c] == t] for t in "GDL"}
        assert (len(cells["G"]), len(cells["D"]), len(cells["L"])) == (
            maze["num_gold"],
            maze["num_diamond"],
            maze["num_lava"],
        )
        assert all(3 <= len(cells[t]) <= 5 for t in "GD"), maze["seed"]
        assert (3 if n == 9 else 1) <= len(cells["L"]) <= 5, maze["seed"]  # lava needs free interior cells
        assert all(abs(r - gold_c[0]) + abs(c - gold_c[1]) <= 2 for r, c in cells["G"])
        assert all(abs(r - diam_c[0]) + abs(c - diam_c[1]) <= 2 for r, c in cells["D"])
        assert all(2 <= r <= n - 3 and 2 <= c <= n - 3 for r, c in cells["L"])

        walls = {p: bfs(grid, p, "#") for p in (start, gold_c, diam_c, (mid, mid))}
        via_gold = walls[start][gold_c] + walls[gold_c][end]
        via_diam = walls[start][diam_c] + walls[diam_c][end]
        both = walls[start][gold_c] + walls[gold_c][diam_c] + walls[diam_c][end]
        assert (maze["via_gold"], maze["via_diam"], maze["both_corners_detour"]) == (via_gold, via_diam, both)
        assert maze["via_center"] == walls[start][(mid, mid)] + walls[(mid, mid)][end]
        assert maze["max_steps"] == max(via_gold, via_diam) + 7
        assert both > maze["max_steps"]  # the designed conflict: one route never gets both corners
        d_safe = bfs(grid, start, "#L")[end]
        assert maze["d_safe"] == d_safe <= maze["max_steps"]


def test_smaller_mazes_are_a_setting_with_their_own_prompt(tmp_path):
    MAZE.preprocess(str(tmp_path), {"train_size": 3, "test_size": 2, "size": 7})
    import pandas as pd

    rows = pd.read_parquet(tmp_path / "train.parquet")
    prompt = rows.iloc[0]["prompt"][0]["content"]
    assert prompt.startswith("Navigate a 7x7 maze from S to E.")
    assert len(rows.iloc[0]["reward_model"]["ground_truth"]["grid_text"].split("\n")) == 7
    with pytest.raises(ValueError, match="size 4 is outside 5..9"):
        MAZE.preprocess(str(tmp_path), {"size": 4})


def test_generation_is_deterministic_and_seeds_are_consecutive(mazes):
    again = generate_mazes(300, 42)
    assert again == mazes[:300]
    seeds = [m["seed"] for m in mazes[:300]]
    assert seeds[0] >= 42 and seeds == sorted(set(seeds))
    # every skipped seed is a rejected one
    skipped = set(range(42, seeds[-1] + 1)) - set(seeds)
    assert all(generate_maze(s) is None for s in skipped)
    assert generate_maze(seeds[5]) == mazes[5]
    assert len({m["grid_text"] for m in mazes}) == len(mazes)  # no two seeds give the same maze


def test_generator_gives_up_with_a_clear_error():
    with pytest.raises(RuntimeError, match="mazes accepted"):
        generate_mazes(5, 42, attempts_per_maze=0)


# ---- warm-start demonstrations -------------------------------------------------------------
def test_demonstrations_are_well_formed_and_of_mixed_quality(mazes):
    rows = MAZE.rows("train", mazes[:20], "convex_bonus")
    rng = random.Random(0)
    singles = [(row, MAZE.demonstration(row, rng, 1)) for row in rows for _ in range(10)]
    for _, text in singles:
        assert re.fullmatch(r"<answer>(UP|DOWN|LEFT|RIGHT)( (UP|DOWN|LEFT|RIGHT))*</answer>", text), text
    scores = [compute_score("maze", t, r["reward_model"]["ground_truth"], {}) for r, t in singles]
    reached = np.mean([s["completion"] for s in scores])
    assert 0.3 < reached < 0.98  # successes and failures both present
    assert len({s["sub_scores"] for s in scores}) > 10  # many different outcome vectors
    assert any(s["gold"] > 0 for s in scores) and any(s["diamond"] > 0 for s in scores)

    multi = MAZE.demonstration(rows[0], np.random.default_rng(3), 3)
    assert re.fullmatch(r"(<route_(\d)>[A-Z ]+</route_\2>\n?){3}", multi), multi
    assert [int(i) for i in re.findall(r"<route_(\d)>", multi)] == [1, 2, 3]
    same = MAZE.demonstration(rows[0], np.random.default_rng(3), 3)
    assert same == multi  # a seeded rng gives the same demonstration


# ---- the scorer and parser on small hand-made mazes -------------------------------------------------
def small(grid_text, end, **changes):
    counts = {t: grid_text.split().count(c) for t, c in (("num_gold", "G"), ("num_diamond", "D"), ("num_lava", "L"))}
    return {"grid_text": grid_text, "start": [0, 0], "end": list(end), "max_steps": 6, **counts, **changes}


TWO_GOLD = small("S G .\n. # .\nG . E", (2, 2))  # the top route takes one of two gold, no diamond, no lava


def test_fractions_and_the_default_score_mode():
    top = ["RIGHT", "RIGHT", "DOWN", "DOWN"]
    assert score_moves(top, {**TWO_GOLD, "score_mode": "linear"}) == [1.0, 0.5, 0.0, 1.0]
    assert score_moves(top, TWO_GOLD) == [1.0, 0.25, 0.0, 1.0]  # no score_mode: convex_bonus, (1/2)^2
    assert score_moves(top, {**TWO_GOLD, "score_mode": None}) == [1.0, 0.25, 0.0, 1.0]
    bonus = small("S G B\nG # .\n. . E", (2, 2))  # the bonus tile B before the exit: 1.5 x (1/2)^2
    assert score_moves(top, {**bonus, "score_mode": "convex_bonus"}) == [1.0, 0.375, 0.0, 1.0]
    capped = small("S G B\n. # .\n. . E", (2, 2))  # 1.5 x 1^2 is capped at 1
    assert score_moves(top, capped) == [1.0, 1.0, 0.0, 1.0]
    empty = small("S . .\n. # .\n. . E", (2, 2))  # nothing to collect: gold and diamond 0, safety 1
    assert score_moves(top, {**empty, "score_mode": "linear"}) == [1.0, 0.0, 0.0, 1.0]


def test_walls_borders_and_the_step_budget():
    row = small("S . E", (0, 2))
    assert score_moves(["DOWN", "UP", "RIGHT", "RIGHT"], row)[0] == 1.0  # the border blocks DOWN and UP
    assert score_moves(["RIGHT", "RIGHT"], {**row, "max_steps": 0}) == [0.0] * 4  # no step allowed
    assert score_moves(["RIGHT"], small("S E", (0, 1), max_steps=0)) == [0.0] * 4  # not even one
    assert score_moves(["RIGHT"], small("S E", (0, 1), max_steps=-3)) == [0.0] * 4
    assert score_moves(["RIGHT", "RIGHT"], {**row, "max_steps": 1}) == [0.0] * 4
    assert score_moves(["RIGHT", "RIGHT"], {**row, "max_steps": 2})[0] == 1.0


@pytest.mark.parametrize(
    "text, m, slots",
    [
        ("<ROUTE_1>UP</route_1><route_2>DOWN</ROUTE_2>", 3, ["UP", "DOWN", ""]),  # tags in any case
        ("<route_0>UP</route_0>", 3, ["<route_0>UP</route_0>", "", ""]),  # numbering starts at 1
        ("<route_2>UP</route_2>", 2, ["", "UP"]),
        ("UP --- DOWN", 3, ["UP", "DOWN", ""]),
        ("UP DOWN", 3, ["UP DOWN", "", ""]),
        ("UP DOWN", 1, ["UP DOWN"]),
        ("   ", 2, ["   ", ""]),
    ],
)
def test_route_slots(text, m, slots):
    assert route_slots(text, m) == slots
    assert MAZE.answer_slots(text, m) == slots


def test_answers_of_the_maze_task():
    assert MAZE.is_correct([1.0, 0.0, 0.0, 0.0]) and not MAZE.is_correct([0.99, 1.0, 1.0, 1.0])
    assert not MAZE.is_correct([0.0, 1.0, 1.0, 1.0]) and not MAZE.is_correct([])
    assert (
        MAZE.parses("go there") is False
        and MAZE.parses("go up") is True
        and MAZE.parses("UP") is True
        and MAZE.parses("") is False
    )
    assert MAZE.split_answers("<route_1>UP</route_1> then LEFT", 1) == ["UP LEFT"]  # single answer: every move word
    assert MAZE.split_answers("no moves", 1) == []
    assert MAZE.split_answers("<route_1>UP</route_1><route_2>LEFT</route_2>", 2) == ["UP", "LEFT"]
    matrix, count = MAZE.score_response("RIGHT RIGHT DOWN DOWN", {**TWO_GOLD, "score_mode": "linear"}, 1)
    assert matrix == [[1.0, 0.5, 0.0, 1.0]] and count == 1
    assert MAZE.score_response("nothing", TWO_GOLD, 1) == ([[0.0] * 4], 0)

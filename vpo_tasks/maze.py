"""maze: the designed-conflict grid, 9x9 in the paper (synthetic, k = 4: completion, gold, diamond, avoid_lava).

A route that reaches the exit E within the step budget can collect the gold corner or the diamond
corner, never both (the generator rejects mazes where both fit), pass through lava or around it,
and visit the bonus tile B at the centre. The reward is gated on reaching E.

This file holds the simulator and scorer, the authors' parsing rules (docs/tasks.md, maze), the prompt and
the task class; the generator is `vpo_tasks.maze_generator`. The warm-start demonstrations at the
bottom are used only by the CPU trainer's base model.
"""

from __future__ import annotations

import json
import os
import random
import re
from collections import deque
from dataclasses import dataclass
from typing import Any, Sequence


from vpo.atomic import write_parquet_atomic
from vpo.task import DEGENERATE_STRATEGY, Task, as_random, settings_from
from vpo_tasks.maze_generator import MIN_SIZE, SIZE, center, corners, generate_mazes

_MOVES: dict[str, tuple[int, int]] = {"UP": (-1, 0), "DOWN": (1, 0), "LEFT": (0, -1), "RIGHT": (0, 1)}
_SCORE_MODES = ("convex_bonus", "linear")
_BONUS_MULT = 1.5  # convex_bonus: squared fractions times this once a B tile was visited

_MOVE_RE = re.compile(r"\b(UP|DOWN|LEFT|RIGHT)\b")
ANSWER_OPEN, ANSWER_CLOSE = re.compile("<answer>", re.IGNORECASE), re.compile("</answer>", re.IGNORECASE)
_DASH_SPLIT = re.compile(r"(?:---)+")  # runs of separators give no empty parts to skip one by one

Cell = tuple[int, int]


@dataclass
class MazeSettings:
    train_size: int = 1000  # mazes in train.parquet
    test_size: int = 100  # mazes in test.parquet
    train_seed: int = 42  # base seed of the train split; seeds base, base+1, ... until enough are accepted
    test_seed: int = 4242  # base seed of the test split
    score_mode: str = "convex_bonus"  # "convex_bonus" (released generator) or "linear" (PAPER_REPRO)
    size: int = SIZE  # grid side: 9 is the paper's; smaller keeps the designed conflicts with shorter routes
    attempts_per_maze: int = 300  # give up after n * this many seeds

    @classmethod
    def from_dict(cls, values: dict[str, Any] | None) -> "MazeSettings":
        settings = settings_from(cls, values, "maze")
        if settings.score_mode not in _SCORE_MODES:
            raise ValueError(f"maze: score_mode {settings.score_mode!r} is not one of {_SCORE_MODES}")
        if not MIN_SIZE <= settings.size <= SIZE:
            raise ValueError(f"maze: size {settings.size} is outside {MIN_SIZE}..{SIZE}; set data.size to one of them")
        if settings.train_size < 1 or settings.test_size < 1:
            raise ValueError("maze: train_size and test_size must be at least 1")
        return settings


# ---- simulator and scoring ------------------------------------------------------------------
def parse_grid(grid_text: str) -> list[list[str]]:
    return [line.split() for line in str(grid_text).strip().split("\n")]


def simulate(grid: list[list[str]], start: Cell, end: Cell, max_steps: int, moves: Sequence[str]) -> dict[str, Any]:
    """Walk the first max_steps moves. Blocked moves (walls, border) stay put but still count.

    Returns reached (entered E), the distinct G, D, L tiles and whether B was visited before E, and `path`:
    the cells entered, in order (a blocked move enters none).
    """
    pos, path = start, [start]
    seen: dict[str, set[Cell]] = {"G": set(), "D": set(), "L": set(), "B": set()}
    for move in list(moves)[: max(0, max_steps)]:
        dr, dc = _MOVES[move]
        r, c = pos[0] + dr, pos[1] + dc
        if 0 <= r < len(grid) and 0 <= c < len(grid[r]) and grid[r][c] != "#":
            pos = (r, c)
            path.append(pos)
        if pos == end:
            return {"reached": True, **{t: len(cells) for t, cells in seen.items()}, "path": path}
        tile = grid[pos[0]][pos[1]]
        if tile in seen:
            seen[tile].add(pos)
    return {"reached": False, **{t: len(cells) for t, cells in seen.items()}, "path": path}


def score_moves(moves: Sequence[str], ground_truth: dict[str, Any]) -> list[float]:
    """[completion, gold, diamond, avoid_lava] of one move sequence under the row's score_mode."""
    if not moves:
        return [0.0] * 4
    mode = str(ground_truth.get("score_mode") or "convex_bonus")
    if mode not in _SCORE_MODES:
        raise ValueError(f"maze: ground_truth score_mode {mode!r} is not one of {_SCORE_MODES}")
    grid = parse_grid(ground_truth["grid_text"])
    start = tuple(int(x) for x in ground_truth["start"])
    end = tuple(int(x) for x in ground_truth["end"])
    walk = simulate(grid, start, end, int(ground_truth["max_steps"]), moves)
    if not walk["reached"]:
        return [0.0] * 4
    total_gold, total_diam, total_lava = (int(ground_truth[k]) for k in ("num_gold", "num_diamond", "num_lava"))
    gold = walk["G"] / total_gold if total_gold else 0.0
    diam = walk["D"] / total_diam if total_diam else 0.0
    safe = 1.0 - walk["L"] / total_lava if total_lava else 1.0
    if mode == "linear":
        return [1.0, gold, diam, safe]
    mult = _BONUS_MULT if walk["B"] else 1.0
    return [1.0] + [min(1.0, mult * x * x) for x in (gold, diam, safe)]


# ---- parsing (docs/tasks.md, maze: the authors' rules, each block found as "opener, then the first
# closer after it", which gives the same blocks as a lazy regex and stays linear in the text) ------
def _block(text: str, opener: re.Pattern, closer: re.Pattern, pos: int = 0) -> tuple[str, int] | None:
    """Body of the first opener...closer pair starting at or after pos, and the index past it."""
    head = opener.search(text, pos)
    tail = closer.search(text, head.end()) if head else None
    if tail is None:
        return None  # no closer after the first opener means none after any later opener either
    return text[head.end() : tail.start()], tail.end()


def _all_blocks(text: str, opener: re.Pattern, closer: re.Pattern) -> list[str]:
    """Every non-overlapping opener...closer body, left to right."""
    bodies, pos = [], 0
    while (found := _block(text, opener, closer, pos)) is not None:
        bodies.append(found[0])
        pos = found[1]
    return bodies


def parse_moves(text: str) -> tuple[str, ...]:
    """Moves of one answer: the first <answer>...</answer> (any case, whatever lies between), else
    the whole text; every whole word UP/DOWN/LEFT/RIGHT after upper-casing."""
    found = _block(text, ANSWER_OPEN, ANSWER_CLOSE)
    return tuple(_MOVE_RE.findall((found[0] if found else text).upper()))


def route_slots(text: str, m: int) -> list[str]:
    """The m route texts of a multi-answer response, missing ones empty; the first rule that applies:
    <route_i> tags for i = 1..m (one match is enough), else >= 2 non-empty `---` parts, else >= 2
    <answer> blocks, else the whole text as route 1."""
    slots = []
    for i in range(1, m + 1):
        found = _block(text, re.compile(f"<route_{i}>", re.IGNORECASE), re.compile(f"</route_{i}>", re.IGNORECASE))
        slots.append(found[0] if found else None)
    if any(slot is not None for slot in slots):
        return [slot or "" for slot in slots]
    dash_parts = [p.strip() for p in _DASH_SPLIT.split(text) if p.strip()]  # stripped, empties dropped
    for parts in (dash_parts, _all_blocks(text, ANSWER_OPEN, ANSWER_CLOSE)):
        if len(parts) >= 2:
            return (parts + [""] * m)[:m]
    return [text] + [""] * (m - 1)


def distinct_routes(text: str, m: int) -> list[tuple[str, ...]]:
    """Move lists of the m slots in order, dropping empty ones and repeats of an earlier slot: a
    duplicate or empty slot costs its row (extra routes never fill it)."""
    routes: list[tuple[str, ...]] = []
    for slot in route_slots(text, m):
        moves = parse_moves(slot)
        if moves and moves not in routes:
            routes.append(moves)
    return routes


# ---- prompts and rows -----------------------------------------------------------------------
FORMAT_LINE = "Write your moves inside <answer></answer> tags, for example <answer>UP UP RIGHT</answer>."


def prompt_fields(maze: dict[str, Any]) -> dict[str, str]:
    """The maze's pieces a prompt template can place (`vpo.templates`)."""
    return {
        "grid": maze["grid_text"],
        "size": str(len(parse_grid(maze["grid_text"]))),
        **{key: str(maze[key]) for key in ("max_steps", "num_gold", "num_diamond", "num_lava")},
    }


def build_prompt(maze: dict[str, Any]) -> str:
    size = len(parse_grid(maze["grid_text"]))
    return (
        f"Navigate a {size}x{size} maze from S to E.\n\n"
        f"{maze['grid_text']}\n\n"
        "Rules:\n"
        "- Moves are UP, DOWN, LEFT and RIGHT; each move is one step.\n"
        "- Walls (#) block movement and you must stay on the grid; a blocked move still uses a step.\n"
        "- Collect gold (G), diamonds (D) and the bonus (B); avoid lava (L).\n"
        "- Visiting a B cell multiplies your other scores — explore!\n"
        "- You must reach E or you score zero; items count only if collected before reaching E.\n"
        f"- You have {maze['max_steps']} steps.\n\n"
        f"This maze has {maze['num_gold']} G, {maze['num_diamond']} D, {maze['num_lava']} L and 1 B.\n"
        f"{FORMAT_LINE}"
    )


def _route_tags(routes: Sequence[str]) -> str:
    return "\n".join(f"<route_{i}>{r}</route_{i}>" for i, r in enumerate(routes, start=1))


class MazeTask(Task):
    name = "maze"
    label = "Maze"
    data_source = "maze"
    ability = "spatial"
    objectives = (
        ("completion", "Reaching the exit (E)"),
        ("gold", "Collecting Gold (G) tiles"),
        ("diamond", "Collecting Diamond (D) tiles"),
        ("avoid_lava", "Avoiding Lava (L) tiles"),
    )
    scalar_weights = (0.25, 0.25, 0.25, 0.25)
    default_m = 3
    single_format_line = FORMAT_LINE
    template_fields = ("grid", "size", "max_steps", "num_gold", "num_diamond", "num_lava")
    required_template_fields = ("grid", "max_steps")
    settings_class = MazeSettings

    def is_correct(self, vector: Sequence[float]) -> bool:
        """Solved = the exit was reached in budget (gold and diamond cannot both be full by design)."""
        return bool(len(vector) and vector[0] >= 1.0)

    # -- data
    def rows(self, split: str, mazes: list[dict[str, Any]], score_mode: str) -> list[dict[str, Any]]:
        gt_keys = ("grid_text", "start", "end", "max_steps", "num_gold", "num_diamond", "num_lava")
        extra_keys = (
            "seed",
            "d_safe",
            "gold_corner",
            "diam_corner",
            "bonus_cell",
            "via_gold",
            "via_diam",
            "via_center",
            "both_corners_detour",
        )
        return [
            self.row(
                build_prompt(maze),
                {**{k: maze[k] for k in gt_keys}, "score_mode": score_mode},
                split=split,
                index=i,
                task_id=f"maze-{maze['seed']}",
                **{k: maze[k] for k in extra_keys},
                prompt_fields=json.dumps(prompt_fields(maze)),
            )
            for i, maze in enumerate(mazes)
        ]

    def preprocess(self, out_dir: str, settings: dict[str, Any] | None = None) -> tuple[str, str]:
        s = MazeSettings.from_dict(settings)
        paths = []
        for split, n, seed in (("train", s.train_size, s.train_seed), ("test", s.test_size, s.test_seed)):
            rows = self.rows(split, generate_mazes(n, seed, s.attempts_per_maze, s.size), s.score_mode)
            paths.append(write_parquet_atomic(rows, os.path.join(out_dir, f"{split}.parquet")))
        return paths[0], paths[1]

    # -- answers
    def split_answers(self, text: str, m: int) -> list[str]:
        """The distinct routes of the m slots, in order, as space-joined moves (at most m); with
        m = 1 the single-answer rule (no route tags are read), as the reward scores it."""
        if m == 1:
            moves = parse_moves(str(text))
            return [" ".join(moves)] if moves else []
        return [" ".join(moves) for moves in distinct_routes(str(text), m)]

    def parses(self, text: str) -> bool:
        return bool(parse_moves(str(text)))

    def candidate_answer(self, candidate: str, m: int) -> str:
        """The moves a candidate holds, space-joined ("" for none): a slot parses as a route of
        `split_answers(response, m)` does, a whole response as the single-answer rule."""
        return " ".join(parse_moves(str(candidate)))

    def strategy_key(self, text: str, ground_truth: dict[str, Any], matrix: list[list[float]]) -> str:
        """The route walked: the cells each answer enters, in order, up to the exit or the step limit (moves
        into walls enter nothing, so two answers that bump differently but walk alike are one strategy)."""
        grid, limit = parse_grid(ground_truth["grid_text"]), int(ground_truth["max_steps"])
        start, end = (tuple(int(x) for x in ground_truth[key]) for key in ("start", "end"))
        walks = {
            " ".join(f"{r},{c}" for r, c in simulate(grid, start, end, limit, parse_moves(answer))["path"])
            for answer in self.split_answers(str(text), len(matrix))
        }
        return "\n".join(sorted(walks)) if walks else DEGENERATE_STRATEGY

    def answer_slots(self, text: str, m: int) -> list[str]:
        return route_slots(str(text), m)

    def score_answer(self, answer: str, ground_truth: dict[str, Any]) -> list[float]:
        return score_moves(parse_moves(str(answer)), ground_truth)

    def multi_format(self, m: int) -> str:
        shapes = ["RIGHT DOWN DOWN", "DOWN RIGHT RIGHT", "DOWN DOWN RIGHT", "RIGHT RIGHT DOWN", "DOWN RIGHT DOWN"]
        example = _route_tags([shapes[i % len(shapes)] for i in range(m)])
        return (
            f"Think briefly, then give {m} genuinely different routes, each inside its own numbered tags "
            f"<route_1></route_1> to <route_{m}></route_{m}>. Put only moves inside the tags. "
            "Each route must reach E on its own within the step budget.\n"
            f"Format example:\n{example}"
        )

    def multi_rewrites(self, m: int) -> list[tuple[str, str]]:
        return super().multi_rewrites(m) + [(r"You have (\d+) steps\.", r"You have \1 steps per route.")]

    # -- warm-start demonstrations
    def demonstration(self, row: dict[str, Any], rng: Any, n_answers: int) -> str:
        """Well-formed answers of mixed quality: shortest, corner, centre and lava-free routes,
        truncated ones and random walks. Quality is drawn, never chosen from the reward."""
        rng = as_random(rng)
        gt = row["reward_model"]["ground_truth"]
        grid = parse_grid(gt["grid_text"])
        start = tuple(int(x) for x in gt["start"])
        end = tuple(int(x) for x in gt["end"])
        routes = [" ".join(_demo_route(grid, start, end, int(gt["max_steps"]), rng)) for _ in range(max(1, n_answers))]
        if n_answers <= 1:
            return f"<answer>{routes[0]}</answer>"
        return _route_tags(routes)


def _path(grid: list[list[str]], a: Cell, b: Cell, rng: random.Random, blocked: str = "#") -> list[str]:
    """One shortest move list from a to b (ties broken at random); [] if b is unreachable."""
    size = len(grid)
    parent: dict[Cell, tuple[Cell, str] | None] = {a: None}
    queue = deque([a])
    names = list(_MOVES)
    while queue and b not in parent:
        cell = queue.popleft()
        rng.shuffle(names)
        for name in names:
            nxt = (cell[0] + _MOVES[name][0], cell[1] + _MOVES[name][1])
            if 0 <= nxt[0] < size and 0 <= nxt[1] < size and nxt not in parent and grid[nxt[0]][nxt[1]] not in blocked:
                parent[nxt] = (cell, name)
                queue.append(nxt)
    if b not in parent:
        return []
    moves: list[str] = []
    cell = b
    while parent[cell] is not None:
        cell, name = parent[cell]
        moves.append(name)
    return moves[::-1]


def _demo_route(grid: list[list[str]], start: Cell, end: Cell, budget: int, rng: random.Random) -> list[str]:
    size = len(grid)
    side_corners = [c for c in corners(size) if c not in (start, end)]
    kind = rng.choice(["shortest", "corner", "corner", "centre", "safe", "detour", "truncated", "random"])
    if kind == "shortest":
        route = _path(grid, start, end, rng)
    elif kind in ("corner", "centre", "detour"):
        if kind == "corner":
            via = rng.choice(side_corners)
        elif kind == "centre":
            via = center(size)
        else:
            via = rng.choice([(r, c) for r in range(size) for c in range(size) if grid[r][c] != "#"])
        route = _path(grid, start, via, rng) + _path(grid, via, end, rng)
    elif kind == "safe":
        route = _path(grid, start, end, rng, blocked="#L") or _path(grid, start, end, rng)
    elif kind == "truncated":
        full = _path(grid, start, rng.choice(side_corners + [end]), rng)
        route = full[: rng.randint(1, max(1, len(full)))]
    else:
        route = [rng.choice(list(_MOVES)) for _ in range(rng.randint(3, budget + 4))]
    return route or [rng.choice(list(_MOVES))]


MAZE = MazeTask()  # found through the vpo.tasks entry point `maze` (pyproject.toml)

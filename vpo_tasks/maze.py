"""maze: the designed-conflict 9x9 grid (synthetic, k = 4: completion, gold, diamond, avoid_lava).

A route that reaches the exit E within the step budget can collect the gold corner or the diamond
corner, never both (the generator rejects mazes where both fit), pass through lava or around it,
and visit the bonus tile B at the centre. The reward is gated on reaching E.
"""

from __future__ import annotations

import dataclasses
import os
import random
import re
from collections import deque
from dataclasses import dataclass
from typing import Any, Sequence

import numpy as np

from vpo.task import Task, register, write_parquet_atomic

SIZE = 9
MOVES: dict[str, tuple[int, int]] = {"UP": (-1, 0), "DOWN": (1, 0), "LEFT": (0, -1), "RIGHT": (0, 1)}
CORNERS = ((0, 0), (0, SIZE - 1), (SIZE - 1, 0), (SIZE - 1, SIZE - 1))
CENTER = (SIZE // 2, SIZE // 2)
UNREACHABLE = 10**6
MAX_VIA = 90  # a corner detour longer than this counts as unreachable (generator rejects the maze)
SLACK = 7  # budget = max(via gold, via diamond) + SLACK
SCORE_MODES = ("convex_bonus", "linear")
BONUS_MULT = 1.5  # convex_bonus: squared fractions times this once a B tile was visited

MOVE_RE = re.compile(r"\b(UP|DOWN|LEFT|RIGHT)\b")
# A block's body may not contain another opening tag of its kind; besides reading an unclosed tag
# as text, this keeps matching linear on text with many unclosed tags.
ANSWER_RE = re.compile(r"<answer>((?:(?!<answer>).)*?)</answer>", re.IGNORECASE | re.DOTALL)
ROUTE_RE = re.compile(r"<route_\d+>((?:(?!<route_\d).)*?)</route_\d+>", re.IGNORECASE | re.DOTALL)

Cell = tuple[int, int]


@dataclass
class MazeSettings:
    train_size: int = 1000  # mazes in train.parquet
    test_size: int = 100  # mazes in test.parquet
    train_seed: int = 42  # base seed of the train split; seeds base, base+1, ... until enough are accepted
    test_seed: int = 4242  # base seed of the test split
    score_mode: str = "convex_bonus"  # "convex_bonus" (released generator) or "linear" (PAPER_REPRO)
    attempts_per_maze: int = 300  # give up after n * this many seeds

    @classmethod
    def from_dict(cls, values: dict[str, Any] | None) -> "MazeSettings":
        values = dict(values or {})
        known = {f.name for f in dataclasses.fields(cls)}
        unknown = sorted(set(values) - known)
        if unknown:
            raise ValueError(f"maze: unknown setting(s) {unknown}; known: {sorted(known)}")
        settings = cls(**values)
        if settings.score_mode not in SCORE_MODES:
            raise ValueError(f"maze: score_mode {settings.score_mode!r} is not one of {SCORE_MODES}")
        if settings.train_size < 1 or settings.test_size < 1:
            raise ValueError("maze: train_size and test_size must be at least 1")
        return settings


# ---- generator ------------------------------------------------------------------------------
def _neighbours(cell: Cell) -> list[Cell]:
    r, c = cell
    return [(r + dr, c + dc) for dr, dc in MOVES.values() if 0 <= r + dr < SIZE and 0 <= c + dc < SIZE]


def bfs_distances(grid: list[list[str]], source: Cell, blocked: str = "#") -> dict[Cell, int]:
    """Shortest step counts from source to every cell reachable without entering `blocked` tiles."""
    dist = {source: 0}
    queue = deque([source])
    while queue:
        cell = queue.popleft()
        for nxt in _neighbours(cell):
            if nxt not in dist and grid[nxt[0]][nxt[1]] not in blocked:
                dist[nxt] = dist[cell] + 1
                queue.append(nxt)
    return dist


def _prim_maze(rng: random.Random) -> list[list[str]]:
    """Randomised Prim's maze: rooms on even coordinates, walls between them opened on a spanning tree."""
    grid = [["#"] * SIZE for _ in range(SIZE)]
    rooms = [(r, c) for r in range(0, SIZE, 2) for c in range(0, SIZE, 2)]
    first = rng.choice(rooms)
    grid[first[0]][first[1]] = "."
    frontier: list[tuple[Cell, Cell]] = []

    def add_walls(cell: Cell) -> None:
        for dr, dc in MOVES.values():
            nr, nc = cell[0] + 2 * dr, cell[1] + 2 * dc
            if 0 <= nr < SIZE and 0 <= nc < SIZE and grid[nr][nc] == "#":
                frontier.append(((cell[0] + dr, cell[1] + dc), (nr, nc)))

    add_walls(first)
    while frontier:
        i = rng.randrange(len(frontier))
        frontier[i], frontier[-1] = frontier[-1], frontier[i]
        wall, room = frontier.pop()
        if grid[room[0]][room[1]] == "#":
            grid[wall[0]][wall[1]] = grid[room[0]][room[1]] = "."
            add_walls(room)
    return grid


def _zone(grid: list[list[str]], corner: Cell) -> list[Cell]:
    """Empty cells within Manhattan radius 2 of a corner."""
    return [(r, c) for r in range(SIZE) for c in range(SIZE)
            if abs(r - corner[0]) + abs(c - corner[1]) <= 2 and grid[r][c] == "."]


def generate_maze(seed: int) -> dict[str, Any] | None:
    """One maze from one seed (tasks.md 1.2), or None when this seed is rejected."""
    rng = random.Random(seed)
    grid = _prim_maze(rng)
    walls = [(r, c) for r in range(SIZE) for c in range(SIZE)
             if grid[r][c] == "#" and sum(grid[a][b] != "#" for a, b in _neighbours((r, c))) >= 2]
    rng.shuffle(walls)
    for r, c in walls[: rng.randint(18, 28)]:
        grid[r][c] = "."

    diagonal = rng.choice([((0, 0), (SIZE - 1, SIZE - 1)), ((0, SIZE - 1), (SIZE - 1, 0))])
    start, end = diagonal if rng.random() < 0.5 else diagonal[::-1]
    others = [c for c in CORNERS if c not in (start, end)]
    rng.shuffle(others)
    gold_corner, diam_corner = others
    for r, c in (start, end, gold_corner, diam_corner, CENTER):
        grid[r][c] = "."

    from_start = bfs_distances(grid, start)
    if end not in from_start:
        return None
    dist = {p: bfs_distances(grid, p) for p in (gold_corner, diam_corner, CENTER)}

    def d(a: Cell, b: Cell) -> int:
        table = from_start if a == start else dist[a]
        return table.get(b, UNREACHABLE)

    via_gold = d(start, gold_corner) + d(gold_corner, end)
    via_diam = d(start, diam_corner) + d(diam_corner, end)
    via_center = d(start, CENTER) + d(CENTER, end)
    if max(via_gold, via_diam, via_center) > MAX_VIA:
        return None
    max_steps = max(via_gold, via_diam) + SLACK
    both_corners_detour = d(start, gold_corner) + d(gold_corner, diam_corner) + d(diam_corner, end)
    if both_corners_detour <= max_steps:
        return None

    grid[start[0]][start[1]], grid[end[0]][end[1]], grid[CENTER[0]][CENTER[1]] = "S", "E", "B"
    counts = {}
    for tile, corner in (("G", gold_corner), ("D", diam_corner)):
        zone = _zone(grid, corner)
        if len(zone) < 3:
            return None
        chosen = rng.sample(zone, rng.randint(3, min(5, len(zone))))
        for r, c in chosen:
            grid[r][c] = tile
        counts[tile] = len(chosen)
    interior = [(r, c) for r in range(2, SIZE - 2) for c in range(2, SIZE - 2) if grid[r][c] == "."]
    lava = rng.sample(interior, min(rng.randint(3, 5), len(interior)))
    for r, c in lava:
        grid[r][c] = "L"

    d_safe = bfs_distances(grid, start, blocked="#L").get(end, UNREACHABLE)
    if d_safe > max_steps:
        return None
    return {
        "grid_text": "\n".join(" ".join(row) for row in grid),
        "start": list(start), "end": list(end), "max_steps": int(max_steps),
        "num_gold": counts["G"], "num_diamond": counts["D"], "num_lava": len(lava),
        "seed": int(seed), "d_safe": int(d_safe),
        "gold_corner": list(gold_corner), "diam_corner": list(diam_corner), "bonus_cell": list(CENTER),
        "via_gold": int(via_gold), "via_diam": int(via_diam), "via_center": int(via_center),
        "both_corners_detour": int(both_corners_detour),
    }


def generate_mazes(n: int, base_seed: int, attempts_per_maze: int = 300) -> list[dict[str, Any]]:
    """n accepted mazes from seeds base_seed, base_seed + 1, ... (deterministic)."""
    mazes: list[dict[str, Any]] = []
    for offset in range(n * attempts_per_maze):
        maze = generate_maze(base_seed + offset)
        if maze is not None:
            mazes.append(maze)
            if len(mazes) == n:
                return mazes
    raise RuntimeError(f"maze: only {len(mazes)} of {n} mazes accepted in {n * attempts_per_maze} seeds from {base_seed}")


# ---- simulator and scoring ------------------------------------------------------------------
def parse_grid(grid_text: str) -> list[list[str]]:
    return [line.split() for line in str(grid_text).strip().split("\n")]


def simulate(grid: list[list[str]], start: Cell, end: Cell, max_steps: int, moves: Sequence[str]) -> dict[str, Any]:
    """Walk the first max_steps moves. Blocked moves (walls, border) stay put but still count.

    Returns reached (entered E), and the distinct G, D, L tiles and whether B was visited before E.
    """
    pos = start
    seen: dict[str, set[Cell]] = {"G": set(), "D": set(), "L": set(), "B": set()}
    for move in list(moves)[: max(0, max_steps)]:
        dr, dc = MOVES[move]
        r, c = pos[0] + dr, pos[1] + dc
        if 0 <= r < len(grid) and 0 <= c < len(grid[r]) and grid[r][c] != "#":
            pos = (r, c)
        if pos == end:
            return {"reached": True, **{t: len(cells) for t, cells in seen.items()}}
        tile = grid[pos[0]][pos[1]]
        if tile in seen:
            seen[tile].add(pos)
    return {"reached": False, **{t: len(cells) for t, cells in seen.items()}}


def score_moves(moves: Sequence[str], ground_truth: dict[str, Any]) -> list[float]:
    """[completion, gold, diamond, avoid_lava] of one move sequence under the row's score_mode."""
    if not moves:
        return [0.0] * 4
    mode = str(ground_truth.get("score_mode") or "convex_bonus")
    if mode not in SCORE_MODES:
        raise ValueError(f"maze: ground_truth score_mode {mode!r} is not one of {SCORE_MODES}")
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
    mult = BONUS_MULT if walk["B"] else 1.0
    return [1.0] + [min(1.0, mult * x * x) for x in (gold, diam, safe)]


def parse_moves(text: str) -> list[str]:
    """Moves of one answer: the first <answer> block, else the whole text; any case, whole words."""
    found = ANSWER_RE.search(text)
    return MOVE_RE.findall((found.group(1) if found else text).upper())


def split_routes(text: str) -> list[str]:
    """Candidate route texts: <route_i> tags, else a `---` split, else several <answer> tags, else all."""
    routes = ROUTE_RE.findall(text)
    if routes:
        return routes
    parts = text.split("---")
    if len(parts) >= 2:
        return parts
    answers = ANSWER_RE.findall(text)
    if len(answers) >= 2:
        return answers
    return [text]


# ---- prompts and rows -----------------------------------------------------------------------
FORMAT_LINE = "Write your moves inside <answer></answer> tags, for example <answer>UP UP RIGHT</answer>."


def build_prompt(maze: dict[str, Any]) -> str:
    return (
        "Navigate a 9x9 maze from S to E.\n\n"
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
    data_source = "maze"
    objectives = (
        ("completion", "Reaching the exit (E)"),
        ("gold", "Collecting Gold (G) tiles"),
        ("diamond", "Collecting Diamond (D) tiles"),
        ("avoid_lava", "Avoiding Lava (L) tiles"),
    )
    scalar_weights = (0.25, 0.25, 0.25, 0.25)
    default_m = 3
    eval_defaults = {"n_chains": 10, "budget": 30, "temperature": 0.7, "top_p": 1.0, "max_tokens": 1024}
    single_format_line = FORMAT_LINE

    def is_correct(self, vector: Sequence[float]) -> bool:
        """Solved = the exit was reached in budget (gold and diamond cannot both be full by design)."""
        return bool(len(vector) and vector[0] >= 1.0)

    # -- data
    def rows(self, split: str, mazes: list[dict[str, Any]], score_mode: str) -> list[dict[str, Any]]:
        gt_keys = ("grid_text", "start", "end", "max_steps", "num_gold", "num_diamond", "num_lava")
        extra_keys = ("seed", "d_safe", "gold_corner", "diam_corner", "bonus_cell", "via_gold",
                      "via_diam", "via_center", "both_corners_detour")
        return [{
            "data_source": self.data_source,
            "prompt": [{"role": "user", "content": build_prompt(maze)}],
            "ability": "spatial",
            "reward_model": {"style": "rule",
                             "ground_truth": {**{k: maze[k] for k in gt_keys}, "score_mode": score_mode}},
            "extra_info": {"split": split, "index": i, "task_id": f"maze-{maze['seed']}",
                           **{k: maze[k] for k in extra_keys}},
        } for i, maze in enumerate(mazes)]

    def preprocess(self, out_dir: str, settings: dict[str, Any] | None = None) -> tuple[str, str]:
        s = MazeSettings.from_dict(settings)
        paths = []
        for split, n, seed in (("train", s.train_size, s.train_seed), ("test", s.test_size, s.test_seed)):
            rows = self.rows(split, generate_mazes(n, seed, s.attempts_per_maze), s.score_mode)
            paths.append(write_parquet_atomic(rows, os.path.join(out_dir, f"{split}.parquet")))
        return paths[0], paths[1]

    # -- answers
    def split_answers(self, text: str, m: int) -> list[str]:
        """Distinct non-empty routes in order (as space-joined moves), at most m."""
        routes: list[str] = []
        for candidate in split_routes(str(text)):
            route = " ".join(parse_moves(candidate))
            if route and route not in routes:
                routes.append(route)
        return routes[:m]

    def parses(self, text: str) -> bool:
        return bool(parse_moves(str(text)))

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
        rng = _as_random(rng)
        gt = row["reward_model"]["ground_truth"]
        grid = parse_grid(gt["grid_text"])
        start = tuple(int(x) for x in gt["start"])
        end = tuple(int(x) for x in gt["end"])
        routes = [" ".join(_demo_route(grid, start, end, int(gt["max_steps"]), rng)) for _ in range(max(1, n_answers))]
        if n_answers <= 1:
            return f"<answer>{routes[0]}</answer>"
        return _route_tags(routes)


def _as_random(rng: Any) -> random.Random:
    if isinstance(rng, random.Random):
        return rng
    if isinstance(rng, np.random.Generator):
        return random.Random(int(rng.integers(2**62)))
    return random.Random(rng)


def _path(grid: list[list[str]], a: Cell, b: Cell, rng: random.Random, blocked: str = "#") -> list[str]:
    """One shortest move list from a to b (ties broken at random); [] if b is unreachable."""
    parent: dict[Cell, tuple[Cell, str] | None] = {a: None}
    queue = deque([a])
    names = list(MOVES)
    while queue and b not in parent:
        cell = queue.popleft()
        rng.shuffle(names)
        for name in names:
            nxt = (cell[0] + MOVES[name][0], cell[1] + MOVES[name][1])
            if 0 <= nxt[0] < SIZE and 0 <= nxt[1] < SIZE and nxt not in parent and grid[nxt[0]][nxt[1]] not in blocked:
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
    corners = [c for c in CORNERS if c not in (start, end)]
    kind = rng.choice(["shortest", "corner", "corner", "centre", "safe", "detour", "truncated", "random"])
    if kind == "shortest":
        route = _path(grid, start, end, rng)
    elif kind in ("corner", "centre", "detour"):
        if kind == "corner":
            via = rng.choice(corners)
        elif kind == "centre":
            via = CENTER
        else:
            via = rng.choice([(r, c) for r in range(SIZE) for c in range(SIZE) if grid[r][c] != "#"])
        route = _path(grid, start, via, rng) + _path(grid, via, end, rng)
    elif kind == "safe":
        route = _path(grid, start, end, rng, blocked="#L") or _path(grid, start, end, rng)
    elif kind == "truncated":
        full = _path(grid, start, rng.choice(corners + [end]), rng)
        route = full[: rng.randint(1, max(1, len(full)))]
    else:
        route = [rng.choice(list(MOVES)) for _ in range(rng.randint(3, budget + 4))]
    return route or [rng.choice(list(MOVES))]


MAZE = register(MazeTask())

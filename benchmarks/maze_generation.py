"""Time the maze generator on one core: the default splits (1000 train + 100 test mazes).

    python benchmarks/maze_generation.py                      # default sizes, goal: under 30 s
    python benchmarks/maze_generation.py --train 256 --test 24 --repeats 3

Prints the wall time per split, mazes per second, the rejection rate (seeds tried per accepted
maze), and the scoring throughput of compute_score on demonstration responses.
"""

from __future__ import annotations

import argparse
import os
import random
import time

os.environ.setdefault("OMP_NUM_THREADS", "1")

GOAL_S = 30.0  # the default 1000 + 100 mazes must take less than this on one core


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--train", type=int, default=1000, help="train mazes (default 1000)")
    parser.add_argument("--test", type=int, default=100, help="test mazes (default 100)")
    parser.add_argument("--repeats", type=int, default=1, help="repeat and report the fastest run")
    args = parser.parse_args()

    if hasattr(os, "sched_setaffinity"):
        os.sched_setaffinity(0, {sorted(os.sched_getaffinity(0))[0]})  # one core

    from vpo.reward import compute_score
    from vpo_tasks.maze import MAZE
    from vpo_tasks.maze_generator import generate_mazes

    best = None
    for _ in range(args.repeats):
        start = time.perf_counter()
        train = generate_mazes(args.train, 42)
        mid = time.perf_counter()
        test = generate_mazes(args.test, 4242)
        end = time.perf_counter()
        run = (end - start, mid - start, end - mid)
        best = run if best is None or run[0] < best[0] else best
    total, t_train, t_test = best
    tried = (train[-1]["seed"] - 42 + 1) + (test[-1]["seed"] - 4242 + 1)
    n = args.train + args.test
    print(
        f"maze generation, one core: {n} mazes ({args.train} train + {args.test} test) in {total:.2f} s "
        f"(train {t_train:.2f} s, test {t_test:.2f} s; {n / total:.0f} mazes/s)"
    )
    print(f"seeds tried: {tried} for {n} accepted ({tried / n:.3f} per maze)")

    rows = MAZE.rows("test", test, "convex_bonus")
    rng = random.Random(0)
    texts = [(row, MAZE.demonstration(row, rng, 3)) for row in rows for _ in range(20)]
    start = time.perf_counter()
    for row, text in texts:
        compute_score("maze", text, row["reward_model"]["ground_truth"], {"num_solutions": 3})
    per_call = (time.perf_counter() - start) / len(texts)
    print(f"compute_score (m = 3, demonstration text): {per_call * 1e6:.0f} us per response")
    verdict = "ok" if total < GOAL_S else "TOO SLOW"
    print(f"goal: default splits under {GOAL_S:.0f} s on one core -> {verdict}")
    return 0 if total < GOAL_S else 1


if __name__ == "__main__":
    raise SystemExit(main())

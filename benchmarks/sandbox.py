"""Cost of the code sandbox (goal: at most 50 ms overhead per test). Prints the median wall time of
an empty program (the per-test overhead: process start, namespaces, limits, clean-up), the same
for a functional-harness run, and the throughput of a batch with 1 and 2 workers.

    python benchmarks/sandbox.py [--runs 40]
"""

from __future__ import annotations

import argparse
import statistics
import time

from vpo.sandbox import Program, run_program, run_programs
from vpo_tasks.lcb_grading import functional_program


def median_wall(code: str, runs: int) -> tuple[float, str]:
    walls, isolation = [], ""
    for _ in range(runs):
        result = run_program(code, timeout_s=6.0)
        assert result.status == "ok", (result.status, result.stderr[-500:])
        walls.append(result.wall_s)
        isolation = f"{result.isolation}, memory capped by {result.memory_cap}"
    return statistics.median(walls), isolation


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=40, help="programs per measurement")
    runs = parser.parse_args().runs

    empty, isolation = median_wall("", runs)
    print(f"isolation on this machine: {isolation}")
    print(f"empty program, median of {runs}: {empty * 1000:.1f} ms per test (goal <= 50 ms)")
    harness = functional_program("def f(x):\n    return x + 1", "f", "41", "@@mark@@")
    wall, _ = median_wall(harness, runs)
    print(f"functional harness (import block + one call), median of {runs}: {wall * 1000:.1f} ms per test")
    for workers in (1, 2):
        programs = [Program("print(sum(range(1000)))", timeout_s=6.0) for _ in range(runs * 2)]
        start = time.perf_counter()
        results = run_programs(programs, workers=workers)
        elapsed = time.perf_counter() - start
        assert all(r.status == "ok" for r in results)
        print(f"{len(programs)} small programs with {workers} worker(s): {len(programs) / elapsed:.1f} tests/s")


if __name__ == "__main__":
    main()

"""Wall time of the CPU default from a fresh clone: `figures/pass_at_k.pdf`, then every other default target.

    python benchmarks/default_run.py                  # this checkout's HEAD
    python benchmarks/default_run.py --commit 101701e # any commit, to compare two on one machine
    python benchmarks/default_run.py --seeds 0 1 2    # other training seeds than the preset's

Clones the commit into a temporary directory and runs Snakemake there with this checkout's environment
(the clone's own code runs: the clone comes first on PYTHONPATH, for the Snakefile's imports and the
jobs'). Prints Snakemake's wall seconds for each of the two targets, the seconds every rule's jobs took
together (from the job logs' start and finish lines), the fixed cost of a train job (its seconds outside
the RL loop), and the RL step times the training cells logged (docs/performance.md has its figures).
Run it on a quiet machine: it measures time, and another process on the same cores changes it.
"""

from __future__ import annotations

import argparse
import collections
import json
import os
import re
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from datetime import datetime
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
STAMP = re.compile(r"^\[(\w{3} \w{3} +\d+ \d\d:\d\d:\d\d \d{4})\]$")


def job_seconds(log: str) -> list[tuple[str, str, float]]:
    """(rule, wildcards, seconds) of every job of a Snakemake log: a job runs from the stamp above its
    `rule` line to the stamp above its `Finished jobid` line."""
    started: dict[str, list] = {}
    jobs = []
    stamp, rule, last = None, None, None
    for line in log.splitlines():
        line = line.strip()
        if match := STAMP.match(line):
            stamp = datetime.strptime(match.group(1), "%a %b %d %H:%M:%S %Y")
        elif match := re.match(r"^(?:local)?rule (\w+):$", line):
            rule = match.group(1)
        elif (match := re.match(r"^jobid: (\d+)$", line)) and rule and stamp:
            last = started[match.group(1)] = [rule, "", stamp]
        elif (match := re.match(r"^wildcards: (.*)$", line)) and last:
            last[1] = match.group(1)  # listed under the job's id
        elif (match := re.match(r"^Finished jobid: (\d+)", line)) and match.group(1) in started and stamp:
            name, cell, begun = started.pop(match.group(1))
            jobs.append((name, cell, (stamp - begun).total_seconds()))
    return jobs


def train_fixed_seconds(jobs, runs: Path) -> list[float]:
    """Seconds of each train job outside its RL loop: the job's seconds less train.json's train_loop_s
    (process start, imports, loading the data and models, the last checkpoint and the final model)."""
    fixed = []
    for rule, wildcards, seconds in jobs:
        if rule != "train":
            continue
        cell = dict(part.split("=") for part in wildcards.split(", "))
        info = runs / cell["task"] / cell["method"] / f"seed{cell['seed']}" / "train.json"
        if info.is_file():
            fixed.append(seconds - json.loads(info.read_text())["train_loop_s"])
    return fixed


def run_target(clone: Path, target: str | None, cores: int, config: list[str]) -> tuple[float, str]:
    command = [str(Path(sys.executable).parent / "snakemake"), "--cores", str(cores)] + ([target] if target else [])
    command += ["--config", *config] if config else []
    # the clone's code first on the path: the Snakefile imports vpo too, and an editable install of this
    # checkout would otherwise give it this checkout's code
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(filter(None, [str(clone), os.environ.get("PYTHONPATH")]))}
    start = time.perf_counter()
    done = subprocess.run(command, cwd=clone, capture_output=True, text=True, env=env)
    seconds = time.perf_counter() - start
    if done.returncode != 0:
        sys.exit(f"snakemake {target or '(all)'} failed in {clone}:\n{done.stderr[-3000:]}")
    return seconds, done.stderr + done.stdout


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--commit", default="HEAD", help="the commit to clone (default: HEAD)")
    parser.add_argument("--cores", type=int, default=2)
    parser.add_argument("--keep", action="store_true", help="keep the clone (its path is printed)")
    parser.add_argument(
        "--seeds",
        type=int,
        nargs="+",
        default=None,
        help="train these seeds instead of the preset's (e.g. --seeds 0 1 2)",
    )
    args = parser.parse_args()

    work = Path(tempfile.mkdtemp(prefix="vpo_default_run_"))
    clone = work / "repo"
    subprocess.run(["git", "clone", "-q", str(REPO), str(clone)], check=True)
    subprocess.run(["git", "checkout", "-q", args.commit], cwd=clone, check=True)
    commit = subprocess.run(["git", "rev-parse", "--short", "HEAD"], cwd=clone, capture_output=True, text=True).stdout
    config = [f"seeds=[{','.join(map(str, args.seeds))}]"] if args.seeds else []
    print(f"commit {commit.strip()}, {args.cores} cores, clone {clone}" + (f", {config[0]}" if config else ""))
    logs = []
    for label, target in (("figures/pass_at_k.pdf", "figures/pass_at_k.pdf"), ("every other default target", None)):
        seconds, log = run_target(clone, target, args.cores, config)
        logs.append(log)
        print(f"{label:28s} {seconds:7.1f} s")
    jobs = job_seconds("\n".join(logs))
    per_rule = collections.defaultdict(list)
    for rule, _, seconds in jobs:
        per_rule[rule].append(seconds)
    print(f"\n{'rule':28s} {'jobs':>5s} {'seconds':>8s} {'median':>7s}")
    for rule, times in sorted(per_rule.items(), key=lambda item: -sum(item[1])):
        print(f"{rule:28s} {len(times):5d} {sum(times):8.0f} {statistics.median(times):7.1f}")
    fixed = train_fixed_seconds(jobs, clone / "results" / "cpu" / "runs")
    if fixed:
        print(
            f"\nfixed cost per train job (job seconds less its RL loop): median {statistics.median(fixed):.1f} s, "
            f"{sum(fixed):.0f} s over {len(fixed)} jobs"
        )
    sys.path.insert(0, str(REPO))
    from benchmarks.rl_step import logged_step_times

    cells = logged_step_times(clone / "results" / "cpu" / "runs")
    print(f"\n{'cell':28s} {'step s':>7s} {'gen s':>6s}")
    for cell, step, generation, _ in cells:
        print(f"{cell:28s} {step:7.3f} {generation:6.3f}")
    if not args.keep:
        shutil.rmtree(work)


if __name__ == "__main__":
    main()

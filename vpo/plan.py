"""Checks on the Snakemake plan, run by the Snakefile before any job starts: where the rules write,
and which finished tables and figures were made from a file that is gone."""

from __future__ import annotations

import os
from typing import Callable, Iterable, Sequence


def paths_outside(paths, preset: str) -> list[str]:
    """The paths (a rule's outputs and logs, wildcards unfilled) that leave results/<preset>/,
    figures/ and logs/<preset>/ once normalised: a rule writing there could overwrite the project."""
    roots = (f"results/{preset}/", "figures/", f"logs/{preset}/")
    return [str(p) for p in paths if not (os.path.normpath(str(p)) + "/").startswith(roots) or os.path.isabs(str(p))]


def stale_outputs(rules_io: Iterable[tuple[Sequence[str], Sequence[str]]]) -> list[tuple[str, list[str]]]:
    """(output, its missing inputs) for every output on disk one of whose inputs is not.

    rules_io: (outputs, inputs) of each rule whose paths hold no wildcards (aggregates, tables,
    figures). Snakemake keeps such an output: it remakes a missing intermediate file only for a job
    that runs anyway, so a table would go on showing numbers whose source is gone (an evaluation whose
    forced rerun failed, a file deleted by hand) or that leave out a cell new to the grid.
    """
    stale = []
    for outputs, inputs in rules_io:
        missing = [str(f) for f in inputs if not os.path.exists(str(f))]
        if missing:
            stale += [(str(out), missing) for out in outputs if os.path.exists(str(out))]
    return stale


def stale_note(output: str, missing: Sequence[str]) -> str:
    """The plan's line for one stale output."""
    more = f" and {len(missing) - 1} more" if len(missing) > 1 else ""
    return (
        f"stale: {output} lacks its input {missing[0]}{more} (gone, or new to the grid); the default "
        "target (snakemake --cores all) makes them and remakes it"
    )


def aggregated_cells(per_seed_csv: str) -> set[tuple[str, str, int]]:
    """(task, method, training seed) of every cell an aggregate's per_seed.csv holds (none if it is absent)."""
    import csv

    if not os.path.exists(per_seed_csv):
        return set()
    with open(per_seed_csv, newline="") as handle:
        return {(row["task"], row["method"], int(row["train_seed"])) for row in csv.DictReader(handle)}


def replaced_note(preset: str, aggregated: set, planned: set) -> str | None:
    """The plan's line when this run's grid leaves out cells the preset's aggregate holds: the aggregates,
    tables and figures of results/<preset>/ and figures/<preset>/ will be remade without them."""
    dropped = sorted(aggregated - set(planned))
    if not dropped:
        return None
    shown = ", ".join(f"{t}/{m}/seed{s}" for t, m, s in dropped[:4]) + (
        f" and {len(dropped) - 4} more" if len(dropped) > 4 else ""
    )
    return (
        f"replaces: results/{preset}/aggregate/ holds {len(dropped)} cell{'s' * (len(dropped) > 1)} this run's grid "
        f"leaves out ({shown}); "
        f"its aggregates, tables and figures (results/{preset}/, figures/{preset}/, figures/*) will be remade "
        "without them. To keep them, copy those folders first or run this grid as a preset of its own name "
        "(config.yaml `presets:`)"
    )


def figure_source_note(target: str, source: str, preset: str, grid: dict) -> str:
    """The sidecar of a top-level figure copy (figures/<name>.source): which run's figure it is (the rule
    adds the time it was copied)."""
    lines = [f"{target} is a copy of {source}, made by the run below; another run's copy replaces both files.",
             f"preset: {preset}"]  # fmt: skip
    lines += [f"{key}: {', '.join(str(v) for v in values)}" for key, values in grid.items()]
    return "\n".join(lines) + "\n"


# Snakemake's planning cost, measured on 2 cores: 10,000 seeds of the cpu grid planned 170,059 jobs in
# 10 min 03 s and 3.46 GB before the first job started
_PLAN_SECONDS_PER_JOB = 603 / 170_059
_PLAN_BYTES_PER_JOB = 3.46e9 / 170_059
LARGE_PLAN_JOBS = 20_000


def cell_jobs(cells: Iterable[tuple[str, str]], seeds: int, eval_seeds: Callable[[str], int]) -> int:
    """About how many jobs the grid's cells make: per cell and training seed, train, merge, each
    evaluation seed and the search (aggregates, tables and figures add a few dozen)."""
    return sum(seeds * (3 + eval_seeds(task)) for task, _ in cells)


def large_plan_note(jobs: int) -> str | None:
    """One line for a plan of more than LARGE_PLAN_JOBS jobs: their number and what planning will cost."""
    if jobs <= LARGE_PLAN_JOBS:
        return None
    minutes, gigabytes = jobs * _PLAN_SECONDS_PER_JOB / 60, jobs * _PLAN_BYTES_PER_JOB / 1e9
    return (
        f"plan: about {jobs:,} jobs; Snakemake takes about {max(1, round(minutes))} min and {gigabytes:.1f} GB "
        "of memory to plan them before the first one starts (fewer seeds, or a target such as one cell, plan faster)"
    )


# What each training backend imports beyond the CPU install (`make install`), and where it comes from
_BACKEND_PACKAGES = {
    "trl": ("trl", "pip install -e '.[trl]' (or make install-test)"),
    "verl": ("verl", "make install-test on CPU, or envs/gpu.yaml's environment on GPU nodes"),
}


def backend_missing(backend: str) -> str | None:
    """One line naming the package `backend` needs and how to install it, when this Python cannot import it;
    None otherwise. Checked before any cell is touched: a training job that found TRL missing once had
    already truncated a finished cell's metrics and removed its marker."""
    from importlib.util import find_spec

    if backend not in _BACKEND_PACKAGES:
        return None
    package, install = _BACKEND_PACKAGES[backend]
    try:
        found = find_spec(package) is not None
    except (ImportError, ValueError):
        found = False
    return None if found else f"backend {backend} needs the package {package}, which this Python lacks: {install}"

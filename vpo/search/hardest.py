"""`vpo evolve select`'s choice: the hardest N test problems of a task, from the standard evaluation's
candidate pools of the methods in `evolve.select_methods` (every training and evaluation seed pooled):
those whose best@`report.best_at` is 0 for all of them; when fewer exist, the N with the lowest best
such score, and the choice says so (vpo/search/evolve.py runs the search on them)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from vpo.metrics import best_at_k


def hardness(pools, best_at: int):
    """Per problem: the highest best@`best_at` over every (method, train seed, eval seed) pool.

    pools: DataFrame with columns method, train_seed, eval_seed, problem, scalar (one row per candidate).
    Returns a Series indexed by problem.
    """

    keys = ["method", "train_seed", "eval_seed", "problem"]
    per_pool = pools.groupby(keys, sort=True)["scalar"].apply(lambda s: best_at_k(s.to_numpy(float), best_at))
    return per_pool.groupby(level="problem").max()


def select_hardest(pools, n: int, best_at: int, methods: list[str] | None = None) -> dict[str, Any]:
    """The N hardest problems for `methods` (None: every method of `pools`): all with hardness 0 (lowest
    index first), else the N lowest."""
    methods = sorted(pools["method"].unique().tolist()) if methods is None else sorted(methods)
    missing = sorted(set(methods) - set(pools["method"]))
    if missing:
        raise ValueError(
            f"evolve.select_methods names {missing}, which have no evaluation pools here "
            f"(evaluated: {sorted(pools['method'].unique())}); add them to `methods` or change "
            "evolve.select_methods"
        )
    scores = hardness(pools[pools["method"].isin(methods)], best_at)
    ranked = sorted(scores.items(), key=lambda item: (item[1], item[0]))
    unsolved = sum(1 for _, v in ranked if v == 0)
    chosen = ranked[:n]
    who = f"{', '.join(methods)} (every seed)"
    note = (
        f"{len(chosen)} of {unsolved} problems that score 0 at best@{best_at} for {who}"
        if unsolved >= n
        else f"only {unsolved} problems score 0 at best@{best_at} for {who}; the other "
        f"{len(chosen) - unsolved} are the lowest-scoring"
    )
    return {
        "best_at": best_at,
        "n_requested": n,
        "n_unsolved": unsolved,
        "note": note,
        "methods": methods,
        "problems": [{"problem": int(p), "best_at": float(v)} for p, v in chosen],
    }


def read_pools(paths: list[str]):
    """Candidate frames of `vpo eval` (parquet, with their JSON beside) as one DataFrame."""
    import pandas as pd

    frames = []
    for path in paths:
        meta = json.loads(Path(path).with_suffix(".json").read_text())
        frame = pd.read_parquet(path, columns=["problem", "scalar"])
        frames.append(frame.assign(method=meta["method"], train_seed=meta["train_seed"], eval_seed=meta["eval_seed"]))
    return pd.concat(frames, ignore_index=True)

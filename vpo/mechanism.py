"""The mechanism on a toy problem: a vector-reward bandit trained with the project's own estimators.

A softmax policy over a few arms with known 2-d reward vectors. Two arms lie at the ends of the
Pareto front, one arm is the best under the fixed mean scalar, the rest are dominated. Each step
draws prompt groups of rollouts from the policy; a rollout is one arm (GRPO, scored by the mean
scalar) or m arms drawn independently (Multi-RLVR: the sum of their scalars; VPO: the (m, 2)
matrix). `vpo.method_advantage.advantage_for_method` turns the batch into advantages, and the logits take
one exact policy-gradient step, A_j * sum over the rollout's arms of (onehot(arm) - p).

    vpo mechanism bandit --out results/mechanism/bandit.csv
    vpo mechanism advantage --out results/mechanism/advantage.csv

The CSV holds, per method and step: the policy's mass on every arm, E_w[best of m] of the policy
(m arms drawn from it, w ~ Dir(1), estimated with fixed draws), and its reward-space diversity (the
exact expected L1 distance between two independent draws). `vpo plot mechanism_bandit` draws it.

`advantage` sweeps one rollout's VPO advantage in a group of eight whose other rollouts each reach
one objective: against how many objectives it reaches (for k = 2..5), against alpha, and, over
repeated weight draws, its spread for the naive and Sobol samplers against the number of weights.
"""

from __future__ import annotations

import argparse
from dataclasses import dataclass
from typing import TYPE_CHECKING

import numpy as np

from vpo.advantage import vpo_advantage
from vpo.data import write_csv
from vpo.method_advantage import advantage_for_method
from vpo.vpo_scores import vpo_raw_scores

if TYPE_CHECKING:  # pandas is imported where a table is made (a job that plots nothing never loads it)
    import pandas as pd

# Arm reward vectors (objective 1, objective 2). Pareto front: arms 0, 1 and 2; arm 2 is the
# unique best under the mean scalar (0.6 against 0.5), so scalar RL has one target.
ARMS = np.array([[1.0, 0.0], [0.0, 1.0], [0.6, 0.6], [0.3, 0.2], [0.1, 0.45], [0.45, 0.1]])
PARETO = (0, 1, 2)
METHODS = ("grpo", "multi_rlvr", "vpo")


@dataclass(frozen=True)
class BanditSettings:
    steps: int = 300  # policy-gradient steps
    groups: int = 8  # prompt groups per step (the advantage normalises within a group)
    group_size: int = 16  # rollouts per group
    m: int = 3  # arms per rollout for the multi-answer methods
    lr: float = 0.5  # step size on the logits
    eval_draws: int = 2000  # sets of m arms for E_w[best of m] of the policy
    eval_weights: int = 100  # Dirichlet(1) weights for it


def expected_best_of_m(p: np.ndarray, m: int, sets: np.ndarray, weights: np.ndarray) -> float:
    """E over m arms drawn from p and over w of max_arm w . r, with fixed uniform draws `sets`
    (eval_draws, m) in [0, 1) turned into arms by inverse CDF, and fixed weights (W, 2)."""
    arms = np.minimum(np.searchsorted(np.cumsum(p), sets, side="right"), len(p) - 1)
    scored = ARMS[arms] @ weights.T  # (draws, m, W)
    return float(scored.max(axis=1).mean())


def diversity(p: np.ndarray) -> float:
    """Expected L1 distance between the reward vectors of two independent draws from p."""
    distance = np.abs(ARMS[:, None, :] - ARMS[None, :, :]).sum(-1)
    return float(p @ distance @ p)


def train(method: str, settings: BanditSettings, seed: int) -> dict[str, np.ndarray]:
    """Train one method from uniform logits; returns mass (steps + 1, arms), best_of_m and diversity (steps + 1,)."""
    rng = np.random.default_rng([seed, METHODS.index(method)])
    m = 1 if method == "grpo" else settings.m
    eval_rng = np.random.default_rng(seed)  # the same evaluation draws for every method
    sets = eval_rng.random((settings.eval_draws, settings.m))
    weights = eval_rng.dirichlet(np.ones(2), size=settings.eval_weights)
    logits = np.zeros(len(ARMS))
    batch = settings.groups * settings.group_size
    group_ids = np.repeat(np.arange(settings.groups), settings.group_size)
    mass, best, spread = [], [], []
    for step in range(settings.steps + 1):
        p = np.exp(logits - logits.max())
        p /= p.sum()
        mass.append(p)
        best.append(expected_best_of_m(p, settings.m, sets, weights))
        spread.append(diversity(p))
        if step == settings.steps:
            break
        arms = rng.choice(len(ARMS), size=(batch, m), p=p)
        scalars = ARMS[arms].mean(-1)  # (B, m) the task scalar of every arm drawn
        advantages, _ = advantage_for_method(
            method,
            scores=scalars.sum(1),
            sub_scores=list(ARMS[arms]),
            group_ids=group_ids,
            settings={"n_weights": 100},
            rng=rng,
        )
        counts = np.stack([np.bincount(row, minlength=len(ARMS)) for row in arms])  # (B, arms)
        gradient = (advantages[:, None] * (counts - m * p[None, :])).mean(0)
        logits = logits + settings.lr * gradient
    return {"mass": np.array(mass), "best_of_m": np.array(best), "diversity": np.array(spread)}


def run_all(settings: BanditSettings, seeds: list[int]):
    """Long table: method, seed, step, arm_<i> masses, best_of_m, diversity."""
    import pandas as pd

    frames = []
    for method in METHODS:
        for seed in seeds:
            out = train(method, settings, seed)
            frame = pd.DataFrame(out["mass"], columns=[f"arm_{i}" for i in range(len(ARMS))])
            frame.insert(0, "step", np.arange(len(frame)))
            frame.insert(0, "seed", seed)
            frame.insert(0, "method", method)
            frame["best_of_m"], frame["diversity"] = out["best_of_m"], out["diversity"]
            frames.append(frame)
    return pd.concat(frames, ignore_index=True)


# ---- how a rollout's VPO advantage responds to coverage, alpha, the sampler and k --------------
def _corner_group(k: int, covered: int, group: int = 8) -> list[np.ndarray]:
    """A prompt group of `group` rollouts with k objectives: rollout 0 reaches `covered` different
    objectives (one-hot answers), every other rollout reaches one (objective j mod k)."""
    eye = np.eye(k)
    return [eye[:covered]] + [eye[[j % k]] for j in range(1, group)]


def advantage_sweeps(seed: int = 0, repeats: int = 200) -> pd.DataFrame:
    """Long table sweep, k, covered, alpha, sampler, n_weights, raw_mean (rollout 0's E_w[best of its
    answers]), advantage_mean, advantage_std: over `repeats` independent weight draws."""
    import pandas as pd

    def measure(sweep, k, covered, alpha=1.0, sampler="naive", n_weights=100):
        group, ids = _corner_group(k, covered), ["g"] * 8
        settings = {"n_weights": n_weights, "alpha": alpha, "sampler": sampler}
        rngs = [np.random.default_rng([seed, r]) for r in range(repeats)]
        draws = [vpo_advantage(group, ids, rng=rng, **settings)[0][0] for rng in rngs]
        raw = [vpo_raw_scores(group, ids, rng=np.random.default_rng([seed, r]), **settings)[0] for r in range(repeats)]
        return {
            "sweep": sweep,
            "k": k,
            "covered": covered,
            "alpha": alpha,
            "sampler": sampler,
            "n_weights": n_weights,
            "raw_mean": float(np.mean(raw)),
            "advantage_mean": float(np.mean(draws)),
            "advantage_std": float(np.std(draws)),
        }

    rows = [measure("coverage", k, c) for k in (2, 3, 4, 5) for c in range(1, k + 1)]
    rows += [measure("alpha", 4, 2, alpha=a) for a in (0.1, 0.3, 1.0, 3.0, 10.0)]
    rows += [measure("sampler", 4, 2, sampler=s, n_weights=w) for s in ("naive", "sobol") for w in (8, 16, 32, 64, 128)]
    return pd.DataFrame(rows)


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("what", choices=["bandit", "advantage"], help="which experiment")
    parser.add_argument("--out", required=True, help="CSV to write")
    parser.add_argument("--seeds", default="0,1,2", help="comma-separated seeds")
    parser.add_argument("--steps", type=int, default=BanditSettings.steps, help="policy-gradient steps")


def run(args: argparse.Namespace) -> int:
    if args.what == "advantage":
        table = advantage_sweeps(seed=int(args.seeds.split(",")[0]))
        write_csv(table, args.out)
        print(table.round(3).to_string())
        return 0
    settings = BanditSettings(steps=args.steps)
    table = run_all(settings, [int(s) for s in args.seeds.split(",")])
    write_csv(table, args.out)
    last = table[table["step"] == settings.steps].groupby("method")[[f"arm_{i}" for i in range(len(ARMS))]].mean()
    print(last.round(3).to_string())
    return 0

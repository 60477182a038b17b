"""Time and variance of the advantage estimators on one training-sized batch.

    python benchmarks/advantage.py [--groups 128] [--group-size 8] [--m 3] [--repeats 30] [--draws 200]

Prints, for k = 4 and k = 16 on B = groups x group-size rollouts of m answers each:
- wall time per call of vpo_advantage (naive and Sobol weights, W = 100), of grpo_advantage, and of
  veRL's own compute_grpo_outcome_advantage when veRL is installed (median over repeats);
- the variance of VPO's raw score (a rollout's E_w[best answer]) over repeated weight draws,
  naive vs Sobol, averaged over rollouts, and their ratio.
Targets: Sobol/naive variance ratio >= 2 at k = 4 (goal 10); VPO <= 1.0x veRL GRPO time (goal 0.25x).
"""

from __future__ import annotations

import argparse
import statistics
import time

import numpy as np

from vpo.advantage import grpo_advantage, vpo_advantage
from vpo.vpo_scores import vpo_raw_scores


def interleaved_ms(fns: dict, repeats: int) -> dict:
    """(median, min) ms per call of each function, timed in alternation so that load changes on a shared
    machine hit every estimator alike."""
    for fn in fns.values():
        fn()  # warm caches and lazy imports
    times = {name: [] for name in fns}
    for _ in range(repeats):
        for name, fn in fns.items():
            start = time.perf_counter()
            fn()
            times[name].append(time.perf_counter() - start)
    return {name: (1e3 * statistics.median(t), 1e3 * min(t)) for name, t in times.items()}


def make_batch(rng: np.random.Generator, groups: int, group_size: int, m: int, k: int):
    """Reward matrices shaped like a maze batch: per-answer channels in [0, 1], some exact 0/1."""
    sub_scores = [np.clip(rng.random((m, k)) * 1.4 - 0.2, 0.0, 1.0) for _ in range(groups * group_size)]
    group_ids = np.repeat(np.array([f"uid-{g}" for g in range(groups)], dtype=object), group_size)
    scores = np.array([s.mean(axis=1).sum() for s in sub_scores])
    return sub_scores, group_ids, scores


def load_verl_grpo():
    """veRL's own GRPO estimator, or None (with the reason printed) when veRL is not installed."""
    try:
        import logging
        import warnings

        logging.disable(logging.WARNING)  # veRL logs accelerator probing on import
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            from verl.trainer.ppo.core_algos import compute_grpo_outcome_advantage
        logging.disable(logging.NOTSET)
        return compute_grpo_outcome_advantage
    except ImportError as err:
        print(f"veRL GRPO estimator: skipped ({err}); install the 'verl' extra to compare")
        return None


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--groups", type=int, default=128, help="prompt groups per batch")
    parser.add_argument("--group-size", type=int, default=8, help="rollouts per prompt")
    parser.add_argument("--m", type=int, default=3, help="answers per rollout")
    parser.add_argument("--n-weights", type=int, default=100, help="weights per group (W)")
    parser.add_argument("--repeats", type=int, default=30, help="timed calls per estimator")
    parser.add_argument("--draws", type=int, default=200, help="weight draws for the variance estimate")
    parser.add_argument("--response-length", type=int, default=512, help="tokens per response for veRL's tensor input")
    args = parser.parse_args()

    verl_grpo = load_verl_grpo()
    rng = np.random.default_rng(0)
    batch = args.groups * args.group_size
    print(f"batch: B = {batch} ({args.groups} groups x {args.group_size}), m = {args.m}, W = {args.n_weights}")
    for k in (4, 16):
        sub_scores, group_ids, scores = make_batch(rng, args.groups, args.group_size, args.m, k)
        print(f"\nk = {k}")
        gens = {sampler: np.random.default_rng(1) for sampler in ("naive", "sobol")}
        fns = {
            f"vpo_advantage ({sampler})": (
                lambda sampler=sampler: vpo_advantage(
                    sub_scores, group_ids, n_weights=args.n_weights, sampler=sampler, rng=gens[sampler]
                )
            )
            for sampler in ("naive", "sobol")
        }
        fns["grpo_advantage (numpy)"] = lambda: grpo_advantage(scores, group_ids)
        if verl_grpo is not None:
            import torch

            rewards = torch.zeros(len(scores), args.response_length)
            rewards[:, -1] = torch.from_numpy(scores).float()  # outcome reward on the last token
            mask = torch.ones(len(scores), args.response_length)
            fns["veRL compute_grpo_outcome_advantage"] = lambda: verl_grpo(rewards, mask, group_ids)
        times = interleaved_ms(fns, args.repeats)
        print(f"  {'time per call':38s} {'median':>8s} {'min':>8s}")
        for name, (median, fastest) in times.items():
            print(f"  {name:38s} {median:8.2f} {fastest:8.2f} ms")
        if verl_grpo is not None:
            verl = times["veRL compute_grpo_outcome_advantage"]
            for sampler in ("naive", "sobol"):
                mine = times[f"vpo_advantage ({sampler})"]
                print(
                    f"  vpo ({sampler}) / veRL GRPO time: {mine[0] / verl[0]:.3f}x median, {mine[1] / verl[1]:.3f}x min"
                    "  (target <= 1.0x, goal 0.25x)"
                )

        variances = {}
        for sampler in ("naive", "sobol"):
            gen = np.random.default_rng(2)
            draws = np.stack(
                [
                    vpo_raw_scores(sub_scores, group_ids, n_weights=args.n_weights, sampler=sampler, rng=gen)
                    for _ in range(args.draws)
                ]
            )
            variances[sampler] = float(draws.var(axis=0, ddof=1).mean())
            print(
                f"  raw-score variance ({sampler:5s}) {variances[sampler]:.3e}"
                f"  (mean over rollouts, {args.draws} draws)"
            )
        ratio = variances["naive"] / variances["sobol"]
        print(f"  Sobol/naive variance reduction: {ratio:.1f}x  (target >= 2 at k = 4, goal 10)")


if __name__ == "__main__":
    main()

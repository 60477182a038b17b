"""The CPU trainer's RL step: generation of one step's rollouts with transformers' `generate` and with
vpo/llama_sampler.py, and (given a finished run) the step times its cells logged.

    python benchmarks/rl_step.py                          # generation of 8 prompts x 8 rollouts, both ways
    python benchmarks/rl_step.py --runs results/cpu/runs  # and the median step and generation seconds per cell

Prints seconds per step's generation and generated tokens per second for each way (a random-init
model at the cpu preset's size writes until the token limit, so every row generates all its tokens),
their ratio, and with --runs the median `step_s` and `generation_s` of every cell's metrics.jsonl.
Goal (README): an RL step of 64 rollouts in at most 0.5 s on one thread.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from benchmarks.generate import build_fixture  # noqa: E402


def time_generation(model, tokenizer, prompt_ids, n: int, max_new_tokens: int, repeats: int, fast: bool):
    """(seconds per call, tokens per second) of sample_responses over `repeats` calls."""
    from vpo.generate import SamplingSettings, sample_responses
    from vpo import llama_sampler as sampler

    original = sampler.supports
    sampler.supports = original if fast else (lambda model: False)
    try:
        sampling = SamplingSettings(temperature=1.0, max_new_tokens=max_new_tokens, seed=0)
        sample_responses(model, tokenizer, prompt_ids, n, sampling)  # warm-up
        start, tokens = time.perf_counter(), 0
        for _ in range(repeats):
            tokens += sum(len(r) for r in sample_responses(model, tokenizer, prompt_ids, n, sampling))
        seconds = (time.perf_counter() - start) / repeats
    finally:
        sampler.supports = original
    return seconds, tokens / repeats / seconds


def logged_step_times(runs: Path) -> list[tuple[str, float, float, int]]:
    """(cell, median step_s, median generation_s, steps) of every metrics.jsonl under `runs`."""
    rows = []
    for path in sorted(runs.rglob("metrics.jsonl")):
        records = [json.loads(line) for line in path.read_text().splitlines() if line.strip()]
        steps = [r["step_s"] for r in records if "step_s" in r]
        if steps:
            rows.append((str(path.parent.relative_to(runs)), statistics.median(steps),
                         statistics.median(r["generation_s"] for r in records), len(steps)))
    return rows


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--prompts", type=int, default=8, help="prompts per step (cpu preset: 8)")
    parser.add_argument("--samples", type=int, default=8, help="rollouts per prompt (cpu preset: 8)")
    parser.add_argument("--max-new-tokens", type=int, default=120, help="token limit (cpu preset, multi: 120)")
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--threads", type=int, default=1, help="torch threads (the workflow's jobs: 1)")
    parser.add_argument("--runs", type=Path, default=None, help="a finished run's runs/ folder: its logged step times")
    args = parser.parse_args()

    import torch

    torch.set_num_threads(args.threads)
    model, tokenizer, prompts = build_fixture(args.prompts)
    model.eval()
    from vpo.generate import render_prompts

    prompt_ids = [tokenizer(t, add_special_tokens=False)["input_ids"] for t in render_prompts(tokenizer, prompts)]
    rollouts = args.prompts * args.samples
    print(f"one RL step's generation: {rollouts} rollouts of up to {args.max_new_tokens} tokens, "
          f"{args.threads} thread(s)")
    results = {}
    for name, fast in (("transformers generate", False), ("vpo/llama_sampler.py", True)):
        seconds, rate = time_generation(model, tokenizer, prompt_ids, args.samples, args.max_new_tokens,
                                        args.repeats, fast)
        results[name] = seconds
        print(f"  {name:22s} {seconds:7.3f} s per step   {rate:9.0f} tokens/s")
    print(f"  speed-up: {results['transformers generate'] / results['vpo/llama_sampler.py']:.1f}x")
    if args.runs:
        rows = logged_step_times(args.runs)
        print(f"logged by the cells under {args.runs} (median over steps):")
        for cell, step_s, gen_s, steps in rows:
            print(f"  {cell:40s} step {step_s:6.3f} s   generation {gen_s:6.3f} s   ({steps} steps)")
        if rows:
            print(f"  all cells: median step {statistics.median(r[1] for r in rows):.3f} s, "
                  f"median generation {statistics.median(r[2] for r in rows):.3f} s")


if __name__ == "__main__":
    main()

"""The CPU trainer's RL step: its generation with transformers' `generate` and with vpo/llama_sampler.py,
the torch operations a decoding step dispatches, whole steps of the local trainer, and (given a
finished run) the step times its cells logged.

    python benchmarks/rl_step.py                          # one step's generation both ways, ops, 5 whole steps
    python benchmarks/rl_step.py --runs results/cpu/runs  # and the median step and generation seconds per cell
    python benchmarks/rl_step.py --commit 14e2a29         # and the same measurements of another commit's code

A random-init model at the cpu preset's size writes until the token limit, so every rollout generates
all its tokens (a trained model stops earlier: its cells' logged steps are shorter); the scoring line cuts
those responses to a trained policy's spread of lengths, where the length buckets pay. The whole steps
are `vpo.local.trainer.Learner.step` for VPO with m = 3 (sample, score, estimate, two updates), the
cpu preset's settings. Operations are counted with a torch dispatch mode over a whole sampling call
(prefill and sampling included) and divided by its decoding steps; "compute" leaves out the view
operations (view, slice, select, transpose, expand...), which move no data.

The distance to the arithmetic limit: one whole step's floating-point operations are counted with
`torch.utils.flop_counter.FlopCounterMode` (matrix products and attention: the arithmetic; elementwise
operations are memory-bound and not counted), the generation's apart from the rest of the step (scoring
the responses, the reference forward, the two updates). The machine's matmul rate is measured on one
thread with `torch.mm` over the model's own weight shapes (fused attention projections, fused MLP
input, MLP output, the tied head) at the row counts the step uses: the rollouts of one decoding step for
generation, a padded update batch for the rest. Each part's ratio is its seconds / (its FLOPs / that
rate): 1 would be a step that does nothing but its matrix products at the machine's rate.

With --commit, the same measurements run on another commit's code (cloned to a temporary folder; this
file measures, the clone's `vpo` is measured) right after this checkout's, so two commits compare on
one machine. docs/performance.md has its figures and what stands between the step and its bound.
"""

from __future__ import annotations

import argparse
import collections
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

HERE = Path(__file__).resolve().parents[1]
CODE = Path(os.environ.get("VPO_BENCH_CODE", HERE))  # whose vpo is measured (--commit: a clone's)
sys.path.insert(0, str(CODE))
from benchmarks.generate import build_fixture  # noqa: E402

VIEWS = {
    "view",
    "_unsafe_view",
    "slice",
    "select",
    "transpose",
    "t",
    "expand",
    "as_strided",
    "unsqueeze",
    "squeeze",
    "split",
    "permute",
    "alias",
    "detach",
    "lift_fresh",
    "chunk",
    "unbind",
}


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


def operations_per_step(model, tokenizer, prompt_ids, n: int, max_new_tokens: int) -> tuple[float, float]:
    """(all, compute) torch operations dispatched per decoding step by one vpo/llama_sampler.py call."""
    import torch
    from torch.utils._python_dispatch import TorchDispatchMode

    from vpo.generate import left_pad
    from vpo.llama_sampler import sample_groups

    class Count(TorchDispatchMode):
        def __init__(self):
            super().__init__()
            self.names = collections.Counter()

        def __torch_dispatch__(self, func, types, args=(), kwargs=None):
            self.names[func.__name__.split(".")[0]] += 1
            return func(*args, **(kwargs or {}))

    input_ids, attention = left_pad(prompt_ids, tokenizer.pad_token_id)
    torch.manual_seed(0)
    with Count() as count:
        out = sample_groups(
            model,
            input_ids,
            attention,
            n,
            max_new_tokens=max_new_tokens,
            eos=tokenizer.eos_token_id,
            pad=tokenizer.pad_token_id,
            temperature=1.0,
            top_k=0,
            top_p=1.0,
        )
    steps = out.shape[1]
    total = sum(count.names.values())
    compute = sum(v for k, v in count.names.items() if k not in VIEWS)
    return total / steps, compute / steps


def weight_shapes(config) -> list[tuple[int, int]]:
    """(in, out) of the model's matrix products per layer and head: q, k and v fused, the attention
    output, gate and up fused, down, the tied head."""
    h, i = config.hidden_size, config.intermediate_size
    return [(h, 3 * h), (h, h), (h, 2 * i), (i, h), (h, config.vocab_size)]


def matmul_rate(shapes: list[tuple[int, int]], rows: int, seconds: float = 0.2) -> float:
    """FLOP/s of torch.mm on this thread over `shapes` with `rows` input rows: every shape timed for about
    `seconds` (after a warm-up), total FLOPs over total time."""
    import torch

    flops = elapsed = 0.0
    for k, n in shapes:
        a, b, out = torch.randn(rows, k), torch.randn(k, n), torch.empty(rows, n)
        torch.mm(a, b, out=out)
        reps, start = 0, time.perf_counter()
        while time.perf_counter() - start < seconds:
            torch.mm(a, b, out=out)
            reps += 1
        elapsed += time.perf_counter() - start
        flops += 2.0 * rows * k * n * reps
    return flops / elapsed


def cpu_attention_flops() -> dict:
    """FlopCounterMode's custom mapping for torch's CPU flash attention, which its registry leaves out
    (it counts the GPU kernels only): forward and backward by torch's own formulas for attention
    (`sdpa_flop_count`, `sdpa_backward_flop_count`: the products, masked entries included, as the kernel
    computes them)."""
    import torch
    from torch.utils.flop_counter import sdpa_backward_flop_count, sdpa_flop_count

    ops = torch.ops.aten

    def forward(query, key, value, *args, out_shape=None, **kwargs):
        return sdpa_flop_count(query, key, value)

    def backward(grad_out, query, key, value, *args, out_shape=None, **kwargs):
        return sdpa_backward_flop_count(grad_out, query, key, value)

    return {
        ops._scaled_dot_product_flash_attention_for_cpu: forward,
        ops._scaled_dot_product_flash_attention_for_cpu_backward: backward,
    }


def count_step_flops(learner, step: int) -> tuple[float, float]:
    """(generation, whole step) floating-point operations of one `Learner.step`, counted by
    FlopCounterMode (the generation's by a second counter around its `sample_responses` call), torch's
    CPU attention included (`cpu_attention_flops`)."""
    from torch.utils.flop_counter import FlopCounterMode

    import vpo.generate as generate
    import vpo.local.trainer as trainer

    original, counted = generate.sample_responses, {}

    def sample_counted(*args, **kwargs):
        with FlopCounterMode(display=False, custom_mapping=cpu_attention_flops()) as inner:
            out = original(*args, **kwargs)
        counted["generation"] = inner.get_total_flops()
        return out

    # Learner.step calls the trainer module's name (older commits: vpo.generate's, imported when it runs)
    patched = [module for module in (generate, trainer) if hasattr(module, "sample_responses")]
    for module in patched:
        module.sample_responses = sample_counted
    try:
        with FlopCounterMode(display=False, custom_mapping=cpu_attention_flops()) as whole:
            learner.step(step, 0)
    finally:
        for module in patched:
            module.sample_responses = original
    return float(counted["generation"]), float(whole.get_total_flops())


def time_steps(model, tokenizer, rows, steps: int) -> tuple[list[tuple[float, float]], tuple[float, float]]:
    """(step seconds, generation seconds) of `steps` whole VPO steps (m = 3) of the local trainer, and the
    (generation, whole step) FLOPs of one more."""
    import copy

    import numpy as np
    import torch

    from vpo.config import load_config, method_settings
    from vpo.generate import SamplingSettings, render_prompts
    from vpo.local.rl import optimizer_for
    from vpo.local.trainer import Learner
    from vpo.methods import get_method
    from vpo.prompts import prepare_row
    from vpo.settings import LocalTrainerSettings
    from vpo.task import resolve

    config = load_config(preset="cpu")
    cfg = LocalTrainerSettings.from_dict(config["local_trainer"])
    settings = dict(method_settings(config, "vpo"))
    method = get_method("vpo")
    rows = [prepare_row(row, "vpo", 3, 0, alpha=settings.get("alpha")) for row in rows]
    prompt_ids = [
        tokenizer(t, add_special_tokens=False)["input_ids"]
        for t in render_prompts(tokenizer, [r["prompt"] for r in rows])
    ]
    policy = model.train()
    reference = copy.deepcopy(model).eval().requires_grad_(False)
    sampling = SamplingSettings(
        temperature=cfg.temperature, top_p=cfg.top_p, max_new_tokens=cfg.max_new_tokens_for(method.prompt), seed=None
    )
    torch.manual_seed(0)
    learner = Learner(
        policy,
        reference,
        optimizer_for(policy, cfg),
        tokenizer,
        rows,
        prompt_ids,
        method,
        resolve("maze"),
        cfg,
        settings,
        sampling,
        np.random.default_rng(0),
    )
    learner.step(1, 0)  # warm-up
    records = [learner.step(step, 0) for step in range(2, steps + 2)]
    return [(r["step_s"], r["generation_s"]) for r in records], count_step_flops(learner, steps + 2)


def time_scoring(model, tokenizer, prompt_ids, n: int, max_new_tokens: int, repeats: int) -> dict[int, float]:
    """Seconds of one forward and backward of the grouped log-probabilities (vpo/local/group_forward.py)
    over n sampled responses per prompt cut to lengths drawn from 5 to 100 tokens, one at the limit (a
    trained multi-answer policy's spread), with the responses in 1 and in 3 length buckets."""
    import torch

    from vpo.generate import SamplingSettings, sample_responses
    from vpo.local.group_forward import StepBatch, group_response_logprobs

    sampling = SamplingSettings(temperature=1.0, max_new_tokens=max_new_tokens, seed=0)
    responses = sample_responses(model, tokenizer, prompt_ids, n, sampling)
    lengths = torch.randint(5, 100, (len(responses),), generator=torch.Generator().manual_seed(0)).tolist()
    lengths[0] = max_new_tokens
    batch = StepBatch(prompt_ids, [r[:k] for r, k in zip(responses, lengths)], n, tokenizer.pad_token_id)
    seconds = {}
    for buckets in (1, 3):
        times = []
        for _ in range(repeats + 1):  # the first is a warm-up
            start = time.perf_counter()
            logp, _ = group_response_logprobs(
                model,
                batch.prompts,
                batch.prompt_attention,
                batch.group_of,
                batch.responses,
                batch.mask,
                buckets=buckets,
            )
            (logp * batch.mask).sum().backward()
            times.append(time.perf_counter() - start)
            model.zero_grad()
        seconds[buckets] = statistics.median(times[1:])
    return seconds


def logged_step_times(runs: Path) -> list[tuple[str, float, float, int]]:
    """(cell, median step_s, median generation_s, steps) of every metrics.jsonl under `runs`."""
    rows = []
    for path in sorted(runs.rglob("metrics.jsonl")):
        records = [json.loads(line) for line in path.read_text().splitlines() if line.strip()]
        steps = [r["step_s"] for r in records if "step_s" in r]
        if steps:
            rows.append(
                (
                    str(path.parent.relative_to(runs)),
                    statistics.median(steps),
                    statistics.median(r["generation_s"] for r in records),
                    len(steps),
                )
            )
    return rows


def measure(args) -> dict[str, float]:
    """Every measurement of one code base (this process's `vpo`), printed as it comes; the figures."""
    import torch

    torch.set_num_threads(args.threads)
    model, tokenizer, rows = build_fixture(args.prompts)
    model.eval()
    from vpo.generate import render_prompts
    from vpo.prompts import prepare_row

    multi = [prepare_row(row, "vpo", 3, 0)["prompt"] for row in rows]  # the prompts of VPO's rollouts (m = 3)
    prompt_ids = [tokenizer(t, add_special_tokens=False)["input_ids"] for t in render_prompts(tokenizer, multi)]
    rollouts = args.prompts * args.samples
    print(
        f"one RL step's generation: {rollouts} rollouts of up to {args.max_new_tokens} tokens, {args.threads} thread(s)"
    )
    results = {}
    for name, fast in (("transformers generate", False), ("vpo/llama_sampler.py", True)):
        seconds, rate = time_generation(
            model, tokenizer, prompt_ids, args.samples, args.max_new_tokens, args.repeats, fast
        )
        results[name] = seconds
        print(f"  {name:22s} {seconds:7.3f} s per step   {rate:9.0f} tokens/s")
    print(f"  speed-up: {results['transformers generate'] / results['vpo/llama_sampler.py']:.1f}x")
    total, compute = operations_per_step(model, tokenizer, prompt_ids, args.samples, args.max_new_tokens)
    print(f"  vpo/llama_sampler.py dispatches {total:.0f} torch operations per decoding step ({compute:.0f} compute)")

    scoring = time_scoring(model.train(), tokenizer, prompt_ids, args.samples, args.max_new_tokens, args.repeats)
    print(
        f"scoring {rollouts} responses of 5 to {args.max_new_tokens} tokens (forward and backward): "
        f"{scoring[1]:.3f} s in one padded batch, {scoring[3]:.3f} s in 3 length buckets"
    )
    model.eval()

    times, (gen_flops, step_flops) = time_steps(model, tokenizer, rows, args.steps)
    step_s, gen_s = statistics.median(t[0] for t in times), statistics.median(t[1] for t in times)
    print(
        f"whole RL steps (vpo, m = 3, {args.steps} after a warm-up): median {step_s:.3f} s, "
        f"of which generation {gen_s:.3f} s"
    )
    shapes = weight_shapes(model.config)
    decode_rate = matmul_rate(shapes, rollouts)  # one decoding step's rows
    update_rate = matmul_rate(shapes, 4096)  # an update batch's rows (padded tokens of a mini-batch)
    rest_flops, rest_s = step_flops - gen_flops, step_s - gen_s
    print(
        f"arithmetic: the step does {step_flops / 1e9:.2f} GFLOP (generation {gen_flops / 1e9:.2f}, the rest "
        f"{rest_flops / 1e9:.2f}); torch.mm on the model's shapes, one thread: {decode_rate / 1e9:.1f} GFLOP/s "
        f"at {rollouts} rows, {update_rate / 1e9:.1f} GFLOP/s at 4096 rows"
    )
    bound_gen, bound_rest = gen_flops / decode_rate, rest_flops / update_rate
    print(
        f"  step / arithmetic bound: generation {gen_s:.3f} s / {bound_gen:.3f} s = {gen_s / bound_gen:.1f}x, "
        f"the rest {rest_s:.3f} s / {bound_rest:.3f} s = {rest_s / bound_rest:.1f}x, "
        f"whole step {step_s / (bound_gen + bound_rest):.1f}x"
    )
    return {
        "generate_s": results["transformers generate"],
        "sampler_s": results["vpo/llama_sampler.py"],
        "ops_per_decoding_step": total,
        "scoring_buckets_s": scoring[3],
        "step_s": step_s,
        "generation_s": gen_s,
        "step_gflop": step_flops / 1e9,
        "generation_gflop": gen_flops / 1e9,
        "step_over_bound": step_s / (bound_gen + bound_rest),
        "generation_over_bound": gen_s / bound_gen,
        "rest_over_bound": rest_s / bound_rest,
    }


def measure_commit(commit: str, argv: list[str]) -> dict[str, float]:
    """measure() of another commit's `vpo`, in a child process on a clone of it."""
    work = Path(tempfile.mkdtemp(prefix="vpo_rl_step_"))
    try:
        subprocess.run(["git", "clone", "-q", str(HERE), str(work)], check=True)
        subprocess.run(["git", "checkout", "-q", commit], cwd=work, check=True)
        out = work / "figures.json"
        env = {**os.environ, "VPO_BENCH_CODE": str(work), "PYTHONPATH": str(work)}
        subprocess.run([sys.executable, __file__, *argv, "--json", str(out)], env=env, cwd=work, check=True)
        return json.loads(out.read_text())
    finally:
        shutil.rmtree(work, ignore_errors=True)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--prompts", type=int, default=8, help="prompts per step (cpu preset: 8)")
    parser.add_argument("--samples", type=int, default=8, help="rollouts per prompt (cpu preset: 8)")
    parser.add_argument("--max-new-tokens", type=int, default=120, help="token limit (cpu preset, multi: 120)")
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--steps", type=int, default=5, help="whole RL steps timed")
    parser.add_argument("--threads", type=int, default=1, help="torch threads (the workflow's jobs: 1)")
    parser.add_argument("--runs", type=Path, default=None, help="a finished run's runs/ folder: its logged step times")
    parser.add_argument("--commit", default=None, help="also measure this commit's code, after this checkout's")
    parser.add_argument("--json", type=Path, default=None, help="write the figures to this file")
    args = parser.parse_args()
    kept = [
        f"--{k.replace('_', '-')}={v}"
        for k, v in vars(args).items()
        if k in ("prompts", "samples", "max_new_tokens", "repeats", "steps", "threads")
    ]

    print(f"code: {CODE}")
    figures = measure(args)
    if args.json:
        args.json.write_text(json.dumps(figures))
    if args.commit:
        print(f"\ncode: commit {args.commit}")
        other = measure_commit(args.commit, kept)
        print(f"\n{'figure':24s} {'this':>9s} {args.commit:>9s} {'ratio':>6s}")
        for key, value in figures.items():
            print(f"{key:24s} {value:9.3f} {other[key]:9.3f} {value / other[key]:6.2f}")
    if args.runs:
        rows = logged_step_times(args.runs)
        print(f"logged by the cells under {args.runs} (median over steps):")
        for cell, step_s, gen_s, steps in rows:
            print(f"  {cell:40s} step {step_s:6.3f} s   generation {gen_s:6.3f} s   ({steps} steps)")
        if rows:
            print(
                f"  all cells: median step {statistics.median(r[1] for r in rows):.3f} s, "
                f"median generation {statistics.median(r[2] for r in rows):.3f} s"
            )


if __name__ == "__main__":
    main()

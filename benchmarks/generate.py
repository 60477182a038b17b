"""Batched vs one-at-a-time generation throughput of the torch backend on CPU.

Samples the rollouts of one RL step (prompts x samples maze prompts) twice: in batches of
`--batch-size` sequences (left-padded, KV cache) and one sequence per `generate` call, and prints
generated tokens per second for both and their ratio (goal: >= 5x).

    python benchmarks/generate.py                       # random-init model at the cpu preset size
    python benchmarks/generate.py --model results/base/maze
"""

from __future__ import annotations

import argparse
import tempfile
import time


def build_fixture(n_prompts: int):
    """A random-init tiny model (cpu preset size), fresh maze rows and a tokenizer for their prompts
    (single-answer and VPO's m = 3); returns (model, tokenizer, rows)."""
    from vpo.local.model import build_model, build_tokenizer, frequent_phrases
    from vpo.config import load_config
    from vpo.settings import LocalTrainerSettings
    from vpo.task import resolve

    task = resolve("maze")
    tmp = tempfile.mkdtemp(prefix="bench_generate_")
    task.preprocess(tmp, {"train_size": n_prompts, "test_size": 1})
    from vpo.data import read_rows

    rows = read_rows(tmp, "train")
    from vpo.prompts import prepare_row

    prompts = [r["prompt"] for r in rows] + [prepare_row(r, "vpo", 3, 0)["prompt"] for r in rows]
    texts = [p[0]["content"] for p in prompts]
    tokenizer = build_tokenizer(
        texts + ["<answer>UP DOWN LEFT RIGHT</answer>"],
        phrases=frequent_phrases(texts, {"UP", "DOWN", "LEFT", "RIGHT"}),
    )
    model = build_model(
        len(tokenizer),
        LocalTrainerSettings.from_dict(load_config(preset="cpu")["local_trainer"]).model_settings(),
        pad_token_id=tokenizer.pad_token_id,
        bos_token_id=tokenizer.bos_token_id,
        eos_token_id=tokenizer.eos_token_id,
    )
    return model, tokenizer, rows


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model", default=None, help="model directory (default: random-init cpu-size model)")
    parser.add_argument("--data", default=None, help="with --model: task data directory for prompts")
    parser.add_argument("--prompts", type=int, default=8, help="distinct prompts")
    parser.add_argument("--samples", type=int, default=8, help="samples per prompt")
    parser.add_argument("--max-new-tokens", type=int, default=40)
    parser.add_argument("--batch-size", type=int, default=64)
    parser.add_argument("--threads", type=int, default=1)
    args = parser.parse_args()

    import torch

    from vpo.generate import SamplingSettings, render_prompts, sample_responses

    torch.set_num_threads(args.threads)
    if args.model:
        from vpo.data import read_rows
        from vpo.generate import load_pretrained

        model, tokenizer = load_pretrained(args.model)
        prompts = [r["prompt"] for r in read_rows(args.data, "test")[: args.prompts]]
    else:
        model, tokenizer, rows = build_fixture(args.prompts)
        prompts = [r["prompt"] for r in rows]
    ids = [tokenizer(t, add_special_tokens=False)["input_ids"] for t in render_prompts(tokenizer, prompts)]
    sampling = SamplingSettings(temperature=1.0, max_new_tokens=args.max_new_tokens, seed=0)
    sample_responses(model, tokenizer, ids[:1], 2, sampling, batch_size=2)  # warm-up

    t0 = time.perf_counter()
    batched = sample_responses(model, tokenizer, ids, args.samples, sampling, batch_size=args.batch_size)
    t_batched = time.perf_counter() - t0
    t0 = time.perf_counter()
    single = []
    for p in ids:
        for _ in range(args.samples):
            single += sample_responses(
                model,
                tokenizer,
                [p],
                1,
                SamplingSettings(temperature=1.0, max_new_tokens=args.max_new_tokens, seed=None),
                batch_size=1,
            )
    t_single = time.perf_counter() - t0

    tok_b, tok_s = sum(map(len, batched)), sum(map(len, single))
    rate_b, rate_s = tok_b / t_batched, tok_s / t_single
    n_params = sum(p.numel() for p in model.parameters())
    print(
        f"model: {n_params} parameters; {len(ids)} prompts x {args.samples} samples, "
        f"max_new_tokens {args.max_new_tokens}, prompt tokens ~{sum(map(len, ids)) // len(ids)}, "
        f"threads {args.threads}"
    )
    print(f"batched (batch {args.batch_size}): {tok_b} tokens in {t_batched:.2f} s = {rate_b:.0f} tokens/s")
    print(f"one at a time:          {tok_s} tokens in {t_single:.2f} s = {rate_s:.0f} tokens/s")
    print(f"speed-up (tokens/s ratio): {rate_b / rate_s:.1f}x  (goal >= 5x)")


if __name__ == "__main__":
    main()

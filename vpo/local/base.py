"""`vpo base-model`: the tiny base model of the CPU backend for one task and prompt form (the warm start).

It stands in for a pretrained model: a word-level tokenizer over the task's text, then a short
supervised run on the task's synthetic demonstrations (`Task.demonstration`: well-formed answers
of mixed quality) in one prompt form (single, multi with m answers, or goal); each method starts
from the base of its own form (`Method.prompt`). One model for all forms was tried first: it wrote
clean multi-answer output for only half its samples, and RL then drifted single-answer policies
into route tags (the single-answer parse reads any text, so nothing stopped it). The tokenizer is
built from every form, so all bases of a task share it. The reward is never seen. The output
directory is a Hugging Face model; `base.json` is written last, with a sampled success rate: RL
needs some rollouts that reach the goal, or every group has zero reward variance.
"""

from __future__ import annotations

import argparse
import json
import logging
import math
import time
from pathlib import Path

import numpy as np

from vpo.atomic import write_json_atomic
from vpo.backend import save_pretrained_atomic
from vpo.config import cell_digest, load_config, task_settings
from vpo.data import read_rows
from vpo.generate import SamplingSettings, render_prompts, sample_responses
from vpo.local.adamw import AdamW
from vpo.local.group_forward import StepBatch
from vpo.progress import Progress
from vpo.prompts import PROMPT_MODES, goal_weights, row_prompt
from vpo.reward import compute_score
from vpo.settings import LocalTrainerSettings
from vpo.task import resolve, task_code

log = logging.getLogger("vpo.local.base")


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--task", required=True, help="task name, e.g. maze")
    parser.add_argument(
        "--mode",
        required=True,
        choices=PROMPT_MODES,
        help="prompt form the base model answers (a method's `prompt`: single, multi or goal)",
    )
    parser.add_argument("--data", required=True, help="directory with the task's train.parquet and test.parquet")
    parser.add_argument("--out", required=True, help="output model directory (Hugging Face format)")
    parser.add_argument("--preset", default=None, help="config preset (default: the config file's `preset`)")
    parser.add_argument("--config", default=None, help="config.yaml path (default: ./config.yaml)")
    parser.add_argument("--seed", type=int, default=0, help="seed of initialisation and demonstrations")
    parser.add_argument(
        "--m",
        type=int,
        default=None,
        help="answers per multi-answer demonstration (default: task_settings.<task>.m; a variant's m)",
    )


def _prompt_variant(task, row: dict, mode: str, m: int, seed: int) -> list[dict]:
    """The row's prompt in one of the three forms (goal weights drawn as goal_cond draws them)."""
    weights = None
    if mode == "goal":
        weights = goal_weights(seed, int(row.get("extra_info", {}).get("index", 0)), task.k)
    return row_prompt(row, mode=mode, m=m, task=task, weights=weights)


def prompt_ids(tokenizer, messages) -> list[int]:
    """The token ids of a prompt's messages, rendered by the tokenizer's chat template."""
    return tokenizer(render_prompts(tokenizer, [messages])[0], add_special_tokens=False)["input_ids"]


def _answer_ids(tokenizer, response: str) -> list[int]:
    """The token ids of a demonstration's response, closed by the end-of-sequence token."""
    return tokenizer(response, add_special_tokens=False)["input_ids"] + [tokenizer.eos_token_id]


def _sampled_success(
    model,
    tokenizer,
    task,
    rows,
    cfg: LocalTrainerSettings,
    mode: str,
    m: int,
    seed: int,
    n_prompts: int = 16,
    n_samples: int = 4,
) -> dict:
    """Mean score, the share of samples with a solved answer (the reward's `acc`) and the share that
    hit the token limit, for prompts of the given form."""
    picked = rows[:n_prompts]
    n_answers = m if mode == "multi" else 1
    ids = [prompt_ids(tokenizer, _prompt_variant(task, r, mode, m, seed)) for r in picked]
    limit = cfg.max_new_tokens_for(mode)
    sampling = SamplingSettings(temperature=1.0, max_new_tokens=limit, seed=seed)
    responses = sample_responses(model, tokenizer, ids, n_samples, sampling, batch_size=cfg.generation_batch)
    scores, solved = [], []
    for i, resp in enumerate(responses):
        row = picked[i // n_samples]
        extra = {**row.get("extra_info", {}), "num_solutions": n_answers}
        result = compute_score(
            row["data_source"],
            tokenizer.decode(resp, skip_special_tokens=True),
            row["reward_model"]["ground_truth"],
            extra,
        )
        scores.append(float(result["score"]))
        solved.append(result["acc"] == 1.0)  # some answer solved (the reward's own verdict)
    return {
        "score_mean": float(np.mean(scores)),
        "success_rate": float(np.mean(solved)),
        "truncated_share": float(np.mean([len(r) >= limit for r in responses])),
    }


def build_base_model(
    task_name: str,
    data_dir: str,
    out_dir: str,
    cfg: LocalTrainerSettings,
    *,
    mode: str,
    m: int = 3,
    seed: int = 0,
    preset: str = "",
    config_hash: str = "",
) -> dict:
    """Build tokenizer + model, warm-start it, save to out_dir; returns the base.json payload."""
    import torch

    from vpo.local.model import count_parameters

    if mode not in PROMPT_MODES:
        raise ValueError(f"base model: prompt form {mode!r} is not one of {PROMPT_MODES}")
    t0 = time.time()
    task = resolve(task_name)
    if cfg.threads:
        torch.set_num_threads(cfg.threads)
    train_rows, test_rows = read_rows(data_dir, "train"), read_rows(data_dir, "test")
    rng = np.random.default_rng([seed, 7])  # the vocabulary's demonstrations draw first, then the warm start's
    tokenizer, model = _untrained_model(task, train_rows + test_rows, train_rows[:200], cfg, m=m, seed=seed, rng=rng)
    losses = _warm_start(model, tokenizer, task, train_rows, cfg, mode=mode, m=m, seed=seed, rng=rng)
    sampled = _sampled_success(model, tokenizer, task, train_rows, cfg, mode, m, seed)
    if sampled["success_rate"] == 0:
        log.warning(
            "the warm-started model never reaches the goal in its samples: RL will see zero reward "
            "variance; raise local_trainer.warm_start_steps or the model size"
        )
    save_pretrained_atomic(model, tokenizer, out_dir)
    payload = {
        "task": task_name,
        "mode": mode,
        "preset": preset,
        "seed": seed,
        "m": m,
        "config_hash": config_hash,
        "parameters": count_parameters(model),
        "vocab_size": len(tokenizer),
        "warm_start_steps": cfg.warm_start_steps,
        "final_loss": float(np.mean(losses[-10:])) if losses else None,
        "sampled": sampled,
        "settings": cfg.to_dict(),
        "wall_time_s": round(time.time() - t0, 2),
    }
    write_json_atomic(Path(out_dir) / "base.json", payload)
    return payload


def _untrained_model(
    task, rows: list[dict], demo_rows: list[dict], cfg: LocalTrainerSettings, *, m: int, seed: int, rng
):
    """(tokenizer, randomly initialised model): the vocabulary covers every prompt form of `rows` and a
    demonstration of one and of m answers for each of `demo_rows` (drawn from rng)."""
    from vpo.local.model import TAG_PATTERN, build_model, build_tokenizer, count_parameters, frequent_phrases

    prompts = [
        msg["content"] for row in rows for mode in PROMPT_MODES for msg in _prompt_variant(task, row, mode, m, seed)
    ]
    with task_code(task, "writing a warm-start demonstration"):
        demos = [task.demonstration(row, rng, n) for row in demo_rows for n in (1, m)]
    response_words = {w for d in demos for w in TAG_PATTERN.sub(" ", d).split()}
    tokenizer = build_tokenizer(prompts + demos, phrases=frequent_phrases(prompts, response_words))
    model = build_model(
        len(tokenizer),
        cfg.model_settings(),
        pad_token_id=tokenizer.pad_token_id,
        bos_token_id=tokenizer.bos_token_id,
        eos_token_id=tokenizer.eos_token_id,
        seed=seed,
    )
    log.info("base model: %d parameters, vocabulary %d", count_parameters(model), len(tokenizer))
    return tokenizer, model


def _warm_start(
    model, tokenizer, task, train_rows: list[dict], cfg: LocalTrainerSettings, *, mode: str, m: int, seed: int, rng
) -> list[float]:
    """Supervised steps on fresh demonstrations in the prompt form `mode` (AdamW, cosine decay to 10%,
    gradients clipped to 1); returns each step's loss and leaves the model in eval mode."""
    import torch

    optimizer = AdamW(model.parameters(), lr=cfg.warm_start_lr, betas=(0.9, 0.999), weight_decay=0.01)
    n_answers = m if mode == "multi" else 1
    # a row's prompt in this form is the same at every step: rendered and tokenized once (8000 renderings
    # took 1.8 s of a base-model job)
    prompts: dict[int, list[int]] = {}
    losses = []
    progress = Progress(cfg.warm_start_steps, "warm start step")
    model.train()
    for step in range(cfg.warm_start_steps):
        lr = cfg.warm_start_lr * (0.1 + 0.9 * 0.5 * (1 + math.cos(math.pi * step / max(1, cfg.warm_start_steps))))
        for group in optimizer.param_groups:
            group["lr"] = lr
        with task_code(task, "writing a warm-start demonstration"):  # once per step, not per example
            picked = [int(i) for i in rng.integers(len(train_rows), size=cfg.warm_start_batch)]
            answers = [_answer_ids(tokenizer, task.demonstration(train_rows[i], rng, n_answers)) for i in picked]
            for i in picked:
                if i not in prompts:
                    prompts[i] = prompt_ids(tokenizer, _prompt_variant(task, train_rows[i], mode, m, seed))
        examples = StepBatch([prompts[i] for i in picked], answers, 1, tokenizer.pad_token_id)
        width = examples.prompts.shape[1] + examples.responses.shape[1]
        if width > cfg.max_positions:
            raise ValueError(
                f"a demonstration needs {width} positions > local_trainer.max_positions "
                f"({cfg.max_positions}); raise max_positions"
            )
        logp, _ = examples.logprobs(model)
        mask = examples.mask[:, : logp.shape[1]]
        loss = -(logp * mask).sum() / mask.sum()
        optimizer.zero_grad()
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        optimizer.step()
        losses.append(float(loss.detach()))
        progress.update(step + 1, f"loss {losses[-1]:.4f}")
    model.eval()
    return losses


def run(args: argparse.Namespace) -> int:
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(name)s %(message)s")
    cfg = load_config(args.config, args.preset)
    settings = LocalTrainerSettings.from_dict(cfg["local_trainer"])
    m = int(args.m or task_settings(cfg, args.task)["m"])
    payload = build_base_model(
        args.task,
        args.data,
        args.out,
        settings,
        mode=args.mode,
        m=m,
        seed=args.seed,
        preset=cfg["preset"],
        config_hash=cell_digest(cfg, args.task),
    )
    print(json.dumps({k: payload[k] for k in ("parameters", "vocab_size", "final_loss", "sampled", "wall_time_s")}))
    return 0

"""`vpo eval`: held-out evaluation of one model, with the same candidate budget for every method.

The pool of a problem holds `budget` candidate answers: `budget / m` chains of m answers for
multi-answer methods (10 x 3 = 30), `budget` single-answer samples otherwise (paper section 4:
k counts candidates, not generations). The candidates are built as the authors' evaluation builds
them (docs/evaluation.md): a chain's m answer slots in order, a repeated answer kept as a copy and a
missing one scored as the empty answer; a single-answer chain's whole response. Goal-conditioned
models see the task's `eval.goal_weights`; token limits differ for single- and multi-answer methods.
Every candidate is scored to its k-vector and the task's fixed scalar (the GRPO training scalar).
Writes

- `<out>.parquet`: one row per candidate (problem, prompt, weights shown, chain, slot, text (the
  candidate as scored), response, answer (its normal form; "" when it holds none), one column per
  objective (padded with zeros past the problem's own k), k, scalar, correct, parsed), and
- `<out>.json`: pool metrics recomputed from that frame alone by `pool_metrics`.
"""

from __future__ import annotations

import argparse
import json
import logging
import re
import sys
import time
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from vpo.atomic import atomic_file, write_json_atomic
from vpo.cell_lock import writing_cell
from vpo.config import answers_per_rollout, load_config, method_settings, task_settings, trains_tiny_base
from vpo.data import read_rows
from vpo.generate import SamplingSettings, make_backend
from vpo.methods import get_method
from vpo.metrics import best_at_k_curve, best_at_k_permutation_curve, diversity, expected_best_of_m, pass_at_k_curve
from vpo.prompts import goal_weights as weights_for_row
from vpo.prompts import row_prompt
from vpo.provenance import collect
from vpo.task import resolve, task_code
from vpo.weights import eval_weights


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--model", required=True, help="Hugging Face model directory (merged model)")
    parser.add_argument("--task", required=True, help="task name, e.g. maze")
    parser.add_argument("--method", required=True, help="method the model was trained with (prompt form, m)")
    parser.add_argument("--data", required=True, help="directory with the task's test.parquet")
    parser.add_argument("--seed", type=int, required=True, help="evaluation seed (sampling, weights)")
    parser.add_argument("--out", required=True, help="output parquet, e.g. <run>/eval/evalseed0.parquet")
    parser.add_argument("--preset", default=None, help="config preset (default: the config file's `preset`)")
    parser.add_argument("--config", default=None, help="config.yaml path (default: ./config.yaml)")
    parser.add_argument("--train-seed", type=int, default=None, help="default: parsed from `seed<N>` in --model")
    parser.add_argument(
        "--backend",
        choices=("torch", "vllm"),
        default=None,
        help="generation backend (default: vllm for veRL on GPUs, else torch)",
    )
    parser.add_argument("--n-problems", type=int, default=None, help="evaluate only the first N test problems")
    parser.add_argument("--batch-size", type=int, default=256, help="torch backend: sequences per batch")


def parse_train_seed(model_path: str) -> int | None:
    for part in reversed(Path(model_path).resolve().parts):
        match = re.fullmatch(r"seed(\d+)", part)
        if match:
            return int(match.group(1))
    return None


_GOAL_WEIGHT_MODES = ("none", "per_chain", "per_problem")  # what a goal-conditioned model is shown at evaluation


@dataclass
class PromptPlan:
    """The prompts of one evaluation: `prompts[i]` belongs to problem `problem[i]`, shows `weights[i]`
    (goal-conditioned prompts; else None) and is sampled `n` times; a problem's chains are the samples
    of its prompts in order."""

    prompts: list  # chat conversations, one per (problem, weight vector)
    problem: list  # problem position (into the test rows) of each prompt
    weights: list  # the objective weights each prompt shows, or None
    n: int  # samples per prompt


def prompt_plan(
    task, rows: list[dict], method, *, m: int, budget: int, eval_seed: int, goal_weights: str, alpha: float
) -> PromptPlan:
    """Which prompts fill each problem's `budget` candidates (docs/evaluation.md).

    Multi-answer methods: the m-answer prompt, budget / m chains. Single-answer methods: the prompt as
    written, budget samples. Goal-conditioned methods by `goal_weights`: "none" the prompt as written;
    "per_problem" one w ~ Dirichlet(alpha) per problem (`vpo.prompts.goal_weights`) shown to all its
    samples; "per_chain" budget / m fresh vectors per problem, drawn in problem-major order from
    default_rng(eval_seed) as the authors' MuSiQue evaluation draws them, each prompt sampled m times.
    """
    if goal_weights not in _GOAL_WEIGHT_MODES:
        raise ValueError(f"eval.goal_weights {goal_weights!r} is not one of {_GOAL_WEIGHT_MODES}")
    if method.multi_answer:
        prompts = [row_prompt(r, mode="multi", m=m, task=task) for r in rows]
        return PromptPlan(prompts, list(range(len(rows))), [None] * len(rows), budget // m)
    if method.prompt != "goal" or goal_weights == "none":
        prompts = [row_prompt(r, mode="single", m=1, task=task) for r in rows]
        return PromptPlan(prompts, list(range(len(rows))), [None] * len(rows), budget)
    if goal_weights == "per_problem":
        shown = [
            weights_for_row(eval_seed, int(r.get("extra_info", {}).get("index", p)), task.k, alpha)
            for p, r in enumerate(rows)
        ]
        problems, n = list(range(len(rows))), budget
    else:
        per_problem = budget // m
        drawn = np.random.default_rng(eval_seed).dirichlet(np.full(task.k, float(alpha)), size=len(rows) * per_problem)
        shown, problems, n = list(drawn), [p for p in range(len(rows)) for _ in range(per_problem)], m
    prompts = [row_prompt(rows[p], mode="goal", m=1, task=task, weights=w) for p, w in zip(problems, shown)]
    return PromptPlan(prompts, problems, [[float(x) for x in w] for w in shown], n)


def candidate_frame(
    task, rows: list[dict], plan: PromptPlan, texts: list[list[str]], m: int, *, single_answer_prefill: str
):
    """One row per candidate (docs/evaluation.md): every chain of every problem adds its m answer slots
    as the authors' evaluation reads them (in order, a repeat kept as a copy, a missing answer scored as
    the empty answer), or, answering once, its whole response (after `single_answer_prefill`, when it is
    not empty). `texts[i]` holds the `plan.n` responses to `plan.prompts[i]`."""
    import pandas as pd

    names = task.objective_names
    records, chains_of = [], [0] * len(rows)
    for prompt, p, shown, responses in zip(plan.prompts, plan.problem, plan.weights, texts):
        row = rows[p]
        found = []  # (chain, slot, candidate, response) of every sample of this prompt, scored in one batch
        for text in responses:
            c, chains_of[p] = chains_of[p], chains_of[p] + 1
            prefilled = m == 1 and single_answer_prefill and str(text).strip()
            scored = single_answer_prefill + str(text) if prefilled else text
            with task_code(task, "reading an evaluation response's answer slots", scored):
                candidates = task.eval_candidates(scored, m)
            found += [(c, slot, candidate, text) for slot, candidate in enumerate(candidates)]
        with task_code(task, "scoring evaluation candidates", found[0][2] if found else ""):
            vectors = task.score_candidates([f[2] for f in found], row["reward_model"]["ground_truth"])
        for (c, slot, candidate, text), vector in zip(found, vectors):
            with task_code(task, "reading the answer of an evaluation candidate", candidate):
                answer = task.candidate_answer(candidate, m)
            records.append(
                {
                    "problem": int(row.get("extra_info", {}).get("index", p)),
                    "prompt": prompt[-1]["content"],
                    "weights": shown,
                    "chain": c,
                    "slot": slot,
                    "text": candidate,
                    "response": text,
                    "answer": answer,
                    **dict(zip(names, task.pad(vector))),
                    "k": len(vector),
                    "scalar": task.scalar(vector),
                    "correct": bool(task.is_correct(vector)),
                }
            )
    frame = pd.DataFrame.from_records(records)
    return frame.assign(parsed=frame["answer"].str.len() > 0)


def pool_metrics(frame, task, *, budget: int, eval_seed: int) -> dict:
    """Pool metrics of a candidate frame (see module docstring); every problem holds `budget` candidates."""
    names = task.objective_names
    rng = np.random.default_rng([eval_seed, 2])
    weights = {}  # per k: the same draws for every problem of that k (variable_k tasks: one set per test count)
    pass_k, best_k, perm_k, divs, ebm = [], [], [], [], []
    for problem, pool in frame.sort_values(["problem", "chain", "slot"]).groupby("problem"):
        if len(pool) != budget:
            raise ValueError(f"problem {problem} has {len(pool)} candidates, expected {budget}")
        scalars = pool["scalar"].to_numpy()
        correct = int(pool["correct"].sum())
        pass_k.append(pass_at_k_curve(budget, correct, budget))
        best_k.append(best_at_k_curve(scalars, budget))
        perm_k.append(best_at_k_permutation_curve(scalars, budget, rng=rng))
        k = int(pool["k"].max())  # the problem's own k, on each of its rows (candidate_frame)
        own = names[:k]
        if k not in weights:
            weights[k] = eval_weights(k, eval_seed)
        divs.append(diversity(pool[own].to_numpy()))
        ebm.extend(expected_best_of_m(chain[own].to_numpy(), weights[k]) for _, chain in pool.groupby("chain"))
    chains = frame.groupby(["problem", "chain"])["parsed"].any()
    return {
        "n_problems": int(frame["problem"].nunique()),
        "budget": int(budget),
        "pass_at_k": [float(v) for v in np.mean(pass_k, axis=0)],
        "best_at_k": [float(v) for v in np.mean(best_k, axis=0)],
        "best_at_k_perm": [float(v) for v in np.mean(perm_k, axis=0)],
        "expected_best_of_m": float(np.mean(ebm)),
        "diversity": float(np.mean(divs)),
        "parse_failure_rate": float(1.0 - chains.mean()),
        "objective_means": {name: float(frame[name].mean()) for name in names},
    }


def evaluate(
    model_path: str,
    task_name: str,
    method_name: str,
    data_dir: str,
    eval_seed: int,
    out: str,
    *,
    eval_settings: dict,
    m: int,
    train_seed: int | None,
    backend: str = "torch",
    n_problems: int | None = None,
    batch_size: int = 256,
    alpha: float = 1.0,
) -> dict:
    """Sample, score and write `<out>` (parquet) and its `.json`; returns the JSON payload."""
    t0 = time.time()
    task, method = resolve(task_name), get_method(method_name)
    budget = int(eval_settings["budget"])
    goal_mode = str(eval_settings["goal_weights"])
    slots = m if method.multi_answer else 1  # candidates per chain
    if (method.multi_answer or (method.prompt == "goal" and goal_mode == "per_chain")) and budget % m:
        raise ValueError(f"eval budget {budget} is not a multiple of m={m}; set task_settings.{task_name}.eval.budget")
    if not (Path(model_path) / "config.json").is_file():
        raise FileNotFoundError(f"{model_path} is not a model directory; run `vpo merge --run <run dir>` first")
    rows = read_rows(data_dir, "test")[:n_problems]
    plan = prompt_plan(task, rows, method, m=m, budget=budget, eval_seed=eval_seed, goal_weights=goal_mode, alpha=alpha)
    limit = int(eval_settings["max_new_tokens"]["multi" if method.multi_answer else "single"])
    sampling = SamplingSettings(
        temperature=float(eval_settings["temperature"]),
        top_p=float(eval_settings["top_p"]),
        max_new_tokens=limit,
        seed=eval_seed,
    )
    kwargs = {"batch_size": batch_size} if backend == "torch" else {"seed": eval_seed}
    generator = make_backend(backend, model_path, **kwargs)
    texts = generator.generate(plan.prompts, plan.n, sampling)
    frame = candidate_frame(
        task, rows, plan, texts, slots, single_answer_prefill=str(eval_settings.get("single_answer_prefill", ""))
    )
    metrics = pool_metrics(frame, task, budget=budget, eval_seed=eval_seed)
    payload = {
        "task": task_name,
        "method": method_name,
        "train_seed": train_seed,
        "eval_seed": eval_seed,
        "m": slots,
        "chains": budget // slots,
        "model": str(model_path),
        "backend": backend,
        "engine": generator.engine,  # what sampled: vpo.llama_sampler, transformers.generate or vllm
        "sampling": {
            "temperature": sampling.temperature,
            "top_p": sampling.top_p,
            "max_new_tokens": sampling.max_new_tokens,
        },
        "goal_weights": goal_mode if method.prompt == "goal" else None,
        **metrics,
        "wall_time_s": round(time.time() - t0, 2),
        "provenance": {**collect(), "engine": generator.engine},
        "training_provenance": training_provenance(model_path),
    }
    out_path = Path(out)
    with atomic_file(out_path) as tmp:
        frame.to_parquet(tmp, index=False)
    write_json_atomic(out_path.with_suffix(".json"), payload)
    return payload


def training_provenance(model_path) -> dict | None:
    """The provenance in the train.json beside a cell's merged model (`<cell>/model`), if any."""
    try:
        return json.loads((Path(model_path).parent / "train.json").read_text()).get("provenance")
    except (OSError, ValueError, AttributeError):
        return None


def generation_backend(cfg: dict, requested: str | None) -> str:
    """The backend a job samples with (vLLM for veRL on GPUs, else torch, unless `requested`);
    with torch, torch gets the configured threads (parallel CPU jobs must not oversubscribe)."""
    backend = requested or ("torch" if trains_tiny_base(cfg) else "vllm")
    threads = int(cfg["local_trainer"]["threads"])
    if backend == "torch" and threads > 0:
        import torch

        torch.set_num_threads(threads)
    return backend


def run(args: argparse.Namespace) -> int:
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(name)s %(message)s", stream=sys.stderr)

    cfg = load_config(args.config, args.preset)
    settings = task_settings(cfg, args.task)
    backend = generation_backend(cfg, args.backend)
    train_seed = args.train_seed if args.train_seed is not None else parse_train_seed(args.model)

    out = Path(args.out)  # <cell>/eval/evalseed<e>.parquet in the workflow: that cell's lock, shared
    cell, output = (out.parent.parent, f"eval/{out.stem}") if out.parent.name == "eval" else (out.parent, out.stem)
    with writing_cell(cell, what=f"vpo eval {args.out}", output=output):
        payload = evaluate(
            args.model,
            args.task,
            args.method,
            args.data,
            args.seed,
            args.out,
            eval_settings=settings["eval"],
            m=answers_per_rollout(cfg, args.task, args.method),
            train_seed=train_seed,
            backend=backend,
            n_problems=args.n_problems,
            batch_size=args.batch_size,
            alpha=method_settings(cfg, args.method).get("alpha"),
        )
    budget = payload["budget"]
    print(
        json.dumps(
            {
                "method": args.method,
                "best@1": payload["best_at_k"][0],
                f"best@{budget}": payload["best_at_k"][-1],
                "diversity": payload["diversity"],
                "parse_failure_rate": payload["parse_failure_rate"],
                "wall_time_s": payload["wall_time_s"],
            }
        )
    )
    return 0

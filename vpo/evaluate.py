"""`vpo eval`: held-out evaluation of one model, with the same candidate budget for every method.

The pool of a problem holds `budget` candidate answers: `budget / m` chains of m answers for
multi-answer methods (10 x 3 = 30), `budget` single-answer samples otherwise (paper section 4:
k counts candidates, not generations). Every candidate is scored to its k-vector and the task's
fixed scalar (the GRPO training scalar). Writes

- `<out>.parquet`: one row per candidate (problem, prompt, chain, slot, text, one column per
  objective (padded with zeros past the problem's own k), k, scalar, parsed, correct), and
- `<out>.json`: pool metrics recomputed from that frame alone by `pool_metrics`.
"""

from __future__ import annotations

import argparse
import json
import logging
import re
import sys
import time
from pathlib import Path

import numpy as np

N_EVAL_WEIGHTS = 100  # Dirichlet(1) weights of E_w[best-of-m], drawn with the eval seed


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
    parser.add_argument("--backend", choices=("transformers", "vllm"), default=None,
                        help="generation backend (default: vllm for veRL on GPUs, else transformers)")
    parser.add_argument("--n-problems", type=int, default=None, help="evaluate only the first N test problems")
    parser.add_argument("--batch-size", type=int, default=256, help="transformers backend: sequences per batch")


def parse_train_seed(model_path: str) -> int | None:
    for part in reversed(Path(model_path).resolve().parts):
        match = re.fullmatch(r"seed(\d+)", part)
        if match:
            return int(match.group(1))
    return None


def candidate_frame(task, rows: list[dict], chains: list[list[str]], m: int):
    """One row per candidate: the m slots of every chain of every problem (missing answers score 0)."""
    import pandas as pd

    from vpo.reward import compute_score
    from vpo.rollouts import as_matrix

    names = task.objective_names
    records = []
    for p, (row, texts) in enumerate(zip(rows, chains)):
        prompt = row["prompt"][-1]["content"]
        for c, text in enumerate(texts):
            result = compute_score(row["data_source"], text, row["reward_model"]["ground_truth"], row.get("extra_info"))
            matrix = as_matrix(result["sub_scores"])
            answers = task.split_answers(text, m)
            k = matrix.shape[1] if matrix.size else task.k  # the problem's own k (variable_k tasks)
            for slot in range(m):
                vector = matrix[slot] if slot < len(matrix) else np.zeros(k)
                records.append({
                    "problem": int(row.get("extra_info", {}).get("index", p)), "prompt": prompt, "chain": c,
                    "slot": slot, "text": answers[slot] if slot < len(answers) else "", "response": text,
                    **dict(zip(names, task.pad(vector))), "k": k,
                    "scalar": task.scalar(vector), "parsed": slot < len(answers),
                    "correct": bool(task.is_correct(vector)),
                })
    return pd.DataFrame.from_records(records)


def pool_metrics(frame, task, *, budget: int, eval_seed: int) -> dict:
    """Pool metrics of a candidate frame (see module docstring); every problem holds `budget` candidates."""
    from vpo.metrics import best_at_k, diversity, expected_best_of_m, pass_at_k
    from vpo.weights import sample_weights

    names = task.objective_names
    rng = np.random.default_rng([eval_seed, 2])
    weights = {}  # per k: the same draws for every problem of that k (variable_k tasks: one set per test count)
    pass_k, best_k, perm_k, divs, ebm = [], [], [], [], []
    for _, pool in frame.sort_values(["problem", "chain", "slot"]).groupby("problem", sort=True):
        if len(pool) != budget:
            raise ValueError(f"problem {pool['problem'].iloc[0]} has {len(pool)} candidates, expected {budget}")
        scalars = pool["scalar"].to_numpy(float)
        correct = int(pool["correct"].sum())
        pass_k.append([pass_at_k(budget, correct, k) for k in range(1, budget + 1)])
        best_k.append([best_at_k(scalars, k) for k in range(1, budget + 1)])
        perm_k.append(np.maximum.accumulate(scalars[rng.permutation(budget)]))
        k = int(pool["k"].iloc[0])  # the problem's own k (candidate_frame)
        own = names[:k]
        if k not in weights:
            weights[k] = sample_weights(k, N_EVAL_WEIGHTS, alpha=1.0, sampler="naive", rng=np.random.default_rng(eval_seed))
        divs.append(diversity(pool[own].to_numpy(float)))
        ebm.extend(expected_best_of_m(chain[own].to_numpy(float), weights[k]) for _, chain in pool.groupby("chain"))
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


def evaluate(model_path: str, task_name: str, method_name: str, data_dir: str, eval_seed: int, out: str, *,
             eval_settings: dict, m: int, train_seed: int | None, backend: str = "transformers",
             n_problems: int | None = None, batch_size: int = 256, alpha: float = 1.0) -> dict:
    """Sample, score and write `<out>` (parquet) and its `.json`; returns the JSON payload."""
    from vpo.generate import SamplingSettings, make_backend
    from vpo.atomic import atomic_file, write_json_atomic
    from vpo.data import read_rows
    from vpo.methods import get_method
    from vpo.prompts import prepare_row
    from vpo.task import resolve

    t0 = time.time()
    task, method = resolve(task_name), get_method(method_name)
    m = m if method.multi_answer else 1
    budget = int(eval_settings["budget"])
    if budget % m:
        raise ValueError(f"eval budget {budget} is not a multiple of m={m}; set task_settings.{task_name}.eval.budget")
    if not (Path(model_path) / "config.json").is_file():
        raise FileNotFoundError(f"{model_path} is not a model directory; run `vpo merge --run <run dir>` first")
    rows = read_rows(data_dir, "test")[:n_problems]
    rows = [prepare_row(row, method, m, eval_seed, alpha=alpha) for row in rows]
    sampling = SamplingSettings(temperature=float(eval_settings["temperature"]), top_p=float(eval_settings["top_p"]),
                                max_new_tokens=int(eval_settings["max_new_tokens"]), seed=eval_seed)
    kwargs = {"batch_size": batch_size} if backend == "transformers" else {"seed": eval_seed}
    generator = make_backend(backend, model_path, **kwargs)
    chains = generator.generate([r["prompt"] for r in rows], budget // m, sampling)
    frame = candidate_frame(task, rows, chains, m)
    metrics = pool_metrics(frame, task, budget=budget, eval_seed=eval_seed)
    payload = {"task": task_name, "method": method_name, "train_seed": train_seed, "eval_seed": eval_seed,
               "m": m, "chains": budget // m, "model": str(model_path), "backend": backend,
               "sampling": {"temperature": sampling.temperature, "top_p": sampling.top_p,
                            "max_new_tokens": sampling.max_new_tokens},
               **metrics, "wall_time_s": round(time.time() - t0, 2)}
    out_path = Path(out)
    with atomic_file(out_path) as tmp:
        frame.to_parquet(tmp, index=False)
    write_json_atomic(out_path.with_suffix(".json"), payload)
    return payload


def generation_backend(cfg: dict, requested: str | None) -> str:
    """The backend a job samples with (vLLM for veRL on GPUs, else transformers, unless `requested`);
    with transformers, torch gets the configured threads (parallel CPU jobs must not oversubscribe)."""
    from vpo.config import trains_tiny_base

    backend = requested or ("transformers" if trains_tiny_base(cfg) else "vllm")
    threads = int((cfg.get("local_trainer") or {}).get("threads", 1))
    if backend == "transformers" and threads > 0:
        import torch

        torch.set_num_threads(threads)
    return backend


def run(args: argparse.Namespace) -> int:
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(name)s %(message)s", stream=sys.stderr)
    from vpo.config import load_config, method_settings, task_settings

    cfg = load_config(args.config, args.preset)
    settings = task_settings(cfg, args.task)
    backend = generation_backend(cfg, args.backend)
    train_seed = args.train_seed if args.train_seed is not None else parse_train_seed(args.model)
    payload = evaluate(args.model, args.task, args.method, args.data, args.seed, args.out,
                       eval_settings=settings["eval"], m=int(settings["m"]), train_seed=train_seed,
                       backend=backend, n_problems=args.n_problems, batch_size=args.batch_size,
                       alpha=float(method_settings(cfg, args.method).get("alpha", 1.0)))
    budget = payload["budget"]
    print(json.dumps({"method": args.method, "best@1": payload["best_at_k"][0],
                      f"best@{budget}": payload["best_at_k"][-1], "diversity": payload["diversity"],
                      "parse_failure_rate": payload["parse_failure_rate"], "wall_time_s": payload["wall_time_s"]}))
    return 0

"""`vpo evolve`: evolutionary search (OpenEvolve) with a trained model as the mutation operator.

Paper section 4: on the held-out problems that GRPO and VPO both fail at best@30, OpenEvolve runs 200
iterations per problem with the cell's model; the figures count problems solved and the mean best
score found by iteration t. Two subcommands:

- `vpo evolve select` (vpo/search/hardest.py): the hardest N test problems of a task from the
  standard evaluation of the methods in `evolve.select_methods` (the paper's GRPO and VPO; every
  training and evaluation seed pooled): those whose best@`report.best_at` is 0 for all of them; when
  fewer exist, the N with the lowest best such score, and the file says so.
- `vpo evolve search`: one cell's search on those problems. Per problem, OpenEvolve (full rewrites,
  islands, MAP-Elites database, checkpoints every `checkpoint_interval` iterations) asks the cell's
  model, served on 127.0.0.1 (`vpo.search.llm_server`), for a better program, shown the parent program and
  its fitness (`parent_in_prompt`) followed by the problem's prompt in the method's own form; programs
  are scored by `vpo.search.evaluator` (a scorer's exceptions counted as `scorer_errors`). Every search
  starts from an empty program (score 0): the hardest problems are unsolved, and all start alike.

A killed search resumes from OpenEvolve's last checkpoint of the problem it was on (finished problems
are kept); state from another model or other settings is removed first, so a rerun reruns.
Writes `<out>/scores.parquet` (problem, iteration, best_score, solved: the best so far at each
iteration, 0 = the starting program) and `<out>/summary.json`.
"""

from __future__ import annotations

import argparse
import json
import logging
import shutil
import sys
import time
from dataclasses import asdict
from pathlib import Path

from vpo.atomic import atomic_file, write_json_atomic
from vpo.cell_lock import writing_cell
from vpo.config import answers_per_rollout, load_config, method_settings, settings_digest, task_settings
from vpo.data import read_rows
from vpo.evaluate import generation_backend, parse_train_seed
from vpo.generate import TorchBackend
from vpo.methods import get_method
from vpo.prompts import prepare_row
from vpo.search import llm_server
from vpo.search.hardest import read_pools, select_hardest
from vpo.search.problem import EvolveSettings, search_problem
from vpo.search.vllm_server import vllm_server
from vpo.task import resolve

log = logging.getLogger(__name__)


# ---- one cell ---------------------------------------------------------------------------------
def _model_fingerprint(model_dir: Path) -> list:
    """What identifies a model directory's contents cheaply: its files' names, sizes and times."""
    return sorted([p.name, p.stat().st_size, p.stat().st_mtime_ns] for p in Path(model_dir).iterdir() if p.is_file())


def reset_state(out: Path, identity: dict) -> None:
    """Keep `out`'s search state only if it was made by this model with these settings and problems."""

    marker = out / "state.json"
    if marker.is_file() and json.loads(marker.read_text()) == identity:
        return
    if (out / "problems").exists():
        log.info("search state in %s is from another model or settings; starting over", out)
        shutil.rmtree(out / "problems")
    out.mkdir(parents=True, exist_ok=True)
    write_json_atomic(marker, identity)


def search_cell(
    *,
    model: str,
    task_name: str,
    method_name: str,
    data_dir: str,
    hardest: str,
    out: str,
    cfg: dict,
    train_seed: int,
    backend: str,
) -> dict:
    """One cell's search on the hardest problems (`hardest`: evolve select's file), with its model served
    on 127.0.0.1; writes scores.parquet and summary.json under `out` and returns the summary."""

    t0 = time.time()
    settings = EvolveSettings.from_config(cfg)
    task, rows, sampling, m = _cell_problems(cfg, task_name, method_name, data_dir, hardest)
    out_dir = Path(out)
    reset_state(
        out_dir,
        {
            "model": str(Path(model).resolve()),
            "files": _model_fingerprint(Path(model)),
            "settings": settings_digest([asdict(settings), sampling, m]),
            "problems": list(rows),
            "train_seed": train_seed,
        },
    )
    model_name = f"{task_name}-{method_name}-seed{train_seed}"
    results = []
    max_tokens = int(sampling["max_new_tokens"])
    with _serve_model(model, model_name, backend=backend, seed=train_seed, max_tokens=max_tokens) as (url, api_key):
        for i, problem in enumerate(rows):
            log.info("problem %d/%d (test index %d)", i + 1, len(rows), problem)
            results.append(
                search_problem(
                    out_dir / "problems" / str(problem),
                    row=rows[problem],
                    settings=settings,
                    url=url,
                    api_key=api_key,
                    model_name=model_name,
                    sampling=sampling,
                    seed=train_seed * 100_003 + problem,
                    task=task,
                    m=m,
                )
            )
    _write_scores(out_dir / "scores.parquet", results)
    summary = {
        "task": task_name,
        "method": method_name,
        "train_seed": train_seed,
        "m": m,
        "iterations": settings.iterations,
        "n_problems": len(results),
        "solved": sum(r["solved"] for r in results),
        "mean_best_score": float(sum(r["best_score"] for r in results) / max(len(results), 1)),
        "problems": [{k: v for k, v in r.items() if k != "curve"} for r in results],
        "settings": asdict(settings),
        "sampling": sampling,
        "backend": backend,
        "wall_time_s": round(time.time() - t0, 1),
    }
    write_json_atomic(out_dir / "summary.json", summary)
    return summary


def _cell_problems(cfg: dict, task_name: str, method_name: str, data_dir: str, hardest: str):
    """(task, {test index: the problem's row as the method's evaluation prompts it}, sampling, m) of a
    cell's search: the problems `hardest` names, in its order."""

    task, method = resolve(task_name), get_method(method_name)
    task_cfg = task_settings(cfg, task_name)
    m = answers_per_rollout(cfg, task_name, method_name) if method.multi_answer else 1
    sampling = {
        "temperature": task_cfg["eval"]["temperature"],
        "top_p": task_cfg["eval"]["top_p"],
        "max_new_tokens": task_cfg["eval"]["max_new_tokens"]["multi" if method.multi_answer else "single"],
    }
    chosen = [p["problem"] for p in json.loads(Path(hardest).read_text())["problems"]]
    rows = {int(r["extra_info"].get("index", i)): r for i, r in enumerate(read_rows(data_dir, "test"))}
    missing = [p for p in chosen if p not in rows]
    if missing:
        raise ValueError(f"{hardest} names problems {missing} that {data_dir}/test.parquet lacks; rebuild it")
    eval_seed = int(task_cfg["eval"]["seeds"][0])
    alpha = method_settings(cfg, method_name).get("alpha")  # None: the method draws no weights
    # the prompt as the evaluation shows it: no weights where eval.goal_weights is none, else one vector per problem
    unweighted = method.prompt == "goal" and task_cfg["eval"]["goal_weights"] == "none"
    shown = get_method("grpo") if unweighted else method
    return task, {p: prepare_row(rows[p], shown, m, eval_seed, alpha=alpha) for p in chosen}, sampling, m


def _write_scores(path: Path, results: list[dict]) -> None:
    """scores.parquet: (problem, iteration, best_score, solved) of every problem's curve."""
    import pandas as pd

    frame = pd.DataFrame([{"problem": r["problem"], **point} for r in results for point in r["curve"]])
    with atomic_file(path) as tmp:
        frame.to_parquet(tmp, index=False)


def _serve_model(model: str, model_name: str, *, backend: str, seed: int, max_tokens: int):
    """A context manager yielding the base URL of an OpenAI-compatible server for the model and the
    API key (bearer token) it requires."""
    import contextlib

    if backend == "vllm":
        return vllm_server(model, model_name, seed=seed)

    @contextlib.contextmanager
    def loopback():
        with llm_server.LoopbackServer(
            TorchBackend(model, progress=False), model_name, max_tokens_cap=max_tokens
        ) as server:
            yield server.url, server.token

    return loopback()


# ---- command line -----------------------------------------------------------------------------
def add_arguments(parser: argparse.ArgumentParser) -> None:
    sub = parser.add_subparsers(dest="step", required=True)
    select = sub.add_parser("select", help="the hardest N test problems of a task (from eval pools)")
    select.add_argument("--out", required=True, help="hardest.json to write")
    select.add_argument("pools", nargs="+", help="eval parquets (results/cpu/runs/T/M/seedS/eval/evalseedE.parquet)")
    search = sub.add_parser("search", help="one cell's OpenEvolve search on the hardest problems")
    search.add_argument("--model", required=True, help="the cell's merged model directory")
    search.add_argument("--task", required=True)
    search.add_argument("--method", required=True)
    search.add_argument("--data", required=True, help="directory with the task's test.parquet")
    search.add_argument("--hardest", required=True, help="hardest.json from `vpo evolve select`")
    search.add_argument("--out", required=True, help="the cell's evolve directory")
    search.add_argument(
        "--backend",
        choices=("torch", "vllm"),
        default=None,
        help="model server (default: vLLM for veRL on GPUs, else torch)",
    )
    for p in (select, search):
        p.add_argument("--preset", default=None, help="config preset (default: the config file's `preset`)")
        p.add_argument("--config", default=None, help="config.yaml path (default: ./config.yaml)")


def run(args: argparse.Namespace) -> int:
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(name)s %(message)s", stream=sys.stderr)

    cfg = load_config(args.config, args.preset)
    settings = EvolveSettings.from_config(cfg)
    if args.step == "select":
        chosen = select_hardest(
            read_pools(args.pools), settings.n_problems, int(cfg["report"]["best_at"]), list(settings.select_methods)
        )
        write_json_atomic(args.out, chosen)
        print(chosen["note"])
        return 0
    backend = generation_backend(cfg, args.backend)

    out = Path(args.out)  # <cell>/evolve
    with writing_cell(out.parent, what=f"vpo evolve search {args.out}", output=f"{out.name}/search"):
        summary = search_cell(
            model=args.model,
            task_name=args.task,
            method_name=args.method,
            data_dir=args.data,
            hardest=args.hardest,
            out=args.out,
            cfg=cfg,
            train_seed=parse_train_seed(args.model) or 0,
            backend=backend,
        )
    print(
        json.dumps(
            {k: summary[k] for k in ("method", "train_seed", "n_problems", "solved", "mean_best_score", "wall_time_s")}
        )
    )
    return 0

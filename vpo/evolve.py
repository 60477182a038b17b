"""`vpo evolve`: evolutionary search (OpenEvolve) with a trained model as the mutation operator.

Paper section 4: on the held-out problems that GRPO and VPO both fail at best@30, OpenEvolve runs 200
iterations per problem with the cell's model; the figures count problems solved and the mean best
score found by iteration t. Two subcommands:

- `vpo evolve select` (vpo/evolve_select.py): the hardest N test problems of a task from the
  standard evaluation of the methods in `evolve.select_methods` (the paper's GRPO and VPO; every
  training and evaluation seed pooled): those whose best@`report.best_at` is 0 for all of them; when
  fewer exist, the N with the lowest best such score, and the file says so.
- `vpo evolve search`: one cell's search on those problems. Per problem, OpenEvolve (full rewrites,
  islands, MAP-Elites database, checkpoints every `checkpoint_interval` iterations) asks the cell's
  model, served on 127.0.0.1 (`vpo.llm_server`), for a better program, shown the parent program and
  its fitness (`parent_in_prompt`) followed by the problem's prompt in the method's own form; programs
  are scored by `vpo.evolve_evaluator` (a scorer's exceptions counted as `scorer_errors`). Every search
  starts from an empty program (score 0): the hardest problems are unsolved, and all start alike.

A killed search resumes from OpenEvolve's last checkpoint of the problem it was on (finished problems
are kept); state from another model or other settings is removed first, so a rerun reruns.
Writes `<out>/scores.parquet` (problem, iteration, best_score, solved: the best so far at each
iteration, 0 = the starting program) and `<out>/summary.json`.
"""

from __future__ import annotations

import argparse
import asyncio
import functools
import json
import logging
import shutil
import sys
import time
from dataclasses import asdict, dataclass, fields
from pathlib import Path

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class EvolveSettings:
    """config.yaml `evolve:` (the paper states the problem count and iterations; the rest are ours)."""

    n_problems: int  # hardest test problems searched (paper: 32)
    iterations: int  # OpenEvolve iterations per problem, one model call each (paper: 200)
    checkpoint_interval: int  # iterations between OpenEvolve checkpoints; must divide iterations
    num_islands: int  # OpenEvolve islands (separate populations with migration)
    population_size: int  # programs kept per database
    archive_size: int  # elite archive size
    migration_interval: int  # iterations between island migrations
    migration_rate: float  # share of an island that migrates
    evaluator_timeout_s: int  # seconds one program's scoring may take
    parent_in_prompt: bool  # show the parent program and its fitness before the problem's prompt
    select_methods: list  # the methods whose evaluation pools must all fail a problem (paper: grpo, vpo)

    @classmethod
    def from_config(cls, cfg: dict) -> "EvolveSettings":
        values = dict(cfg["evolve"])
        settings = cls(**{f.name: values[f.name] for f in fields(cls)})
        if settings.iterations % settings.checkpoint_interval:
            raise ValueError(f"evolve.checkpoint_interval ({settings.checkpoint_interval}) must divide "
                             f"evolve.iterations ({settings.iterations}): the last iteration is a checkpoint")
        return settings


# ---- one problem's search ---------------------------------------------------------------------
PARENT_SECTION = "A previous answer (fitness {fitness_score}):\n{current_program}\n\n"


def user_template(problem_prompt: str, *, parent_in_prompt: bool) -> str:
    """OpenEvolve's full-rewrite user message: (the parent and its fitness, then) the problem's own
    prompt, last, so the model answers it as it was trained to (braces escaped for str.format)."""
    escaped = problem_prompt.replace("{", "{{").replace("}", "}}")
    return (PARENT_SECTION if parent_in_prompt else "") + escaped


def openevolve_config(settings: EvolveSettings, *, url: str, api_key: str, model_name: str, sampling: dict, seed: int,
                      language: str, templates: Path, problem_file: Path, trace: Path, task: str, m: int) -> dict:
    """OpenEvolve's configuration (as its YAML would hold it) for one problem's search."""
    return {
        "max_iterations": settings.iterations, "checkpoint_interval": settings.checkpoint_interval,
        "random_seed": seed, "language": language, "file_suffix": ".py" if language == "python" else ".txt",
        "diff_based_evolution": False,  # the models write whole answers, never SEARCH/REPLACE diffs
        "max_code_length": 100_000, "log_level": "WARNING",
        "llm": {"api_base": url, "api_key": api_key, "models": [{"name": model_name, "weight": 1.0}],
                "temperature": sampling["temperature"], "top_p": sampling["top_p"],
                "max_tokens": sampling["max_new_tokens"], "timeout": 1800, "retries": 2, "retry_delay": 1},
        "prompt": {"template_dir": str(templates), "system_message": "", "use_template_stochasticity": False,
                   "include_artifacts": False},
        "database": {"num_islands": settings.num_islands, "population_size": settings.population_size,
                     "archive_size": settings.archive_size, "migration_interval": settings.migration_interval,
                     "migration_rate": settings.migration_rate, "random_seed": seed, "log_prompts": False},
        "evaluator": {"timeout": settings.evaluator_timeout_s, "max_retries": 0, "cascade_evaluation": False,
                      "parallel_evaluations": 1,  # one worker: iterations complete in order, runs repeat
                      "enable_artifacts": False,
                      "evaluator_args": {"task": task, "problem_file": str(problem_file), "m": m}},
        "evolution_trace": {"enabled": True, "format": "jsonl", "output_path": str(trace), "buffer_size": 1,
                            "include_code": False, "include_prompts": False, "include_failures": True},
    }


def last_checkpoint(output_dir: Path) -> tuple[int, Path | None]:
    """(iteration, directory) of the newest complete OpenEvolve checkpoint (metadata.json is written last)."""
    found = [(int(p.name.split("_")[-1]), p) for p in (output_dir / "checkpoints").glob("checkpoint_*")
             if p.name.split("_")[-1].isdigit() and (p / "metadata.json").is_file()]
    return max(found) if found else (0, None)


def read_records(path: Path, through: int | None = None) -> dict[int, dict]:
    """iteration -> record of an OpenEvolve trace file (JSON lines; the last record of an iteration
    wins, as a resumed run repeats the iterations after its checkpoint; a line cut by a kill is skipped)."""
    out: dict[int, dict] = {}
    for line in path.read_text().splitlines() if path.is_file() else []:
        try:
            record = json.loads(line)
        except json.JSONDecodeError:
            continue
        if through is None or record["iteration"] <= through:
            out[int(record["iteration"])] = record
    return out


def keep_through(path: Path, iteration: int) -> None:
    """Drop what a killed run traced after its last checkpoint (the resumed run redoes it)."""
    from vpo.atomic import write_text_atomic

    if path.is_file():
        write_text_atomic(path, "".join(json.dumps(r) + "\n" for r in read_records(path, iteration).values()))


NO_PROGRAM = "No valid code found"  # OpenEvolve's error when a response holds nothing to keep


def best_so_far(initial: dict, by_iteration: dict[int, dict], iterations: int) -> list[dict]:
    """[{iteration, best_score, solved}] for 0..iterations: the running best over the programs found."""
    best, solved, rows = float(initial["combined_score"]), bool(initial["solved"]), []
    for t in range(iterations + 1):
        if t in by_iteration:
            best = max(best, float(by_iteration[t].get("combined_score", 0.0)))
            solved = solved or bool(by_iteration[t].get("solved", 0.0))
        rows.append({"iteration": t, "best_score": best, "solved": solved})
    return rows


def search_problem(problem_dir: Path, *, row: dict, settings: EvolveSettings, url: str, api_key: str,
                   model_name: str, sampling: dict, seed: int, task, m: int) -> dict:
    """Run (or resume) one problem's search; returns its result, also written to result.json."""
    from openevolve import OpenEvolve
    from openevolve.config import Config
    from openevolve.controller import EvolutionFailedError

    from vpo.atomic import write_json_atomic, write_text_atomic
    from vpo.evolve_evaluator import program_client, score_program

    done = problem_dir / "result.json"
    if done.is_file():
        return json.loads(done.read_text())
    problem_dir.mkdir(parents=True, exist_ok=True)
    problem_file = write_json_atomic(problem_dir / "problem.json", {"ground_truth": row["reward_model"]["ground_truth"]})
    templates = problem_dir / "templates"
    templates.mkdir(exist_ok=True)
    write_text_atomic(templates / "full_rewrite_user.txt",
                      user_template(row["prompt"][-1]["content"], parent_in_prompt=settings.parent_in_prompt))
    suffix = ".py" if task.program_language == "python" else ".txt"
    start = ""  # the empty program (module docstring)
    initial = write_text_atomic(problem_dir / f"initial{suffix}", start)
    trace, output_dir = problem_dir / "trace.jsonl", problem_dir / "openevolve"
    config = openevolve_config(settings, url=url, api_key=api_key, model_name=model_name, sampling=sampling, seed=seed,
                               language=task.program_language, templates=templates, problem_file=problem_file,
                               trace=trace, task=task.name, m=m)
    # the record on disk without the server's per-job key (which lets any local user use the server)
    write_json_atomic(problem_dir / "openevolve_config.json", {**config, "llm": {**config["llm"], "api_key": "<per-job key>"}})
    failures = trace.with_name("trace_failures.jsonl")  # OpenEvolve's name for it
    checkpointed, checkpoint = last_checkpoint(output_dir)
    for path in (trace, failures):
        keep_through(path, checkpointed)
    if checkpointed < settings.iterations:
        log.info("problem %s: iterations %d..%d%s", problem_dir.name, checkpointed + 1, settings.iterations,
                 f" (resuming from {checkpoint.name})" if checkpoint else "")
        oe_config = Config.from_dict(config)
        for model in oe_config.llm.models:  # responses reach OpenEvolve with every program in them
            model.init_client = functools.partial(program_client, task=task.name, m=m)
        controller = OpenEvolve(str(initial), sys.modules["vpo.evolve_evaluator"].__file__,
                                oe_config, output_dir=str(output_dir))
        try:
            asyncio.run(controller.run(iterations=settings.iterations - checkpointed,
                                       checkpoint_path=str(checkpoint) if checkpoint else None))
        except EvolutionFailedError as err:  # no program at all: fine if the model answered with nothing usable
            errors = [r.get("error") or "" for r in read_records(failures).values()]
            if not errors or not all(NO_PROGRAM in e for e in errors):
                raise RuntimeError(f"problem {problem_dir.name}: the search got no program from the model "
                                   f"server ({err})") from err
    programs, failed = read_records(trace), read_records(failures)
    start_score = score_program(task.name, start, row["reward_model"]["ground_truth"], m)
    curve = best_so_far(start_score, {t: r.get("child_metrics") or {} for t, r in programs.items()},
                        settings.iterations)
    solved_at = next((r["iteration"] for r in curve if r["solved"]), None)
    scorer_errors = int(sum((r.get("child_metrics") or {}).get("scorer_errors", 0.0) for r in programs.values()))
    if scorer_errors:  # scored 0 by vpo.evolve_evaluator.score_program, which shows the error on the text
        log.warning("problem %s: the %s scorer raised on %d of %d programs", problem_dir.name, task.name, scorer_errors, len(programs))
    result = {"problem": int(row["extra_info"].get("index", 0)), "scorer_errors": scorer_errors,
              "iterations": max([checkpointed, *programs, *failed]), "no_program_iterations": len(failed),
              "seed": seed, "start_score": start_score["combined_score"], "best_score": curve[-1]["best_score"],
              "solved": curve[-1]["solved"], "solved_at": solved_at, "curve": curve}
    write_json_atomic(done, result)
    return result


# ---- one cell ---------------------------------------------------------------------------------
def model_fingerprint(model_dir: Path) -> list:
    """What identifies a model directory's contents cheaply: its files' names, sizes and times."""
    return sorted([p.name, p.stat().st_size, p.stat().st_mtime_ns] for p in Path(model_dir).iterdir() if p.is_file())


def reset_state(out: Path, identity: dict) -> None:
    """Keep `out`'s search state only if it was made by this model with these settings and problems."""
    from vpo.atomic import write_json_atomic

    marker = out / "state.json"
    if marker.is_file() and json.loads(marker.read_text()) == identity:
        return
    if (out / "problems").exists():
        log.info("search state in %s is from another model or settings; starting over", out)
        shutil.rmtree(out / "problems")
    out.mkdir(parents=True, exist_ok=True)
    write_json_atomic(marker, identity)


def search_cell(*, model: str, task_name: str, method_name: str, data_dir: str, hardest: str,
                out: str, cfg: dict, train_seed: int, backend: str) -> dict:
    import pandas as pd

    from vpo.atomic import atomic_file, write_json_atomic
    from vpo.config import answers_per_rollout, method_settings, settings_digest, task_settings
    from vpo.data import read_rows
    from vpo.methods import get_method
    from vpo.prompts import prepare_row
    from vpo.task import resolve

    t0 = time.time()
    settings = EvolveSettings.from_config(cfg)
    task, method = resolve(task_name), get_method(method_name)
    task_cfg = task_settings(cfg, task_name)
    m = answers_per_rollout(cfg, task_name, method_name) if method.multi_answer else 1
    sampling = {"temperature": task_cfg["eval"]["temperature"], "top_p": task_cfg["eval"]["top_p"],
                "max_new_tokens": task_cfg["eval"]["max_new_tokens"]["multi" if method.multi_answer else "single"]}
    chosen = [p["problem"] for p in json.loads(Path(hardest).read_text())["problems"]]
    rows = {int(r["extra_info"].get("index", i)): r for i, r in enumerate(read_rows(data_dir, "test"))}
    missing = [p for p in chosen if p not in rows]
    if missing:
        raise ValueError(f"{hardest} names problems {missing} that {data_dir}/test.parquet lacks; rebuild it")
    eval_seed = int(task_cfg["eval"]["seeds"][0])
    alpha = method_settings(cfg, method_name).get("alpha")  # None: the method draws no weights
    # the prompt as the evaluation shows it: no weights where eval.goal_weights is none, else one vector per problem
    unweighted = method.prompt == "goal" and task_cfg["eval"]["goal_weights"] == "none"
    rows = {p: prepare_row(rows[p], get_method("grpo") if unweighted else method, m, eval_seed, alpha=alpha)
            for p in chosen}
    out_dir = Path(out)
    reset_state(out_dir, {"model": str(Path(model).resolve()), "files": model_fingerprint(Path(model)),
                          "settings": settings_digest([asdict(settings), sampling, m]), "problems": chosen,
                          "train_seed": train_seed})
    model_name = f"{task_name}-{method_name}-seed{train_seed}"
    results = []
    with serve_model(model, model_name, backend=backend, seed=train_seed,
                     max_tokens=int(sampling["max_new_tokens"])) as (url, api_key):
        for i, problem in enumerate(chosen):
            log.info("problem %d/%d (test index %d)", i + 1, len(chosen), problem)
            results.append(search_problem(out_dir / "problems" / str(problem), row=rows[problem],
                                          settings=settings, url=url, api_key=api_key,
                                          model_name=model_name, sampling=sampling,
                                          seed=train_seed * 100_003 + problem, task=task, m=m))
    frame = pd.DataFrame([{"problem": r["problem"], **point} for r in results for point in r["curve"]])
    with atomic_file(out_dir / "scores.parquet") as tmp:
        frame.to_parquet(tmp, index=False)
    summary = {"task": task_name, "method": method_name, "train_seed": train_seed, "m": m,
               "iterations": settings.iterations, "n_problems": len(results),
               "solved": sum(r["solved"] for r in results),
               "mean_best_score": float(sum(r["best_score"] for r in results) / max(len(results), 1)),
               "problems": [{k: v for k, v in r.items() if k != "curve"} for r in results],
               "settings": asdict(settings), "sampling": sampling, "backend": backend,
               "wall_time_s": round(time.time() - t0, 1)}
    write_json_atomic(out_dir / "summary.json", summary)
    return summary


def serve_model(model: str, model_name: str, *, backend: str, seed: int, max_tokens: int):
    """A context manager yielding the base URL of an OpenAI-compatible server for the model and the
    API key (bearer token) it requires."""
    import contextlib

    from vpo import llm_server

    if backend == "vllm":
        return llm_server.vllm_server(model, model_name, seed=seed)

    @contextlib.contextmanager
    def loopback():
        from vpo.generate import TorchBackend

        with llm_server.LoopbackServer(TorchBackend(model, progress=False), model_name,
                                       max_tokens_cap=max_tokens) as server:
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
    search.add_argument("--backend", choices=("torch", "vllm"), default=None,
                        help="model server (default: vLLM for veRL on GPUs, else torch)")
    for p in (select, search):
        p.add_argument("--preset", default=None, help="config preset (default: the config file's `preset`)")
        p.add_argument("--config", default=None, help="config.yaml path (default: ./config.yaml)")


def run(args: argparse.Namespace) -> int:
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(name)s %(message)s", stream=sys.stderr)
    from vpo.atomic import write_json_atomic
    from vpo.config import load_config
    from vpo.evaluate import generation_backend, parse_train_seed

    cfg = load_config(args.config, args.preset)
    settings = EvolveSettings.from_config(cfg)
    if args.step == "select":
        from vpo.evolve_select import read_pools, select_hardest

        chosen = select_hardest(read_pools(args.pools), settings.n_problems, int(cfg["report"]["best_at"]),
                                list(settings.select_methods))
        write_json_atomic(args.out, chosen)
        print(chosen["note"])
        return 0
    backend = generation_backend(cfg, args.backend)
    from vpo.cell_lock import writing_cell

    out = Path(args.out)  # <cell>/evolve
    with writing_cell(out.parent, what=f"vpo evolve search {args.out}", output=f"{out.name}/search"):
        summary = search_cell(model=args.model, task_name=args.task, method_name=args.method, data_dir=args.data,
                              hardest=args.hardest, out=args.out, cfg=cfg,
                              train_seed=parse_train_seed(args.model) or 0, backend=backend)
    print(json.dumps({k: summary[k] for k in ("method", "train_seed", "n_problems", "solved", "mean_best_score",
                                               "wall_time_s")}))
    return 0

"""One problem's evolutionary search (`vpo evolve search` runs it on each of a cell's problems) and the
`evolve:` settings block.

OpenEvolve (full rewrites, islands, MAP-Elites database, checkpoints every `checkpoint_interval`
iterations) asks the cell's model server for a better program, shown the parent program and its
fitness (`parent_in_prompt`) followed by the problem's prompt; `vpo.search.evaluator` scores each
program. A problem's directory holds its ground truth, template, starting program, OpenEvolve's
configuration, checkpoints and traces (trace.jsonl, trace_failures.jsonl) and, once done,
result.json. A killed search resumes from the last checkpoint, its traces cut back to it.
"""

from __future__ import annotations

import asyncio
import functools
import json
import logging
import sys
from dataclasses import dataclass, fields
from pathlib import Path

from vpo.atomic import write_json_atomic, write_text_atomic
from vpo.search.evaluator import program_client, score_program

log = logging.getLogger(__name__)
TRACE, FAILURES = "trace.jsonl", "trace_failures.jsonl"  # the second: OpenEvolve's name beside the first


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
            raise ValueError(
                f"evolve.checkpoint_interval ({settings.checkpoint_interval}) must divide "
                f"evolve.iterations ({settings.iterations}): the last iteration is a checkpoint"
            )
        return settings


_PARENT_SECTION = "A previous answer (fitness {fitness_score}):\n{current_program}\n\n"


def user_template(problem_prompt: str, *, parent_in_prompt: bool) -> str:
    """OpenEvolve's full-rewrite user message: (the parent and its fitness, then) the problem's own
    prompt, last, so the model answers it as it was trained to (braces escaped for str.format)."""
    escaped = problem_prompt.replace("{", "{{").replace("}", "}}")
    return (_PARENT_SECTION if parent_in_prompt else "") + escaped


def openevolve_config(
    settings: EvolveSettings,
    *,
    url: str,
    api_key: str,
    model_name: str,
    sampling: dict,
    seed: int,
    language: str,
    templates: Path,
    problem_file: Path,
    trace: Path,
    task: str,
    m: int,
) -> dict:
    """OpenEvolve's configuration (as its YAML would hold it) for one problem's search."""
    return {
        "max_iterations": settings.iterations,
        "checkpoint_interval": settings.checkpoint_interval,
        "random_seed": seed,
        "language": language,
        "file_suffix": ".py" if language == "python" else ".txt",
        "diff_based_evolution": False,  # the models write whole answers, never SEARCH/REPLACE diffs
        "max_code_length": 100_000,
        "log_level": "WARNING",
        "llm": {
            "api_base": url,
            "api_key": api_key,
            "models": [{"name": model_name, "weight": 1.0}],
            "temperature": sampling["temperature"],
            "top_p": sampling["top_p"],
            "max_tokens": sampling["max_new_tokens"],
            "timeout": 1800,
            "retries": 2,
            "retry_delay": 1,
        },
        "prompt": {
            "template_dir": str(templates),
            "system_message": "",
            "use_template_stochasticity": False,
            "include_artifacts": False,
        },
        "database": {
            "num_islands": settings.num_islands,
            "population_size": settings.population_size,
            "archive_size": settings.archive_size,
            "migration_interval": settings.migration_interval,
            "migration_rate": settings.migration_rate,
            "random_seed": seed,
            "log_prompts": False,
        },
        "evaluator": {
            "timeout": settings.evaluator_timeout_s,
            "max_retries": 0,
            "cascade_evaluation": False,
            "parallel_evaluations": 1,  # one worker: iterations complete in order, runs repeat
            "enable_artifacts": False,
            "evaluator_args": {"task": task, "problem_file": str(problem_file), "m": m},
        },
        "evolution_trace": {
            "enabled": True,
            "format": "jsonl",
            "output_path": str(trace),
            "buffer_size": 1,
            "include_code": False,
            "include_prompts": False,
            "include_failures": True,
        },
    }


def _last_checkpoint(output_dir: Path) -> tuple[int, Path | None]:
    """(iteration, directory) of the newest complete OpenEvolve checkpoint (metadata.json is written last)."""
    found = [
        (int(p.name.split("_")[-1]), p)
        for p in (output_dir / "checkpoints").glob("checkpoint_*")
        if p.name.split("_")[-1].isdigit() and (p / "metadata.json").is_file()
    ]
    return max(found) if found else (0, None)


def _read_records(path: Path, through: int | None = None) -> dict[int, dict]:
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


def _keep_through(path: Path, iteration: int) -> None:
    """Drop what a killed run traced after its last checkpoint (the resumed run redoes it)."""

    if path.is_file():
        write_text_atomic(path, "".join(json.dumps(r) + "\n" for r in _read_records(path, iteration).values()))


_NO_PROGRAM = "No valid code found"  # OpenEvolve's error when a response holds nothing to keep


def best_so_far(initial: dict, by_iteration: dict[int, dict], iterations: int) -> list[dict]:
    """[{iteration, best_score, solved}] for 0..iterations: the running best over the programs found."""
    best, solved, rows = float(initial["combined_score"]), bool(initial["solved"]), []
    for t in range(iterations + 1):
        if t in by_iteration:
            best = max(best, float(by_iteration[t].get("combined_score", 0.0)))
            solved = solved or bool(by_iteration[t].get("solved", 0.0))
        rows.append({"iteration": t, "best_score": best, "solved": solved})
    return rows


_START_PROGRAM = ""  # every search starts from the empty program (score 0): the hardest problems are unsolved


def search_problem(
    problem_dir: Path,
    *,
    row: dict,
    settings: EvolveSettings,
    url: str,
    api_key: str,
    model_name: str,
    sampling: dict,
    seed: int,
    task,
    m: int,
) -> dict:
    """Run (or resume) one problem's search; returns its result, also written to result.json."""

    done = problem_dir / "result.json"
    if done.is_file():
        return json.loads(done.read_text())
    server = {"url": url, "api_key": api_key, "model_name": model_name, "sampling": sampling}
    initial, config = _prepare_problem(
        problem_dir, row=row, settings=settings, server=server, seed=seed, task=task, m=m
    )
    checkpointed = _run_openevolve(problem_dir, initial, config, settings, task=task, m=m)
    result = _problem_result(problem_dir, row, settings, checkpointed, seed=seed, task=task, m=m)
    write_json_atomic(done, result)
    return result


def _prepare_problem(
    problem_dir: Path, *, row: dict, settings: EvolveSettings, server: dict, seed: int, task, m: int
) -> tuple[Path, dict]:
    """Write what OpenEvolve reads for one problem (its ground truth, the user template, the starting
    program) and the configuration's record; returns (the starting program's file, the configuration).
    server: url, api_key, model_name and sampling of the cell's model server."""

    problem_dir.mkdir(parents=True, exist_ok=True)
    problem_file = write_json_atomic(
        problem_dir / "problem.json", {"ground_truth": row["reward_model"]["ground_truth"]}
    )
    templates = problem_dir / "templates"
    templates.mkdir(exist_ok=True)
    write_text_atomic(
        templates / "full_rewrite_user.txt",
        user_template(row["prompt"][-1]["content"], parent_in_prompt=settings.parent_in_prompt),
    )
    suffix = ".py" if task.program_language == "python" else ".txt"
    initial = write_text_atomic(problem_dir / f"initial{suffix}", _START_PROGRAM)
    config = openevolve_config(
        settings,
        **server,
        seed=seed,
        language=task.program_language,
        templates=templates,
        problem_file=problem_file,
        trace=problem_dir / TRACE,
        task=task.name,
        m=m,
    )
    # the record on disk without the server's per-job key (which lets any local user use the server)
    write_json_atomic(
        problem_dir / "openevolve_config.json", {**config, "llm": {**config["llm"], "api_key": "<per-job key>"}}
    )
    return initial, config


def _run_openevolve(problem_dir: Path, initial: Path, config: dict, settings: EvolveSettings, *, task, m: int) -> int:
    """OpenEvolve's iterations after the problem's last checkpoint (none when it has them all); returns
    the iteration of that checkpoint. A search in which the model never gave a program ends quietly."""
    from openevolve import OpenEvolve
    from openevolve.config import Config
    from openevolve.controller import EvolutionFailedError

    trace, failures, output_dir = problem_dir / TRACE, problem_dir / FAILURES, problem_dir / "openevolve"
    checkpointed, checkpoint = _last_checkpoint(output_dir)
    for path in (trace, failures):
        _keep_through(path, checkpointed)
    if checkpointed >= settings.iterations:
        return checkpointed
    log.info(
        "problem %s: iterations %d..%d%s",
        problem_dir.name,
        checkpointed + 1,
        settings.iterations,
        f" (resuming from {checkpoint.name})" if checkpoint else "",
    )
    oe_config = Config.from_dict(config)
    for model in oe_config.llm.models:  # responses reach OpenEvolve with every program in them
        model.init_client = functools.partial(program_client, task=task.name, m=m)
    controller = OpenEvolve(
        str(initial), sys.modules["vpo.search.evaluator"].__file__, oe_config, output_dir=str(output_dir)
    )
    try:
        asyncio.run(
            controller.run(
                iterations=settings.iterations - checkpointed,
                checkpoint_path=str(checkpoint) if checkpoint else None,
            )
        )
    except EvolutionFailedError as err:  # no program at all: fine if the model answered with nothing usable
        errors = [r.get("error") or "" for r in _read_records(failures).values()]
        if not errors or not all(_NO_PROGRAM in e for e in errors):
            raise RuntimeError(
                f"problem {problem_dir.name}: the search got no program from the model server ({err})"
            ) from err
    return checkpointed


def _problem_result(
    problem_dir: Path, row: dict, settings: EvolveSettings, checkpointed: int, *, seed: int, task, m: int
) -> dict:
    """One problem's result from its traces: the best score so far at each iteration, when it was
    solved, and how many programs the task's scorer raised on."""

    programs, failed = _read_records(problem_dir / TRACE), _read_records(problem_dir / FAILURES)
    start_score = score_program(task.name, _START_PROGRAM, row["reward_model"]["ground_truth"], m)
    curve = best_so_far(
        start_score, {t: r.get("child_metrics") or {} for t, r in programs.items()}, settings.iterations
    )
    solved_at = next((r["iteration"] for r in curve if r["solved"]), None)
    scorer_errors = int(sum((r.get("child_metrics") or {}).get("scorer_errors", 0.0) for r in programs.values()))
    if scorer_errors:  # scored 0 by vpo.search.evaluator.score_program, which shows the error on the text
        log.warning(
            "problem %s: the %s scorer raised on %d of %d programs",
            problem_dir.name,
            task.name,
            scorer_errors,
            len(programs),
        )
    return {
        "problem": int(row["extra_info"].get("index", 0)),
        "scorer_errors": scorer_errors,
        "iterations": max([checkpointed, *programs, *failed]),
        "no_program_iterations": len(failed),
        "seed": seed,
        "start_score": start_score["combined_score"],
        "best_score": curve[-1]["best_score"],
        "solved": curve[-1]["solved"],
        "solved_at": solved_at,
        "curve": curve,
    }

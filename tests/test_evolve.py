"""The evolutionary search: hardest-problem selection, program scoring, the loopback model server
(with OpenEvolve's own client) and whole searches on the tiny maze model (determinism, kill and resume)."""

from __future__ import annotations

import asyncio
import json
import os
import random
import re
import signal
import socket
import subprocess
import sys
import time
import urllib.error
import urllib.request
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
import yaml

REPO = Path(__file__).resolve().parents[1]


# ---- selection --------------------------------------------------------------------------------
def pools_frame(scores: dict) -> pd.DataFrame:
    """{(method, seed): {problem: [candidate scalars]}} -> the candidate frame select_hardest reads."""
    rows = [
        {"method": m, "train_seed": s, "eval_seed": 0, "problem": p, "scalar": v}
        for (m, s), per in scores.items()
        for p, values in per.items()
        for v in values
    ]
    return pd.DataFrame(rows)


def test_hardest_are_the_problems_every_pool_fails_in_index_order():
    pools = pools_frame(
        {
            ("grpo", 0): {0: [0, 0], 1: [0, 0], 2: [0, 1], 3: [0, 0]},
            ("vpo", 0): {0: [0, 0], 1: [0.5, 0], 2: [0, 0], 3: [0, 0]},
            ("vpo", 1): {0: [0, 0], 1: [0, 0], 2: [0, 0], 3: [0, 0]},
        }
    )
    from vpo.search.hardest import select_hardest

    chosen = select_hardest(pools, 2, best_at=2)
    assert [p["problem"] for p in chosen["problems"]] == [0, 3]
    assert chosen["n_unsolved"] == 2 and "2 of 2" in chosen["note"]


def test_hardest_are_chosen_from_the_select_methods_pools_only():
    """The paper: the problems GRPO and VPO both fail; another method solving one does not remove it."""
    pools = pools_frame(
        {
            ("grpo", 0): {0: [0, 0], 1: [0, 0], 2: [0, 1]},
            ("max_at_k", 0): {0: [1, 1], 1: [0, 0], 2: [0, 0]},
            ("vpo", 0): {0: [0, 0], 1: [0.5, 0], 2: [0, 0]},
        }
    )
    from vpo.search.hardest import select_hardest

    chosen = select_hardest(pools, 2, best_at=2, methods=["vpo", "grpo"])
    assert [p["problem"] for p in chosen["problems"]] == [0, 1]  # problem 0 counts although Max@k solves it
    assert chosen["methods"] == ["grpo", "vpo"] and "for grpo, vpo (every seed)" in chosen["note"]
    assert [p["problem"] for p in select_hardest(pools, 2, best_at=2)["problems"]] == [1, 0]
    with pytest.raises(ValueError, match=r"select_methods names \['multi_rlvr'\]"):
        select_hardest(pools, 2, best_at=2, methods=["grpo", "multi_rlvr"])


def test_too_few_unsolved_problems_take_the_lowest_and_say_so():
    # best@1 of a pool is its mean: problem 1 -> max(0.25, 0.5) = 0.5, problem 2 -> 1/3 (grpo)
    pools = pools_frame(
        {
            ("grpo", 0): {0: [0, 0, 0], 1: [0.5, 0, 0.25], 2: [1, 0, 0]},
            ("vpo", 0): {0: [0, 0, 0], 1: [1, 0.5, 0], 2: [0, 0, 0]},
        }
    )
    from vpo.search.hardest import select_hardest

    chosen = select_hardest(pools, 2, best_at=1)
    assert [(p["problem"], round(p["best_at"], 4)) for p in chosen["problems"]] == [(0, 0.0), (2, 0.3333)]
    assert chosen["n_unsolved"] == 1 and chosen["note"].startswith("only 1 problems score 0 at best@1")


def test_best_so_far_is_a_running_max_from_the_start_program():
    from vpo.search.problem import best_so_far

    found = {
        2: {"combined_score": 0.4, "solved": 0.0},
        3: {"combined_score": 0.2, "solved": 1.0},
        5: {"combined_score": 0.9, "solved": 0.0},
    }
    curve = best_so_far({"combined_score": 0.1, "solved": 0.0}, found, 5)
    assert [r["best_score"] for r in curve] == [0.1, 0.1, 0.4, 0.4, 0.4, 0.9]
    assert [r["solved"] for r in curve] == [False, False, False, True, True, True]


def test_the_problem_prompt_survives_openevolve_formatting():
    from vpo.search.problem import user_template

    problem = 'Read {n} numbers; print {"a": 1}.'
    with_parent = user_template(problem, parent_in_prompt=True)
    shown = with_parent.format(fitness_score="0.5000", current_program="x = 1")
    assert shown.endswith(problem) and "x = 1" in shown and "0.5000" in shown
    assert user_template(problem, parent_in_prompt=False).format(current_program="unused") == problem


# ---- scoring ----------------------------------------------------------------------------------
def test_a_program_scores_its_best_answer_and_bad_text_scores_zero(tiny_maze_data):
    from vpo.data import read_rows
    from vpo.search.evaluator import score_program
    from vpo.task import resolve
    from vpo_tasks.maze import _path, parse_grid, score_moves

    task = resolve("maze")
    row = read_rows(tiny_maze_data, "test")[0]
    gt = row["reward_model"]["ground_truth"]
    shortest = _path(parse_grid(gt["grid_text"]), tuple(gt["start"]), tuple(gt["end"]), random.Random(0))
    route = " ".join(shortest)  # within the step budget by construction
    expected = task.scalar(score_moves(shortest, gt))
    assert expected > 0
    text = f"<route_1>UP UP</route_1>\n<route_2>{route}</route_2>\n<route_3>LEFT</route_3>"
    scored = score_program("maze", text, gt, 3)
    assert scored == {"combined_score": pytest.approx(expected), "solved": 1.0, "answers": 3.0, "scorer_errors": 0.0}
    assert score_program("maze", route, gt, 3)["combined_score"] == pytest.approx(expected)  # no tags: one answer
    assert score_program("maze", "\x00 ``` }{", gt, 3)["combined_score"] == 0.0
    assert score_program("maze", "", gt, 1) == {
        "combined_score": 0.0,
        "solved": 0.0,
        "answers": 1.0,
        "scorer_errors": 0.0,
    }


def test_a_scorer_that_raises_scores_zero_and_is_counted(monkeypatch):
    """A task whose code raises on a program scores it 0 and marks it, so the search counts it."""
    from vpo.search.evaluator import score_program
    from vpo.task import resolve

    maze = resolve("maze")
    monkeypatch.setattr(type(maze), "score_answer", lambda self, answer, gt: [1 / 0])
    assert score_program("maze", "<route_1>UP</route_1>", {}, 3) == {
        "combined_score": 0.0,
        "solved": 0.0,
        "answers": 0.0,
        "scorer_errors": 1.0,
    }


def test_the_search_scores_a_percentage_scorer_as_training_and_evaluation_do():
    """A plugin scorer giving percentages is forced into [0, 1] in training and evaluation; the search once
    scored it unclamped (its table said mean best 33.3, no warning). A scorer returning the wrong number of
    values is counted in scorer_errors, not raised."""
    from vpo.search.evaluator import score_program
    from vpo.task import TASKS, Task, register

    class Percent(Task):
        name = "percent_plugin"
        objectives = (("a", "first"), ("b", "second"))
        scalar_weights = (0.5, 0.5)
        single_format_line = "Answer with two percentages."

        def split_answers(self, text, m):
            return [line for line in text.splitlines() if line.strip()][:m]

        def score_answer(self, answer, ground_truth):
            return [float(v) for v in answer.split(",")]  # "40,100": percentages, as a careless plugin writes

    task = register(Percent())
    try:
        text = "40,100\n20,30"
        scored = score_program(task.name, text, {}, 2)
        # evaluation's score of each answer as a candidate, and training's row of the response
        candidates = [task.score_candidate(answer, {}) for answer in ("40,100", "20,30")]
        assert candidates == [[1.0, 1.0], [1.0, 1.0]]
        assert task.score_response(text, {}, 2)[0] == candidates
        assert scored == {"combined_score": 1.0, "solved": 1.0, "answers": 2.0, "scorer_errors": 0.0}
        three = score_program(task.name, "1,0,1", {}, 2)  # three values for k = 2
        assert three == {"combined_score": 0.0, "solved": 0.0, "answers": 0.0, "scorer_errors": 1.0}
    finally:
        del TASKS[task.name]


def test_a_multi_answer_code_response_reaches_openevolve_with_every_program(tmp_path):
    from openevolve.utils.code_utils import parse_full_rewrite

    from vpo.data import read_rows
    from vpo.search.evaluator import program_response, score_program
    from vpo.task import resolve

    resolve("lcb").preprocess(
        str(tmp_path), {"source": "livecodebench", "livecodebench": {"path": str(REPO / "tests" / "fixtures" / "lcb")}}
    )
    row = next(r for r in read_rows(str(tmp_path), "test") if r["extra_info"]["task_id"] == "lc-add-k")
    truth = row["reward_model"]["ground_truth"]
    wrong = "def addK(nums, k):\n    return nums"
    two_of_three = "def addK(nums, k):\n    return [] if k == 5 else [x + k for x in nums]"
    right = "def addK(nums, k):\n    return [x + k for x in nums]"
    response = "\n---\n".join(
        f"Solution {i}:\n```python\n{code}\n```" for i, code in enumerate((wrong, two_of_three, right), 1)
    )
    # OpenEvolve alone keeps the first block: the wrong program
    assert score_program("lcb", parse_full_rewrite(response, "python"), truth, 3)["combined_score"] == 0.0
    kept = parse_full_rewrite(program_response("lcb", response, 3), "python")
    assert score_program("lcb", kept, truth, 3) == {
        "combined_score": 1.0,
        "solved": 1.0,
        "answers": 3.0,
        "scorer_errors": 0.0,
    }
    partial = parse_full_rewrite(program_response("lcb", response.rsplit("---", 1)[0], 3), "python")
    assert score_program("lcb", partial, truth, 3)["combined_score"] == pytest.approx(2 / 3)
    # one answer per response, routes (not code) and garbage pass unchanged
    assert program_response("lcb", response, 1) == response
    assert program_response("maze", response, 3) == response
    assert program_response("lcb", "\x00 ``` }{", 3) == "\x00 ``` }{"


# ---- the loopback server ------------------------------------------------------------------------
def refused(url: str) -> bool:
    host, port = url.split("//")[1].split("/")[0].split(":")
    with socket.socket() as sock:
        sock.settimeout(2)
        return sock.connect_ex((host, int(port))) != 0


def test_loopback_server_answers_openevolve_client_and_is_gone_after(tiny_base_model, tiny_maze_data):
    from openevolve.config import LLMModelConfig
    from openevolve.llm.openai import OpenAILLM

    from vpo.data import read_rows
    from vpo.generate import SamplingSettings, TorchBackend
    from vpo.search.llm_server import LoopbackServer

    backend = TorchBackend(tiny_base_model, progress=False)
    prompt = read_rows(tiny_maze_data, "test")[0]["prompt"]
    with LoopbackServer(backend, "tiny", max_tokens_cap=16) as server:
        assert server._httpd.server_address[0] == "127.0.0.1" and server.url.startswith("http://127.0.0.1:")
        llm = OpenAILLM(
            LLMModelConfig(
                name="tiny",
                api_base=server.url,
                api_key=server.token,
                temperature=0.7,
                top_p=1.0,
                max_tokens=64,
                timeout=60,
                retries=0,
                retry_delay=1,
                random_seed=7,
            )
        )
        first = asyncio.run(llm.generate_with_context("", list(prompt)))
        again = asyncio.run(llm.generate_with_context("", list(prompt)))
        # what the project's backend samples for the same conversation, seed and (capped) length
        direct = backend.generate([prompt], 1, SamplingSettings(temperature=0.7, max_new_tokens=16, seed=7))[0][0]
        assert first == again == direct
        auth = {"Authorization": f"Bearer {server.token}"}
        with urllib.request.urlopen(urllib.request.Request(f"{server.url}/models", headers=auth)) as reply:
            assert json.load(reply)["data"][0]["id"] == "tiny"
        request = urllib.request.Request(
            f"{server.url}/chat/completions",
            data=b'{"messages": []}',
            headers={"Content-Type": "application/json", **auth},
        )
        with pytest.raises(urllib.error.HTTPError) as bad:
            urllib.request.urlopen(request)
        assert bad.value.code == 400 and "messages" in json.load(bad.value)["error"]["message"]
        url = server.url
    assert refused(url)


# ---- whole searches ------------------------------------------------------------------------------
def write_search_inputs(tmp_path: Path, iterations: int, checkpoint_interval: int) -> tuple[Path, Path]:
    """A config file (the cpu preset with a tiny search) and a hardest.json naming test problems 0 and 2."""
    cfg = yaml.safe_load((REPO / "config.yaml").read_text())
    cfg["presets"]["cpu"]["evolve"] = {
        "n_problems": 2,
        "iterations": iterations,
        "checkpoint_interval": checkpoint_interval,
        "num_islands": 1,
        "parent_in_prompt": False,
    }
    config = tmp_path / "config.yaml"
    config.write_text(yaml.safe_dump(cfg))
    hardest = tmp_path / "hardest.json"
    hardest.write_text(json.dumps({"problems": [{"problem": 0, "best_at": 0.0}, {"problem": 2, "best_at": 0.0}]}))
    return config, hardest


def search_command(model, data, hardest, config, out) -> list[str]:
    return [
        sys.executable,
        "-m",
        "vpo.cli",
        "evolve",
        "search",
        "--model",
        str(model),
        "--task",
        "maze",
        "--method",
        "grpo",
        "--data",
        str(data),
        "--hardest",
        str(hardest),
        "--out",
        str(out),
        "--config",
        str(config),
        "--preset",
        "cpu",
    ]


@pytest.mark.slow
def test_same_seed_same_search(tmp_path, tiny_base_model, tiny_maze_data):
    from vpo.config import load_config
    from vpo.search.evolve import search_cell

    config, hardest = write_search_inputs(tmp_path, iterations=4, checkpoint_interval=2)
    cfg = load_config(str(config), "cpu")
    runs = []
    for name in ("a", "b"):
        search_cell(
            model=str(tiny_base_model),
            task_name="maze",
            method_name="grpo",
            data_dir=str(tiny_maze_data),
            hardest=str(hardest),
            out=str(tmp_path / name),
            cfg=cfg,
            train_seed=0,
            backend="torch",
        )
        runs.append(pd.read_parquet(tmp_path / name / "scores.parquet"))
    assert list(runs[0].columns) == ["problem", "iteration", "best_score", "solved"]
    assert len(runs[0]) == 2 * 5  # iterations 0..4 of two problems
    pd.testing.assert_frame_equal(runs[0], runs[1])
    traces = [
        [
            json.loads(line)["child_metrics"]
            for line in (tmp_path / n / "problems" / "0" / "trace.jsonl").read_text().splitlines()
        ]
        for n in ("a", "b")
    ]
    assert traces[0] == traces[1] and len(traces[0]) == 4  # every iteration's program, not only the best
    assert all(t["scorer_errors"] == 0.0 for t in traces[0])
    assert json.loads((tmp_path / "a" / "problems" / "0" / "result.json").read_text())["scorer_errors"] == 0


@pytest.mark.slow
def test_killed_search_leaves_no_server_or_worker_and_resumes_to_the_same_iteration_count(
    tmp_path, tiny_base_model, tiny_maze_data
):
    import psutil

    iterations = 12
    config, hardest = write_search_inputs(tmp_path, iterations=iterations, checkpoint_interval=2)
    out, log = tmp_path / "evolve", tmp_path / "search.log"
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    with open(log, "w") as fh:
        job = subprocess.Popen(
            search_command(tiny_base_model, tiny_maze_data, hardest, config, out),
            cwd=REPO,
            stdout=fh,
            stderr=subprocess.STDOUT,
            env=env,
        )
    trace = out / "problems" / "0" / "trace.jsonl"
    checkpoints = out / "problems" / "0" / "openevolve" / "checkpoints"
    deadline = time.time() + 120
    # mid-search, with a complete checkpoint to resume from: OpenEvolve's workers can trace iteration 5 before
    # the controller has written checkpoint_2, and a kill then left nothing to resume (the rerun rightly
    # started afresh, and this test failed about one run in five). Problem 0 takes about 3 s: poll often.
    while time.time() < deadline and not (trace.is_file() and any(checkpoints.glob("checkpoint_*/metadata.json"))):
        assert job.poll() is None, log.read_text()
        time.sleep(0.02)
    url = log.read_text().split("model server for ")[1].split(" at ")[1].split()[0]
    workers = psutil.Process(job.pid).children(recursive=True)
    assert workers, "OpenEvolve runs its iterations in worker processes"
    job.send_signal(signal.SIGKILL)
    job.wait()
    gone, alive = psutil.wait_procs(workers, timeout=10)
    assert not alive, f"processes outlived the killed job: {[p.pid for p in alive]}"
    assert refused(url)
    assert not (out / "summary.json").exists() and not (out / "problems" / "0" / "result.json").exists()

    done = subprocess.run(
        search_command(tiny_base_model, tiny_maze_data, hardest, config, out),
        cwd=REPO,
        capture_output=True,
        text=True,
        env=env,
        timeout=600,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    assert "resuming from checkpoint_" in done.stderr
    result = json.loads((out / "problems" / "0" / "result.json").read_text())
    assert result["iterations"] == iterations and len(result["curve"]) == iterations + 1
    for problem in ("0", "2"):  # every iteration once: a program, or a response with none in it
        traced = [
            json.loads(line)["iteration"]
            for name in ("trace.jsonl", "trace_failures.jsonl")
            if (out / "problems" / problem / name).is_file()
            for line in (out / "problems" / problem / name).read_text().splitlines()
        ]
        assert sorted(traced) == list(range(1, iterations + 1))
    summary = json.loads((out / "summary.json").read_text())
    assert [p["iterations"] for p in summary["problems"]] == [iterations, iterations]
    scores = pd.read_parquet(out / "scores.parquet")
    assert np.all(np.diff(scores[scores.problem == 0].best_score) >= 0)


def test_search_state_from_another_model_is_removed(tmp_path):
    from vpo.search.evolve import reset_state

    out = tmp_path / "evolve"
    reset_state(out, {"model": "a"})
    (out / "problems" / "0").mkdir(parents=True)
    reset_state(out, {"model": "a"})
    assert (out / "problems" / "0").is_dir()  # same identity: resume
    reset_state(out, {"model": "b"})
    assert not (out / "problems").exists()  # another model: start over


# ---- aggregation, table and figures ---------------------------------------------------------------
def search_cells(tmp_path: Path, task: str, methods: dict) -> list[Path]:
    """{method: {seed: {problem: [best score at t = 0..T]}}} -> summary.json + scores.parquet per cell
    (solved = best score 1, as for LiveCodeBench)."""
    paths = []
    for method, seeds in methods.items():
        for seed, problems in seeds.items():
            cell = tmp_path / task / method / f"seed{seed}" / "evolve"
            cell.mkdir(parents=True)
            rows = [
                {"problem": p, "iteration": t, "best_score": v, "solved": v >= 1.0}
                for p, values in problems.items()
                for t, v in enumerate(values)
            ]
            pd.DataFrame(rows).to_parquet(cell / "scores.parquet", index=False)
            (cell / "summary.json").write_text(json.dumps({"task": task, "method": method, "train_seed": seed}))
            paths.append(cell / "summary.json")
    return paths


GRID = {  # two problems, iterations 0..4
    "grpo": {0: {1: [0, 0, 0.2, 0.2, 0.2], 2: [0, 0, 0, 0, 0]}, 1: {1: [0, 0.1, 0.1, 0.1, 0.1], 2: [0] * 5}},
    "vpo": {0: {1: [0, 0.5, 1, 1, 1], 2: [0, 0, 0, 0.5, 1]}, 1: {1: [0, 1, 1, 1, 1], 2: [0, 0, 0, 0, 0]}},
}


def test_search_curves_average_problems_then_seeds(tmp_path):
    from vpo.report.aggregate import aggregate_evolve

    curves = aggregate_evolve(search_cells(tmp_path, "lcb", GRID))
    vpo = curves[(curves.method == "vpo")].set_index(["metric", "iteration"])
    # solved: seed 0 -> 0, 0, 1, 1, 2; seed 1 -> 0, 1, 1, 1, 1
    assert [vpo.at[("solved", t), "mean"] for t in range(5)] == [0, 0.5, 1, 1, 1.5]
    assert vpo.at[("solved", 4), "stderr"] == pytest.approx(0.5)  # std(2, 1) / sqrt(2)
    # mean best: seed 0 -> (1 + 1) / 2 = 1 at t = 4; seed 1 -> (1 + 0) / 2; over seeds 0.75
    assert vpo.at[("mean_best", 4), "mean"] == pytest.approx(0.75)
    assert vpo.at[("mean_best", 1), "mean"] == pytest.approx((0.25 + 0.5) / 2)
    assert set(curves.n_seeds) == {2} and set(curves.n_problems) == {2}


def test_evolve_table_reads_solved_at_the_asked_iterations(tmp_path):
    from vpo.report.aggregate import aggregate_evolve
    from vpo.report.table_render import render_evolve
    from vpo.report.tables import evolve_table

    table = evolve_table(aggregate_evolve(search_cells(tmp_path, "lcb", GRID)), ["grpo", "vpo"], [2, 4, 9])
    vpo = table[table.method == "vpo"]
    assert vpo.iteration.tolist() == [2, 4] and vpo["mean"].tolist() == [1.0, 1.5]  # 9 > 4: the last, once
    md = re.sub(r" {2,}", " ", render_evolve(table, latex=False))
    assert "| VPO | 1.000 ± 0.000 | 1.500 ± 0.500 |" in md and "t=4" in md and "LiveCodeBench 2" in md


def test_evolve_and_case_study_figures_have_the_papers_panels(tmp_path):
    from vpo.report.aggregate import aggregate_evals, aggregate_evolve
    from vpo.report.figures import evolve, lcb_case_study

    curves = aggregate_evolve(search_cells(tmp_path, "lcb", GRID))
    fig = evolve(curves=curves, task="lcb", methods=["grpo", "vpo"], out=tmp_path / "evolve_lcb.pdf")
    assert (tmp_path / "evolve_lcb.pdf").read_bytes()[:4] == b"%PDF"
    solved, best = [ax for ax in fig.axes if ax.get_visible()]
    assert solved.get_ylabel() == "problems solved (of 2)" and best.get_ylabel() == "mean best score so far"
    assert list(solved.get_lines()[1].get_ydata()) == [0, 0.5, 1, 1, 1.5]  # VPO, the seed mean
    assert [line.get_label() for line in best.get_lines()] == ["GRPO", "VPO"]

    evals = []
    for method in ("grpo", "vpo"):
        for seed in (0, 1):
            path = tmp_path / f"{method}{seed}.json"
            best_k = [0.2 + 0.1 * k for k in range(3)]
            path.write_text(
                json.dumps(
                    {
                        "task": "lcb",
                        "method": method,
                        "train_seed": seed,
                        "eval_seed": 0,
                        "budget": 3,
                        "pass_at_k": best_k,
                        "best_at_k": best_k,
                        "best_at_k_perm": best_k,
                        "expected_best_of_m": 0.1,
                        "diversity": 0.1,
                        "parse_failure_rate": 0.0,
                    }
                )
            )
            evals.append(path)
    per_seed, summary = aggregate_evals(evals)
    fig = lcb_case_study(
        summary=summary, per_seed=per_seed, curves=curves, methods=["grpo", "vpo"], out=tmp_path / "case.pdf"
    )
    titles = [ax.get_title() for ax in fig.axes]
    assert [t[:3] for t in titles] == ["(a)", "(b)", "(c)", "(d)"]
    assert "pass@k" in titles[0] and "best@k" in titles[1] and "solved" in titles[2] and "best@t" in titles[3]

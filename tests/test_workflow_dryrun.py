"""The Snakemake DAG, planned without running anything: per preset, per cell, after a touch, with
bad configs, and through each profile."""

import os
import re
import subprocess
import sys
import time
from collections import Counter
from pathlib import Path

import pytest
from snakemake.api import SnakemakeApi
from snakemake.settings.enums import Quietness
from snakemake.settings.types import ConfigSettings, DAGSettings, OutputSettings, ResourceSettings, StorageSettings

REPO = Path(__file__).resolve().parents[1]
SNAKEFILE = REPO / "workflow" / "Snakefile"
SNAKEMAKE = Path(sys.executable).parent / "snakemake"


def dryrun(workdir, config=None, targets=(), executor="dryrun"):
    """Files a run would produce in workdir (the API changes into it), as sorted relative paths."""
    planned = []
    with SnakemakeApi(OutputSettings(dryrun=True, quiet={Quietness.ALL})) as api:
        workflow = api.workflow(
            snakefile=SNAKEFILE,
            workdir=workdir,
            resource_settings=ResourceSettings(cores=1, nodes=100),
            config_settings=ConfigSettings(configfiles=[REPO / "config.yaml"], config=config or {}),
            storage_settings=StorageSettings(),
        )
        dag = workflow.dag(DAGSettings(targets=set(targets)))
        if executor == "dryrun":
            dag.execute_workflow(executor="dryrun", updated_files=planned)
        else:
            dag.execute_workflow(executor=executor, pseudo_executor="dryrun", updated_files=planned)
    return sorted(str(Path(p)) for p in planned)


def kinds(files):
    """Count planned files by what they are (the rule that writes them)."""

    def kind(path):
        if re.match(r"results/[^/]+/runs/", path):
            return (
                "model"
                if path.endswith("/model")
                else Path(path).suffix.lstrip(".")
                if "/eval/" in path
                else Path(path).name
            )
        return re.sub(r"_(maze|musique|eureqa|tool|lcb)\.", ".", path.split("/")[-1])

    return Counter(kind(f) for f in files)


def test_cpu_preset_plans_every_rule(tmp_path):
    files = dryrun(tmp_path)
    counts = kinds(files)
    # 4 methods x 1 task x 5 seeds = 20 cells, one eval seed each
    assert counts["train.json"] == 20 and counts["model"] == 20 and counts["json"] == 20 and counts["parquet"] == 20
    assert counts["train.parquet"] == counts["test.parquet"] == 1
    # one warm start per prompt form in use: grpo and max_at_k answer single, multi_rlvr and vpo multi
    assert sorted(f for f in files if f.startswith("results/cpu/base/")) == [
        "results/cpu/base/maze/multi/base.json",
        "results/cpu/base/maze/single/base.json",
    ]
    for target in [
        "figures/cpu/pass_at_k.pdf",
        "figures/cpu/best_at_k.pdf",
        "figures/cpu/diversity_over_training.pdf",
        "results/cpu/tables/main_table.csv",
        "results/cpu/tables/main_table.md",
        "results/cpu/tables/main_table.tex",
        "results/cpu/tables/best_at_k_maze.tex",
        "results/cpu/tables/pass_at_k_maze.md",
        "results/cpu/aggregate/summary.csv",
        "results/cpu/aggregate/training_curves.csv",
        "figures/pass_at_k.pdf",
        "figures/pass_at_k.png",
    ]:  # the latest run's copies
        assert target in files
    assert all(f.startswith(("results/cpu/", "figures/")) for f in files)
    # the resolved config every vpo command reads is written when a run starts, not by the plan
    assert not (tmp_path / "results").exists()


def test_paper_grid_through_the_slurm_executor(tmp_path):
    files = dryrun(tmp_path, config={"preset": "paper"}, executor="slurm")
    counts = kinds(files)
    # 9 methods x 5 tasks x 3 seeds = 135 cells, and the ablations' 9 variants x 3 seeds on maze; eval
    # seeds 1 + 1 + 4 + 4 + 1 per cell and task (maze: 1)
    assert counts["train.json"] == 135 + 27 and counts["model"] == 135 + 27
    assert counts["json"] == 9 * 3 * (1 + 1 + 4 + 4 + 1) + 27
    assert counts["parquet"] == 9 * 3 * 11 + 27 and counts["train.parquet"] == counts["test.parquet"] == 5
    assert "results/paper/runs/maze/vpo_sobol/seed2/train.json" in files
    assert not any("/vpo_sobol/" in f for f in files if not f.startswith("results/paper/runs/maze/"))
    for name in ("components", "alpha", "sampler", "m"):
        assert f"figures/paper/ablation_{name}.pdf" in files
    assert not any(f.startswith("results/paper/base/") for f in files)  # veRL trains from the hub model
    assert sum(f.startswith("results/paper/tables/best_at_k_") for f in files) == 5 * 4  # csv, md, tex, html per task
    for method in (
        "grpo",
        "gdpo",
        "maxrl",
        "max_at_k",
        "multi_rlvr",
        "vpo",
        "vpo_single",
        "goal_cond",
        "random_weight",
    ):
        assert (
            f"results/paper/runs/lcb/{method}/seed2/train.json" in files
        )  # every method on code, multi-answer included


def test_one_cell_is_rebuilt_alone(tmp_path):
    cell = "results/cpu/runs/maze/vpo/seed1"
    files = dryrun(tmp_path, targets=[f"{cell}/eval/evalseed0.json"])
    assert files == sorted(
        [
            "results/cpu/data/maze/train.parquet",
            "results/cpu/data/maze/test.parquet",
            "results/cpu/base/maze/multi/base.json",
            f"{cell}/train.json",
            f"{cell}/model",
            f"{cell}/eval/evalseed0.parquet",
            f"{cell}/eval/evalseed0.json",
        ]
    )


STAGES = {"data": 0, "base": 1, "train.json": 2, "model": 3, "eval": 4, "hardest": 5, "aggregate": 7, "evolve": 6}


def stage(path):
    """Where a planned file stands in the DAG (aggregate before evolve: .../aggregate/evolve_maze.csv
    is an aggregate); tables and figures after everything, the copies in figures/ last."""
    if re.fullmatch(r"figures/[^/]+", path):
        return 9
    if path.startswith("figures/") or "/tables/" in path:
        return 8
    for key, value in STAGES.items():
        if f"/{key}" in path or path.endswith(key):
            return value
    return 8


def complete(workdir, files, start):
    """Make `files` exist, each newer than what it is made from: an up-to-date tree."""
    for path in sorted(files, key=stage):
        target = workdir / path
        if path.endswith("/model"):
            target.mkdir(parents=True, exist_ok=True)
        else:
            target.parent.mkdir(parents=True, exist_ok=True)
            target.write_text(path)
        os.utime(target, (start + 10 * stage(path),) * 2)


def test_touching_one_train_marker_replans_only_that_cell_and_what_follows(tmp_path):
    every = dryrun(tmp_path)
    complete(tmp_path, every, time.time() - 1000)
    assert dryrun(tmp_path) == []

    cell = "results/cpu/runs/maze/vpo/seed1"
    os.utime(tmp_path / cell / "train.json")  # touch: now newer than everything
    replanned = dryrun(tmp_path)
    assert replanned == sorted(
        [
            f"{cell}/model",
            f"{cell}/eval/evalseed0.parquet",
            f"{cell}/eval/evalseed0.json",
            "results/cpu/aggregate/summary.csv",
            "results/cpu/aggregate/per_seed.csv",
            "results/cpu/aggregate/provenance.json",
            "results/cpu/aggregate/training_curves.csv",
            "results/cpu/evolve/maze/hardest.json",
            "results/cpu/aggregate/per_problem.csv",
            "results/cpu/aggregate/intervals.csv",
            "results/cpu/aggregate/improvement.csv",
            "results/cpu/aggregate/profiles.csv",
            "results/cpu/aggregate/evolve_maze.csv",
        ]
        + [f for f in every if "/evolve/" in f and f.startswith("results/cpu/runs/")]  # the hardest set may change
        + [f for f in every if f.startswith(("figures/", "results/cpu/tables/")) and "mechanism" not in f]
    )  # the bandit figure depends on no cell


def test_a_gone_evaluation_remakes_it_and_the_tables_and_figures_made_from_it(tmp_path, capfd):
    """Snakemake alone plans nothing when a finished cell's evaluation is gone (it remakes a missing
    intermediate only for a job that runs anyway), and the tables keep numbers whose source is gone."""
    every, start = dryrun(tmp_path), time.time() - 1000
    complete(tmp_path, every, start)
    cell = "results/cpu/runs/maze/vpo/seed1"
    (tmp_path / cell / "eval" / "evalseed0.json").unlink()
    replanned = dryrun(tmp_path)
    assert f"{cell}/eval/evalseed0.json" in replanned and f"{cell}/eval/evalseed0.parquet" in replanned
    for made_from_it in (
        "results/cpu/aggregate/summary.csv",
        "results/cpu/tables/main_table.md",
        "figures/cpu/pass_at_k.pdf",
        "figures/pass_at_k.pdf",
    ):
        assert made_from_it in replanned
    # no other cell trains or evaluates again (their searches follow the hardest set, which may change)
    assert not any(
        f.startswith("results/cpu/runs/") and not f.startswith(cell) and "/evolve/" not in f for f in replanned
    )
    assert (
        f"stale: results/cpu/aggregate/summary.csv lacks its input {cell}/eval/evalseed0.json" in capfd.readouterr().err
    )
    complete(tmp_path, [f"{cell}/eval/evalseed0.json"], start)  # back as it was: nothing planned, no word
    assert dryrun(tmp_path) == [] and "stale:" not in capfd.readouterr().err


def descendants(pid):
    """The pids of a process's children, grandchildren and so on (Linux's /proc)."""
    found, todo = [], [pid]
    while todo:
        parent = todo.pop()
        for task in Path(f"/proc/{parent}/task").glob("*"):
            try:
                children = [int(c) for c in (task / "children").read_text().split()]
            except OSError:
                continue
            found += children
            todo += children
    return found


def command_line(pid):
    try:
        return Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ").decode()
    except OSError:
        return ""


def test_a_killed_rerun_of_an_evaluation_is_rerun_not_replaced_by_the_previous_one(
    tmp_path, tiny_maze_data, tiny_multi_base_model
):
    """A real run: a finished cell's evaluation rerun with another temperature, its `vpo eval` SIGKILLed.
    The previous evaluation (temperature 0.7) must not stand for the new one: Snakemake once restored it
    (update() outputs), recorded the failed job's params for it, and the next run said "Nothing to be done"."""
    import shutil
    import signal

    every, start = dryrun(tmp_path), time.time() - 1000
    complete(tmp_path, every, start)
    cell = tmp_path / "results/cpu/runs/maze/vpo/seed1"
    test_split = tmp_path / "results/cpu/data/maze/test.parquet"
    times = {path: path.stat().st_mtime for path in (cell / "model", test_split)}
    shutil.rmtree(cell / "model")
    shutil.copytree(tiny_multi_base_model, cell / "model")  # a real model: the evaluation runs until killed
    shutil.copy(tiny_maze_data / "test.parquet", test_split)
    for path, mtime in times.items():
        os.utime(path, (mtime,) * 2)  # the finished tree's times: only the new temperature reruns the evaluation
    target = "results/cpu/runs/maze/vpo/seed1/eval/evalseed0.json"
    hotter = "task_settings={'maze': {'eval': {'temperature': 1.3}}}"
    cmd = [str(SNAKEMAKE), "--snakefile", str(SNAKEFILE), "--directory", str(tmp_path), "--cores", "1",
           "--configfile", str(REPO / "config.yaml"), "--workflow-profile", str(REPO / "profiles" / "default"),
           "--config", hotter, "-f", target]  # fmt: skip
    run = subprocess.Popen(cmd, cwd=tmp_path, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    killed, deadline = None, time.monotonic() + 240
    while killed is None and run.poll() is None and time.monotonic() < deadline:
        evaluations = [  # the Python process, not the job's shell around it
            pid for pid in descendants(run.pid) if command_line(pid).split(" ")[0].split("/")[-1].startswith("python")
            and "vpo.cli eval" in command_line(pid)
        ]  # fmt: skip
        if evaluations:
            time.sleep(0.5)  # mid-run: importing, loading the model or sampling
            os.kill(evaluations[0], signal.SIGKILL)
            killed = evaluations[0]
        time.sleep(0.05)
    _, err = run.communicate(timeout=240)
    assert killed is not None and run.returncode != 0, err[-2000:]
    assert "returned non-zero exit status 137" in err, err[-2000:]  # the evaluation died of the kill
    assert "Restored previous version" not in err
    assert not (cell / "eval/evalseed0.json").exists() and not (cell / "eval/evalseed0.parquet").exists()
    # the next run, with the same settings, reruns the evaluation and what is made from it
    planned = dryrun(tmp_path, config={"task_settings": {"maze": {"eval": {"temperature": 1.3}}}})
    assert target in planned and "results/cpu/aggregate/summary.csv" in planned


def test_a_run_whose_backend_is_not_installed_stops_before_any_job(tmp_path):
    """A real run with `--config backend=trl` in a Python without TRL stops at its start with one line, every
    finished cell as it was (a train job once removed the cell's marker before it found TRL missing)."""
    every = dryrun(tmp_path)
    complete(tmp_path, every, time.time() - 1000)
    marker = tmp_path / "results/cpu/runs/maze/vpo/seed1/train.json"
    before = marker.read_text()
    no_trl = "import sys; sys.modules['trl'] = None; from snakemake.cli import main; sys.argv[0] = 'snakemake'; main()"
    target = str(marker.relative_to(tmp_path))
    cmd = [sys.executable, "-c", no_trl, "--snakefile", str(SNAKEFILE), "--directory", str(tmp_path), "--cores", "1",
           "--configfile", str(REPO / "config.yaml"), "--config", "backend=trl", "-f", target]  # fmt: skip
    result = subprocess.run(cmd, cwd=tmp_path, capture_output=True, text=True, timeout=300)
    assert result.returncode != 0
    assert "backend trl needs the package trl, which this Python lacks: pip install -e '.[trl]'" in result.stderr
    assert "(config: backend=trl)" in result.stderr and "localrule train" not in result.stderr
    assert marker.read_text() == before
    plan = subprocess.run([*cmd, "-n"], cwd=tmp_path, capture_output=True, text=True, timeout=300)
    assert plan.returncode == 0 and "rule train:" in plan.stdout  # a dry-run still shows the plan


def test_a_grid_too_large_to_plan_quickly_is_announced_before_planning(tmp_path, capfd):
    """10,000 seeds planned 170,059 jobs in 10 min and 3.46 GB with no word. The workflow is only parsed
    here (no DAG is built): the line comes before planning starts."""

    def parse(seeds):
        with SnakemakeApi(OutputSettings(dryrun=True, quiet={Quietness.ALL})) as api:
            workflow = api.workflow(
                snakefile=SNAKEFILE,
                workdir=tmp_path,
                resource_settings=ResourceSettings(cores=1),
                config_settings=ConfigSettings(configfiles=[REPO / "config.yaml"], config={"seeds": seeds}),
                storage_settings=StorageSettings(),
            )
            workflow.dag(DAGSettings())  # parses the Snakefile
        return capfd.readouterr().err

    started = time.monotonic()
    err = parse(list(range(10_000)))  # cpu grid: 4 cells x 10,000 seeds x (train, merge, 1 eval, search)
    assert "plan: about 160,000 jobs; Snakemake takes about 9 min and 3.3 GB" in err
    assert time.monotonic() - started < 60
    assert "plan: about" not in parse(list(range(5)))


def test_presets_in_one_tree_never_redo_each_others_outputs(tmp_path):
    cpu = dryrun(tmp_path)
    complete(tmp_path, cpu, time.time() - 2000)
    for preset in ("ci", "paper"):  # a finished cpu run, then another preset's plan
        planned = dryrun(tmp_path, config={"preset": preset})
        assert planned and all(
            f.startswith((f"results/{preset}/", f"figures/{preset}/")) or re.fullmatch(r"figures/[^/]+", f)
            for f in planned
        ), preset
    ci = dryrun(tmp_path, config={"preset": "ci"})
    complete(tmp_path, ci, time.time() - 1000)  # a finished ci run after it: the cpu tree is untouched
    assert dryrun(tmp_path) == [] and all((tmp_path / f).exists() for f in cpu)


@pytest.mark.parametrize(
    "config, key, words",
    [
        ({"methods": ["grpo", "vpo", "reinforce"]}, "methods", "'reinforce' is neither a method"),
        ({"seeds": [0, -3]}, "seeds[1]", "-3 is less than the minimum of 0"),
        ({"seeds": [2**32]}, "seeds[0]", "4294967296 is greater than the maximum of 4294967295"),  # crashed training
        ({"tasks": ["maze", "sudoku"]}, "tasks", "'sudoku' has no settings; add task_settings.sudoku"),
        ({"preset": "x; touch pwned"}, "preset", "does not match"),  # a hostile name never reaches a shell
        ({"method_settings": {"vpo": {"alpah": 0.5}}}, "method_settings.vpo", "'alpah' was unexpected"),
        ({"task_settings": {"maze": {"eval": {"budget": 31}}}}, "task_settings.maze.eval.budget", "not whole groups"),
        (
            {"task_settings": {"lcb": {"data": {"source": "apps"}}}},
            "task_settings.lcb.data",
            "source 'apps' is not one of",
        ),
        ({"task_settings": {"maze": {"data": {"size": 12}}}}, "task_settings.maze.data", "size 12 is outside 5..9"),
        # whole numbers written as floats once reached the code as floats; a token limit below 1 reached training
        ({"seeds": [0, 1.0]}, "seeds[1]", "1.0 is not of type 'integer'"),
        ({"local_trainer": {"steps": 4.0}}, "local_trainer.steps", "4.0 is not of type 'integer'"),
        (
            {"local_trainer": {"max_new_tokens": {"single": 0}}},
            "local_trainer.max_new_tokens.single",
            "0 is less than the minimum of 1",
        ),
    ],
)
def test_malformed_config_fails_at_parse_time(tmp_path, config, key, words):
    # the overrides win over the preset; preset=paper makes the paper grid the base
    with pytest.raises(Exception) as err:
        dryrun(tmp_path, config={"preset": "paper", **config})
    assert key in str(err.value) and words in str(err.value)
    assert not (tmp_path / "results" / "runs").exists()


def test_a_bad_prompt_template_fails_the_plan_naming_the_file(tmp_path):
    template = tmp_path / "maze_multi.txt"
    template.write_text("Give {m} routes. {multi_format}")  # the maze itself is missing
    with pytest.raises(Exception) as err:
        dryrun(tmp_path, config={"task_settings": {"maze": {"prompts": {"multi": str(template)}}}})
    assert f"prompt template {template} (maze, multi) lacks {{grid}}, {{max_steps}}" in str(err.value)
    template.write_text("Give {m} routes through {grid} in {max_steps}. {multi_format}")
    planned = dryrun(tmp_path, config={"task_settings": {"maze": {"prompts": {"multi": str(template)}}}})
    assert "results/cpu/data/maze/train.parquet" in planned


def cli_dryrun(tmp_path, *args, env=None):
    """`snakemake -n` from a clean directory with the repository's profiles (CLI, so profiles load)."""
    cmd = [
        str(SNAKEMAKE),
        "-n",
        "--snakefile",
        str(SNAKEFILE),
        "--directory",
        str(tmp_path),
        "--configfile",
        str(REPO / "config.yaml"),
        "--workflow-profile",
        str(REPO / "profiles" / "default"),
        *args,
    ]
    result = subprocess.run(
        cmd, cwd=tmp_path, capture_output=True, text=True, timeout=120, env={**os.environ, **(env or {})}
    )
    assert result.returncode == 0, result.stderr[-3000:]
    return result.stdout + result.stderr


def job_counts(output):
    return {m.group(1): int(m.group(2)) for m in re.finditer(r"^(\w+)\s+(\d+)$", output, re.M)}


# the grid's 135 cells and the ablations' 27 (9 variants x 3 seeds on maze, one eval seed each)
PAPER_COUNTS = {
    "preprocess": 5,
    "train": 135 + 27,
    "merge": 135 + 27,
    "eval": 297 + 27,
    "aggregate": 1,
    "aggregate_training": 1,
    "aggregate_ablations": 1,
    "figure_ablation": 4,
    "table_ablations": 1,
    # bootstrap intervals over seeds x problems: per-problem scores, estimates, 2 tables, 3 figures
    "aggregate_problems": 1,
    "intervals": 1,
    "table_intervals": 1,
    "table_pool_quality": 1,
    "figure_intervals": 1,
    "figure_performance_profiles": 1,
    "figure_pool_quality": 1,
    "table_main": 1,
    "table_curve": 10,
    "figure_pass_at_k": 1,
    "figure_best_at_k": 1,
    "figure_diversity_over_training": 1,
    "mechanism_bandit": 1,
    "figure_mechanism_bandit": 1,
    "mechanism_advantage": 1,
    "figure_mechanism_advantage": 1,
    # evolutionary search: per task the hardest problems, 9 x 3 searches, curves, figure
    "evolve_select": 5,
    "evolve_search": 135,
    "aggregate_evolve": 5,
    "figure_evolve": 5,
    "figure_lcb_case_study": 1,
    "table_evolve": 1,
    "figure_appendix_pass_at_k": 1,
    "figure_appendix_best_at_k": 1,  # all nine methods
    "publish_figure": 40,  # figures/<name>: copies of the 20 figures, PDF and PNG
    "all": 1,
    "total": 881,
}


@pytest.mark.slow
@pytest.mark.parametrize("profile", ["slurm", "lsf"])
def test_cluster_profiles_plan_the_paper_grid(tmp_path, profile):
    # profiles/default is layered over the cluster profile, as from the repository root
    output = cli_dryrun(tmp_path, "--profile", str(REPO / "profiles" / profile), "-p")
    assert job_counts(output) == PAPER_COUNTS
    # every cluster job gets the threads config.yaml asks for, not the planning machine's core count
    threads = {
        rule: {int(n) for n in re.findall(rf"OMP_NUM_THREADS=(\d+) python -m vpo.cli {rule} ", output)}
        for rule in ("train", "eval")
    }
    assert threads == {"train": {16}, "eval": {8}}
    profile_yaml = (REPO / "profiles" / profile / "config.yaml").read_text()
    assert re.search(r"^retries: [1-9]", profile_yaml, re.MULTILINE)
    # GPUs per job come from config.yaml's task settings (paper: 4 to train, 1 to evaluate and search),
    # as Slurm's `gpu` resource and as bsub's -gpu option for LSF (whose executor has no GPU resource)
    jobs = re.findall(r"^(?:local)?rule (\w+):\n(?:.*\n)*?\s+resources: (.*)$", output, re.MULTILINE)
    gpus = {}
    for rule, resources in jobs:
        found = re.search(r"\bgpu=(\d+)", resources)
        lsf = re.search(r"lsf_extra=-gpu num=(\d+)", resources)
        gpus.setdefault(rule, set()).add((int(found.group(1)) if found else 0, int(lsf.group(1)) if lsf else 0))
    assert gpus["train"] == {(4, 4)} and gpus["eval"] == gpus["evolve_search"] == {(1, 1)}
    assert gpus["merge"] == {(0, 0)}


def test_every_planned_plot_command_parses(tmp_path):
    """Each `vpo plot` shell command of the ci and paper plans is accepted by `vpo plot`'s own parser
    (an empty option value vanishes in the shell and takes the next flag as its value)."""
    import shlex

    from vpo.cli import build_parser

    commands = []
    for preset in ("ci", "paper"):
        output = cli_dryrun(tmp_path, "-p", "--config", f"preset={preset}")
        commands += re.findall(r"python -m vpo\.cli (plot .*?) > \S+ 2>&1", output)
    assert len(commands) > 20 and any(" ablation " in c for c in commands)
    for command in commands:
        argv = shlex.split(command)
        args = build_parser("plot").parse_args(argv)
        assert args.out, command


@pytest.mark.slow
def test_installed_profile_works_by_name(tmp_path):
    home = tmp_path / "home"
    subprocess.run(
        [sys.executable, "-m", "vpo.cli", "install-profile", "slurm"],
        check=True,
        env={**os.environ, "HOME": str(home), "XDG_CONFIG_HOME": ""},
        capture_output=True,
    )
    assert (home / ".config" / "snakemake" / "slurm" / "config.yaml").exists()
    again = subprocess.run(
        [sys.executable, "-m", "vpo.cli", "install-profile", "slurm"],
        env={**os.environ, "HOME": str(home), "XDG_CONFIG_HOME": ""},
        capture_output=True,
        text=True,
    )
    assert again.returncode == 1 and "already exists" in again.stderr
    work = tmp_path / "work"
    work.mkdir()
    output = cli_dryrun(work, "--profile", "slurm", env={"HOME": str(home), "XDG_CONFIG_HOME": ""})
    assert job_counts(output) == PAPER_COUNTS


@pytest.mark.slow
def test_default_profile_keeps_the_cpu_preset(tmp_path):
    # per cell (4 methods x 5 seeds): train, merge, eval and the evolutionary search = 80 jobs; the rest
    # (data, two warm starts, aggregates, tables, figures, mechanism, copies) does not depend on seeds: 45
    counts = job_counts(cli_dryrun(tmp_path))
    assert counts["train"] == counts["merge"] == counts["eval"] == counts["evolve_search"] == 20
    assert counts["total"] == 125


def test_a_dry_run_writes_nothing_under_results(tmp_path):
    """`snakemake -n` (and a changed config) never rewrites what running jobs read."""
    snapshot = tmp_path / "results" / "config.yaml"
    snapshot.parent.mkdir(parents=True)
    snapshot.write_text("preset: cpu  # a running job's view\n")
    before = {p: p.read_bytes() for p in (tmp_path / "results").rglob("*") if p.is_file()}
    dryrun(tmp_path, config={"preset": "ci"})
    dryrun(tmp_path)
    after = {p: p.read_bytes() for p in (tmp_path / "results").rglob("*") if p.is_file()}
    assert after == before


def test_command_line_seeds_win_over_the_default_preset(tmp_path):
    """The README recipe: `--config seeds=[0]` under the cpu preset plans one seed per cell."""
    counts = kinds(dryrun(tmp_path, config={"seeds": ["0"]}))
    assert counts["train.json"] == 4  # 4 methods x 1 seed


def test_command_line_seeds_equal_to_config_yamls_still_win(tmp_path):
    """`--config seeds=[0,1,2]` is config.yaml's own list: it once went unnoticed and the cpu preset's five
    seeds were planned."""
    counts = job_counts(cli_dryrun(tmp_path, "figures/pass_at_k.pdf", "--config", "seeds=[0,1,2]"))
    assert counts["train"] == 12  # 4 methods x 3 seeds


@pytest.mark.parametrize(
    "path", ["results/ci/runs/maze/grpo/seed0/model", "results/ci/data/maze/train.parquet", "figures/ci/pass_at_k.pdf"]
)
def test_a_rebuild_hint_plans_the_file_in_its_own_preset(tmp_path, path):
    """The hints errors print, run as printed (dry): outside the cpu preset they once named no preset, and
    Snakemake answered MissingRuleException (or planned the default preset's settings)."""
    import shlex

    from vpo.data import rebuild_hint

    hint = re.search(r"`snakemake (.*)`", rebuild_hint(path)).group(1)
    output = cli_dryrun(tmp_path, *shlex.split(hint))
    assert "preset ci" in output or "results/ci/" in output
    assert path in output


def test_a_copy_of_config_yaml_as_a_run_file_changes_only_what_it_changes(tmp_path):
    """README's recipe: `cp config.yaml my-run.yaml`, other seeds. Every leaf of the copy once won over the
    preset, so the cpu run planned the paper grid (backend veRL, 54 trainings) into results/cpu/."""
    import yaml

    mine = yaml.safe_load((REPO / "config.yaml").read_text())
    mine["seeds"] = [7, 8]  # what the user changed; the rest is config.yaml's, under the preset as config.yaml is
    (tmp_path / "my-run.yaml").write_text(yaml.safe_dump(mine, sort_keys=False))
    cmd = [str(SNAKEMAKE), "-n", "--snakefile", str(SNAKEFILE), "--directory", str(tmp_path), "--configfile",
           str(REPO / "config.yaml"), str(tmp_path / "my-run.yaml"), "--workflow-profile",
           str(REPO / "profiles" / "default"), "figures/pass_at_k.pdf"]  # fmt: skip
    result = subprocess.run(cmd, cwd=tmp_path, capture_output=True, text=True, timeout=120)
    assert result.returncode == 0, result.stderr[-3000:]
    counts = job_counts(result.stdout + result.stderr)
    assert counts["train"] == 8 and counts["base_model"] == 2  # the cpu preset's 4 methods (local), 2 seeds
    assert f"config: {tmp_path / 'my-run.yaml'} sets seeds over preset 'cpu'; a copy of config.yaml" in result.stderr
    assert "results/cpu/runs/maze/vpo/seed8/train.json" in result.stdout and "results/cpu/runs/musique" not in (
        result.stdout
    )
    (tmp_path / "run.yaml").write_text("seeds: [0, 1, 2]\n")  # a run file: what it sets wins, equal or not
    result = subprocess.run([*cmd[:-3], str(tmp_path / "run.yaml"), *cmd[-3:]], cwd=tmp_path, capture_output=True,
                            text=True, timeout=120)  # fmt: skip
    assert job_counts(result.stdout + result.stderr)["train"] == 12
    assert f"config: {tmp_path / 'run.yaml'} sets seeds over preset 'cpu'\n" in result.stderr


def test_a_second_config_files_values_equal_to_config_yamls_still_win(tmp_path):
    """`seeds: [0, 1, 2]` in the user's own file is config.yaml's own list: it wins over the cpu preset's
    five seeds as `--config` does (it once planned five)."""
    mine = tmp_path / "mine.yaml"
    mine.write_text("seeds: [0, 1, 2]\n")
    cmd = [
        str(SNAKEMAKE),
        "-n",
        "--snakefile",
        str(SNAKEFILE),
        "--directory",
        str(tmp_path),
        "--configfile",
        str(REPO / "config.yaml"),
        str(mine),
        "--workflow-profile",
        str(REPO / "profiles" / "default"),
        "figures/pass_at_k.pdf",
    ]
    result = subprocess.run(cmd, cwd=tmp_path, capture_output=True, text=True, timeout=120)
    assert result.returncode == 0, result.stderr[-3000:]
    assert job_counts(result.stdout + result.stderr)["train"] == 12  # 4 methods x 3 seeds
    assert "preset 'cpu' sets seeds, but your --configfile/--config value is used" in result.stderr


def test_a_grid_that_leaves_out_aggregated_cells_says_what_it_replaces(tmp_path, capfd):
    """A run of the cpu preset whose grid drops cells its last aggregate holds says so before it runs;
    the top-level figure copies come with their sidecars."""
    aggregate = tmp_path / "results" / "cpu" / "aggregate"
    aggregate.mkdir(parents=True)
    header = "task,method,train_seed,metric,k,value,n_eval_seeds\n"
    (aggregate / "per_seed.csv").write_text(header + "maze,grpo,0,best_at_k,1,0.5,1\nmaze,gdpo,7,best_at_k,1,0.5,1\n")
    files = dryrun(tmp_path)
    err = capfd.readouterr().err
    assert "replaces: results/cpu/aggregate/ holds 1 cell this run's grid leaves out (maze/gdpo/seed7)" in err
    assert {"figures/pass_at_k.pdf", "figures/pass_at_k.pdf.source"} <= set(files)
    (aggregate / "per_seed.csv").write_text(header + "maze,grpo,0,best_at_k,1,0.5,1\n")  # inside the grid
    dryrun(tmp_path)
    assert "replaces:" not in capfd.readouterr().err


def test_a_top_level_figure_says_which_run_it_came_from(tmp_path):
    """rule publish_figure: figures/<name> is the preset's figure, figures/<name>.source names the run."""
    (tmp_path / "figures" / "ci").mkdir(parents=True)
    (tmp_path / "figures" / "ci" / "pass_at_k.pdf").write_bytes(b"%PDF-1.4 the ci preset's figure\n")
    command = [str(SNAKEMAKE), "figures/pass_at_k.pdf", "-s", str(SNAKEFILE), "--directory", str(tmp_path)]
    command += ["--configfile", str(REPO / "config.yaml"), "--cores", "1", "--allowed-rules", "publish_figure"]
    command += ["--config", "preset=ci"]  # options that take several values last: they would swallow the target
    done = subprocess.run(command, capture_output=True, text=True, cwd=tmp_path)
    assert done.returncode == 0, done.stderr[-2000:]
    assert (tmp_path / "figures" / "pass_at_k.pdf").read_bytes() == b"%PDF-1.4 the ci preset's figure\n"
    source = (tmp_path / "figures" / "pass_at_k.pdf.source").read_text().splitlines()
    assert source[0].startswith("figures/pass_at_k.pdf is a copy of figures/ci/pass_at_k.pdf")
    assert source[1] == "preset: ci" and source[2].startswith("tasks: ") and source[-1].startswith("copied: 20")

"""The veRL launcher: the command of every paper cell composes in veRL's Hydra and passes veRL's
validate_config (4-GPU and 1-GPU presets), preflight rejects bad cells in seconds naming the
problem, and veRL's file-logger output becomes the run's metrics.jsonl."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from dataclasses import replace
from pathlib import Path

import pytest

from vpo.backend import RunSpec, TrainResult


def _spec(cfg, task, method, seed, out, data, print_command=False):
    """The cell as `vpo train` hands it to the verl backend."""
    return RunSpec.for_cell(cfg, task, method, seed, data_dir=data, out_dir=out, print_command=print_command)


pytest.importorskip("verl")
pytestmark = pytest.mark.slow  # real veRL imports (about 12 s per process)

REPO = Path(__file__).resolve().parents[1]


@pytest.fixture(scope="module")
def paper_cfg():
    from vpo.config import load_config

    return load_config(str(REPO / "config.yaml"), preset="paper")


@pytest.fixture(scope="module")
def launcher():
    from vpo.verl_ext import launcher

    return launcher


def _compose(overrides):
    from hydra import compose, initialize_config_dir

    with initialize_config_dir(config_dir=str(REPO / "verl" / "config"), version_base=None):
        return compose(config_name="vpo_trainer", overrides=list(overrides))


def _cells(cfg):
    return [(task, method) for task in cfg["tasks"] for method in cfg["methods"]]


@pytest.mark.parametrize("gpus", [4, 1])
def test_every_paper_cell_composes_and_validates(paper_cfg, launcher, tmp_path, gpus):
    from hydra import compose, initialize_config_dir
    from verl.trainer.ppo.utils import need_critic, need_reference_policy
    from verl.utils.config import validate_config

    from vpo.config import deep_merge
    from vpo.methods import get_method

    cfg = deep_merge(paper_cfg, {"verl": {"gpus": gpus}})
    assert len(_cells(cfg)) == 45
    for task, method in _cells(cfg):
        command = launcher.build_command(cfg, task, method, 1, tmp_path / task / method, tmp_path / "data" / task)
        with initialize_config_dir(config_dir=str(REPO / "verl" / "config"), version_base=None):
            config = compose(config_name="vpo_trainer", overrides=list(command.overrides))
        validate_config(config, use_reference_policy=need_reference_policy(config), use_critic=need_critic(config))
        spec, tset = get_method(method), cfg["task_settings"][task]
        assert config.algorithm.adv_estimator == command.estimator
        assert config.algorithm.vpo.method == method and config.data.vpo.method == method
        assert config.data.vpo.m == (tset["m"] if spec.multi_answer else 1)
        # the authors' lengths per data path: multi-answer prompts, goal-conditioned prompts (random-weight
        # GRPO runs through that path with the weights hidden, PAPER_REPRO.md section 1), the rest single
        kind = {"vpo": "multi", "multi_rlvr": "multi", "goal_cond": "goal", "random_weight": "goal"}.get(
            method, "single"
        )
        assert config.data.max_response_length == tset["max_response_length"][kind]
        assert config.data.max_prompt_length == tset["max_prompt_length"][kind]
        assert config.trainer.n_gpus_per_node == gpus
        assert config.trainer.v1.trainer_mode == "vpo_sync"
        assert config.trainer.project_name == f"vpo_{task}"
        assert config.trainer.experiment_name == f"{method}_{task}_seed1"
        assert config.reward.custom_reward_function.path == "pkg://vpo.verl_ext.reward"
        env_vars = config.ray_kwargs.ray_init.runtime_env.env_vars  # Ray takes only strings
        assert env_vars.TOKENIZERS_PARALLELISM == "false" and all(isinstance(v, str) for v in env_vars.values())
        assert env_vars.WANDB_RUN_ID == command.env["WANDB_RUN_ID"]
        expected_preset = "smoke_1gpu" if gpus == 1 else ("7b_8b" if task in ("eureqa", "lcb") else "up_to_4b")
        assert command.batch_preset == expected_preset, (task, command.model)
        if method in ("vpo", "vpo_single"):
            assert config.algorithm.vpo.settings.n_weights == 100
    # the paper's two batch presets (prompts / rollout.n / mini batch / micro batch per GPU)
    assert (command.batch.train_batch_size, command.batch.rollout_n) == ((32, 4) if gpus == 1 else (64, 8))


def test_an_8b_musique_model_gets_the_7b_8b_batch(paper_cfg, launcher, tmp_path):
    """docs/reproducibility.md: the batch table's 7B/8B row (64/32/2) by model size, where train.sh's
    preset matches only `-7B` names and would give an 8B MuSiQue run 128/64/8."""
    from vpo.config import deep_merge

    cfg = deep_merge(paper_cfg, {"task_settings": {"musique": {"model": "Qwen/Qwen3-8B"}}})
    command = launcher.build_command(cfg, "musique", "grpo", 0, tmp_path / "run", tmp_path / "data")
    assert command.batch_preset == "7b_8b"
    batch = command.batch
    assert (batch.train_batch_size, batch.ppo_mini_batch_size, batch.micro_batch_per_gpu) == (64, 32, 2)
    command = launcher.build_command(paper_cfg, "musique", "grpo", 0, tmp_path / "run", tmp_path / "data")
    assert (command.batch_preset, command.batch.micro_batch_per_gpu) == ("up_to_4b", 8)


def test_printed_command_composes_with_cfg_job(paper_cfg, launcher, tmp_path, capsys):
    """Run the printed command itself (environment included) with --cfg job appended."""
    import shlex

    assert launcher.train_verl(
        _spec(paper_cfg, "eureqa", "gdpo", 2, tmp_path / "run", tmp_path / "data", print_command=True)
    ) == TrainResult(0, trained=False)
    line = capsys.readouterr().out.strip().splitlines()[-1]
    assert not (tmp_path / "run").exists()  # printing starts nothing
    words = shlex.split(line)
    env = dict(
        os.environ,
        **dict(
            w.split("=", 1) for w in words if "=" in w and not w.startswith(("-", "/")) and w.split("=", 1)[0].isupper()
        ),
    )
    argv = [w for w in words if not ("=" in w and w.split("=", 1)[0].isupper())]
    result = subprocess.run(argv + ["--cfg", "job"], env=env, capture_output=True, text=True, timeout=300)
    assert result.returncode == 0, result.stderr[-2000:]
    import yaml

    job = yaml.safe_load(result.stdout[result.stdout.index("actor_rollout_ref:") :])
    assert job["algorithm"]["adv_estimator"] == "gdpo_v1"
    assert (
        job["data"]["train_batch_size"] == 64 and job["actor_rollout_ref"]["actor"]["ppo_micro_batch_size_per_gpu"] == 2
    )
    assert job["trainer"]["experiment_name"] == "gdpo_eureqa_seed2"
    assert job["trainer"]["default_local_dir"] == str((tmp_path / "run" / "checkpoints").resolve())
    assert "file" in job["trainer"]["logger"]
    env_vars = job["ray_kwargs"]["ray_init"]["runtime_env"]["env_vars"]
    assert env_vars["VERL_USE_EXTERNAL_MODULES"] == "vpo.verl_ext.plugin"
    assert env_vars["WANDB_MODE"] == "offline"


def test_run_identity_is_stable(paper_cfg, launcher, tmp_path):
    a = launcher.build_command(paper_cfg, "maze", "vpo", 0, tmp_path / "a", tmp_path / "d")
    b = launcher.build_command(paper_cfg, "maze", "vpo", 0, tmp_path / "a", tmp_path / "d")
    c = launcher.build_command(paper_cfg, "maze", "vpo", 1, tmp_path / "c", tmp_path / "d")
    assert a.env["WANDB_RUN_ID"] == b.env["WANDB_RUN_ID"] != c.env["WANDB_RUN_ID"]
    assert a.env["RAY_TMPDIR"] != c.env["RAY_TMPDIR"]  # one Ray scratch dir per job
    assert a.env["HF_DATASETS_CACHE"].startswith(str((tmp_path / "a").resolve()))
    assert 1024 <= int(a.env["MASTER_PORT"]) <= 65535


@pytest.fixture()
def cell(tmp_path):
    """A cell whose data and model exist locally."""
    from vpo.task import resolve

    data = tmp_path / "data"
    resolve("maze").preprocess(str(data), {"train_size": 4, "test_size": 2})
    model = tmp_path / "model"
    model.mkdir()
    (model / "config.json").write_text("{}")
    return data, model


def _cfg_with(paper_cfg, model, **verl):
    from vpo.config import deep_merge

    return deep_merge(paper_cfg, {"task_settings": {"maze": {"model": str(model)}}, "verl": verl})


def test_preflight_passes_a_good_cell_on_a_gpu_node_only(paper_cfg, launcher, cell, tmp_path, monkeypatch):
    import torch

    data, model = cell
    cfg = _cfg_with(paper_cfg, model)
    command = launcher.build_command(cfg, "maze", "vpo", 0, tmp_path / "run", data)
    monkeypatch.setattr(torch.cuda, "device_count", lambda: 0)  # this machine
    with pytest.raises(launcher.PreflightError, match=r"asks for 4 GPU\(s\) but torch sees 0 .* preset=verl_cpu"):
        launcher.preflight(cfg, "maze", "vpo", command)
    monkeypatch.setattr(torch.cuda, "device_count", lambda: 4)  # a node with the cell's 4 GPUs
    launcher.preflight(cfg, "maze", "vpo", command)  # includes veRL's registry and validate_config


def test_preflight_rejects_wrong_method_fast(paper_cfg, launcher, cell, tmp_path, capsys):
    data, model = cell
    started = time.time()
    status = launcher.train_verl(
        replace(_spec(_cfg_with(paper_cfg, model), "maze", "grpo", 0, tmp_path / "run", data), method="vpoo")
    ).status
    assert status == 2 and time.time() - started < 30
    assert "unknown method 'vpoo'" in capsys.readouterr().err
    with pytest.raises(launcher.PreflightError, match="'vpoo'"):
        launcher.check_cell(paper_cfg, "maze", "vpoo")


def test_preflight_rejects_missing_data_fast(paper_cfg, launcher, cell, tmp_path, capsys):
    _, model = cell
    missing = tmp_path / "nowhere"
    started = time.time()
    status = launcher.train_verl(
        _spec(_cfg_with(paper_cfg, model), "maze", "grpo", 0, tmp_path / "run", missing)
    ).status
    assert status == 2 and time.time() - started < 30
    assert f"data file {missing / 'train.parquet'} does not exist" in capsys.readouterr().err
    assert not (tmp_path / "run").exists()


def test_preflight_rejects_bad_sizes_and_models(paper_cfg, launcher, cell, tmp_path):
    from vpo.config import deep_merge

    data, model = cell
    bad = launcher.build_command(_cfg_with(paper_cfg, model, gpus=3), "maze", "grpo", 0, tmp_path / "r", data)
    with pytest.raises(launcher.PreflightError, match="does not divide over 3 GPUs"):
        launcher.preflight(_cfg_with(paper_cfg, model, gpus=3), "maze", "grpo", bad, with_verl=False)
    short = deep_merge(
        _cfg_with(paper_cfg, model), {"task_settings": {"maze": {"max_response_length": {"multi": 200}}}}
    )
    command = launcher.build_command(short, "maze", "vpo", 0, tmp_path / "r", data)
    with pytest.raises(launcher.PreflightError, match="m=3 answers do not fit max_response_length=200"):
        launcher.preflight(short, "maze", "vpo", command, with_verl=False)
    nomodel = _cfg_with(paper_cfg, tmp_path / "no_model")
    command = launcher.build_command(nomodel, "maze", "grpo", 0, tmp_path / "r", data)
    with pytest.raises(launcher.PreflightError, match="no_model"):
        launcher.preflight(nomodel, "maze", "grpo", command, with_verl=False)


def test_cli_wrong_method_fails_fast(tmp_path, cell):
    data, _ = cell
    started = time.time()
    result = subprocess.run(
        [
            sys.executable,
            "-m",
            "vpo.cli",
            "train",
            "--backend",
            "verl",
            "--task",
            "maze",
            "--method",
            "vpoo",
            "--seed",
            "0",
            "--preset",
            "paper",
            "--data",
            str(data),
            "--out",
            str(tmp_path / "run"),
            "--config",
            str(REPO / "config.yaml"),
        ],
        capture_output=True,
        text=True,
        timeout=120,
        cwd=REPO,
    )
    elapsed = time.time() - started
    assert result.returncode != 0 and "vpoo" in result.stderr
    assert elapsed < 30, elapsed


def test_file_logger_output_becomes_metrics_jsonl(launcher, tmp_path, monkeypatch):
    from verl.utils.tracking import FileLogger

    (tmp_path / "logs").mkdir()
    # two attempts (a preemption and a resume); the resumed attempt repeats step 2
    for stamp, steps in (("20260101T000000", [1, 2]), ("20260101T010000", [2, 3])):
        monkeypatch.setenv("VERL_FILE_LOGGER_PATH", str(tmp_path / "logs" / f"verl_metrics.{stamp}.jsonl"))
        logger = FileLogger("vpo_maze", "vpo_maze_seed0")
        for step in steps:
            logger.log(
                {
                    "vpo/pool_diversity": 0.1 * step + (1 if stamp.endswith("10000") else 0),
                    "vpo/reward/gold": 0.5,
                    "vpo/advantage/std": 1.0,
                    "vpo/vpo/pool_size_mean": 12.0,
                    "vpo/score_mean": 0.3,
                    "actor/entropy": 2.0,
                    "timing_s/step": 10.0,
                    "critic/score/mean": 0.25,
                },
                step=step,
            )
        logger.log({"val-core/maze/acc/mean@3": 0.4}, step=steps[-1])  # a validation record
        logger.finish()
    assert launcher.convert_metrics(tmp_path) == 3
    rows = [json.loads(line) for line in (tmp_path / "metrics.jsonl").read_text().splitlines()]
    assert [r["step"] for r in rows] == [1, 2, 3]
    assert rows[1]["pool_diversity"] == pytest.approx(1.2)  # the resumed attempt's value wins
    assert rows[0]["reward/gold"] == 0.5 and rows[0]["advantage/std"] == 1.0 and rows[0]["entropy"] == 2.0
    assert rows[0]["vpo/pool_size_mean"] == 12.0  # the rollout keys lose the prefix the trainer logs them under
    assert rows[0]["score_mean"] == 0.3 and rows[0]["critic/score/mean"] == 0.25  # veRL's own keep their names
    assert rows[2]["wall_time_s"] == 30.0
    assert rows[2]["val-core/maze/acc/mean@3"] == 0.4


def test_entry_point_registers_in_a_fresh_process():
    """`import verl` alone (the verl.plugins entry point) registers the estimators and trainer."""
    code = (
        "import verl\nfrom verl.trainer.ppo import core_algos\nfrom verl.trainer.ppo.v1 import get_trainer_cls\n"
        "print([n for n in ('vpo','vpo_single','maxrl','max_at_k','multi_rlvr','gdpo_v1') "
        "if n in core_algos.ADV_ESTIMATOR_REGISTRY], get_trainer_cls('vpo_sync').__name__)"
    )
    env = {k: v for k, v in os.environ.items() if k != "VERL_USE_EXTERNAL_MODULES"}
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120, env=env)
    assert result.returncode == 0, result.stderr[-2000:]
    assert "['vpo', 'vpo_single', 'maxrl', 'max_at_k', 'multi_rlvr', 'gdpo_v1'] VPOTrainerSync" in result.stdout


@pytest.mark.parametrize(
    "task, method",
    [("maze", "vpo"), ("musique", "multi_rlvr"), ("tool", "goal_cond"), ("lcb", "vpo"), ("lcb", "multi_rlvr")],
)
def test_printed_command_of_each_task_composes(paper_cfg, launcher, tmp_path, capsys, task, method):
    """The printed command of a paper cell of every other task, split as a shell splits it: its program is
    veRL's main on this config, and its overrides compose in veRL's Hydra (one printed command runs through
    veRL's main itself: test_printed_command_composes_with_cfg_job)."""
    import shlex

    assert (
        launcher.train_verl(
            _spec(paper_cfg, task, method, 0, tmp_path / "run", tmp_path / "data", print_command=True)
        ).status
        == 0
    )
    words = shlex.split(capsys.readouterr().out.strip().splitlines()[-1])
    is_env = [("=" in w and w.split("=", 1)[0].isupper() and not w.startswith(("-", "/"))) for w in words]
    env = dict(w.split("=", 1) for w, e in zip(words, is_env) if e)
    argv = [w for w, e in zip(words, is_env) if not e]
    assert env["VERL_USE_EXTERNAL_MODULES"] == "vpo.verl_ext.plugin"
    assert argv[1:5] == [
        "-m",
        "verl.trainer.main_ppo",
        f"--config-path={REPO / 'verl' / 'config'}",
        "--config-name=vpo_trainer",
    ]
    job = _compose(argv[5:])
    assert job.trainer.experiment_name == f"{method}_{task}_seed0" and job.algorithm.vpo.task == task
    assert job.data.vpo.method == method and job.data.vpo.m == (3 if method in ("vpo", "multi_rlvr") else 1)


def test_importing_the_launcher_registers_nothing_and_the_plugin_registers_all():
    """Only vpo.verl_ext.plugin registers (veRL imports it through the `verl.plugins` entry point)."""
    import os
    import subprocess
    import sys

    probe = (
        "from verl.trainer.ppo import core_algos; from verl.trainer.ppo.v1.trainer_base import TRAINER_REGISTRY; "
        "registered = lambda: ('vpo' in core_algos.ADV_ESTIMATOR_REGISTRY, 'vpo_sync' in TRAINER_REGISTRY); "
    )
    code = probe + (
        "import vpo.verl_ext.launcher, vpo.verl_ext.estimators, vpo.verl_ext.preflight; print(registered()); "
        "import vpo.verl_ext.plugin; print(registered())"
    )
    quiet = {**os.environ, "VERL_USE_EXTERNAL_PLUGINS": "none"}  # veRL's switch for its entry-point discovery
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True, env=quiet).stdout
    assert out.split("\n")[:2] == ["(False, False)", "(True, True)"]
    # with the entry point discovered, `import verl` registers all: test_entry_point_registers_in_a_fresh_process


def test_verl_checkpoints_are_resumed_only_by_the_run_that_made_them(tmp_path):
    from vpo.verl_ext.launcher import FINISHED, RECORD, claim_checkpoints

    ckpt = tmp_path / "checkpoints"
    mine = {"config_hash": "a", "method": "vpo", "seed": 0, "model": "m", "data": "d"}
    assert claim_checkpoints(ckpt, mine) is None and json.loads((ckpt / RECORD).read_text()) == mine
    (ckpt / "global_step_10").mkdir()
    assert claim_checkpoints(ckpt, mine) is None and (ckpt / "global_step_10").is_dir()  # a killed run resumes
    changed = {**mine, "config_hash": "b"}
    assert "other settings" in claim_checkpoints(ckpt, changed)
    assert not (ckpt / "global_step_10").exists() and json.loads((ckpt / RECORD).read_text()) == changed
    (ckpt / "global_step_20").mkdir()
    (ckpt / FINISHED).touch()
    assert "had finished" in claim_checkpoints(ckpt, changed)  # --forcerun / -R train: train again
    # set aside each time; only the newest set-aside copy is kept (forced retrains do not pile them up)
    (aside,) = tmp_path.glob("checkpoints.stale-*")
    assert (aside / "global_step_20").is_dir()

"""The embedded trainer end to end at tiny sizes: run files, determinism, kill-and-resume, bad input."""

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
import yaml

pytest.importorskip("torch")

from conftest import TINY_LOCAL_TRAINER  # noqa: E402

REPO = Path(__file__).resolve().parents[1]
TIMING_KEYS = {"generation_s", "step_s", "wall_time_s"}


@pytest.fixture(scope="module")
def tiny_config(tmp_path_factory):
    """The repository's config.yaml with the ci preset's local_trainer block set to tiny sizes."""
    raw = yaml.safe_load((REPO / "config.yaml").read_text())
    raw["presets"]["ci"]["local_trainer"] = dict(TINY_LOCAL_TRAINER)
    path = tmp_path_factory.mktemp("cfg") / "config.yaml"
    path.write_text(yaml.safe_dump(raw, sort_keys=False))
    return path


def train_args(cfg, data, base, out, method="grpo", seed=0):
    return [
        "train",
        "--backend",
        "local",
        "--task",
        "maze",
        "--method",
        method,
        "--seed",
        str(seed),
        "--preset",
        "ci",
        "--config",
        str(cfg),
        "--data",
        str(data),
        "--base-model",
        str(base),
        "--out",
        str(out),
    ]


def read_metrics(run_dir):
    return [json.loads(line) for line in (Path(run_dir) / "metrics.jsonl").read_text().splitlines()]


def read_wandb_offline_run(path):
    """(run record, history records) of an offline W&B run file: W&B's LevelDB-style log (a 7-byte
    header, 32 KiB blocks of records: crc32 (4), length (2), type (1: full, 2-4: first/middle/last
    fragment)) of `wandb_internal_pb2.Record` protobufs."""
    import struct

    from wandb.proto import wandb_internal_pb2 as pb

    data, pos, block, chunks, partial = Path(path).read_bytes(), 7, 32768, [], b""
    assert data[:4] == b":W&B"
    while pos + 7 <= len(data):
        left = block - pos % block
        if left < 7:
            pos += left
            continue
        _, length, kind = struct.unpack("<IHB", data[pos : pos + 7])
        if length == 0 and kind == 0:  # block padding
            pos += left
            continue
        chunk, pos = data[pos + 7 : pos + 7 + length], pos + 7 + length
        partial = chunk if kind in (1, 2) else partial + chunk
        if kind in (1, 4):
            chunks.append(partial)
    records = []
    for raw in chunks:
        record = pb.Record()
        record.ParseFromString(raw)
        records.append(record)
    run = next((r.run for r in records if r.WhichOneof("record_type") == "run"), None)
    history = [
        {
            "step": r.history.step.num,
            **{item.key or "/".join(item.nested_key): json.loads(item.value_json) for item in r.history.item},
        }
        for r in records
        if r.WhichOneof("record_type") == "history"
    ]
    return run, history


def wandb_offline_run(path, steps: int, timeout_s: float = 60.0):
    """read_wandb_offline_run once W&B's service process has written the run record and `steps`
    history records (it flushes after the trainer's process has moved on; on a loaded machine, seconds)."""
    deadline = time.time() + timeout_s
    while True:
        run, history = read_wandb_offline_run(path)
        if (run is not None and len(history) >= steps) or time.time() > deadline:
            return run, history
        time.sleep(0.5)


def strip_timing(records):
    return [{k: v for k, v in r.items() if k not in TIMING_KEYS} for r in records]


@pytest.mark.parametrize("method", ["grpo", "vpo", "poly_epo", "grpo_div"])
def test_train_cli_writes_run_directory(
    method, tiny_config, tiny_maze_data, tiny_base_model, tiny_multi_base_model, tmp_path
):
    from vpo.cli import main
    from vpo.generate import load_pretrained
    from vpo.task import resolve

    out = tmp_path / "run"
    base = tiny_multi_base_model if method == "vpo" else tiny_base_model
    assert main(train_args(tiny_config, tiny_maze_data, base, out, method)) == 0
    records = read_metrics(out)
    assert [r["step"] for r in records] == [1, 2, 3, 4]
    objectives = resolve("maze").objective_names
    for r in records:
        assert {
            "pool_diversity",
            "score_mean",
            "parse_failure_rate",
            "entropy",
            "wall_time_s",
            "kl",
            "advantage/mean",
            "advantage/std",
        } <= set(r)
        assert all(f"reward/{name}" in r for name in objectives)
        assert 0.0 <= r["score_mean"] <= 1.0 and r["pool_diversity"] >= 0.0
        assert 0.0 <= r["truncated_share"] <= 1.0
        if r["truncated_share"] == 1.0:  # every rollout ran to the limit
            assert r["response_length_mean"] == (40 if method == "vpo" else 16)
    if method == "vpo":
        assert "vpo/pool_expected_best_mean" in records[0]
    if method == "poly_epo":  # groups of 3 rollouts, sets of 4: every group is skipped, and counted
        assert all(r["set_rl/skipped_groups"] == 2 and r["advantage/zero_frac"] == 1.0 for r in records)
        assert {"set_rl/distinct_keys", "set_rl/incorrect_positive_share"} <= set(records[0])
    if method == "grpo_div":
        assert all(0.0 <= r["grpo_div/novelty"] <= 1.0 for r in records) and "grpo_div/distinct_keys" in records[0]
    # keep_checkpoints = 2 of steps 2 and 4; the final model loads with from_pretrained.
    assert sorted(p.name for p in (out / "checkpoints").iterdir()) == ["final", "step_2", "step_4"]
    load_pretrained(out / "checkpoints" / "final")
    info = json.loads((out / "train.json").read_text())
    assert {"backend", "task", "method", "seed", "preset", "steps", "wall_time_s", "config_hash", "provenance"} <= set(
        info
    )
    assert (info["backend"], info["method"], info["steps"], info["resumed_from_step"]) == ("local", method, 4, 0)
    # train.json is the last file written (W&B's own log files aside: its service process may flush them later)
    newest_other = max(
        p.stat().st_mtime for p in out.rglob("*") if p.is_file() and p.name != "train.json" and "wandb" not in p.parts
    )
    assert (out / "train.json").stat().st_mtime >= newest_other
    # the config's wandb block (offline): one W&B run per cell, named as veRL's, with every step's metrics
    from vpo.tracking import run_id

    files = list((out / "logs" / "wandb").glob("offline-run-*/run-*.wandb"))
    assert len(files) == 1
    run, history = wandb_offline_run(files[0], steps=4)
    assert (run.run_id, run.project, run.display_name) == (
        run_id("maze", method, 0, out),
        "vpo_maze",
        f"{method}_maze_seed0",
    )
    assert [h["step"] for h in history] == [1, 2, 3, 4]
    assert [h["score_mean"] for h in history] == pytest.approx([r["score_mean"] for r in records])
    assert [h["pool_diversity"] for h in history] == pytest.approx([r["pool_diversity"] for r in records])


def test_same_seed_same_metrics_and_seed_changes_them(
    tiny_maze_data, tiny_multi_base_model, tiny_local_settings, tmp_path
):
    from vpo.backend import RunSpec
    from vpo.local.trainer import train_local

    def run(name, seed):
        spec = RunSpec(
            "maze",
            "vpo",
            seed,
            str(tiny_maze_data),
            str(tiny_multi_base_model),
            str(tmp_path / name),
            tiny_local_settings,
            {"n_weights": 20},
            m=3,
        )
        train_local(spec)
        return strip_timing(read_metrics(tmp_path / name))

    a, b, c = run("a", 0), run("b", 0), run("c", 1)
    assert a == b
    assert a != c


@pytest.mark.slow
def test_killed_run_resumes_from_latest_checkpoint(tiny_config, tiny_maze_data, tiny_base_model, tmp_path):
    """A subprocess killed (SIGKILL) after its first checkpoint resumes from it and ends complete,
    with the same metrics as an uninterrupted run."""
    from vpo.cli import main
    from vpo.local.checkpoint import checkpoint_steps

    raw = yaml.safe_load(tiny_config.read_text())
    raw["presets"]["ci"]["local_trainer"].update(steps=8, checkpoint_every=2)
    cfg = tmp_path / "config.yaml"
    cfg.write_text(yaml.safe_dump(raw, sort_keys=False))

    killed = tmp_path / "killed"
    env = {**os.environ, "OMP_NUM_THREADS": "1"}
    proc = subprocess.Popen(
        [sys.executable, "-m", "vpo.cli", *train_args(cfg, tiny_maze_data, tiny_base_model, killed)],
        env=env,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    deadline = time.time() + 240
    while not checkpoint_steps(killed / "checkpoints") and proc.poll() is None and time.time() < deadline:
        time.sleep(0.02)
    proc.send_signal(signal.SIGKILL)
    proc.wait()
    assert not (killed / "train.json").exists(), "the run finished before it could be killed"
    at_kill = checkpoint_steps(killed / "checkpoints")
    assert at_kill and at_kill[-1] < 8

    assert main(train_args(cfg, tiny_maze_data, tiny_base_model, killed)) == 0
    info = json.loads((killed / "train.json").read_text())
    assert 2 <= info["resumed_from_step"] < 8 and info["resumed_from_step"] >= at_kill[-1]
    assert (killed / "checkpoints" / "final" / "config.json").is_file()

    fresh = tmp_path / "fresh"
    assert main(train_args(cfg, tiny_maze_data, tiny_base_model, fresh)) == 0
    resumed = strip_timing(read_metrics(killed))
    assert [r["step"] for r in resumed] == list(range(1, 9))
    assert resumed == strip_timing(read_metrics(fresh))


def test_bad_input_fails_before_training(tiny_config, tiny_maze_data, tiny_base_model, tmp_path):
    from vpo.cli import main

    with pytest.raises(SystemExit, match="vpo base-model"):
        main(train_args(tiny_config, tiny_maze_data, tmp_path / "no_model", tmp_path / "r"))
    with pytest.raises(SystemExit, match="vpo preprocess"):
        main(train_args(tiny_config, tmp_path / "no_data", tiny_base_model, tmp_path / "r"))
    with pytest.raises(ValueError, match="unknown method"):
        main(train_args(tiny_config, tiny_maze_data, tiny_base_model, tmp_path / "r", method="ppo_typo"))
    with pytest.raises(
        ValueError, match=r"vpo answers multi prompts but .* single prompts; pass results/<preset>/base/maze/multi"
    ):
        main(train_args(tiny_config, tiny_maze_data, tiny_base_model, tmp_path / "r", method="vpo"))
    assert not (tmp_path / "r").exists()


def test_unknown_local_trainer_key_is_named():
    from vpo.settings import LocalTrainerSettings

    from conftest import local_trainer_block

    with pytest.raises(ValueError, match="lerning_rate"):
        LocalTrainerSettings.from_dict(local_trainer_block(lerning_rate=1.0))
    with pytest.raises(ValueError, match=r"missing \['lr'\]"):
        LocalTrainerSettings.from_dict({k: v for k, v in local_trainer_block().items() if k != "lr"})
    with pytest.raises(ValueError, match="divisible"):
        LocalTrainerSettings.from_dict(local_trainer_block(prompts_per_step=3, ppo_mini_batches=2))


def test_base_model_cli_writes_model_and_base_json_last(tiny_config, tiny_maze_data, tmp_path):
    from vpo.cli import main
    from vpo.generate import load_pretrained

    out = tmp_path / "base"
    assert (
        main(
            [
                "base-model",
                "--task",
                "maze",
                "--mode",
                "goal",
                "--data",
                str(tiny_maze_data),
                "--preset",
                "ci",
                "--config",
                str(tiny_config),
                "--out",
                str(out),
            ]
        )
        == 0
    )
    info = json.loads((out / "base.json").read_text())
    assert info["parameters"] > 0 and info["settings"]["hidden_size"] == TINY_LOCAL_TRAINER["hidden_size"]
    assert info["mode"] == "goal" and {"success_rate", "score_mean", "truncated_share"} <= set(info["sampled"])
    model, tok = load_pretrained(out)
    assert model.config.vocab_size == len(tok)


# ---- a rerun is the run it claims to be --------------------------------------------------------
def _spec(data, base, out, settings, config_hash="h1"):
    from vpo.backend import RunSpec

    return RunSpec("maze", "grpo", 0, str(data), str(base), str(out), settings, {}, m=3, config_hash=config_hash)


def _final_weights(out):
    return (Path(out) / "checkpoints" / "final" / "model.safetensors").read_bytes()


def test_changed_settings_or_a_finished_run_retrain_from_step_0(
    tiny_maze_data, tiny_base_model, tiny_local_settings, tmp_path, caplog
):
    import dataclasses

    from vpo.local.trainer import train_local

    out = tmp_path / "run"
    first = train_local(_spec(tiny_maze_data, tiny_base_model, out, tiny_local_settings))
    assert first.record["resumed_from_step"] == 0
    before = _final_weights(out)
    # the same settings again (what --forcerun or -R train does): the finished run is retrained
    again = train_local(_spec(tiny_maze_data, tiny_base_model, out, tiny_local_settings))
    assert again.record["resumed_from_step"] == 0 and "had finished" in caplog.text
    assert _final_weights(out) == before  # deterministic: the same settings give the same model
    # another learning rate (a new settings digest): retrained, and the weights differ
    faster = dataclasses.replace(tiny_local_settings, lr=tiny_local_settings.lr * 10)
    changed = train_local(_spec(tiny_maze_data, tiny_base_model, out, faster, config_hash="h2"))
    assert changed.record["resumed_from_step"] == 0 and _final_weights(out) != before
    assert len(list(tmp_path.glob("run/checkpoints.stale-*"))) >= 1  # old checkpoints kept aside


def _unfinished(out):
    """Turn a finished run directory into one killed after its last step checkpoint."""
    import shutil

    shutil.rmtree(Path(out) / "checkpoints" / "final")


def test_resume_needs_the_same_record_and_skips_a_damaged_newest_checkpoint(
    tiny_maze_data, tiny_base_model, tiny_local_settings, tmp_path, caplog
):
    import shutil

    from vpo.local.checkpoint import checkpoint_steps
    from vpo.local.trainer import train_local

    out = tmp_path / "run"
    train_local(_spec(tiny_maze_data, tiny_base_model, out, tiny_local_settings))
    _unfinished(out)
    steps = checkpoint_steps(out / "checkpoints")
    assert steps == [2, 4]
    assert (
        train_local(_spec(tiny_maze_data, tiny_base_model, out, tiny_local_settings)).record["resumed_from_step"] == 4
    )
    # a damaged newest checkpoint: the previous one is used
    _unfinished(out)
    (out / "checkpoints" / "step_4" / "trainer_state.pt").write_bytes(b"not a checkpoint")
    assert (
        train_local(_spec(tiny_maze_data, tiny_base_model, out, tiny_local_settings)).record["resumed_from_step"] == 2
    )
    # a truncated model file in the newest checkpoint (a kill mid-write once blocked every resume): the one before
    _unfinished(out)
    weights = out / "checkpoints" / "step_4" / "model" / "model.safetensors"
    weights.write_bytes(weights.read_bytes()[:1000])
    with caplog.at_level("WARNING"):
        assert (
            train_local(_spec(tiny_maze_data, tiny_base_model, out, tiny_local_settings)).record["resumed_from_step"]
            == 2
        )
    assert str(weights) in caplog.text
    # a rebuilt base model (a new build record) is not resumed from
    _unfinished(out)
    rebuilt = tmp_path / "base"
    shutil.copytree(tiny_base_model, rebuilt)
    (rebuilt / "base.json").write_text((rebuilt / "base.json").read_text().replace("{", '{"rebuilt": true, ', 1))
    assert train_local(_spec(tiny_maze_data, rebuilt, out, tiny_local_settings)).record["resumed_from_step"] == 0
    # each fresh start sets the old checkpoints aside; only the newest set-aside copy is kept
    assert (
        train_local(_spec(tiny_maze_data, tiny_base_model, out, tiny_local_settings)).record["resumed_from_step"] == 0
    )
    assert len(list(out.glob("checkpoints.stale-*"))) == 1

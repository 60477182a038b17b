"""veRL's real trainer on CPU through the project's commands (verl_cpu preset), each step for what it proves:

- the first veRL run (killed once step 1 is checkpointed and logged): veRL's own trainer and workers run
  the plug-in (VPO's estimator and the task's reward) on a real rollout, and checkpoint;
- the second run: veRL's own resume continues from that checkpoint (step 2 only, no step rerun), and
  every step's metrics come from veRL with VPO's diagnostics (the reward's sub_scores reached the
  estimator);
- merge: veRL's merger turns the checkpoint into a Hugging Face model; eval: that model evaluates.

Two runs because a resume needs a killed process; 2 steps of 4 prompts on the tiny model, one agent
loop worker (vpo/verl_ext/command.py). About 3 minutes on 2 cores, most of it the workers' start-up.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

pytest.importorskip("verl")
pytestmark = [pytest.mark.slow, pytest.mark.minutes]

REPO = Path(__file__).resolve().parents[1]


def vpo(*args, **kwargs) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "vpo.cli", *args], cwd=REPO, capture_output=True, text=True, timeout=900, **kwargs
    )


def logged_steps(run) -> set[int]:
    """The steps veRL's file logger has written so far (whole lines only)."""
    steps = set()
    for path in (run / "logs").glob("verl_metrics.*.jsonl"):
        for line in path.read_text().splitlines():
            try:
                steps.add(int(json.loads(line)["step"]))
            except (ValueError, KeyError):
                pass
    return steps


def test_killed_verl_cpu_run_resumes_from_its_checkpoint_then_merges_and_evaluates(tmp_path):
    common = ["--preset", "verl_cpu", "--config", str(REPO / "config.yaml")]
    data, base, run = tmp_path / "data", tmp_path / "base", tmp_path / "run"
    assert vpo("preprocess", "--task", "maze", "--out", str(data), *common).returncode == 0
    built = vpo("base-model", "--task", "maze", "--mode", "multi", "--data", str(data), "--out", str(base), *common)
    assert built.returncode == 0, built.stderr[-2000:]
    train = [
        sys.executable,
        "-m",
        "vpo.cli",
        "train",
        "--backend",
        "verl",
        "--task",
        "maze",
        "--method",
        "vpo",
        "--seed",
        "0",
        "--data",
        str(data),
        "--base-model",
        str(base),
        "--out",
        str(run),
        *common,
    ]

    with open(tmp_path / "first.log", "w") as log:
        first = subprocess.Popen(train, cwd=REPO, stdout=log, stderr=subprocess.STDOUT, start_new_session=True)
        deadline = time.time() + 600
        # killed once step 1 is checkpointed and logged: veRL saves the checkpoint before it logs the
        # step, and a kill in between loses that step's metrics row (docs/reliability.md)
        while not ((run / "checkpoints" / "latest_checkpointed_iteration.txt").is_file() and 1 in logged_steps(run)):
            assert first.poll() is None, (tmp_path / "first.log").read_text()[-3000:]
            assert time.time() < deadline, "no checkpoint within 10 minutes"
            time.sleep(0.2)
        os.killpg(first.pid, signal.SIGKILL)  # the launcher, veRL's driver and Ray, all at once
        first.wait()
    assert (run / "checkpoints" / "latest_checkpointed_iteration.txt").read_text().strip() == "1"
    assert not (run / "train.json").exists()

    second = subprocess.run(train, cwd=REPO, capture_output=True, text=True, timeout=900)
    assert second.returncode == 0, second.stderr[-3000:]
    assert "Resuming from" in second.stdout + second.stderr and "global_step_1" in second.stdout + second.stderr
    info = json.loads((run / "train.json").read_text())
    assert (info["backend"], info["steps"], info["model"]) == ("verl", 2, str(base))
    # the second attempt's veRL log holds step 2 only: step 1 came from the checkpoint, not a rerun
    attempts = sorted((run / "logs").glob("verl_metrics.*.jsonl"))
    assert len(attempts) == 2
    steps_logged = [json.loads(line)["step"] for line in attempts[-1].read_text().splitlines()]
    assert 1 not in steps_logged and 2 in steps_logged

    metrics = [json.loads(line) for line in (run / "metrics.jsonl").read_text().splitlines()]
    assert [r["step"] for r in metrics] == [1, 2]
    for record in metrics:  # VPO's own diagnostics, computed from the rows the rollout's reward returned
        assert record["vpo/rows_per_rollout_mean"] == pytest.approx(3.0)  # m = 3 answers parsed into rows
        assert record["advantage/std"] > 0.0
        assert record["pool_diversity"] >= 0.0
    from test_metrics_keys import documented

    missing = documented("veRL", "VPO") - set(metrics[-1])  # docs/metrics.md's keys, veRL's converted line
    assert not missing, f"docs/metrics.md says the veRL backend writes {sorted(missing)}; it does not"

    merged = vpo("merge", "--run", str(run))
    assert merged.returncode == 0, merged.stderr[-2000:]
    from transformers import AutoModelForCausalLM

    AutoModelForCausalLM.from_pretrained(run / "model")
    out = run / "eval" / "evalseed0.parquet"
    evaluated = vpo(
        "eval",
        "--model",
        str(run / "model"),
        "--task",
        "maze",
        "--method",
        "vpo",
        "--data",
        str(data),
        "--seed",
        "0",
        "--out",
        str(out),
        "--train-seed",
        "0",
        *common,
    )
    assert evaluated.returncode == 0, evaluated.stderr[-2000:]
    summary = json.loads(out.with_suffix(".json").read_text())
    assert summary["backend"] == "torch" and summary["m"] == 3

"""The same commit makes the same numbers: one ci cell trained, merged and evaluated twice, each
step in a fresh process, gives identical metrics (timings aside), identical model weights and
identical evaluation files (docs/reproducibility.md, "Determinism")."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

pytest.importorskip("torch")

from conftest import TINY_LOCAL_TRAINER  # noqa: E402

REPO = Path(__file__).resolve().parents[1]
TIMING_KEYS = {"generation_s", "step_s", "wall_time_s"}


def vpo(*args: str) -> None:
    done = subprocess.run(
        [sys.executable, "-m", "vpo.cli", *args], cwd=REPO, capture_output=True, text=True, timeout=600
    )
    assert done.returncode == 0, done.stderr[-3000:]


@pytest.mark.slow
def test_one_cell_twice_gives_identical_metrics_model_and_evaluation(tiny_maze_data, tiny_multi_base_model, tmp_path):
    raw = yaml.safe_load((REPO / "config.yaml").read_text())
    raw["presets"]["ci"]["local_trainer"] = dict(TINY_LOCAL_TRAINER)
    config = tmp_path / "config.yaml"
    config.write_text(yaml.safe_dump(raw, sort_keys=False))
    common = ["--preset", "ci", "--config", str(config)]
    runs = []
    for name in ("first", "second"):
        cell = tmp_path / name / "maze" / "vpo" / "seed0"
        vpo(
            "train",
            "--backend",
            "local",
            "--task",
            "maze",
            "--method",
            "vpo",
            "--seed",
            "0",
            "--data",
            str(tiny_maze_data),
            "--base-model",
            str(tiny_multi_base_model),
            "--out",
            str(cell),
            *common,
        )
        vpo("merge", "--run", str(cell))
        vpo(
            "eval",
            "--model",
            str(cell / "model"),
            "--task",
            "maze",
            "--method",
            "vpo",
            "--data",
            str(tiny_maze_data),
            "--seed",
            "0",
            "--out",
            str(cell / "eval" / "evalseed0.parquet"),
            *common,
        )
        runs.append(cell)
    first, second = runs

    def metrics(cell):
        return [
            {k: v for k, v in json.loads(line).items() if k not in TIMING_KEYS}
            for line in (cell / "metrics.jsonl").read_text().splitlines()
        ]

    def evaluation(cell):
        return {
            k: v
            for k, v in json.loads((cell / "eval" / "evalseed0.json").read_text()).items()
            if k not in TIMING_KEYS | {"model"}
        }

    assert len(metrics(first)) == TINY_LOCAL_TRAINER["steps"]
    assert metrics(first) == metrics(second)
    assert (first / "model" / "model.safetensors").read_bytes() == (second / "model" / "model.safetensors").read_bytes()
    assert evaluation(first) == evaluation(second)
    assert (first / "eval" / "evalseed0.parquet").read_bytes() == (second / "eval" / "evalseed0.parquet").read_bytes()

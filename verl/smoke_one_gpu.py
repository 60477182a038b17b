"""One tiny veRL training step end to end on one GPU, from a local model directory.

    python verl/smoke_one_gpu.py --model /path/to/Qwen3-0.6B [--method vpo] [--out /tmp/vpo_verl_smoke]

Needs a GPU node with the cluster extras (`pip install -e ".[gpu]"`, see verl/REQUIRED_VERL.txt).
It runs the same code path as the paper preset, only smaller: `vpo preprocess` (64 maze rows), the
launcher's preflight and veRL command for one cell with the 1-GPU smoke batch preset and
`trainer.total_training_steps=1`, then `vpo merge`, and checks what every stage must leave behind:
metrics.jsonl with pool_diversity, train.json, a checkpoint, and a merged model that transformers
loads. Exit status 0 means the whole veRL backend worked on this machine.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model", required=True, help="local Hugging Face model directory (no hub download)")
    parser.add_argument("--method", default="vpo", help="method of the cell (default vpo)")
    parser.add_argument("--out", default="/tmp/vpo_verl_smoke", help="scratch directory")
    parser.add_argument("--config", default=str(REPO / "config.yaml"))
    args = parser.parse_args()

    from vpo.config import deep_merge, load_config
    from vpo.merge import merge_run
    from vpo.verl_ext.launcher import train_cell

    out = Path(args.out).resolve()
    data, run = out / "data", out / "runs" / "maze" / args.method / "seed0"
    started = time.time()
    subprocess.run([sys.executable, "-m", "vpo.cli", "preprocess", "--task", "maze", "--out", str(data),
                    "--train-size", "64", "--test-size", "8"], check=True)
    cfg = deep_merge(load_config(args.config, preset="paper"), {
        "task_settings": {"maze": {"model": str(Path(args.model).resolve()), "gpus": 1, "epochs": 1}},
        "verl": {"gpus": 1, "batch_preset": "smoke_1gpu", "logger": ["console", "file"], "overrides": [
            "trainer.total_training_steps=1",
            "actor_rollout_ref.rollout.gpu_memory_utilization=0.4",
            "actor_rollout_ref.actor.fsdp_config.param_offload=true",
            "actor_rollout_ref.actor.fsdp_config.optimizer_offload=true",
        ]},
    })
    status = train_cell(cfg, "maze", args.method, 0, run, data)
    if status != 0:
        print(f"FAIL: veRL exited with status {status}", file=sys.stderr)
        return status
    rows = [json.loads(line) for line in (run / "metrics.jsonl").read_text().splitlines()]
    train = json.loads((run / "train.json").read_text())
    assert rows and "pool_diversity" in rows[0], "metrics.jsonl has no training step"
    assert train["backend"] == "verl" and train["steps"] >= 1, train
    model_dir = merge_run(run)
    from transformers import AutoModelForCausalLM

    model = AutoModelForCausalLM.from_pretrained(model_dir)
    print(json.dumps({"ok": True, "method": args.method, "steps": train["steps"],
                      "pool_diversity": rows[-1]["pool_diversity"], "score_mean": rows[-1]["score_mean"],
                      "parameters": sum(p.numel() for p in model.parameters()),
                      "wall_time_s": round(time.time() - started, 1)}))
    return 0


if __name__ == "__main__":
    sys.exit(main())

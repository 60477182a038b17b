"""The GPU path end to end on one GPU in minutes: one veRL step with vLLM rollouts, then one vLLM evaluation.

    python verl/smoke_one_gpu.py --model /path/to/Qwen3-0.6B [--method vpo] [--out /tmp/vpo_verl_smoke]

Needs a GPU node with the cluster extras (`pip install -e ".[gpu]"`, see verl/REQUIRED_VERL.txt) and a
small local model (no hub download). It runs the paper preset's code path, only smaller:
`vpo preprocess` (64 maze rows), the launcher's preflight and veRL command for one cell with the
1-GPU smoke batch preset, vLLM as the rollout engine and `trainer.total_training_steps=1`, then
`vpo merge`, then `vpo eval --backend vllm` of the merged model on 4 test mazes (the task's
evaluation settings, a 6-candidate budget). Each check prints one line as it passes; the last line is
a JSON summary. Exit status 0 means the whole GPU path worked on this machine.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]


def check(what: str, condition: bool, detail: object = "") -> None:
    if not condition:
        raise SystemExit(f"FAIL: {what} {detail}")
    print(f"ok   {what} {detail}".rstrip(), flush=True)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model", required=True, help="local Hugging Face model directory (no hub download)")
    parser.add_argument("--method", default="vpo", help="method of the cell (default vpo)")
    parser.add_argument("--out", default="/tmp/vpo_verl_smoke", help="scratch directory")
    parser.add_argument("--config", default=str(REPO / "config.yaml"))
    args = parser.parse_args()

    from vpo.config import deep_merge, load_config, write_config
    from vpo.merge import merge_run
    from vpo.train import train_verl

    out = Path(args.out).resolve()
    data, run = out / "data", out / "runs" / "maze" / args.method / "seed0"
    started = time.time()
    subprocess.run([sys.executable, "-m", "vpo.cli", "preprocess", "--task", "maze", "--out", str(data),
                    "--train-size", "64", "--test-size", "8"], check=True, cwd=REPO)
    check("preprocess", (data / "train.parquet").is_file() and (data / "test.parquet").is_file(), data)
    cfg = deep_merge(load_config(args.config, preset="paper"), {
        "task_settings": {"maze": {"model": str(Path(args.model).resolve()), "gpus": 1, "epochs": 1,
                                   "eval": {"budget": 6}}},
        "verl": {"gpus": 1, "batch_preset": "smoke_1gpu", "logger": ["console", "file"], "overrides": [
            "trainer.total_training_steps=1",
            "actor_rollout_ref.rollout.name=vllm",
            "actor_rollout_ref.rollout.gpu_memory_utilization=0.4",
            "actor_rollout_ref.actor.fsdp_config.param_offload=true",
            "actor_rollout_ref.actor.fsdp_config.optimizer_offload=true",
        ]},
    })
    status = train_verl(cfg, "maze", args.method, 0, run, data)
    check("veRL step with vLLM rollouts", status == 0, f"(exit status {status})")
    rows = [json.loads(line) for line in (run / "metrics.jsonl").read_text().splitlines()]
    train = json.loads((run / "train.json").read_text())
    check("metrics.jsonl has the step and pool_diversity", bool(rows) and "pool_diversity" in rows[0])
    check("train.json", train["backend"] == "verl" and train["steps"] >= 1, {"steps": train["steps"]})
    model_dir = merge_run(run)
    check("merged model", (Path(model_dir) / "config.json").is_file(), model_dir)

    snapshot = out / "config.yaml"
    write_config(cfg, snapshot)
    pool = run / "eval" / "evalseed0.parquet"
    subprocess.run([sys.executable, "-m", "vpo.cli", "eval", "--model", str(model_dir), "--task", "maze",
                    "--method", args.method, "--data", str(data), "--seed", "0", "--config", str(snapshot),
                    "--backend", "vllm", "--n-problems", "4", "--out", str(pool)], check=True, cwd=REPO)
    payload = json.loads(pool.with_suffix(".json").read_text())
    check("vLLM evaluation", payload["backend"] == "vllm" and payload["n_problems"] == 4 and payload["budget"] == 6,
          {"best@1": round(payload["best_at_k"][0], 3), "best@6": round(payload["best_at_k"][-1], 3),
           "max_new_tokens": payload["sampling"]["max_new_tokens"]})
    print(json.dumps({"ok": True, "method": args.method, "steps": train["steps"],
                      "pool_diversity": rows[-1]["pool_diversity"], "score_mean": rows[-1]["score_mean"],
                      "eval_best_at_k": payload["best_at_k"], "wall_time_s": round(time.time() - started, 1)}))
    return 0


if __name__ == "__main__":
    sys.exit(main())

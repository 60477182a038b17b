"""After `snakemake --config preset=verl_cpu` in DIR: both cells were trained by veRL, every VPO step
logged VPO's own diagnostics (so the reward's rows reached the estimator through a real rollout), and
the tables and figures exist."""

import json
import sys
from pathlib import Path

work = Path(sys.argv[1])
for method in ("grpo", "vpo"):
    cell = work / "results" / "verl_cpu" / "runs" / "maze" / method / "seed0"
    info = json.loads((cell / "train.json").read_text())
    assert info["backend"] == "verl" and info["steps"] == 2, info
    assert (cell / "model" / "config.json").is_file() and (cell / "eval" / "evalseed0.json").is_file()
steps = [json.loads(line) for line in (work / "results/verl_cpu/runs/maze/vpo/seed0/metrics.jsonl").read_text().splitlines()]
assert [s["step"] for s in steps] == [1, 2], steps
for s in steps:
    assert s["vpo/rows_per_rollout_mean"] == 3.0 and s["vpo/pool_size_mean"] == 24.0, s  # m = 3, 8 rollouts
    assert s["advantage/std"] > 0, s
    print(f"vpo step {s['step']}: advantage std {s['advantage/std']:.3f}, pool size {s['vpo/pool_size_mean']:.0f}, "
          f"pool diversity {s['pool_diversity']:.3f}")
for target in ("figures/pass_at_k.pdf", "figures/verl_cpu/diversity_over_training.pdf",
               "results/verl_cpu/tables/main_table.md"):
    assert (work / target).stat().st_size > 0, target
print("verl_cpu preset: ok")

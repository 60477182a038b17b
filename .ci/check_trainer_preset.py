"""After `snakemake --config preset=PRESET` in DIR (verl_cpu: veRL's own trainer on CPU; trl_cpu: TRL's
GRPOTrainer): both cells were trained by that backend for the preset's steps, every VPO step logged
VPO's own diagnostics (so the reward's rows reached the estimator through a real rollout), and the
tables and figures exist.

    python .ci/check_trainer_preset.py DIR PRESET
"""

import json
import sys
from pathlib import Path

EXPECTED = {"verl_cpu": ("verl", 2), "trl_cpu": ("trl", 10)}  # preset -> (backend, RL steps)

work, preset = Path(sys.argv[1]), sys.argv[2]
backend, n_steps = EXPECTED[preset]
for method in ("grpo", "vpo"):
    cell = work / "results" / preset / "runs" / "maze" / method / "seed0"
    info = json.loads((cell / "train.json").read_text())
    assert info["backend"] == backend and info["steps"] == n_steps, info
    assert (cell / "model" / "config.json").is_file() and (cell / "eval" / "evalseed0.json").is_file()
steps = [json.loads(line) for line in (work / f"results/{preset}/runs/maze/vpo/seed0/metrics.jsonl").read_text().splitlines()]
assert [s["step"] for s in steps] == list(range(1, n_steps + 1)), steps
for s in steps:
    assert s["vpo/rows_per_rollout_mean"] == 3.0 and s["vpo/pool_size_mean"] == 24.0, s  # m = 3, 8 rollouts
    assert s["advantage/std"] > 0, s
    print(f"vpo step {s['step']}: advantage std {s['advantage/std']:.3f}, pool size {s['vpo/pool_size_mean']:.0f}, "
          f"pool diversity {s['pool_diversity']:.3f}")
for target in ("figures/pass_at_k.pdf", f"figures/{preset}/diversity_over_training.pdf",
               f"results/{preset}/tables/main_table.md"):
    assert (work / target).stat().st_size > 0, target
print(f"{preset} preset: ok")

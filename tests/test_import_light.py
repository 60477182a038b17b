"""The engine imports and runs without veRL, vLLM, transformers, Ray, pandas or torch.

Each check runs in a fresh interpreter with an import hook that refuses the heavy packages, so
a top-level import of any of them in the engine fails here instead of on a user's laptop.
"""

from __future__ import annotations

import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]

BLOCKER = textwrap.dedent(
    """
    import importlib.abc, sys
    BLOCKED = set(sys.argv[1].split(","))
    class Refuse(importlib.abc.MetaPathFinder):
        def find_spec(self, name, path=None, target=None):
            if name.split(".")[0] in BLOCKED:
                raise ImportError(f"import of {name} is blocked in this check")
            return None
    sys.meta_path.insert(0, Refuse())
    """
)


def run_blocked(blocked: list[str], body: str) -> subprocess.CompletedProcess:
    code = BLOCKER + textwrap.dedent(body)
    return subprocess.run(
        [sys.executable, "-c", code, ",".join(blocked)], cwd=REPO, capture_output=True, text=True, timeout=120
    )


HEAVY = ["transformers", "verl", "vllm", "ray", "torch", "tokenizers"]


def test_engine_imports_and_runs_with_only_numpy_and_scipy():
    result = run_blocked(
        HEAVY + ["pandas", "pyarrow"],
        """
        import numpy as np
        import vpo, vpo.method_advantage, vpo.weights, vpo.metrics, vpo.methods
        adv, diag = vpo.method_advantage.advantage_for_method(
            "vpo", scores=None, sub_scores=[[[1, 0], [0, 1]], [[0.5, 0.5]]], group_ids=["g", "g"],
            settings={"sampler": "sobol", "alpha": 0.7}, rng=0)
        assert adv.shape == (2,) and adv[0] > adv[1]
        assert vpo.metrics.best_at_k([0, 1, 0.5], 2) > 0.8
        for name in ("transformers", "verl", "vllm", "ray", "torch", "pandas"):
            assert name not in sys.modules, name
        print("ok")
        """,
    )
    assert result.returncode == 0 and result.stdout.strip() == "ok", result.stderr


def test_the_blocker_really_blocks():
    # Guard against a hook that silently lets imports through.
    result = run_blocked(["json"], "import json\n")
    assert result.returncode != 0 and "blocked in this check" in result.stderr


@pytest.mark.parametrize("module", ["vpo.task", "vpo.reward", "vpo.prompts"])
def test_task_reward_prompt_modules_import_without_gpu_stack(module):
    # These may use pandas/pyarrow for parquet I/O, but nothing from the training stack.
    if not (REPO / (module.replace(".", "/") + ".py")).exists():
        pytest.skip(f"{module} is not part of this checkout")
    result = run_blocked(HEAVY, f"import {module}\nprint('ok')\n")
    assert result.returncode == 0 and result.stdout.strip() == "ok", result.stderr


@pytest.mark.parametrize(
    "module, blocked",
    [
        # every job starts here, and `vpo --help` must answer at once
        ("vpo.cli", HEAVY + ["pandas", "pyarrow", "numpy"]),
        # the cheap commands: preprocessing, the config, the plan's checks, the record, a figure's dispatch
        ("vpo.preprocess", HEAVY + ["pandas"]),
        ("vpo.config", HEAVY + ["pandas", "pyarrow"]),
        ("vpo.plan", HEAVY + ["pandas", "pyarrow"]),
        ("vpo.record", HEAVY + ["pandas", "pyarrow"]),
        ("vpo.report.plot", HEAVY + ["pandas", "pyarrow"]),
        # the report reads tables with pandas, and nothing of the training stack
        ("vpo.report.aggregate", HEAVY),
        ("vpo.report.tables", HEAVY),
        ("vpo.report.claims", HEAVY),
        ("vpo.report.figures", HEAVY),
    ],
)
def test_the_cheap_commands_import_nothing_they_do_not_use(module, blocked):
    """A cheap command's module imports without the packages it does not need (each blocked in a fresh
    interpreter), so moving an import to a file's head cannot make `vpo --help` or an aggregate job load
    torch."""
    result = run_blocked(blocked, f"import {module}\nprint('ok')\n")
    assert result.returncode == 0 and result.stdout.strip() == "ok", result.stderr[-2000:]

"""Method variants (config.yaml `variants`): a method of the table under another name with changed
settings or m, usable wherever a method name is: its settings and m, its own cells and digest, its veRL
command (run as its method, named as itself), the plan, and the errors that stop a bad one."""

from __future__ import annotations

import copy
from pathlib import Path

import pytest
import yaml

from vpo.config import ConfigError, answers_per_rollout, cell_digest, method_settings, resolve_config

REPO = Path(__file__).resolve().parents[1]
VARIANTS = {
    "vpo_sobol": {"method": "vpo", "settings": {"sampler": "sobol"}, "label": "VPO (Sobol weights)"},
    "vpo_alpha_0.3": {"method": "vpo", "settings": {"alpha": 0.3}},
    "multi_rlvr_m5": {"method": "multi_rlvr", "m": 5},
}


@pytest.fixture()
def raw():
    cfg = yaml.safe_load((REPO / "config.yaml").read_text())
    cfg["variants"] = {**cfg["variants"], **copy.deepcopy(VARIANTS)}  # the ablations name the file's own
    cfg["methods"] = cfg["methods"] + list(VARIANTS)
    return cfg


def test_a_variant_is_its_method_with_its_own_settings_m_and_digest(raw):
    from vpo.methods import get_method

    cfg = resolve_config(raw, "paper")
    assert method_settings(cfg, "vpo_sobol") == {"alpha": 1.0, "sampler": "sobol", "n_weights": 100}
    assert method_settings(cfg, "vpo_alpha_0.3")["alpha"] == 0.3 and method_settings(cfg, "vpo")["alpha"] == 1.0
    assert answers_per_rollout(cfg, "maze", "multi_rlvr_m5") == 5 and answers_per_rollout(cfg, "maze", "vpo_sobol") == 3
    sobol = get_method("vpo_sobol")
    assert (sobol.base, sobol.estimator, sobol.multi_answer, sobol.label) == ("vpo", "vpo", True, "VPO (Sobol weights)")
    assert get_method("vpo_alpha_0.3").label == "VPO (vpo_alpha_0.3)"
    digests = {name: cell_digest(cfg, "maze", name) for name in ("vpo", "vpo_sobol", "vpo_alpha_0.3", "multi_rlvr")}
    assert len(set(digests.values())) == 4
    assert cell_digest(cfg, "maze", "multi_rlvr_m5") != digests["multi_rlvr"]


@pytest.mark.parametrize(
    "variant, key, words",
    [
        ({"method": "vpoo"}, "variants.bad.method", "'vpoo' is not one of"),
        ({"method": "vpo", "settings": {"k": 2}}, "variants.bad.settings.k", "vpo does not take 'k'"),
        ({"method": "grpo", "m": 2}, "variants.bad.m", "grpo writes one answer per rollout"),
        ({"method": "vpo", "colour": "red"}, "variants.bad", "'colour' was unexpected"),
        (
            {"method": "vpo", "settings": {"sampler": "halton"}},
            "variants.bad.settings.sampler",
            "'halton' is not one of",
        ),
    ],
)
def test_a_bad_variant_stops_the_config_naming_it(raw, variant, key, words):
    raw["variants"]["bad"] = variant
    raw["methods"].append("bad")
    with pytest.raises(ConfigError) as err:
        resolve_config(raw, "paper")
    assert key in str(err.value) and words in str(err.value)


def test_a_variant_may_not_take_a_methods_name(raw):
    raw["variants"]["grpo"] = {"method": "vpo"}
    with pytest.raises(ConfigError, match="variants.grpo: variant 'grpo' is already a method of the table"):
        resolve_config(raw, "paper")


def test_the_budget_must_hold_whole_groups_of_a_variants_m(raw):
    raw["variants"]["multi_rlvr_m4"] = {"method": "multi_rlvr", "m": 4}
    raw["methods"].append("multi_rlvr_m4")
    with pytest.raises(ConfigError, match=r"30 candidates are not whole groups of m = 4 \(multi_rlvr_m4"):
        resolve_config(raw, "paper")


def test_the_verl_command_runs_a_variant_as_its_method_under_its_own_name(raw, tmp_path):
    from vpo.verl_ext.command import build_command

    cfg = resolve_config(raw, "paper")
    command = build_command(cfg, "maze", "multi_rlvr_m5", 1, tmp_path / "run", tmp_path / "data")
    overrides = set(command.overrides)
    assert {
        "data.vpo.method=multi_rlvr",
        "algorithm.vpo.method=multi_rlvr",
        "data.vpo.m=5",
        "trainer.experiment_name=multi_rlvr_m5_maze_seed1",
    } <= overrides
    sobol = set(build_command(cfg, "maze", "vpo_sobol", 0, tmp_path / "s", tmp_path / "data").overrides)
    assert {"++algorithm.vpo.settings.sampler=sobol", "algorithm.adv_estimator=vpo", "data.vpo.m=3"} <= sobol


def test_the_plan_gives_a_variant_its_own_cells(tmp_path):
    from test_workflow_dryrun import dryrun

    planned = dryrun(
        tmp_path,
        config={
            "variants": {"vpo_alpha_0.3": {"method": "vpo", "settings": {"alpha": 0.3}}},
            "methods": ["grpo", "vpo", "vpo_alpha_0.3"],
        },
    )
    cells = {p.split("/")[4] for p in planned if p.startswith("results/cpu/runs/maze/")}
    assert cells == {"grpo", "vpo", "vpo_alpha_0.3"}
    assert "results/cpu/runs/maze/vpo_alpha_0.3/seed2/eval/evalseed0.json" in planned


def test_vpo_train_knows_the_variants_of_its_config(raw, tmp_path):
    """`vpo train` reads the config before it looks the method up, so a variant is a known name there."""
    import subprocess
    import sys

    config = tmp_path / "config.yaml"
    config.write_text(yaml.safe_dump(raw))
    (tmp_path / "data").mkdir()
    (tmp_path / "data" / "train.parquet").touch()
    done = subprocess.run(
        [
            sys.executable,
            "-m",
            "vpo.cli",
            "train",
            "--backend",
            "verl",
            "--print-command",
            "--task",
            "maze",
            "--method",
            "vpo_sobol",
            "--seed",
            "0",
            "--data",
            str(tmp_path / "data"),
            "--out",
            str(tmp_path / "run"),
            "--config",
            str(config),
            "--preset",
            "paper",
        ],
        capture_output=True,
        text=True,
        cwd=REPO,
        timeout=120,
    )
    assert done.returncode == 0, done.stderr
    assert "algorithm.vpo.method=vpo " in done.stdout and "++algorithm.vpo.settings.sampler=sobol" in done.stdout
    assert "trainer.experiment_name=vpo_sobol_maze_seed0" in done.stdout

"""The record's settings (docs/reproducibility.yaml) against what runs: every row with a key is checked
against the veRL command the launcher composes (`verl:`), the resolved task, evaluation or method
settings (`task:`, `eval:`, `method:`) of a paper cell of each task and method family in its scope."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml

from vpo.record import deviations, read_record, settings_rows

pytest.importorskip("verl")
pytestmark = pytest.mark.slow  # real veRL and Hydra imports

REPO = Path(__file__).resolve().parents[1]
# one method of each family: the prompt lengths it trains with (Method.length_kind) and its reward shape
FAMILY = {
    "single": ["grpo", "gdpo", "maxrl", "max_at_k", "vpo_single"],
    "multi": ["vpo", "multi_rlvr"],
    "goal": ["goal_cond", "random_weight"],
}


def cells(cfg, scope: str) -> list[tuple[str, str]]:
    """(task, method) pairs a row's scope covers: every method family of every task for `all`."""
    task, _, kind = scope.partition(":")
    tasks = cfg["tasks"] if task == "all" else [task]
    kinds = [kind] if kind else list(FAMILY)
    return [(t, method) for t in tasks for k in kinds for method in FAMILY[k]]


@pytest.fixture(scope="module")
def composed():
    """(task, method) -> (veRL config composed from the launcher's command, resolved config)."""
    from hydra import compose, initialize_config_dir

    from vpo.config import load_config
    from vpo.verl_ext.command import build_command

    cfg = load_config(str(REPO / "config.yaml"), preset="paper")
    out = {}
    with initialize_config_dir(config_dir=str(REPO / "verl" / "config"), version_base=None):
        for task in cfg["tasks"]:
            for method in (m for family in FAMILY.values() for m in family):
                command = build_command(cfg, task, method, 0, Path("/tmp/run"), Path("/tmp/data"))
                out[(task, method)] = compose(config_name="vpo_trainer", overrides=list(command.overrides))
    return cfg, out


def test_the_record_has_a_source_for_every_authors_value():
    rows = settings_rows()
    evaluation = read_record()["evaluation"]
    marked = sum(1 for r in rows + evaluation if r["differs"])
    assert len(rows) >= 40 and len(deviations()) == marked >= 5
    for row in rows:
        assert row["authors"] and row["source"], row
        if row["key"] != "-":
            assert row["key"].split(":", 1)[0] in {"verl", "task", "eval", "method"}, row


def test_every_keyed_row_is_what_the_paper_preset_runs(composed):
    from omegaconf import OmegaConf

    from vpo.config import method_settings, task_settings

    cfg, configs = composed
    checked = 0
    for row in settings_rows():
        if row["key"] == "-":
            continue
        kind, key = row["key"].split(":", 1)
        expected = yaml.safe_load(row["ours"])
        for task, method in cells(cfg, row["scope"]):
            if kind == "verl":
                got = OmegaConf.select(configs[(task, method)], key, throw_on_missing=True)
            elif kind in ("task", "eval"):
                got = task_settings(cfg, task)["eval"] if kind == "eval" else task_settings(cfg, task)
                for part in key.split("."):  # task:data.source
                    got = got[part]
            else:
                name, setting = key.split(".", 1)
                got = method_settings(cfg, name)[setting]
            assert got == expected, (
                f"{row['setting']} ({task}, {method}): the record says {expected!r}, "
                f"the paper preset runs {got!r} ({row['key']})"
            )
            checked += 1
    assert checked > 200  # every keyed row, over the cells of its scope


def test_the_deviations_render_as_clean_rst_on_the_report_front_page():
    """`vpo_tasks/*.py` in a row once opened an emphasis that never closed: a docutils warning on the
    HTML report's front page."""
    from docutils import nodes
    from docutils.core import publish_doctree

    from vpo.record import as_rst

    text = "\n".join(f"- {as_rst(line)}" for line in deviations())
    tree = publish_doctree(text, settings_overrides={"report_level": 5, "halt_level": 5})
    problems = [node.astext() for node in tree.findall(nodes.system_message) if node["level"] >= 2]
    assert not problems
    assert "vpo_tasks/*.py" in tree.astext()  # the escaped text reads as written
    assert any(node.astext() == "rollout.seed" for node in tree.findall(nodes.literal))


def test_poly_epos_keyed_rows_are_what_a_paper_preset_poly_epo_cell_runs():
    """The `peers` table (Poly-EPO as its authors ran it): every keyed row against the veRL command the
    launcher composes for poly_epo on maze under the paper preset, and the method's settings."""
    from hydra import compose, initialize_config_dir
    from omegaconf import OmegaConf

    from vpo.config import load_config, method_settings
    from vpo.record import read_record
    from vpo.verl_ext.command import build_command

    cfg = load_config(str(REPO / "config.yaml"), preset="paper")
    command = build_command(cfg, "maze", "poly_epo", 0, Path("/tmp/run"), Path("/tmp/data"))
    with initialize_config_dir(config_dir=str(REPO / "verl" / "config"), version_base=None):
        composed = compose(config_name="vpo_trainer", overrides=list(command.overrides))
    assert composed.algorithm.adv_estimator == "poly_epo"
    rows = read_record()["peers"]
    keyed = [row for row in rows if row["key"] != "-"]
    assert len(rows) >= 10 and len(keyed) >= 8 and all(row["authors"] and row["source"] for row in rows)
    for row in keyed:
        kind, key = row["key"].split(":", 1)
        if kind == "verl":
            got = OmegaConf.select(composed, key, throw_on_missing=True)
        else:
            name, setting = key.split(".", 1)
            got = method_settings(cfg, name)[setting]
        assert got == yaml.safe_load(row["ours"]), (
            f"{row['setting']}: the record says {row['ours']!r}, the cell runs {got!r}"
        )
    assert [row["setting"] for row in rows if row["differs"]] == [
        "PPO clip ratio (low, high)", "gradient clip", "KL loss", "loss aggregation", "model, data, batch and lengths",
        "strategy clusters", "a failed judge call",
    ]  # fmt: skip


def test_every_evaluation_row_is_what_vpo_eval_reads_for_the_paper_preset():
    """docs/evaluation.md's settings table (the record's `evaluation:` rows): each key against the paper
    preset's task_settings.<task>.eval, which `vpo eval` reads; every task of the preset has every row."""
    from vpo.config import load_config, task_settings
    from vpo.record import read_record

    cfg = load_config(str(REPO / "config.yaml"), preset="paper")
    rows = read_record()["evaluation"]
    settings = {row["setting"] for row in rows}
    assert {(row["task"], s) for row in rows for s in settings} >= {(t, s) for t in cfg["tasks"] for s in settings}
    for row in rows:
        kind, key = row["key"].split(":", 1)
        assert kind == "eval" and row["authors"] and row["source"], row
        got = task_settings(cfg, row["task"])["eval"]
        for part in key.split("."):
            got = got[part]
        assert got == yaml.safe_load(row["ours"]), (
            f"{row['task']} {row['setting']}: record {row['ours']!r}, preset {got!r}"
        )

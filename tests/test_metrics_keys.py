"""docs/metrics.md's training keys against what the backends write: a tiny VPO cell trained by the local
trainer and by TRL writes every key the document gives those backends, and the two lines have the same
keys but for the ones the document says one of them cannot write (veRL's line is checked where the veRL
CPU test trains its cell, tests/test_verl_cpu_run.py)."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest
import yaml

REPO = Path(__file__).resolve().parents[1]
WRITERS = {"all", "local", "TRL", "veRL"}  # the backend column's writers; its other words name methods


def documented(backend: str, method_tag: str) -> set[str]:
    """The training keys docs/metrics.md says `backend` writes for a method (`method_tag`: VPO, Poly-EPO...),
    `reward/<objective>` expanded to maze's objectives; keys with a qualifier other than the method's left out."""
    from vpo.task import resolve

    text = (REPO / "docs" / "metrics.md").read_text()
    table = text.split("## Training:", 1)[1].split("\n## ", 1)[0]
    keys = set()
    for row in table.splitlines():
        cells = [c.strip() for c in row.strip().strip("|").split("|")]
        if len(cells) < 3 or not cells[0].startswith("`"):
            continue
        words = {w.strip() for w in cells[1].split("(")[0].split(",") if w.strip()}
        writers, qualifiers = words & WRITERS, words - WRITERS  # who writes it; for which methods
        if "all" not in writers and backend not in writers:
            continue
        if qualifiers and method_tag not in qualifiers:
            continue
        for name in re.findall(r"`([^`]+)`", cells[0]):
            if name.startswith("_"):
                continue  # a suffix of the key before it
            if name == "reward/<objective>":
                keys |= {f"reward/{o}" for o in resolve("maze").objective_names}
            else:
                keys.add(name)
    return keys


@pytest.fixture(scope="module")
def lines(tiny_maze_data, tiny_multi_base_model, tmp_path_factory):
    """The first metrics.jsonl line of a tiny VPO cell, trained by the local trainer and by TRL."""
    from conftest import TINY_LOCAL_TRAINER

    from vpo.cli import main

    pytest.importorskip("trl")
    raw = yaml.safe_load((REPO / "config.yaml").read_text())
    raw["presets"]["ci"]["local_trainer"] = dict(TINY_LOCAL_TRAINER)
    cfg = tmp_path_factory.mktemp("cfg") / "config.yaml"
    cfg.write_text(yaml.safe_dump(raw, sort_keys=False))
    found = {}
    for backend in ("local", "trl"):
        out = tmp_path_factory.mktemp(backend) / "run"
        args = ["train", "--backend", backend, "--task", "maze", "--method", "vpo", "--seed", "0", "--preset", "ci"]
        args += ["--config", str(cfg), "--data", str(tiny_maze_data), "--base-model", str(tiny_multi_base_model)]
        assert main(args + ["--out", str(out)]) == 0
        found[backend] = json.loads((out / "metrics.jsonl").read_text().splitlines()[0])
    return found


def test_every_documented_key_is_written_by_the_local_and_trl_backends(lines):
    for backend in ("local", "TRL"):
        missing = documented(backend, "VPO") - set(lines[backend.lower()])
        assert not missing, f"docs/metrics.md says the {backend} backend writes {sorted(missing)}; it does not"


def test_the_local_and_trl_lines_have_the_same_keys_but_the_documented_exceptions(lines):
    local, trl = set(lines["local"]), set(lines["trl"])
    assert local - trl == {"ppo_kl"}  # TRL logs no KL to the rollout policy
    assert not {k for k in trl - local if not k.startswith(("rewards/", "completions/", "clip_ratio/"))} - {
        "loss",
        "learning_rate",
        "num_tokens",
        "epoch",
        "reward",
        "reward_std",
        "frac_reward_zero_std",
        "step_time",
    }  # beyond the documented keys, TRL's own log keys only


def test_the_document_parses_as_it_reads():
    """The parser above, on rows whose writers are written out: a key for all, one for local and TRL only,
    and a VPO-only key."""
    local = documented("local", "VPO")
    assert {"score_mean", "advantage/zero_frac", "vpo/pool_size_mean", "reward/completion"} <= local
    assert "set_rl/set_diversity" not in local and "judge/groups" not in local
    assert "generation_s" not in documented("veRL", "VPO") and "advantage/zero_frac" in documented("veRL", "VPO")

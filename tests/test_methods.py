"""The method table equals the methods of the paper and PAPER_REPRO.md section 1 (ryanboldi/vpo)."""

from __future__ import annotations

import dataclasses

import pytest

from vpo.advantage import ESTIMATORS
from vpo.methods import METHODS, Method, get_method

# (name, estimator, multi_answer, reward, prompt), transcribed from PAPER_REPRO.md section 1 and the paper; vpo_single
# names its own registered estimator (VPO on one answer per rollout) so the table alone picks it.
DESIGN_TABLE = [
    ("grpo", "grpo", False, "scalar", "single"),
    ("gdpo", "gdpo", False, "channels", "single"),
    ("maxrl", "maxrl", False, "scalar", "single"),
    ("max_at_k", "max_at_k", False, "scalar", "single"),
    ("multi_rlvr", "grpo", True, "sum", "multi"),
    ("vpo", "vpo", True, "matrix", "multi"),
    ("vpo_single", "vpo_single", False, "matrix", "single"),
    ("goal_cond", "grpo", False, "weighted", "goal"),
    ("random_weight", "grpo", False, "weighted", "single"),
    ("poly_epo", "set_rl", False, "keyed", "single"),
    ("grpo_div", "grpo_div", False, "keyed", "single"),
]


def test_table_matches_design():
    got = [(m.name, m.estimator, m.multi_answer, m.reward, m.prompt) for m in METHODS.values() if m.base is None]
    assert got == DESIGN_TABLE
    assert all(m.estimator in ESTIMATORS for m in METHODS.values())


def test_get_method():
    assert get_method("vpo") is METHODS["vpo"]
    assert get_method(METHODS["grpo"]) is METHODS["grpo"]
    with pytest.raises(ValueError, match="unknown method 'vpo2'.*grpo, gdpo"):
        get_method("vpo2")


def test_method_is_frozen_and_validated():
    with pytest.raises(dataclasses.FrozenInstanceError):
        METHODS["grpo"].estimator = "vpo"  # type: ignore[misc]
    with pytest.raises(ValueError, match="reward 'vector'"):
        Method("x", "grpo", False, "vector", "single")
    with pytest.raises(ValueError, match="prompt kind 'weird'"):
        Method("x", "grpo", False, "scalar", "weird")
    with pytest.raises(ValueError, match="prompt kind 'long'"):
        Method("x", "grpo", False, "scalar", "single", lengths="long")
    assert METHODS["random_weight"].length_kind == "goal" and METHODS["random_weight"].prompt == "single"
    assert METHODS["vpo"].length_kind == "multi" and METHODS["grpo"].length_kind == "single"

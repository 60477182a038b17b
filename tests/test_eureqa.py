"""eureqa: preprocessing from the fixture in both local layouts, the mixed split of PAPER_REPRO.md section 3.3
(ryanboldi/vpo at 767db79)
(seed 0 permutations), the scorer's normalisation and gate, <response_i> slots, the 5-hop check,
the hub branch (the real `datasets` parquet builder behind a stubbed hub), and a fuzzed scorer."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from vpo.cli import main as vpo_main
from vpo.prompts import prepare_row
from vpo.reward import compute_score
from vpo_tasks import eureqa as eq

FIXTURE = Path(__file__).parent / "fixtures" / "eureqa"
GOLD = {
    "chain_entities": ["Ava_Lindqvist", "The_Quiet_Harbor", "Northwind_Pictures", "Port_Elsby", "Saltmarsh_County"],
    "answer": "Ava_Lindqvist",
    "entity_masks": ["Person A", "Film B", "Company C", "City D", "Region E"],
    "num_hops": 5,
}


@pytest.fixture(scope="module")
def data(tmp_path_factory):
    out = tmp_path_factory.mktemp("eureqa")
    assert vpo_main(["preprocess", "--task", "eureqa", "--out", str(out), "--set", f"path={FIXTURE}"]) == 0
    return pd.read_parquet(out / "train.parquet"), pd.read_parquet(out / "test.parquet")


def test_mixed_split_of_the_fixture(data):
    train, test = data
    # normal rows first, then hard5[:1] of permutation [2, 0, 1] = H2; test = H0, H1
    assert [e["eureqa_idx"] for e in train["extra_info"]] == list(range(8)) + [102]
    assert [e["eureqa_idx"] for e in test["extra_info"]] == [100, 101]
    gt = test["reward_model"].iloc[0]["ground_truth"]
    assert list(gt["chain_entities"]) == GOLD["chain_entities"] and gt["answer"] == "Ava_Lindqvist"
    assert "- A: Person A" in test["prompt"].iloc[0][0]["content"]


def hard_dir(tmp_path, n_hard):
    directory = tmp_path / f"hard{n_hard}"
    directory.mkdir()
    hard = pd.read_parquet(next((FIXTURE / "data").glob("questions_hard_5-*.parquet")))
    normal = pd.read_parquet(FIXTURE / "questions_normal_5.parquet").iloc[:2]
    extra = hard.iloc[:1].assign(idx=103)
    pd.concat([hard, extra] if n_hard == 4 else [hard], ignore_index=True).to_parquet(
        directory / "questions_hard_5.parquet"
    )
    normal.to_parquet(directory / "questions_normal_5.parquet")
    return directory


@pytest.mark.parametrize(
    "n_hard, train_ids, test_ids",
    [
        (3, [0, 1, 102], [100, 101]),  # permutation [2, 0, 1], half 1
        (4, [0, 1, 102, 100], [101, 103]),  # permutation [2, 0, 1, 3], half 2
    ],
)
def test_mixed_split_permutations(tmp_path, n_hard, train_ids, test_ids):
    settings = eq.EureqaSettings(path=str(hard_dir(tmp_path, n_hard)))
    train, test = eq.split_records(settings)
    assert [r["idx"] for r in train] == train_ids and [r["idx"] for r in test] == test_ids


def test_normal_to_hard_and_the_five_hop_check(tmp_path):
    train, test = eq.split_records(eq.EureqaSettings(path=str(FIXTURE), mode="normal_to_hard"))
    assert len(train) == 8 and [r["idx"] for r in test] == [100, 101, 102]
    with pytest.raises(ValueError, match="only 5-hop splits"):
        eq.EUREQA.preprocess(
            str(tmp_path / "o"), {"path": str(FIXTURE), "mode": "normal_to_hard", "test_split": "questions_hard_4"}
        )
    assert not (tmp_path / "o" / "train.parquet").exists()  # nothing written when a split is rejected
    with pytest.raises(ValueError, match="questions_hard_3"):
        eq.split_records(eq.EureqaSettings(path=str(FIXTURE), mode="normal_to_hard", test_split="questions_hard_3"))


@pytest.mark.parametrize(
    "response, vector",
    [
        (
            "<entity_A>ava lindqvist</entity_A><ENTITY_B>The Quiet Harbor</ENTITY_B><entity_C>Northwind Pictures Inc."
            "</entity_C><entity_D></entity_D><entity_E>Saltmarsh_County</entity_E>",
            [1, 1, 0, 0, 1],
        ),
        ("", [0, 0, 0, 0, 0]),
        ("Ava_Lindqvist, The_Quiet_Harbor", [0, 0, 0, 0, 0]),
        ("<entity_a>the Ava-Lindqvist!</entity_a>", [0, 0, 0, 0, 0]),  # '-' is deleted, not a space
        ("<entity_a>the Ava_Lindqvist!</entity_a><entity_A>x</entity_A>", [1, 0, 0, 0, 0]),
        ("<entity_E>\n  Saltmarsh County \n</entity_E>", [0, 0, 0, 0, 1]),
    ],
)
def test_scoring(data, response, vector):
    truth = data[1]["reward_model"].iloc[0]["ground_truth"]  # H0, as `vpo preprocess` wrote it
    assert list(truth["chain_entities"]) == GOLD["chain_entities"]
    result = compute_score("eureqa", response, truth, {})
    assert json.loads(result["sub_scores"]) == [vector]
    assert result["score"] == pytest.approx(sum(vector) / 5) and result["acc"] == float(sum(vector) == 5)


def test_normalisation_examples():
    assert eq.normalize_entity("Robert_Rodriguez") == eq.normalize_entity("the robert rodriguez!")
    assert eq.normalize_entity("From_Dusk_till_Dawn:_The_Series") == "from dusk till dawn series"


def test_multi_answer_slots():
    full = "".join(f"<entity_{x}>{g}</entity_{x}>" for x, g in zip("ABCDE", GOLD["chain_entities"]))
    half = "<entity_A>Ava_Lindqvist</entity_A><entity_B>wrong</entity_B>"
    text = f"<response_1>{half}</response_1><response_2>{full}</response_2><response_3>{half}</response_3>"
    result = compute_score("eureqa", text, GOLD, {"num_solutions": 3})
    assert json.loads(result["sub_scores"]) == [[1, 0, 0, 0, 0], [1, 1, 1, 1, 1], [0, 0, 0, 0, 0]]
    assert result["acc"] == 1.0 and result["score"] == pytest.approx(0.2 + 1.0)
    assert json.loads(compute_score("eureqa", full, GOLD, {"num_solutions": 3})["sub_scores"]) == [[0] * 5] * 3


def test_prompts(data):
    row = data[1].iloc[0].to_dict()
    multi = prepare_row(row, "multi_rlvr", 3, seed=0)["prompt"][0]["content"]
    assert "<response_1></response_1> to <response_3></response_3>" in multi and eq.FORMAT_BLOCK not in multi
    assert (
        "Resolving masked entity A (the answer): "
        in prepare_row(row, "goal_cond", None, seed=1)["prompt"][0]["content"]
    )


def test_hub_branch(tmp_path, monkeypatch):
    import datasets

    real = datasets.load_dataset
    files = {
        "questions_normal_5": str(FIXTURE / "questions_normal_5.parquet"),
        "questions_hard_5": str(next((FIXTURE / "data").glob("questions_hard_5-*.parquet"))),
    }
    monkeypatch.setattr(
        datasets,
        "load_dataset",
        lambda name, **kw: real("parquet", data_files=files, cache_dir=str(tmp_path / "cache")),
    )
    monkeypatch.setattr("vpo_tasks.hub.hub_reachable", lambda timeout=3.0: True)
    train, test = eq.EUREQA.preprocess(str(tmp_path / "out"))
    assert len(pd.read_parquet(train)) == 9 and len(pd.read_parquet(test)) == 2


def test_missing_split_names_the_path_setting(tmp_path):
    shutil.copy(FIXTURE / "questions_normal_5.parquet", tmp_path)
    with pytest.raises(ValueError, match=r"task_settings.eureqa.data.path .*questions_hard_5"):
        eq.EUREQA.preprocess(str(tmp_path / "o"), {"path": str(tmp_path)})


TAGS = [
    "<entity_A>",
    "</entity_A>",
    "<entity_b>",
    "</ENTITY_B>",
    "<entity_E>",
    "</entity_E>",
    "<response_1>",
    "</response_1>",
    "<response_2>",
    "</response_2>",
    "Ava_Lindqvist",
    "the",
    " ",
    "_",
    "!",
    "\n",
]


@pytest.mark.slow
@settings(max_examples=10_000, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    text=st.one_of(st.text(max_size=300), st.lists(st.sampled_from(TAGS), max_size=40).map("".join)),
    m=st.sampled_from([1, 3]),
)
def test_scorer_never_raises_and_stays_in_range(text, m):
    matrix = np.asarray(json.loads(compute_score("eureqa", text, GOLD, {"num_solutions": m})["sub_scores"]))
    assert matrix.shape == (m, 5) and np.all((matrix >= 0) & (matrix <= 1))


def test_unreachable_hub_fails_fast_naming_the_path_setting(tmp_path):
    import os
    import subprocess
    import sys
    import time

    env = {**os.environ, "HF_ENDPOINT": "http://127.0.0.1:9", "HF_HUB_OFFLINE": "0"}
    start = time.time()
    done = subprocess.run(
        [sys.executable, "-m", "vpo.cli", "preprocess", "--task", "eureqa", "--out", str(tmp_path)],
        capture_output=True,
        text=True,
        env=env,
        timeout=60,
    )
    assert done.returncode != 0 and time.time() - start < 30
    assert "task_settings.eureqa.data.path" in done.stderr


def test_missing_entities_are_empty_and_one_entity_parses():
    from vpo_tasks.eureqa import EUREQA, parse_entities

    assert parse_entities("<entity_B> Paris </entity_B>") == ["", "Paris", "", "", ""]
    assert (
        EUREQA.parses("<entity_E>x</entity_E>")
        and not EUREQA.parses("x")
        and not EUREQA.parses("<entity_A> </entity_A>")
    )


@pytest.mark.parametrize(
    "size, message",
    [
        ("train_size=-1", "train_size must be at least 1"),  # once dropped the last row silently
        ("test_size=0", "test_size must be at least 1"),  # once wrote an empty split, rc 0
        ("train_size=10000", r"train.parquet holds \d+ rows; task_settings.eureqa.data.train_size asks for 10000"),
    ],
)
def test_a_size_that_would_give_an_empty_or_short_split_fails_naming_it(tmp_path, size, message):
    with pytest.raises(SystemExit, match=message):
        vpo_main(
            [
                "preprocess",
                "--task",
                "eureqa",
                "--out",
                str(tmp_path / "out"),
                "--set",
                f"path={FIXTURE}",
                "--set",
                size,
            ]
        )
    assert not list((tmp_path / "out").glob("*.parquet"))

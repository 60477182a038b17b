"""musique: the fixture of tests/fixtures/musique through `vpo preprocess --set path=...` and compute_score, the
parsing rules of 2.3, the hop-stratified split, the hub path (real `datasets` JSON builder behind a
stubbed hub), the error when no data is reachable, and a fuzzed scorer."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from vpo.cli import main as vpo_main
from vpo.prompts import prepare_row
from vpo.reward import compute_score
from vpo_tasks import musique as mq

FIXTURE = Path(__file__).parent / "fixtures" / "musique"


@pytest.fixture(scope="module")
def rows(tmp_path_factory):
    out = tmp_path_factory.mktemp("musique")
    args = ["preprocess", "--task", "musique", "--out", str(out), "--set", f"path={FIXTURE}", "--set", "eval_size=3"]
    assert vpo_main(args) == 0
    test = pd.read_parquet(out / "test.parquet").to_dict("records")
    return {r["extra_info"]["musique_id"][:5]: r for r in test}, pd.read_parquet(out / "train.parquet")


def truth(rows, key):
    return rows[0][key]["reward_model"]["ground_truth"]


def test_preprocessed_ground_truth(rows):
    by_id, train = rows
    assert len(train) == 9 and len(by_id) == 3  # one question per hop count
    expected = {"2hop_": ([3, 1], 2), "3hop1": ([0, 4, 2], 3), "4hop1": ([5, 1, 3, 0], 4)}
    for key, (support, hops) in expected.items():
        gt = by_id[key]["reward_model"]["ground_truth"]
        assert list(gt["supporting_indices_ordered"]) == support and gt["num_hops"] == hops
        assert by_id[key]["extra_info"]["num_hops"] == hops
    assert "[3] (Title: Orme Lumineux) Orme Lumineux is a song" in by_id["2hop_"]["prompt"][0]["content"]


@pytest.mark.parametrize(
    "key, response, vector",
    [
        ("2hop_", "<support>3, 1</support><answer>Miquette Giraudy</answer>", [1, 1, 1, 1, 1.0]),
        ("2hop_", "<support>1</support><answer>Steve Hillage</answer>", [0, 1, 1, 1, 0.0]),
        ("2hop_", "<support>3,1</support>", [0, 0, 0, 0, 0]),
        ("2hop_", "<support>0, 2, 4, 5, 3, 1</support><answer>Giraudy</answer>", [0, 0, 1, 1, 2 / 3]),
        ("2hop_", "<answer>the Miquette Giraudy!</answer>", [0, 0, 1, 1, 1.0]),
        ("3hop1", "<support>0, 4</support><answer>1871</answer>", [1, 1, 0, 1, 1.0]),
        ("4hop1", "<support>5,5,1,3,7,0</support><answer>Tolm</answer>", [1, 1, 1, 0, 1.0]),
    ],
)
def test_fixture_vectors(rows, key, response, vector):
    result = compute_score("musique", response, truth(rows, key), {})
    assert json.loads(result["sub_scores"]) == [pytest.approx(vector)]
    hops, f1 = vector[:4], vector[4]
    assert result["score"] == pytest.approx((sum(hops) + 3 * f1) / 7)
    assert result["acc"] == float(min(vector) == 1)


@pytest.mark.parametrize(
    "support, cited",
    [
        ("03, ３, 7", [3, 3, 7]),  # leading zeros and fullwidth digits are decimal
        ("[3], P3, +3, 3.0, ³, ③, 4", [4]),  # anything else is ignored
        ("", []),
    ],
)
def test_support_tokens(support, cited):
    assert mq.cited_indices(f"<support>{support}</support>") == cited


def test_tags_are_case_sensitive_and_first_blocks_win(rows):
    gt = truth(rows, "2hop_")
    assert mq.score_answer("<ANSWER>Miquette Giraudy</ANSWER>", gt) == [0.0] * 5
    text = "<answer>Miquette Giraudy</answer><support>3, 1</support><answer>wrong</answer><support>9</support>"
    assert mq.score_answer(text, gt) == [1, 1, 1, 1, 1.0]  # either order, first of each
    assert mq.score_answer("<answer>  </answer><support>3, 1</support>", gt) == [0.0] * 5  # empty answer gate
    assert mq.token_f1("a the an", "") == 1.0 and mq.token_f1("the", "Tolm") == 0.0


def test_multi_answer_slots_dedup_by_vector_and_pad(rows):
    gt = truth(rows, "2hop_")
    a = "<support>3, 1</support><answer>Miquette Giraudy</answer>"
    b = "<support>1</support><answer>Steve Hillage</answer>"
    c = "<support>1, 3</support><answer>Miquette</answer>"  # other text, same vector as a: [1, 1, 1, 1, 1]
    # slots [empty, A, C, B] with C scoring like A -> rows [0, A, B, 0]: dedup is by score vector
    text = f"<response_2>{a}</response_2><response_3>{c}</response_3><response_4>{b}</response_4>"
    result = compute_score("musique", text, gt, {"num_solutions": 4})
    assert json.loads(result["sub_scores"]) == [[0.0] * 5, [1, 1, 1, 1, 1.0], [0, 1, 1, 1, 0.0], [0.0] * 5]
    assert result["num_answers"] == 3  # three non-empty slots were given
    # slots above m are never read; no tags at all -> m zero rows (no fallback)
    got = json.loads(compute_score("musique", text, gt, {"num_solutions": 2})["sub_scores"])
    assert got == [[0.0] * 5, [1, 1, 1, 1, 1.0]]
    assert json.loads(compute_score("musique", a, gt, {"num_solutions": 3})["sub_scores"]) == [[0.0] * 5] * 3
    nested = f"<response_1>{a}<response_2>{b}</response_2></response_1>"
    got = json.loads(compute_score("musique", nested, gt, {"num_solutions": 2})["sub_scores"])
    assert got == [[1, 1, 1, 1, 1.0], [0, 1, 1, 1, 0.0]]  # slot 2 nested in slot 1 is also slot 2


def test_hop_stratified_split():
    def record(i, hops):
        return {"id": f"r{i}", "question_decomposition": [{}] * hops}

    pool = [record(0, 2), record(1, 2), record(2, 3), record(3, 4)]
    chosen = mq.hop_stratified(pool, 3, seed=42)
    assert sorted(len(r["question_decomposition"]) for r in chosen) == [2, 3, 4]
    assert mq.hop_stratified(pool, 3, seed=42) == chosen  # deterministic


@pytest.mark.parametrize("size, seed", [(12, 42), (30, 42), (12, 7)])
def test_hop_stratified_picks_the_questions_datasets_shuffle_picks(size, seed):
    """The authors' recipe (PAPER_REPRO.md) run with `datasets` itself selects the same questions in the
    same order; the 4-hop bucket (5 questions) is smaller than size / 3 at size 30."""
    datasets = pytest.importorskip("datasets")

    hops = [2, 3, 2, 4, 2, 3, 3, 2, 4, 2, 3, 2, 2, 4, 3, 2, 3, 3, 2, 4, 2, 2, 3, 3, 2, 4, 3, 2, 2, 3, 2, 3, 2, 2]
    pool = [{"id": f"{h}hop__{i}", "question_decomposition": [{"id": j} for j in range(h)]} for i, h in enumerate(hops)]
    ds = datasets.Dataset.from_list([{"id": r["id"], "num_hops": len(r["question_decomposition"])} for r in pool])
    parts = []
    for h in (2, 3, 4):
        bucket = ds.filter(lambda r: r["num_hops"] == h).shuffle(seed=seed)
        parts.append(bucket.select(range(min(size // 3, len(bucket)))))
    expected = datasets.concatenate_datasets(parts).shuffle(seed=seed)["id"]
    assert [r["id"] for r in mq.hop_stratified(pool, size, seed)] == expected


def test_hop_stratified_on_the_fixture_matches_datasets():
    datasets = pytest.importorskip("datasets")

    dev = mq.read_jsonl(FIXTURE / "musique_ans_v1.0_dev.jsonl")
    ds = datasets.Dataset.from_list([{"id": r["id"], "num_hops": len(r["question_decomposition"])} for r in dev])
    parts = [
        b.select(range(min(1, len(b))))
        for b in (ds.filter(lambda r, h=h: r["num_hops"] == h).shuffle(seed=42) for h in (2, 3, 4))
    ]
    expected = datasets.concatenate_datasets(parts).shuffle(seed=42)["id"]
    assert [r["id"] for r in mq.hop_stratified(dev, 3, 42)] == expected


def test_prompts_for_every_method(rows):
    row = rows[0]["2hop_"]
    multi = prepare_row(row, "vpo", 3, seed=0)["prompt"][0]["content"]
    assert "<response_1></response_1> to <response_3></response_3>" in multi and mq.FORMAT_LINE not in multi
    goal = prepare_row(row, "goal_cond", None, seed=0)["prompt"][0]["content"]
    assert "- Answer word-level accuracy: " in goal
    broken = {**row, "prompt": [{"role": "user", "content": "no format line here"}]}
    with pytest.raises(ValueError):
        prepare_row(broken, "vpo", 3, seed=0)


def test_hub_path_reads_the_dataset_through_datasets(tmp_path, monkeypatch):
    """The hub branch with the hub stubbed: `datasets.load_dataset(<id>)` answered by the real JSON
    builder on the fixture files, mapped to the hub's split names."""
    import datasets

    real = datasets.load_dataset
    calls = []

    def hub(name, *args, **kwargs):
        calls.append(name)
        files = {"train": str(FIXTURE / mq.FILES["train"]), "validation": str(FIXTURE / mq.FILES["validation"])}
        return real("json", data_files=files, cache_dir=str(tmp_path / "cache"))

    monkeypatch.setattr(datasets, "load_dataset", hub)
    monkeypatch.setattr("vpo_tasks.hub.hub_reachable", lambda timeout=3.0: True)
    train, test = mq.MUSIQUE.preprocess(str(tmp_path / "out"), {"eval_size": 3})
    assert calls == ["dgslibisey/MuSiQue"]
    assert len(pd.read_parquet(train)) == 9 and len(pd.read_parquet(test)) == 3


def test_unreachable_hub_fails_fast_naming_the_path_setting(tmp_path):
    env = {**os.environ, "HF_ENDPOINT": "http://127.0.0.1:9", "HF_HUB_OFFLINE": "0"}
    start = time.time()
    done = subprocess.run(
        [sys.executable, "-m", "vpo.cli", "preprocess", "--task", "musique", "--out", str(tmp_path / "x")],
        capture_output=True,
        text=True,
        env=env,
        timeout=60,
    )
    assert done.returncode != 0 and time.time() - start < 30
    assert "task_settings.musique.data.path" in done.stderr
    bad = subprocess.run(
        [
            sys.executable,
            "-m",
            "vpo.cli",
            "preprocess",
            "--task",
            "musique",
            "--out",
            str(tmp_path / "y"),
            "--set",
            f"path={tmp_path}",
        ],
        capture_output=True,
        text=True,
    )
    assert bad.returncode != 0 and "musique_ans_v1.0_train.jsonl" in bad.stderr


FRAGMENTS = [
    "<support>",
    "</support>",
    "<answer>",
    "</answer>",
    "<response_1>",
    "</response_1>",
    "<response_2>",
    "</response_2>",
    "<response_3>",
    "</response_3>",
    "3",
    "1",
    ",",
    " ",
    "Miquette",
    "Giraudy",
    "the",
    "\n",
    "③",
]


@pytest.mark.slow
@settings(max_examples=10_000, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    text=st.one_of(st.text(max_size=300), st.lists(st.sampled_from(FRAGMENTS), max_size=40).map("".join)),
    m=st.sampled_from([1, 3]),
)
def test_scorer_never_raises_and_stays_in_range(text, m):
    gt = {
        "answer": "Miquette Giraudy",
        "answer_aliases": ["Miquette"],
        "supporting_indices_ordered": [3, 1],
        "num_hops": 2,
    }
    result = compute_score("musique", text, gt, {"num_solutions": m})
    matrix = np.asarray(json.loads(result["sub_scores"]))
    assert matrix.shape == (m, 5) and np.all((matrix >= 0) & (matrix <= 1))


def test_one_megabyte_response_is_scored_quickly():
    gt = {"answer": "Miquette Giraudy", "answer_aliases": [], "supporting_indices_ordered": [3, 1], "num_hops": 2}
    texts = [
        "<support>" + "1, " * 350_000 + "</support><answer>x</answer>",
        "<response_1>" * 80_000,
        "<answer>" + "Miquette " * 110_000 + "</answer>",
    ]
    slowest = 0.0
    for text in texts:
        for m in (1, 3):
            start = time.perf_counter()
            compute_score("musique", text, gt, {"num_solutions": m})
            slowest = max(slowest, time.perf_counter() - start)
    assert slowest < 0.5  # the budget is 50 ms (benchmarks/scorers.py prints it); margin for a loaded CI machine


def test_token_f1_edges():
    assert mq.best_token_f1("Paris", ["", "Paris"]) == 1.0  # an empty alias does not end the search
    assert mq.best_token_f1("the", ["a"]) == 1.0  # both normalise to nothing: equal
    assert mq.best_token_f1("the", ["Paris"]) == 0.0 and mq.best_token_f1("Paris", ["the"]) == 0.0
    assert mq.best_token_f1("New York City", ["new york"]) == pytest.approx(2 * (2 / 3) * 1 / (2 / 3 + 1))


def test_answers_without_aliases_or_support():
    truth = {"answer": "Paris", "supporting_indices_ordered": [3, 7]}  # no answer_aliases key
    assert mq.score_answer("<answer>Paris</answer>", truth) == [0.0, 0.0, 1.0, 1.0, 1.0]
    assert mq.cited_indices("no support block") == [] and mq.cited_indices("<support>2, x, 5</support>") == [2, 5]
    task = mq.MUSIQUE
    assert task.parses("<answer>Paris</answer>") and not task.parses("<answer>  </answer>")
    assert not task.parses("Paris") and not task.parses("<ANSWER>Paris</ANSWER>")


def test_a_test_split_shorter_than_eval_size_is_refused(tmp_path, capsys):
    """eval_size=300 on data with 3 validation questions once wrote 3 rows and exited 0: the short-split check
    knew only train_size and test_size."""
    out = tmp_path / "out"
    args = ["preprocess", "--task", "musique", "--out", str(out), "--set", f"path={FIXTURE}"]
    with pytest.raises(
        SystemExit, match=r"test\.parquet holds 3 rows; task_settings\.musique\.data\.eval_size asks for 300"
    ):
        vpo_main([*args, "--set", "eval_size=300"])
    assert not (out / "test.parquet").exists() and not (out / "train.parquet").exists()
    with pytest.raises(SystemExit, match=r"eval_size asks for 300"):  # the default asks for 300 too
        vpo_main(args)
    with pytest.raises(
        SystemExit, match=r"train\.parquet holds 9 rows; task_settings\.musique\.data\.train_size asks for 20"
    ):
        vpo_main([*args, "--set", "eval_size=3", "--set", "train_size=20"])
    assert vpo_main([*args, "--set", "eval_size=0"]) == 0  # 0: every validation question, nothing asked

"""`vpo diagnose`: the figures it prints, recomputed by hand on a small run directory."""

from __future__ import annotations

import json

import pandas as pd
import pytest

from vpo.cli import main as vpo_main
from vpo.diagnose import diagnose


@pytest.fixture
def run_dir(tmp_path):
    run = tmp_path / "run"
    (run / "eval").mkdir(parents=True)
    rows = []
    # problem 0: chain 0 answers "UP A" and "UP B", chain 1 only "DOWN C"; problem 1: chain 0 "UP A" twice
    for problem, chain, slot, text in [
        (0, 0, 0, "UP A"),
        (0, 0, 1, "UP B"),
        (0, 1, 0, "DOWN C"),
        (0, 1, 1, ""),
        (1, 0, 0, "UP A"),
        (1, 0, 1, "UP A"),
    ]:
        rows.append(
            {
                "problem": problem,
                "prompt": "p",
                "weights": None,
                "chain": chain,
                "slot": slot,
                "text": f"<answer>{text}</answer>" if text else "",
                "response": f"r{problem}{chain}",
                "answer": text,
                "gold": float(slot == 0),
                "k": 1,
                "scalar": 0.0,
                "parsed": bool(text),
                "correct": False,
            }
        )
    pd.DataFrame(rows).to_parquet(run / "eval" / "evalseed0.parquet")
    (run / "eval" / "evalseed0.json").write_text(json.dumps({"m": 2, "sampling": {"max_new_tokens": 40}}))
    steps = [{"step": s, "score_mean": s / 10, "pool_diversity": 1 - s / 10, "reward/gold": 0.5} for s in range(1, 11)]
    (run / "metrics.jsonl").write_text("".join(json.dumps(r) + "\n" for r in steps) + '{"step": 11, "score')
    return run


def test_figures_by_hand(run_dir):
    report = diagnose(run_dir)
    ev = report["eval"]
    assert ev["candidates"] == 6 and ev["m"] == 2
    assert ev["parse_rate_by_slot"] == [1.0, pytest.approx(2 / 3, abs=1e-3)]
    assert ev["distinct_answers_per_pool"] == pytest.approx((3 + 1) / 2)  # {UP A, UP B, DOWN C}, {UP A}
    # first words: problem 0 {UP, UP, DOWN} -> H = 0.918 bits; problem 1 {UP, UP} -> 0
    assert ev["first_word_entropy_bits"] == pytest.approx(0.918 / 2, abs=1e-3)
    assert ev["objective_means"] == {"gold": pytest.approx(0.5)}
    assert "truncated_share" not in ev  # no model directory, no tokenizer to count tokens with
    training = report["training"]
    assert training["steps"] == 10  # the cut-off last line is ignored
    assert training["start"]["score_mean"] == pytest.approx(0.15) and training["end"]["score_mean"] == pytest.approx(
        0.95
    )
    assert training["end"]["pool_diversity"] == pytest.approx(0.05) and training["start"]["entropy"] is None


def test_cli_and_missing_eval(run_dir, tmp_path, capsys):
    assert vpo_main(["diagnose", str(run_dir), "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["eval"]["m"] == 2
    with pytest.raises(SystemExit, match="run the cell's eval first"):
        vpo_main(["diagnose", str(tmp_path)])

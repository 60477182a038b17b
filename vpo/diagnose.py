"""`vpo diagnose RUN_DIR`: what a finished cell's model actually writes, read from its files.

    vpo diagnose results/cpu/runs/maze/vpo/seed0            # a table on stdout
    vpo diagnose results/cpu/runs/maze/*/seed0 --json       # one JSON object per cell

From the evaluation candidates (`eval/evalseed*.parquet`): the parse rate of every answer slot,
response length in tokens against the evaluation's token limit and the share that hit it
(truncated), distinct answers per problem pool and the entropy of their first word (maze: the first
move) per pool, both read from each candidate's answer in the task's normal form, and per-objective
means. From `metrics.jsonl`: the training score, each
reward channel and the pool diversity at the start and the end of training (means over the first
and last fifth of the steps). Nothing here feeds a figure; it explains them.
"""

from __future__ import annotations

import argparse
import json
import math
from collections import Counter
from pathlib import Path
from typing import Any


def _entropy_bits(items: list[str]) -> float:
    counts = Counter(items)
    total = sum(counts.values())
    return -sum(c / total * math.log2(c / total) for c in counts.values()) if total else 0.0


def _eval_diagnostics(run_dir: Path) -> dict[str, Any]:
    """Candidate-level figures of every evaluation of the cell (pooled over eval seeds)."""
    import pandas as pd

    pools = sorted((run_dir / "eval").glob("evalseed*.parquet"))
    if not pools:
        raise FileNotFoundError(f"{run_dir}/eval has no evalseed*.parquet; run the cell's eval first")
    frame = pd.concat([pd.read_parquet(p).assign(eval_seed=p.stem) for p in pools], ignore_index=True)
    meta = json.loads(pools[0].with_suffix(".json").read_text())
    out: dict[str, Any] = {"candidates": len(frame), "m": int(meta["m"])}
    out["parse_rate_by_slot"] = [round(float(v), 3) for v in frame.groupby("slot")["parsed"].mean()]
    parsed = frame[frame["parsed"]]
    keys = ["eval_seed", "problem"]
    out["distinct_answers_per_pool"] = (
        round(float(parsed.groupby(keys)["answer"].nunique().mean()), 2) if len(parsed) else 0.0
    )
    first_words = parsed.assign(first=parsed["answer"].str.split().str[0])
    out["first_word_entropy_bits"] = (
        round(float(first_words.groupby(keys)["first"].apply(lambda s: _entropy_bits(list(s))).mean()), 3)
        if len(parsed)
        else 0.0
    )
    objectives = [
        c
        for c in frame.columns
        if c
        not in {
            "problem",
            "prompt",
            "weights",
            "chain",
            "slot",
            "text",
            "response",
            "answer",
            "scalar",
            "parsed",
            "correct",
            "eval_seed",
            "k",
        }
    ]
    out["objective_means"] = {c: round(float(frame[c].mean()), 3) for c in objectives}
    responses = frame.drop_duplicates(["eval_seed", "problem", "chain"])["response"].tolist()
    limit = int(meta["sampling"]["max_new_tokens"])
    lengths = _token_lengths(run_dir, responses)
    if lengths is not None:
        out["response_tokens_mean"] = round(sum(lengths) / len(lengths), 1)
        out["response_token_limit"] = limit
        out["truncated_share"] = round(sum(n >= limit for n in lengths) / len(lengths), 3)
    return out


def _token_lengths(run_dir: Path, responses: list[str]) -> list[int] | None:
    """Token counts with the cell's own tokenizer (None when the model directory has none)."""
    if not (run_dir / "model" / "tokenizer_config.json").is_file():
        return None
    from transformers import AutoTokenizer

    tokenizer = AutoTokenizer.from_pretrained(run_dir / "model")
    # +1: the end-of-sequence token the generation stopped on is not part of the decoded text
    return [len(tokenizer(text, add_special_tokens=False)["input_ids"]) + 1 for text in responses]


def _training_diagnostics(run_dir: Path) -> dict[str, Any]:
    """Start and end of training (means over the first and last fifth of the logged steps)."""
    path = run_dir / "metrics.jsonl"
    if not path.is_file():
        return {}
    records = []
    for line in path.read_text().splitlines():
        try:
            records.append(json.loads(line))
        except json.JSONDecodeError:
            continue  # a line cut by a killed job
    if not records:
        return {}
    fifth = max(1, len(records) // 5)
    keys = [
        "score_mean",
        "pool_diversity",
        "entropy",
        "parse_failure_rate",
        "response_length_mean",
        "truncated_share",
    ] + sorted(k for k in records[0] if k.startswith("reward/"))

    def mean(rows: list[dict], key: str) -> float | None:
        values = [float(r[key]) for r in rows if r.get(key) is not None]
        return round(sum(values) / len(values), 3) if values else None

    return {
        "steps": len(records),
        "start": {k: mean(records[:fifth], k) for k in keys},
        "end": {k: mean(records[-fifth:], k) for k in keys},
    }


def diagnose(run_dir: str | Path) -> dict[str, Any]:
    run = Path(run_dir)
    return {"run": str(run), "eval": _eval_diagnostics(run), "training": _training_diagnostics(run)}


def _print(report: dict[str, Any]) -> None:
    print(f"== {report['run']}")
    for key, value in report["eval"].items():
        print(f"  eval  {key:28s} {value}")
    training = report["training"]
    if training:
        print(f"  train steps {training['steps']}   (start -> end: means over the first and last fifth)")
        for key in training["start"]:
            print(f"  train {key:28s} {training['start'][key]} -> {training['end'][key]}")


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("runs", nargs="+", help="run directories: results/cpu/runs/<task>/<method>/seed<seed>")
    parser.add_argument("--json", action="store_true", help="print one JSON object per run instead of a table")


def run(args: argparse.Namespace) -> int:
    for run_dir in args.runs:
        try:
            report = diagnose(run_dir)
        except FileNotFoundError as err:
            raise SystemExit(f"vpo diagnose: {err}") from None
        print(json.dumps(report)) if args.json else _print(report)
    return 0

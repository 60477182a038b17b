"""musique: MuSiQue-Ans multi-hop question answering (k = 5: hop_1..hop_4, answer_f1).

The model reads about 20 paragraphs, cites the ones supporting each reasoning step in
`<support>i, j</support>` and answers in `<answer>...</answer>` (docs/tasks.md). hop_i is 1 when the
gold paragraph of step i is among the first four distinct cited indices (steps past the question's
hop count score 1); answer_f1 is SQuAD-style token F1 against the answer and its aliases; an
answer-less response scores zero everywhere. Multi-answer responses use `<response_i>` slots.

Data: `dgslibisey/MuSiQue` (train 19,938 rows; validation 2,417, the source of the test split),
or the same two jsonl files in a local directory (`data.path`). The paper's test set is 300
validation questions stratified by hop count (100 each of 2, 3 and 4 hops).
"""

from __future__ import annotations

import json
import os
import re
import string
from collections import Counter
from dataclasses import dataclass
from typing import Any, Sequence

import numpy as np

from vpo.atomic import write_parquet_atomic
from vpo.task import as_random, settings_from
from vpo_tasks.hub import local_files, load_hub_dataset
from vpo_tasks.response_slots import ResponseSlotTask, first_block

_MAX_HOPS = 4  # hop channels; also the citation cap (first 4 distinct indices)
FILES = {"train": "musique_ans_v1.0_train.jsonl", "validation": "musique_ans_v1.0_dev.jsonl"}
_HOP_COUNTS = (2, 3, 4)
ARTICLES = re.compile(r"\b(a|an|the)\b")
PUNCTUATION = str.maketrans("", "", string.punctuation)


@dataclass
class MusiqueSettings:
    path: str | None = None  # directory with the two upstream jsonl files; None: the hub dataset below
    dataset: str = "dgslibisey/MuSiQue"  # Hugging Face dataset id
    eval_size: int = 300  # test questions drawn from validation; 0: all validation rows
    eval_split: str = "hop_stratified"  # hop_stratified: eval_size / 3 each of 2, 3, 4 hops (paper); first: file order
    eval_split_seed: int = 42  # hop_stratified: shuffles each hop bucket, then the concatenation
    train_size: int | None = None  # cap on training rows (in file order); None: all

    @classmethod
    def from_dict(cls, values: dict[str, Any] | None) -> "MusiqueSettings":
        settings = settings_from(cls, values, "musique")
        if settings.eval_split not in ("hop_stratified", "first"):
            raise ValueError(f"musique: eval_split {settings.eval_split!r} is not one of hop_stratified, first")
        if settings.eval_size < 0 or (
            settings.eval_split == "hop_stratified" and settings.eval_size % len(_HOP_COUNTS)
        ):
            raise ValueError(
                f"musique: eval_size {settings.eval_size} must be a non-negative multiple of 3 "
                "for the hop-stratified split"
            )
        return settings


# ---- scoring (docs/tasks.md, musique) ------------------------------------------------------------
def normalize(text: str) -> str:
    """Lowercase, whole-word articles to spaces, punctuation deleted, whitespace collapsed."""
    return " ".join(ARTICLES.sub(" ", str(text).lower()).translate(PUNCTUATION).split())


def token_f1(prediction: str, gold: str) -> float:
    """Word-level F1 of the normalised strings (1 when both are empty)."""
    return best_token_f1(prediction, [gold])


def best_token_f1(prediction: str, golds: Sequence[str]) -> float:
    """Max over golds of token_f1(prediction, gold); the prediction is normalised once."""
    pred = normalize(prediction).split()
    counts = Counter(pred)
    best = 0.0
    for gold in golds:
        ref = normalize(gold).split()
        same = sum((counts & Counter(ref)).values())
        if same:
            precision, recall = same / len(pred), same / len(ref)
            best = max(best, 2 * precision * recall / (precision + recall))
        elif pred == ref:  # no word in common and equal: both empty
            best = 1.0
    return best


def cited_indices(text: str) -> list[int]:
    """Indices of the first <support> block: comma-separated tokens made only of decimal digits."""
    block = first_block(text, "<support>", "</support>")
    if block is None:
        return []
    tokens = (token.strip() for token in block.split(","))
    return [int(token) for token in tokens if token.isdecimal()]


def score_answer(text: str, truth: dict[str, Any]) -> list[float]:
    """[hop_1..hop_4, answer_f1] of one answer text."""
    answer = (first_block(text, "<answer>", "</answer>") or "").strip()
    if not answer:
        return [0.0] * (_MAX_HOPS + 1)
    capped: list[int] = []
    for index in cited_indices(text):
        if index not in capped:
            capped.append(index)
            if len(capped) == _MAX_HOPS:
                break
    gold = [int(i) for i in truth["supporting_indices_ordered"]]
    hops = [float(gold[i] in capped) if i < len(gold) else 1.0 for i in range(_MAX_HOPS)]
    aliases = truth.get("answer_aliases")  # a list, or an array after a parquet round trip
    golds = [truth["answer"], *(list(aliases) if aliases is not None else [])]
    return hops + [best_token_f1(answer, golds)]


# ---- data ------------------------------------------------------------------------------------
def read_jsonl(path: os.PathLike | str) -> list[dict[str, Any]]:
    with open(path, encoding="utf-8") as fh:
        return [json.loads(line) for line in fh if line.strip()]


def _load_raw(settings: MusiqueSettings) -> dict[str, list[dict[str, Any]]]:
    """{"train": records, "validation": records} in the upstream schema."""
    if settings.path:
        return {split: read_jsonl(p) for split, p in local_files("musique", settings.path, FILES).items()}
    loaded = load_hub_dataset("musique", settings.dataset)
    return {split: [dict(r) for r in loaded[split]] for split in ("train", "validation")}


def hop_stratified(records: list[dict[str, Any]], size: int, seed: int) -> list[dict[str, Any]]:
    """The authors' selection (PAPER_REPRO.md, MuSiQue eval split), done with numpy as `datasets` does
    it: each hop bucket, in file order, permuted by `np.random.default_rng(seed).permutation` (what
    `Dataset.shuffle(seed=seed)` draws), its first size / 3 kept (all, when fewer), the buckets of 2, 3
    and 4 hops concatenated, and the concatenation permuted again with the same seed."""
    per_hop = size // len(_HOP_COUNTS)
    chosen: list[dict[str, Any]] = []
    for hops in _HOP_COUNTS:
        bucket = [r for r in records if len(r["question_decomposition"]) == hops]
        chosen += [bucket[i] for i in np.random.default_rng(seed).permutation(len(bucket))[:per_hop]]
    return [chosen[i] for i in np.random.default_rng(seed).permutation(len(chosen))]


FORMAT_LINE = (
    "First reason about which paragraphs matter, then give the supporting paragraph indices as "
    "<support>i, j, k</support> and the final answer as <answer>your answer</answer>."
)


def prompt_fields(record: dict[str, Any]) -> dict[str, str]:
    """The question's pieces a prompt template can place (`vpo.templates`): the numbered paragraphs, one
    per line as `[i] (Title: t) text`, and the question."""
    paragraphs = "\n".join(f"[{p['idx']}] (Title: {p['title']}) {p['paragraph_text']}" for p in record["paragraphs"])
    return {"paragraphs": paragraphs, "question": str(record["question"])}


def build_prompt(record: dict[str, Any]) -> str:
    fields = prompt_fields(record)
    return (
        "Read the paragraphs below and answer the multi-hop question. Identify which paragraphs "
        f"support your answer.\n\nParagraphs:\n{fields['paragraphs']}\n\nQuestion: {fields['question']}\n\n"
        f"{FORMAT_LINE}"
    )


class MusiqueTask(ResponseSlotTask):
    name = "musique"
    label = "MuSiQue"
    data_source = "musique"
    ability = "reasoning"
    objectives = (
        ("hop_1", "Finding evidence for reasoning step 1"),
        ("hop_2", "Finding evidence for reasoning step 2"),
        ("hop_3", "Finding evidence for reasoning step 3"),
        ("hop_4", "Finding evidence for reasoning step 4"),
        ("answer_f1", "Answer word-level accuracy"),
    )
    scalar_weights = (1 / 7, 1 / 7, 1 / 7, 1 / 7, 3 / 7)  # (hop_1 + ... + hop_4 + 3 answer_f1) / 7
    default_m = 3
    single_format_line = FORMAT_LINE
    template_fields = ("paragraphs", "question")
    required_template_fields = ("paragraphs", "question")
    settings_class = MusiqueSettings
    size_settings = {"train": "train_size", "test": "eval_size"}  # the test split is drawn from validation

    def is_correct(self, vector: Sequence[float]) -> bool:
        """Solved: every hop found and answer F1 = 1."""
        return bool(len(vector) == self.k and min(vector) >= 1.0)

    def rows(self, split: str, records: list[dict[str, Any]]) -> list[dict[str, Any]]:
        out = []
        for i, record in enumerate(records):
            steps = record["question_decomposition"]
            truth = {
                "answer": record["answer"],
                "answer_aliases": list(record.get("answer_aliases") or []),
                "supporting_indices_ordered": [int(s["paragraph_support_idx"]) for s in steps],
                "num_hops": len(steps),
            }
            out.append(
                self.row(
                    build_prompt(record),
                    truth,
                    split=split,
                    index=i,
                    task_id=f"musique-{record['id']}",
                    musique_id=record["id"],
                    num_hops=len(steps),
                    prompt_fields=json.dumps(prompt_fields(record)),
                )
            )
        return out

    def preprocess(self, out_dir: str, settings: dict[str, Any] | None = None) -> tuple[str, str]:
        s = MusiqueSettings.from_dict(settings)
        raw = _load_raw(s)
        train = raw["train"][: s.train_size] if s.train_size is not None else raw["train"]
        test = raw["validation"]
        if s.eval_size and s.eval_split == "hop_stratified":
            test = hop_stratified(test, s.eval_size, s.eval_split_seed)
        elif s.eval_size:
            test = test[: s.eval_size]
        return (
            write_parquet_atomic(self.rows("train", train), os.path.join(out_dir, "train.parquet")),
            write_parquet_atomic(self.rows("test", test), os.path.join(out_dir, "test.parquet")),
        )

    # -- answers
    def parses(self, text: str) -> bool:
        return bool((first_block(str(text), "<answer>", "</answer>") or "").strip())

    def canonical_answer(self, answer: str) -> str:
        """The normalised text of its <answer> block (the form the F1 compares)."""
        return normalize(first_block(str(answer), "<answer>", "</answer>") or "")

    def score_answer(self, answer: str, ground_truth: dict[str, Any]) -> list[float]:
        return score_answer(str(answer), ground_truth)

    def multi_format(self, m: int) -> str:
        return (
            f"Give {m} different answers, each in its own block <response_1></response_1> to "
            f"<response_{m}></response_{m}>; inside each block put <support>indices</support> and "
            "<answer>your answer</answer>."
        )

    # -- warm-start demonstrations (CPU trainer only)
    def demonstration(self, row: dict[str, Any], rng: Any, n_answers: int) -> str:
        """Well-formed answers of mixed quality: gold, partial or wrong citations; the gold answer,
        an alias or a paragraph title."""
        rng = as_random(rng)
        truth = row["reward_model"]["ground_truth"]
        gold = list(truth["supporting_indices_ordered"])
        titles = re.findall(r"\(Title: ([^)]*)\)", row["prompt"][-1]["content"]) or [truth["answer"]]

        def one() -> str:
            cited = [i for i in gold if rng.random() < 0.7] + [rng.randrange(20) for _ in range(rng.randrange(2))]
            answer = rng.choice([truth["answer"], truth["answer"], *truth["answer_aliases"], rng.choice(titles)])
            return f"<support>{', '.join(map(str, cited))}</support><answer>{answer}</answer>"

        if n_answers <= 1:
            return one()
        return "\n".join(f"<response_{i}>{one()}</response_{i}>" for i in range(1, n_answers + 1))


MUSIQUE = MusiqueTask()  # found through the vpo.tasks entry point `musique` (pyproject.toml)

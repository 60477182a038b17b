"""eureqa: EUREQA entity back-chaining (k = 5: entity_A..entity_E).

A narrative describes a chain of masked entities (Person A, Film B, ...); the last sentence names
the leaf, and the model resolves the five masks back to the answer, Person A, writing each
canonical name in `<entity_X>` tags (docs/tasks.md). Each channel is an exact match after
normalisation; a response with all five tags empty scores zero. Multi-answer responses use
`<response_i>` slots.

Data: `vincentleebang/EUREQA` (one parquet per split: questions_normal_5, questions_hard_1..5), or
the same files in a local directory (`data.path`: `<split>.parquet` or the hub layout
`data/<split>-*.parquet`). The paper trains on questions_normal_5 plus half of a seeded shuffle of
questions_hard_5 and tests on the other half (`mode: mixed_split`).
"""

from __future__ import annotations

import json
import os
import re
import string
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Sequence

import numpy as np

from vpo.atomic import write_parquet_atomic
from vpo.task import as_random, settings_from
from vpo_tasks.hub import DataUnavailable, load_hub_dataset
from vpo_tasks.response_slots import ResponseSlotTask, first_block_nocase

_LETTERS = ("A", "B", "C", "D", "E")
MODES = ("mixed_split", "normal_to_hard")
ARTICLES = re.compile(r"\b(a|an|the)\b")
PUNCTUATION = str.maketrans("", "", string.punctuation)


@dataclass
class EureqaSettings:
    path: str | None = None  # directory with the split parquet files; None: the hub dataset below
    dataset: str = "vincentleebang/EUREQA"  # Hugging Face dataset id
    mode: str = "mixed_split"  # mixed_split (paper) or normal_to_hard (train_split -> test_split)
    mixed_split_seed: int = 0  # mixed_split: permutation of questions_hard_5 (= datasets' shuffle(seed))
    train_split: str = "questions_normal_5"  # normal_to_hard: training split
    test_split: str = "questions_hard_5"  # normal_to_hard: test split
    train_size: int | None = None  # cap on training rows; None: all
    test_size: int | None = None  # cap on test rows; None: all

    @classmethod
    def from_dict(cls, values: dict[str, Any] | None) -> "EureqaSettings":
        settings = settings_from(cls, values, "eureqa")
        if settings.mode not in MODES:
            raise ValueError(f"eureqa: mode {settings.mode!r} is not one of {MODES}")
        return settings


# ---- scoring (docs/tasks.md, eureqa) -------------------------------------------------------------
def normalize_entity(text: str) -> str:
    """Underscores to spaces, lowercase, whole-word articles removed, punctuation deleted, spaces collapsed."""
    return " ".join(ARTICLES.sub(" ", str(text).replace("_", " ").lower()).translate(PUNCTUATION).split())


def parse_entities(text: str) -> list[str]:
    """The stripped contents of the first <entity_A> ... <entity_E> blocks ("" where missing)."""
    return [(first_block_nocase(text, f"entity_{letter}") or "").strip() for letter in _LETTERS]


def score_answer(text: str, truth: dict[str, Any]) -> list[float]:
    predicted = parse_entities(text)
    if not any(predicted):
        return [0.0] * len(_LETTERS)
    gold = list(truth["chain_entities"])
    return [float(bool(p) and bool(g) and normalize_entity(p) == normalize_entity(g)) for p, g in zip(predicted, gold)]


# ---- data ------------------------------------------------------------------------------------
def _local_split(directory: Path, split: str) -> list[dict[str, Any]]:
    import pandas as pd

    files = (
        [directory / f"{split}.parquet"]
        if (directory / f"{split}.parquet").is_file()
        else sorted((directory / "data").glob(f"{split}-*.parquet"))
    )
    if not files:
        raise DataUnavailable(
            f"eureqa: task_settings.eureqa.data.path = {str(directory)!r} has neither "
            f"{split}.parquet nor data/{split}-*.parquet"
        )
    frame = pd.concat([pd.read_parquet(f) for f in files], ignore_index=True)
    return frame.to_dict("records")


def _load_splits(settings: EureqaSettings, names: Sequence[str]) -> dict[str, list[dict[str, Any]]]:
    if settings.path:
        return {name: _local_split(Path(settings.path).expanduser(), name) for name in names}
    loaded = load_hub_dataset("eureqa", settings.dataset)
    return {name: [dict(r) for r in loaded[name]] for name in names}


def split_records(settings: EureqaSettings) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
    """(train, test) records for the settings' mode."""
    if settings.mode == "normal_to_hard":
        raw = _load_splits(settings, [settings.train_split, settings.test_split])
        train, test = raw[settings.train_split], raw[settings.test_split]
    else:
        raw = _load_splits(settings, ["questions_normal_5", "questions_hard_5"])
        hard = raw["questions_hard_5"]
        shuffled = [hard[i] for i in np.random.default_rng(settings.mixed_split_seed).permutation(len(hard))]
        half = len(hard) // 2
        train, test = raw["questions_normal_5"] + shuffled[:half], shuffled[half:]
    return train[: settings.train_size], test[: settings.test_size]


FORMAT_BLOCK = (
    "Write each resolved canonical name, and nothing else, in its tag:\n"
    + "\n".join(f"<entity_{x}>...</entity_{x}>" for x in _LETTERS)
    + "\nThe answer to the question is what you put in <entity_A>."
)


def prompt_fields(record: dict[str, Any]) -> dict[str, str]:
    """The chain's pieces a prompt template can place (`vpo.templates`): the narrative's sentences, one
    per line, and the five masks as `- A: mask` lines."""
    masks = list(record["entity_masks"])[:5]
    return {
        "narrative": "\n".join(record["question"]),
        "masks": "\n".join(f"- {x}: {mask}" for x, mask in zip(_LETTERS, masks)),
    }


def build_prompt(record: dict[str, Any]) -> str:
    fields = prompt_fields(record)
    return (
        "Below is a short narrative about masked entities (Person A, Country B, ...) linked by relations. "
        "The last sentence names the final entity; reason backwards from it to resolve every mask.\n\n"
        "Narrative:\n"
        + fields["narrative"]
        + "\n\nMasked entities, in order of introduction:\n"
        + fields["masks"]
        + "\n\nUse canonical underscored Wikipedia names (e.g. `Robert_Rodriguez`, "
        "`From_Dusk_till_Dawn:_The_Series`).\n" + FORMAT_BLOCK
    )


class EureqaTask(ResponseSlotTask):
    name = "eureqa"
    label = "EUREQA"
    data_source = "eureqa"
    ability = "reasoning"
    objectives = tuple(
        (f"entity_{x}", f"Resolving masked entity {x}" + (" (the answer)" if x == "A" else "")) for x in _LETTERS
    )
    scalar_weights = (0.2, 0.2, 0.2, 0.2, 0.2)
    default_m = 3
    single_format_line = FORMAT_BLOCK
    template_fields = ("narrative", "masks")
    required_template_fields = ("narrative", "masks")
    settings_class = EureqaSettings

    def rows(self, split: str, records: list[dict[str, Any]]) -> list[dict[str, Any]]:
        out = []
        for i, record in enumerate(records):
            masks, entities = list(record["entity_masks"]), list(record["entities"])
            if len(masks) < 6 or len(entities) < 6:
                raise ValueError(
                    f"eureqa: record idx={record.get('idx')} has {len(masks)} masks and {len(entities)} "
                    "entities; only 5-hop splits (6 of each) are supported"
                )
            truth = {"answer": entities[0], "chain_entities": entities[:5], "entity_masks": masks[:5], "num_hops": 5}
            out.append(
                self.row(
                    build_prompt(record),
                    truth,
                    split=split,
                    index=i,
                    task_id=f"eureqa-{record['idx']}",
                    eureqa_idx=int(record["idx"]),
                    num_hops=5,
                    prompt_fields=json.dumps(prompt_fields(record)),
                )
            )
        return out

    def preprocess(self, out_dir: str, settings: dict[str, Any] | None = None) -> tuple[str, str]:
        train, test = split_records(EureqaSettings.from_dict(settings))
        train_rows, test_rows = self.rows("train", train), self.rows("test", test)  # check both before writing
        return (
            write_parquet_atomic(train_rows, os.path.join(out_dir, "train.parquet")),
            write_parquet_atomic(test_rows, os.path.join(out_dir, "test.parquet")),
        )

    # -- answers
    def parses(self, text: str) -> bool:
        return any(parse_entities(str(text)))

    def canonical_answer(self, answer: str) -> str:
        """The chain: its five entities normalised as scored, joined by |; "" without any."""
        entities = parse_entities(str(answer))
        return "|".join(normalize_entity(e) for e in entities) if any(entities) else ""

    def score_answer(self, answer: str, ground_truth: dict[str, Any]) -> list[float]:
        return score_answer(str(answer), ground_truth)

    def multi_format(self, m: int) -> str:
        return (
            f"Give {m} genuinely different reasoning chains (different candidate resolutions, not "
            f"paraphrases), each in its own block <response_1></response_1> to <response_{m}></response_{m}>, "
            "and put all five tags <entity_A></entity_A> to <entity_E></entity_E> in every block, each "
            "holding only a canonical name. The answer of a chain is its <entity_A>."
        )

    # -- warm-start demonstrations (CPU trainer only)
    def demonstration(self, row: dict[str, Any], rng: Any, n_answers: int) -> str:
        """Well-formed chains of mixed quality: each entity right, replaced by another of the chain, or
        left empty, at random."""
        rng = as_random(rng)
        gold = list(row["reward_model"]["ground_truth"]["chain_entities"])

        def one() -> str:
            names = [g if rng.random() < 0.6 else (rng.choice(gold) if rng.random() < 0.7 else "") for g in gold]
            return "\n".join(f"<entity_{x}>{name}</entity_{x}>" for x, name in zip(_LETTERS, names))

        if n_answers <= 1:
            return one()
        return "\n".join(f"<response_{i}>\n{one()}\n</response_{i}>" for i in range(1, n_answers + 1))


EUREQA = EureqaTask()  # found through the vpo.tasks entry point `eureqa` (pyproject.toml)

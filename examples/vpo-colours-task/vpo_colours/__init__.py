"""The colours task: a problem shows three colours; an answer names at most two colours.

Objectives (k = 3): the answer names the problem's first, second, third colour. One answer can reach
two of the three, never all three, so the objectives conflict: a single answer trades them off, and
m answers can cover every colour between them (what VPO rewards, and what best@k and diversity show).
The fixed scalar (GRPO's) is their mean; an answer is correct when it names two of the colours.

Prompt: "Colours: red blue green. Name at most two of them. Answer inside <answer></answer>."
Single answer: `<answer>red blue</answer>`; m answers: `<answer_1>red</answer_1> ... <answer_m>...</answer_m>`.
"""

from __future__ import annotations

import dataclasses
import os
import re
from typing import Any

from vpo.atomic import write_parquet_atomic
from vpo.task import Task, as_random, settings_from

PALETTE = ("red", "blue", "green", "yellow", "black", "white", "pink", "brown")
SINGLE = re.compile(r"<answer>(.*?)</answer>", re.S)
SLOT = re.compile(r"<answer_(\d+)>(.*?)</answer_\1>", re.S)


@dataclasses.dataclass(frozen=True)
class ColoursSettings:
    train_size: int = 64  # training problems
    test_size: int = 8  # held-out problems
    seed: int = 0  # the problems' generator

    @classmethod
    def from_dict(cls, values: dict[str, Any] | None) -> "ColoursSettings":
        return settings_from(cls, values, "colours")


def colour_words(answer: str) -> list[str]:
    """The palette's colours an answer names, in order, each once."""
    return list(dict.fromkeys(w for w in re.findall(r"[a-z]+", str(answer).lower()) if w in PALETTE))


class ColoursTask(Task):
    name = "colours"
    ability = "colours"
    label = "Colours"
    objectives = (
        ("first", "Naming the first colour"),
        ("second", "Naming the second colour"),
        ("third", "Naming the third colour"),
    )
    scalar_weights = (1 / 3, 1 / 3, 1 / 3)  # the mean: the scalar is the weighted sum
    default_m = 3
    single_format_line = "Answer inside <answer></answer>."
    settings_class = ColoursSettings

    def preprocess(self, out_dir: str, settings: dict[str, Any] | None = None) -> tuple[str, str]:
        s = ColoursSettings.from_dict(settings)
        rng = as_random(s.seed)
        os.makedirs(out_dir, exist_ok=True)
        paths = []
        for split, size in (("train", s.train_size), ("test", s.test_size)):
            rows = []
            for index in range(size):
                colours = rng.sample(PALETTE, 3)
                content = f"Colours: {' '.join(colours)}. Name at most two of them. {self.single_format_line}"
                rows.append(self.row(content, {"colours": colours}, split=split, index=index))
            paths.append(str(write_parquet_atomic(rows, os.path.join(out_dir, f"{split}.parquet"))))
        return paths[0], paths[1]

    def split_answers(self, text: str, m: int) -> list[str]:
        if m == 1:
            found = SINGLE.findall(str(text))
            return [found[0].strip()] if found and found[0].strip() else []
        slots = [a.strip() for a in self.answer_slots(text, m)]
        return list(dict.fromkeys(a for a in slots if a))

    def answer_slots(self, text: str, m: int) -> list[str]:
        found = {int(i): a.strip() for i, a in SLOT.findall(str(text))}
        return [found.get(i, "") for i in range(1, m + 1)]

    def score_answer(self, answer: str, ground_truth: dict[str, Any]) -> list[float]:
        inside = SINGLE.findall(str(answer))
        named = colour_words(inside[0] if inside else answer)
        if not named or len(named) > 2:  # nothing, or more than two colours: the answer breaks the rule
            return [0.0, 0.0, 0.0]
        return [float(colour in named) for colour in list(ground_truth["colours"])]

    def is_correct(self, vector) -> bool:
        return sum(vector) >= 2

    def multi_format(self, m: int) -> str:
        return f"Give {m} answers inside <answer_1></answer_1> to <answer_{m}></answer_{m}>."

    def demonstration(self, row: dict[str, Any], rng: Any, n_answers: int) -> str:
        """Answers of mixed quality: one or two of the problem's colours, sometimes another colour."""
        rng = as_random(rng)
        colours = list(row["reward_model"]["ground_truth"]["colours"])
        answers = [" ".join(rng.sample(colours + [rng.choice(PALETTE)], rng.randint(1, 2))) for _ in range(n_answers)]
        if n_answers == 1:
            return f"<answer>{answers[0]}</answer>"
        return " ".join(f"<answer_{i}>{a}</answer_{i}>" for i, a in enumerate(answers, 1))


COLOURS = ColoursTask()

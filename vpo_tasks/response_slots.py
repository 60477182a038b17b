"""`<response_i>` answer slots and first-block parsing, shared by the text tasks (docs/tasks.md).

For i = 1..m, slot i is the text between the first `<response_i>` and the first `</response_i>`
after it: case-sensitive and exact (`<RESPONSE_1>`, `<response_01>`, `<response_1 >` are not
tags), spanning lines; a missing pair is an empty slot. Tags above m, closers with another number
and text outside the slots are ignored; a `<response_2>` block inside slot 1 stays part of slot 1
and is also slot 2. There is no fallback: a response without tags gives m empty slots.

A multi-answer response scores to an (m, k) matrix: the m slots in order, an empty slot (after
stripping) or one failing the task's gate is a zero row, every row equal to an earlier row is
dropped (zero rows included), and zero rows pad back to m (`ResponseSlotTask`, the base class of
musique, eureqa and tool). Every search is "opener, then the first closer after it", which is
linear in the text.
"""

from __future__ import annotations

import re
from typing import Any

from vpo.task import Task


def first_block(text: str, opener: str, closer: str) -> str | None:
    """Text between the first `opener` and the first `closer` after it, or None (case-sensitive)."""
    start = text.find(opener)
    if start < 0:
        return None
    end = text.find(closer, start + len(opener))
    return None if end == -1 else text[start + len(opener) : end]


def first_block_nocase(text: str, tag: str) -> str | None:
    """Like first_block for `<tag>` / `</tag>`, matching the tags in any case (re.IGNORECASE)."""
    head = re.search(f"<{re.escape(tag)}>", text, re.IGNORECASE)
    tail = re.compile(f"</{re.escape(tag)}>", re.IGNORECASE).search(text, head.end()) if head else None
    return None if tail is None else text[head.end() : tail.start()]


def response_slots(text: str, m: int) -> list[str]:
    """The m `<response_i>` slots of a response; a missing one is ""."""
    return [first_block(text, f"<response_{i}>", f"</response_{i}>") or "" for i in range(1, m + 1)]


class ResponseSlotTask(Task):
    """A task whose multi-answer responses come in `<response_i>` slots: the slot rules above for
    m > 1; a single answer is the whole text, given when the task `parses` it."""

    def split_answers(self, text: str, m: int) -> list[str]:
        """m = 1: the stripped text if it parses; else the non-empty slots, stripped, without repeats."""
        if m == 1:
            return [text.strip()] if self.parses(text) else []
        found: list[str] = []
        for slot in (s.strip() for s in response_slots(text, m)):
            if slot and slot not in found:
                found.append(slot)
        return found

    def answer_slots(self, text: str, m: int) -> list[str]:
        return response_slots(str(text), m)

    def score_response(self, text: str, ground_truth: dict[str, Any], m: int) -> tuple[list[list[float]], int]:
        """Rows of the m slots: a non-empty slot scored (a gate failure scores zeros), an empty one a
        zero row, every row equal to an earlier one dropped, zero rows padding to m; and the number of
        distinct non-empty slots."""
        if m == 1:
            return super().score_response(text, ground_truth, 1)
        rows: list[list[float]] = []
        given: set[str] = set()
        for slot in response_slots(text, m):
            row = self._clean(self.score_answer(slot, ground_truth)) if slot.strip() else [0.0] * self.k
            if slot.strip():
                given.add(slot.strip())
            if row not in rows:
                rows.append(row)
        return rows + [[0.0] * self.k for _ in range(m - len(rows))], len(given)

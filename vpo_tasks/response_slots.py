"""`<response_i>` answer slots and first-block parsing, shared by the text tasks (tasks.md 0.2).

For i = 1..m, slot i is the text between the first `<response_i>` and the first `</response_i>`
after it: case-sensitive and exact (`<RESPONSE_1>`, `<response_01>`, `<response_1 >` are not
tags), spanning lines; a missing pair is an empty slot. Tags above m, closers with another number
and text outside the slots are ignored; a `<response_2>` block inside slot 1 stays part of slot 1
and is also slot 2. There is no fallback: a response without tags gives m empty slots.

A multi-answer response scores to an (m, k) matrix: the m slots in order, an empty slot (after
stripping) or one failing the task's gate is a zero row, every row equal to an earlier row is
dropped (zero rows included), and zero rows pad back to m. Every search is "opener, then the first
closer after it", which is linear in the text.
"""

from __future__ import annotations

import re
from typing import Callable, Sequence


def first_block(text: str, opener: str, closer: str) -> str | None:
    """Text between the first `opener` and the first `closer` after it, or None (case-sensitive)."""
    start = text.find(opener)
    if start < 0:
        return None
    end = text.find(closer, start + len(opener))
    return None if end < 0 else text[start + len(opener):end]


def first_block_nocase(text: str, tag: str) -> str | None:
    """Like first_block for `<tag>` / `</tag>`, matching the tags in any case (re.IGNORECASE)."""
    head = re.search(f"<{re.escape(tag)}>", text, re.IGNORECASE)
    tail = re.compile(f"</{re.escape(tag)}>", re.IGNORECASE).search(text, head.end()) if head else None
    return None if tail is None else text[head.end():tail.start()]


def response_slots(text: str, m: int) -> list[str]:
    """The m `<response_i>` slots of a response; a missing one is ""."""
    return [first_block(text, f"<response_{i}>", f"</response_{i}>") or "" for i in range(1, m + 1)]


def slot_matrix(text: str, m: int, k: int, score: Callable[[str], Sequence[float]]) -> list[list[float]]:
    """(m, k) rows of the m slots: score(slot) for a non-empty slot (a gate failure returns zeros),
    duplicates of an earlier row dropped, zero rows appended up to m."""
    rows: list[list[float]] = []
    for slot in response_slots(text, m):
        row = [float(v) for v in score(slot)] if slot.strip() else [0.0] * k
        if row not in rows:
            rows.append(row)
    return rows + [[0.0] * k for _ in range(m - len(rows))]


def distinct_slots(text: str, m: int) -> list[str]:
    """The non-empty slots, stripped, without repeats (diagnostics: how many answers were given)."""
    found: list[str] = []
    for slot in response_slots(text, m):
        if slot.strip() and slot.strip() not in found:
            found.append(slot.strip())
    return found

"""docs/reproducibility.md, read: the paper preset's settings beside the authors', and where they differ.

`settings_rows` parses the record's first table (tests/test_reproducibility.py checks every keyed row
against what runs); `deviations` lists the rows marked as differing, for the HTML report's front page.
Only the standard library is needed here.
"""

from __future__ import annotations

from pathlib import Path

RECORD = Path(__file__).resolve().parents[1] / "docs" / "reproducibility.md"
COLUMNS = ["setting", "scope", "authors", "source", "ours", "key", "differs"]
TABLE_HEADING = "## Settings that shape a result"


def settings_rows(path: Path = RECORD) -> list[dict[str, str]]:
    """The record's settings table, one {column: text} per row; a changed header is an error."""
    text = Path(path).read_text(encoding="utf-8")
    if TABLE_HEADING not in text:
        raise ValueError(f"{path}: no section {TABLE_HEADING!r}")
    table = text.split(TABLE_HEADING, 1)[1].split("\n## ", 1)[0]
    lines = [line for line in table.splitlines() if line.startswith("|")]
    header = [cell.strip() for cell in lines[0].strip("|").split("|")]
    if header != COLUMNS:
        raise ValueError(f"{path}: the settings table's columns are {header}, expected {COLUMNS}")
    rows = [[cell.strip() for cell in line.strip("|").split("|")] for line in lines[2:]]
    bad = [row[0] for row in rows if len(row) != len(COLUMNS)]
    if bad:
        raise ValueError(f"{path}: rows without {len(COLUMNS)} cells: {bad}")
    return [dict(zip(COLUMNS, row)) for row in rows]


def deviations(path: Path = RECORD) -> list[str]:
    """One line per setting the paper preset runs differently from the authors: what, ours, why."""
    return [f"{row['setting']}: ours {row['ours']}, the authors' {row['authors']} ({row['differs']})"
            for row in settings_rows(path) if row["differs"]]


def as_rst(text: str) -> str:
    """A line of the record's Markdown as reStructuredText for the HTML report's front page
    (workflow/report/workflow.rst inserts it as is): `code` becomes ``code``, and *, _, | and
    backslashes elsewhere are escaped (`vpo_tasks/*.py` once opened an emphasis that never closed)."""
    import re

    parts = text.split("`")
    out = []
    for i, part in enumerate(parts):
        if i % 2 and i < len(parts) - 1:
            out.append(f"``{part}``")
        else:
            out.append(re.sub(r"([\\*_|`])", r"\\\1", part))
    return "".join(out)

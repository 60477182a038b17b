"""The reproducibility record's citations of the authors' files (docs/reproducibility.md,
docs/evaluation.md): every line citation names the commit it points to, and every line cited of
PAPER_REPRO.md exists in that file at 218995d (355 lines; at 767db79 it has 328, and the same
numbers fall on other text)."""

from __future__ import annotations

import re
from pathlib import Path

DOCS = Path(__file__).resolve().parents[1] / "docs"
RECORDS = ("reproducibility.md", "evaluation.md")
PAPER_REPRO_COMMIT, PAPER_REPRO_LINES = "218995d", 355


def cited_lines(text: str) -> list[int]:
    """Every line number of every `PAPER_REPRO.md@<commit>:<n>[-<m>][, <n>...]` citation."""
    lines = []
    for cited in re.findall(r"PAPER_REPRO\.md@\w+:([0-9][0-9, -]*)", text):
        for part in filter(None, (p.strip() for p in cited.split(","))):
            low, _, high = part.partition("-")
            lines += [int(low), int(high or low)]
    return lines


def test_every_paper_repro_citation_names_218995d_and_exists_there():
    for name in RECORDS:
        text = (DOCS / name).read_text()
        # a mention outside a link's address names its commit
        bare = [m.start() for m in re.finditer(r"(?<![/\w])PAPER_REPRO\.md(?!@)", text)]
        assert not bare, f"docs/{name}: PAPER_REPRO.md without @{PAPER_REPRO_COMMIT} at offsets {bare[:5]}"
        assert set(re.findall(r"PAPER_REPRO\.md@(\w+)", text)) <= {PAPER_REPRO_COMMIT}, name
        past = [n for n in cited_lines(text) if not 1 <= n <= PAPER_REPRO_LINES]
        assert not past, f"docs/{name}: PAPER_REPRO.md lines {past} do not exist at {PAPER_REPRO_COMMIT}"
    assert len(cited_lines((DOCS / "reproducibility.md").read_text())) > 50


def test_every_line_citation_of_an_authors_file_names_its_commit():
    text = (DOCS / "reproducibility.md").read_text()
    unnamed = re.findall(r"[\w./-]+\.(?:py|sh|md|ipynb):\d+", text)
    assert not unnamed, f"docs/reproducibility.md: line citations without a commit: {unnamed}"
    assert re.findall(r"train\.sh@767db79:\d+", text)


def test_the_line_parser_reads_ranges_and_lists():
    assert cited_lines("PAPER_REPRO.md@218995d:53-54, 338-339 and PAPER_REPRO.md@218995d:80, 266 |") == \
        [53, 54, 338, 339, 80, 80, 266, 266]

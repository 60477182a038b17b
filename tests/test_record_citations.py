"""The reproducibility record's citations of the authors' files (docs/reproducibility.md,
docs/evaluation.md): every line citation names the commit it points to, and every line cited of
PAPER_REPRO.md exists in that file at 218995d (355 lines; at 767db79 it has 328, and the same
numbers fall on other text)."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

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
    assert cited_lines("PAPER_REPRO.md@218995d:53-54, 338-339 and PAPER_REPRO.md@218995d:80, 266 |") == [
        53,
        54,
        338,
        339,
        80,
        80,
        266,
        266,
    ]


# ---- the record as data: docs/reproducibility.yaml, shown by docs/reproducibility.md ----------------
def test_the_documents_tables_are_the_yamls():
    from vpo import record

    assert record.main(["--check"]) == 0
    assert len(record.settings_rows()) > 70 and len(record.read_record()["conflicts"]) > 10


def test_a_row_changed_in_the_yaml_fails_the_check_until_the_document_is_written(tmp_path, monkeypatch, capsys):
    import shutil

    import yaml

    from vpo import record

    data, document = tmp_path / "reproducibility.yaml", tmp_path / "reproducibility.md"
    shutil.copy(record.DATA, data)
    shutil.copy(record.DOCUMENT, document)
    monkeypatch.setattr(record, "DATA", data)
    monkeypatch.setattr(record, "DOCUMENT", document)
    rows = yaml.safe_load(data.read_text())
    rows["settings"][0]["ours"] = "2e-6"
    data.write_text(yaml.safe_dump(rows, sort_keys=False))
    assert record.main(["--check"]) == 1 and "python -m vpo.record" in capsys.readouterr().err
    assert record.main([]) == 0 and record.main(["--check"]) == 0
    assert (
        "| learning rate, constant, no warmup | all | 1e-6 | PAPER_REPRO.md@218995d:64 | 2e-6 |" in document.read_text()
    )


@pytest.mark.parametrize(
    "row, words",
    [
        ({"setting": "x"}, "must have exactly the fields"),
        (
            {"setting": "a | b", "scope": "all", "authors": "1", "source": "s", "ours": "1", "key": "-", "differs": ""},
            "would split its table row",
        ),
    ],
)
def test_a_row_that_cannot_be_a_table_row_is_refused(tmp_path, row, words):
    import yaml

    from vpo import record

    path = tmp_path / "record.yaml"
    path.write_text(yaml.safe_dump({"settings": [row], "conflicts": []}))
    with pytest.raises(ValueError, match=words):
        record.read_record(path)


def test_readme_counts_the_records_deviations_and_the_document_lists_them():
    """README says in how many settings the paper preset departs (a number kept true by this test) and
    points to the list, which `python -m vpo.record` writes from the YAML."""
    import re as regex

    from vpo.record import DEVIATIONS_END, DEVIATIONS_START, deviations

    readme = (DOCS.parent / "README.md").read_text()
    said = regex.search(r"It departs from their setup in (\d+)\s+settings", readme)
    assert said and int(said.group(1)) == len(deviations()) >= 10
    document = (DOCS / "reproducibility.md").read_text()
    listed = document.split(DEVIATIONS_START)[1].split(DEVIATIONS_END)[0].strip().splitlines()
    assert listed == [f"- {line}" for line in deviations()]

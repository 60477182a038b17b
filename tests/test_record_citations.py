"""The reproducibility record's citations of the authors' files (docs/reproducibility.md,
docs/evaluation.md): every line citation names the commit it points to, every line cited of
PAPER_REPRO.md exists in that file at 218995d (355 lines; at 767db79 it has 328, and the same
numbers fall on other text), and every line citation has a quote of what the lines say, which
`python -m vpo.record --check-quotes` compares with the authors' files (here on git fixtures; against
the authors' repositories when VPO_AUTHORS_CHECKOUTS names their checkouts)."""

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


# ---- what the cited lines say: the quotes and `python -m vpo.record --check-quotes` ------------------
def test_line_citations_reads_text_citations_lists_and_github_links():
    from vpo.record import line_citations

    text = (
        "train.sh@767db79:16, 48 defaults to 50; PAPER_REPRO.md@218995d:53-54 and "
        "[maze.py:60-64](https://github.com/ryanboldi/vpo/blob/767db79fbf8ca59777a4b2bbc11247de9a1f91fd/vpo_tasks/maze.py#L60-L64)"
        " and [tool.py:262](https://github.com/ryanboldi/vpo/blob/767db79fbf8ca59777a4b2bbc11247de9a1f91fd/vpo_tasks/tool.py#L262)"
    )
    assert line_citations(text) == [
        "train.sh@767db79:16",
        "train.sh@767db79:48",
        "PAPER_REPRO.md@218995d:53-54",
        "vpo_tasks/maze.py@767db79:60-64",
        "vpo_tasks/tool.py@767db79:262",
    ]


def test_every_line_citation_has_a_quote_and_every_quote_a_citation():
    from vpo import record

    cited = record.cited_in_documents()
    quoted = [row["cite"] for row in record.read_record()["quotes"]]
    assert len(quoted) == len(set(quoted)), "a citation quoted twice"
    assert not cited - set(quoted), (
        f"line citations without a quote in docs/reproducibility.yaml: {sorted(cited - set(quoted))}"
    )
    assert not set(quoted) - cited, f"quotes of lines nothing cites: {sorted(set(quoted) - cited)}"
    assert len(cited) > 120 and all(len(row["says"].split()) >= 1 for row in record.read_record()["quotes"])


def _git_checkout(root, files: dict[str, str]) -> str:
    """A git repository holding `files` in one commit; its short hash."""
    import subprocess

    for path, text in files.items():
        (root / path).parent.mkdir(parents=True, exist_ok=True)
        (root / path).write_text(text)
    run = lambda *args: subprocess.run(["git", "-C", str(root), *args], check=True, capture_output=True, text=True)  # noqa: E731
    run("init", "-q")
    run("add", ".")
    run("-c", "user.name=t", "-c", "user.email=t@t", "commit", "-q", "-m", "files")
    return run("rev-parse", "--short=7", "HEAD").stdout.strip()


def test_the_quote_check_catches_a_quote_its_lines_do_not_say(tmp_path):
    """The shape of a wrong line number: the value sits two lines below the cited range. Whitespace runs
    (indentation, a break between lines) count as one space; a file at another commit is not found."""
    from vpo.record import check_quotes

    lines = [
        "import os",
        "",
        "def evaluate(args):",
        "    n = 10",
        "    if args.max_tokens is None:",
        "        args.max_tokens = 3072 if multi else 2048",
    ]
    commit = _git_checkout(tmp_path / "repo", {"pkg/lcb.py": "\n".join(lines) + "\n"})
    quotes = [
        {"cite": f"pkg/lcb.py@{commit}:5-6", "says": "if args.max_tokens is None: args.max_tokens = 3072"},
        {"cite": f"pkg/lcb.py@{commit}:3-4", "says": "3072 if multi"},
        {"cite": "pkg/lcb.py@0000000:5", "says": "max_tokens"},
    ]
    checked, wrong, missing = check_quotes(quotes, [tmp_path / "repo"])
    assert checked == 2
    assert len(wrong) == 1 and wrong[0].startswith(f"pkg/lcb.py@{commit}:3-4") and "n = 10" in wrong[0]
    assert len(missing) == 1 and missing[0].startswith("pkg/lcb.py@0000000:5")


def test_the_quote_check_reads_a_folder_of_files_per_commit_and_its_exit_code_says_what_it_found(
    tmp_path, monkeypatch, capsys
):
    import yaml

    from vpo import record

    (tmp_path / "files" / "abc1234").mkdir(parents=True)
    (tmp_path / "files" / "abc1234" / "train.sh").write_text('#!/bin/bash\nEPOCHS="${EPOCHS:-50}"\n')
    data = tmp_path / "record.yaml"
    monkeypatch.setattr(record, "DATA", data)
    data.write_text(yaml.safe_dump({"quotes": [{"cite": "train.sh@abc1234:2", "says": 'EPOCHS="${EPOCHS:-50}"'}]}))
    assert record.main(["--check-quotes", str(tmp_path / "files")]) == 0
    assert "1 quotes checked: 0 differ" in capsys.readouterr().out
    data.write_text(yaml.safe_dump({"quotes": [{"cite": "train.sh@abc1234:1", "says": "EPOCHS"}]}))
    assert record.main(["--check-quotes", str(tmp_path / "files")]) == 1
    assert "train.sh@abc1234:1: says 'EPOCHS'" in capsys.readouterr().err
    # a quote no checkout holds fails too: nothing was compared
    assert record.main(["--check-quotes", str(tmp_path / "elsewhere")]) == 1


@pytest.mark.skipif(
    not __import__("os").environ.get("VPO_AUTHORS_CHECKOUTS"),
    reason="set VPO_AUTHORS_CHECKOUTS to checkouts of ryanboldi/vpo and ifdita-hasan/polyepo (separated by ':')",
)
def test_every_quote_is_in_the_authors_files():
    import os

    from vpo import record

    roots = [Path(p) for p in os.environ["VPO_AUTHORS_CHECKOUTS"].split(":")]
    checked, wrong, missing = record.check_quotes(record.read_record()["quotes"], roots)
    assert not wrong and not missing and checked == len(record.read_record()["quotes"])

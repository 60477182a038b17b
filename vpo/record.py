"""The reproducibility record: the paper preset's settings beside the authors', and where they differ.

The rows live in `docs/reproducibility.yaml` (`settings`, `conflicts`, and `peers`: Poly-EPO's runs beside
a paper-preset poly_epo cell); `docs/reproducibility.md` shows
them as tables written by `python -m vpo.record` between its `<!-- table ... -->` markers (with
`--check`: exit 1 when the document's tables are not the YAML's). `settings_rows` is what
tests/test_reproducibility.py checks against the composed veRL command; `deviations` lists the rows
marked as differing, for the HTML report's front page.
"""

from __future__ import annotations

import argparse
import re
import subprocess
import sys
from pathlib import Path

DOCS = Path(__file__).resolve().parents[1] / "docs"
DATA = DOCS / "reproducibility.yaml"
DOCUMENT = DOCS / "reproducibility.md"
_EVALUATION = DOCS / "evaluation.md"  # the evaluation table's document; every other table is DOCUMENT's
# each table: its YAML list, then (YAML field, the document's column heading) in order
TABLES = {
    "settings": [
        ("setting", "setting"),
        ("scope", "scope"),
        ("authors", "authors"),
        ("source", "source"),
        ("ours", "ours"),
        ("key", "key"),
        ("differs", "differs"),
    ],
    "conflicts": [("what", "what"), ("one", "one source says"), ("another", "another says"), ("follow", "we follow")],
    "evaluation": [
        ("task", "task"),
        ("setting", "setting"),
        ("authors", "authors"),
        ("source", "source"),
        ("ours", "ours"),
        ("key", "key"),
        ("differs", "differs"),
    ],
    "peers": [
        ("setting", "setting"),
        ("authors", "Poly-EPO's authors"),
        ("source", "source"),
        ("ours", "ours"),
        ("key", "key"),
        ("differs", "differs"),
    ],
    # every line citation of the record and its documents: a few words the cited lines say (`--check-quotes`)
    "quotes": [("cite", "cited lines"), ("says", "what they say")],
}


def read_record(path: Path | None = None) -> dict[str, list[dict[str, str]]]:
    """The record's tables (default: DATA), each a list of {field: text}; a row without every field, or
    with another, is an error naming it."""
    import yaml

    path = Path(path or DATA)
    data = yaml.safe_load(Path(path).read_text(encoding="utf-8")) or {}
    for table, columns in TABLES.items():
        fields = [name for name, _ in columns]
        for i, row in enumerate(data.get(table) or []):
            if not isinstance(row, dict) or sorted(row) != sorted(fields):
                raise ValueError(f"{path}: {table}[{i}] must have exactly the fields {fields}, got {row!r}")
            # a quote may hold a '|' (the authors' Markdown tables): its cell escapes it
            cells = [value for name, value in row.items() if (table, name) != ("quotes", "says")]
            if any("|" in str(value) for value in cells) or any("\n" in str(value) for value in row.values()):
                raise ValueError(f"{path}: {table}[{i}] holds a '|' or a line break, which would split its table row")
    return {table: [{k: str(v) for k, v in row.items()} for row in data.get(table) or []] for table in TABLES}


def settings_rows(path: Path | None = None) -> list[dict[str, str]]:
    """The settings table, one {field: text} per row (the fields of TABLES['settings'])."""
    return read_record(path)["settings"]


def deviations(path: Path | None = None) -> list[str]:
    """One line per setting the paper preset runs differently from the authors (training settings, then
    evaluation settings per task): what, ours, why."""
    record = read_record(path)
    rows = record["settings"] + [
        {**row, "setting": f"{row['task']} evaluation, {row['setting']}"} for row in record["evaluation"]
    ]
    return [
        f"{row['setting']}: ours {row['ours']}, the authors' {row['authors']} ({row['differs']})"
        for row in rows
        if row["differs"]
    ]


def _markdown_table(table: str, rows: list[dict[str, str]]) -> str:
    """A table of the record as Markdown lines (an empty cell as `| |`)."""
    columns = TABLES[table]
    lines = ["| " + " | ".join(heading for _, heading in columns) + " |", "|" + "---|" * len(columns)]
    lines += [
        "|" + "|".join(f" {_cell(table, name, row[name])} " if row[name] else " " for name, _ in columns) + "|"
        for row in rows
    ]
    return "\n".join(lines)


def _cell(table: str, name: str, value: str) -> str:
    """A table cell's Markdown: a quote of the authors' text as code (its '|' escaped), anything else as written."""
    if (table, name) != ("quotes", "says"):
        return value
    code = f"`` {value} ``" if "`" in value else f"`{value}`"
    return code.replace("|", "\\|")


def _with_tables(document: str, record: dict[str, list[dict[str, str]]], tables=None) -> str:
    """The document with each of `tables` (default: every table) between its markers written from the record."""
    for table in tables or TABLES:
        start, end = (
            f"<!-- table {table}: docs/reproducibility.yaml, written by `python -m vpo.record` -->",
            f"<!-- end of table {table} -->",
        )
        pattern = re.compile(re.escape(start) + r"\n.*?" + re.escape(end), re.DOTALL)
        if not pattern.search(document):
            raise ValueError(f"the document has no markers {start!r} ... {end!r}")
        body = _markdown_table(table, record[table])
        document = pattern.sub(lambda _: f"{start}\n{body}\n{end}", document)
    return document


DEVIATIONS_START = "<!-- list deviations: docs/reproducibility.yaml, written by `python -m vpo.record` -->"
DEVIATIONS_END = "<!-- end of list deviations -->"


def _with_deviations(document: str, path: Path | None = None) -> str:
    """The document with the list of deviations (every settings row with a `differs`) between its markers."""
    pattern = re.compile(re.escape(DEVIATIONS_START) + r"\n.*?" + re.escape(DEVIATIONS_END), re.DOTALL)
    if not pattern.search(document):
        raise ValueError(f"docs/reproducibility.md has no markers {DEVIATIONS_START!r} ... {DEVIATIONS_END!r}")
    body = "\n".join(f"- {line}" for line in deviations(path))
    return pattern.sub(lambda _: f"{DEVIATIONS_START}\n{body}\n{DEVIATIONS_END}", document)


def as_rst(text: str) -> str:
    """A line of the record's Markdown as reStructuredText for the HTML report's front page
    (workflow/report/workflow.rst inserts it as is): `code` becomes ``code``, and *, _, | and
    backslashes elsewhere are escaped (`vpo_tasks/*.py` once opened an emphasis that never closed)."""
    parts = text.split("`")
    out = []
    for i, part in enumerate(parts):
        if i % 2 and i < len(parts) - 1:
            out.append(f"``{part}``")
        else:
            out.append(re.sub(r"([\\*_|`])", r"\\\1", part))
    return "".join(out)


# ---- line citations and what they say ------------------------------------------------------------
# `path@commit:lines` (lines: 64, 53-54 or a list "16, 48"), and GitHub links to `blob/<sha>/<path>#La-Lb`
_TEXT_CITATION = re.compile(
    r"(?P<path>[\w./-]+\.(?:py|sh|md|ipynb))@(?P<commit>[0-9a-f]{7,40}):(?P<lines>\d+(?:-\d+)?(?:, \d+(?:-\d+)?)*)"
)
_LINK_CITATION = re.compile(
    r"https://github\.com/[\w-]+/[\w.-]+/blob/(?P<commit>[0-9a-f]{40})/(?P<path>[^#)\s]+)#L(?P<low>\d+)(?:-L(?P<high>\d+))?"
)


def line_citations(text: str) -> list[str]:
    """Every line citation in `text`, one `path@commit7:low[-high]` per cited line or range."""
    found = [
        f"{m['path']}@{m['commit'][:7]}:{part}"
        for m in _TEXT_CITATION.finditer(text)
        for part in m["lines"].split(", ")
    ]
    found += [
        f"{m['path']}@{m['commit'][:7]}:{m['low']}" + (f"-{m['high']}" if m["high"] else "")
        for m in _LINK_CITATION.finditer(text)
    ]
    return found


def cited_in_documents() -> set[str]:
    """The line citations of the record's tables (but its quotes) and of both documents' prose."""
    record = read_record()
    cited = {
        c
        for table, rows in record.items()
        if table != "quotes"
        for row in rows
        for c in line_citations(" ".join(row.values()))
    }
    for document in (DOCUMENT, _EVALUATION):
        prose = re.sub(
            r"<!-- (table|list) .*?<!-- end of (table|list) \w+ -->", "", document.read_text(), flags=re.DOTALL
        )
        cited |= set(line_citations(prose))
    return cited


def _authors_file(roots: list[Path], commit: str, path: str) -> str | None:
    """The text of `path` at `commit` from the first root that has it: a git checkout (`git show`), or a folder
    of files saved per commit (`<root>/<commit>/<path>`); None when no root has it."""
    for root in roots:
        if (root / ".git").exists():
            shown = subprocess.run(["git", "-C", str(root), "show", f"{commit}:{path}"], capture_output=True, text=True)
            if shown.returncode == 0:
                return shown.stdout
        if (root / commit / path).is_file():
            return (root / commit / path).read_text(encoding="utf-8")
    return None


def check_quotes(quotes: list[dict[str, str]], roots: list[Path]) -> tuple[int, list[str], list[str]]:
    """Each quote against its cited lines (whitespace runs count as one space): (quotes checked, one line per
    quote the lines do not contain, one line per quote whose file at its commit no root holds)."""
    checked, wrong, missing, files = 0, [], [], {}
    for quote in quotes:
        path, _, rest = quote["cite"].partition("@")
        commit, _, lines = rest.partition(":")
        low, _, high = lines.partition("-")
        if (commit, path) not in files:  # each file read once, however many of its lines are cited
            files[commit, path] = _authors_file(roots, commit, path)
        text = files[commit, path]
        if text is None:
            missing.append(f"{quote['cite']}: no {path} at {commit} under {', '.join(map(str, roots))}")
            continue
        checked += 1
        span = " ".join(" ".join(text.split("\n")[int(low) - 1 : int(high or low)]).split())
        if " ".join(quote["says"].split()) not in span:
            wrong.append(f"{quote['cite']}: says {quote['says']!r}, the lines read {span[:200]!r}")
    return checked, wrong, missing


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        description="write docs/reproducibility.md's tables from docs/reproducibility.yaml"
    )
    parser.add_argument("--check", action="store_true", help="only check: exit 1 when the document differs")
    parser.add_argument(
        "--check-quotes",
        nargs="+",
        type=Path,
        metavar="CHECKOUT",
        help="check every quote against the cited lines in these checkouts of the authors' repositories (git "
        "checkouts, or folders of files saved as <commit>/<path>); exit 1 on a mismatch or a file none holds",
    )
    args = parser.parse_args(argv)
    if args.check_quotes:
        checked, wrong, missing = check_quotes(read_record()["quotes"], args.check_quotes)
        for line in wrong + missing:
            print(line, file=sys.stderr)
        print(f"{checked} quotes checked: {len(wrong)} differ from their lines, {len(missing)} not found")
        return 1 if wrong or missing or not checked else 0
    record = read_record()
    main_tables = [t for t in TABLES if t != "evaluation"]
    differ = []
    for document, build in (
        (DOCUMENT, lambda text: _with_deviations(_with_tables(text, record, main_tables))),
        (_EVALUATION, lambda text: _with_tables(text, record, ["evaluation"])),
    ):
        current = document.read_text(encoding="utf-8")
        wanted = build(current)
        if wanted != current:
            differ.append(document)
            if not args.check:
                document.write_text(wanted, encoding="utf-8")
                print(f"wrote the tables of {document}")
    if args.check and differ:
        print(f"{', '.join(map(str, differ))}: not what {DATA} gives: run `python -m vpo.record`", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())

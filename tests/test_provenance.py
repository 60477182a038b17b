"""What made a result (vpo.provenance): the record every train.json, evaluation JSON and aggregate
carries, `vpo provenance`, which flags a result made with another package version or commit, and the
aggregate's summary of where its results disagree."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from vpo import provenance
from vpo.cli import main as vpo

REPO = Path(__file__).resolve().parents[1]


def git(*args: str) -> str:
    return subprocess.run(["git", "-C", str(REPO), *args], capture_output=True, text=True, check=True).stdout.strip()


def test_the_record_names_this_checkouts_commit_and_its_packages():
    record = provenance.collect()
    assert record["commit"] == git("rev-parse", "HEAD")
    assert record["dirty"] == bool(git("status", "--porcelain", "--untracked-files=no"))
    import numpy

    assert record["versions"]["numpy"] == numpy.__version__
    assert record["versions"]["python"] == ".".join(map(str, sys.version_info[:3]))
    assert len(record["packages"]) == 16 and record["machine"]["cpu"]
    assert record["threads"]["cpus"] >= 1


def test_the_packages_fingerprint_follows_any_installed_version(monkeypatch):
    before = provenance.packages_fingerprint()
    changed = {**provenance.installed(), "tabulate": "0.0.1"}
    monkeypatch.setattr(provenance, "installed", lambda: changed)
    assert provenance.packages_fingerprint() != before


def test_installed_reads_what_importlib_parses_from_every_distribution():
    """`installed` reads only the metadata headers; importlib's full email parse gives the same names
    and versions for every distribution of this environment."""
    import importlib.metadata as md

    parsed = {provenance.canonical(d.metadata["Name"]): d.version for d in md.distributions() if d.metadata["Name"]}
    assert provenance.installed() == parsed and len(parsed) > 50


def test_a_metadata_header_is_read_up_to_its_blank_line():
    text = "Metadata-Version: 2.1\nName: Some_Pkg\nVersion: 1.2rc1\n\nName: not-this\nVersion: 9\n"
    assert provenance._name_and_version(text) == ("Some_Pkg", "1.2rc1")
    assert provenance._name_and_version("") == ("", "")


def write_result(folder: Path, name: str, record: dict) -> Path:
    path = folder / name / "train.json"
    path.parent.mkdir(parents=True)
    path.write_text(json.dumps({"backend": "local", "provenance": record}))
    return path


def test_vpo_provenance_flags_a_result_made_with_another_package_version(tmp_path, capsys):
    here = provenance.collect()
    write_result(tmp_path, "same", here)
    other = json.loads(json.dumps(here))
    other["versions"]["numpy"] = "1.0.0"
    other["packages"] = "0123456789abcdef"
    write_result(tmp_path, "other", other)
    assert vpo(["provenance", str(tmp_path)]) == 0
    out = capsys.readouterr().out
    same_line = next(line for line in out.splitlines() if "same/train.json" in line)
    assert same_line.endswith("as here")
    assert f"numpy: 1.0.0 (result) vs {here['versions']['numpy']} (here)" in out
    assert "packages: 0123456789abcdef (result)" in out
    assert "the results disagree on packages" in out and "the results disagree on versions" in out
    assert out.strip().endswith("2 results, 1 made differently from here")


def test_vpo_provenance_flags_another_commit_and_uncommitted_changes(tmp_path, capsys):
    record = {**provenance.collect(), "commit": "f" * 40, "dirty": True}
    write_result(tmp_path, "old", record)
    vpo(["provenance", str(tmp_path)])
    out = capsys.readouterr().out
    assert f"commit: ffffffffffff (result) vs {provenance.collect()['commit'][:12]} (here)" in out
    if not provenance.collect()["dirty"]:
        assert "dirty: True (result) vs False (here)" in out


def test_vpo_provenance_without_records_says_so(tmp_path, capsys):
    (tmp_path / "train.json").write_text(json.dumps({"backend": "local"}))
    assert vpo(["provenance", str(tmp_path)]) == 1
    assert "records its provenance" in capsys.readouterr().out


def test_summarize_names_each_field_the_results_disagree_on():
    base = provenance.collect()
    records = {"a": base, "b": base, "c": {**base, "commit": "e" * 40}}
    mixed = provenance.summarize(records)
    assert set(mixed) == {"commit"}
    assert sorted(map(sorted, mixed["commit"].values())) == [["a", "b"], ["c"]]
    assert provenance.summarize({"a": base, "b": base}) == {}
    # threads: those of the jobs that ran torch; a record without torch's (the aggregate) does not count
    one, two = {**base, "threads": {"torch": 1, "cpus": 2}}, {**base, "threads": {"torch": 2, "cpus": 2}}
    assert set(provenance.summarize({"a": one, "b": two})) == {"threads"}
    assert provenance.summarize({"a": one, "b": {**base, "threads": {"cpus": 8}}}) == {}
    # engine: what sampled an evaluation's pool; records without one (training, the aggregate) do not count
    llama, vllm = {**base, "engine": "vpo.llama_sampler"}, {**base, "engine": "vllm"}
    assert set(provenance.summarize({"a": llama, "b": vllm, "c": base})) == {"engine"}
    assert provenance.summarize({"a": llama, "b": llama, "c": base}) == {}


def test_a_commit_is_shortened_and_no_other_value_is():
    assert provenance.describe("0123456789abcdef0123456789abcdef01234567") == "0123456789ab"
    assert provenance.describe("a sentence of exactly forty characters..") == "a sentence of exactly forty characters.."


def test_a_lock_is_matched_to_the_environment(tmp_path, monkeypatch):
    have = provenance.installed()
    (tmp_path / "env.txt").write_text(
        f"numpy=={have['numpy']}\n    # via pandas\npyyaml=={have['pyyaml']} ; python_version >= '3'\n"
    )
    (tmp_path / "other.txt").write_text("numpy==0.1\n")
    monkeypatch.setattr(provenance, "LOCKS", tmp_path)
    state = provenance.lock_state()
    assert state["file"] == "locks/env.txt" and state["matches"] and state["differs"] == []
    (tmp_path / "env.txt").write_text("numpy==0.2\npyyaml==0.3\n")
    state = provenance.lock_state()
    assert not state["matches"] and state["file"] == "locks/other.txt" and state["differs"] == ["numpy"]


@pytest.fixture()
def eval_jsons(tmp_path):
    """Two evaluation JSONs as `vpo eval` writes them, made at two commits."""
    here = provenance.collect()
    paths = []
    for seed, commit in ((0, here["commit"]), (1, "a" * 40)):
        path = tmp_path / f"evalseed{seed}.json"
        path.write_text(
            json.dumps(
                {
                    "task": "maze",
                    "method": "vpo",
                    "train_seed": seed,
                    "eval_seed": 0,
                    "provenance": {**here, "commit": commit},
                    "training_provenance": here,
                }
            )
        )
        paths.append(path)
    return paths


def test_the_aggregate_record_keeps_every_result_and_says_where_they_disagree(eval_jsons, tmp_path):
    from vpo.report.aggregate import provenance_record

    record = provenance_record(eval_jsons)
    assert set(record["results"]) == {"maze/vpo/seed0/evalseed0", "maze/vpo/seed1/evalseed0"}
    assert set(record["mixed"]) == {"commit"}
    (tmp_path / "provenance.json").write_text(json.dumps(record))
    lines = provenance.front_page_lines(tmp_path / "provenance.json")
    assert lines[0].startswith("code: commit ")
    assert any(line.startswith("the results disagree on commit: ") and "aaaaaaaaaaaa" in line for line in lines)
    assert provenance.front_page_lines(tmp_path / "absent.json") == []


def test_damaged_records_are_named_one_by_one_and_the_rest_still_reported(tmp_path, capsys):
    """A JSON list, fields of the wrong type, a link to /dev/zero (once read until memory ran out), a FIFO
    (once hung) and JSON nested 100,000 deep are each skipped with a line; the good result is still compared."""
    import os

    here = provenance.collect()
    write_result(tmp_path, "good", here)
    (tmp_path / "listed").mkdir()
    (tmp_path / "listed" / "train.json").write_text("[1, 2]")
    write_result(tmp_path, "typed", {**here, "versions": "numpy 2"})
    (tmp_path / "zero").mkdir()
    (tmp_path / "zero" / "train.json").symlink_to("/dev/zero")
    (tmp_path / "fifo").mkdir()
    os.mkfifo(tmp_path / "fifo" / "evalseed0.json")
    (tmp_path / "deep").mkdir()
    (tmp_path / "deep" / "train.json").write_text("[" * 100_000 + "]" * 100_000)  # once a RecursionError traceback
    assert vpo(["provenance", str(tmp_path)]) == 0
    captured = capsys.readouterr()
    skipped = [line for line in captured.err.splitlines() if line.startswith("vpo provenance: skipped")]
    assert len(skipped) == 5
    assert any("deep/train.json: unreadable (RecursionError" in line for line in skipped)
    assert any("listed/train.json: no provenance record (a list" in line for line in skipped)
    assert any("typed/train.json: provenance fields of the wrong type: versions" in line for line in skipped)
    assert any("zero/train.json: not a regular file" in line for line in skipped)
    assert any("fifo/evalseed0.json: not a regular file" in line for line in skipped)
    assert captured.out.strip().endswith("1 results, 0 made differently from here")

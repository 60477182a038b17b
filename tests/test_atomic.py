"""vpo.atomic: a writer killed mid-way leaves no file or directory that looks complete, an error
leaves the old target untouched, and temporary siblings of dead writers are cleaned up."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time

import pytest

from vpo.atomic import HOST, atomic_dir, atomic_file, remove_stale_tmp, write_json_atomic


def test_an_error_inside_leaves_the_old_file_and_no_temporary(tmp_path):
    target = tmp_path / "out.csv"
    target.write_text("old\n")
    with pytest.raises(RuntimeError):
        with atomic_file(target) as tmp:
            tmp.write_text("half")
            raise RuntimeError("killed by a bug")
    assert target.read_text() == "old\n"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["out.csv"]


def test_a_directory_is_replaced_whole(tmp_path):
    target = tmp_path / "model"
    with atomic_dir(target) as tmp:
        (tmp / "a.txt").write_text("1")
    with atomic_dir(target) as tmp:
        (tmp / "b.txt").write_text("2")
    assert sorted(p.name for p in target.iterdir()) == ["b.txt"]  # nothing of the old one survives
    with pytest.raises(ValueError):
        with atomic_dir(target) as tmp:
            (tmp / "c.txt").write_text("3")
            raise ValueError
    assert sorted(p.name for p in target.iterdir()) == ["b.txt"]
    assert sorted(p.name for p in tmp_path.iterdir()) == ["model"]


WRITER = """
import sys, time
from vpo.atomic import atomic_dir
with atomic_dir(sys.argv[1]) as tmp:
    (tmp / "part").write_text("x")
    print("writing", flush=True)
    time.sleep(60)
"""


def test_a_killed_writer_leaves_only_a_hidden_temporary_that_the_next_write_removes(tmp_path):
    target = tmp_path / "checkpoint"
    proc = subprocess.Popen([sys.executable, "-c", WRITER, str(target)], stdout=subprocess.PIPE, text=True)
    assert proc.stdout.readline().strip() == "writing"
    os.kill(proc.pid, signal.SIGKILL)
    proc.wait()
    left = [p.name for p in tmp_path.iterdir()]
    assert left == [f".checkpoint.tmp-{proc.pid}@{HOST}"] and not target.exists()
    assert remove_stale_tmp(target) == [tmp_path / f".checkpoint.tmp-{proc.pid}@{HOST}"]
    write_json_atomic(tmp_path / "other.json", {"a": 1})  # siblings of other names are not touched
    with atomic_dir(target) as tmp:
        (tmp / "done").write_text("y")
    assert sorted(p.name for p in tmp_path.iterdir()) == ["checkpoint", "other.json"]


def test_a_live_writers_temporary_is_left_alone(tmp_path):
    target = tmp_path / "table.csv"
    sleeper = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(30)"])
    try:
        live = tmp_path / f".table.csv.tmp-{sleeper.pid}"
        live.write_text("in progress")
        time.sleep(0.1)
        with atomic_file(target) as tmp:
            tmp.write_text("mine")
        assert live.exists() and target.read_text() == "mine"
    finally:
        sleeper.kill()
        sleeper.wait()


def test_another_hosts_temporary_is_never_judged_by_a_local_pid(tmp_path):
    """On a cluster's shared filesystem a pid of another node means nothing here: a temporary of
    another host is left alone even when no local process has its pid; this host's dead one goes."""
    target = tmp_path / "table.csv"
    dead = subprocess.Popen([sys.executable, "-c", "pass"])
    dead.wait()
    other = tmp_path / f".table.csv.tmp-{dead.pid}@node-elsewhere.cluster"
    mine = tmp_path / f".table.csv.tmp-{dead.pid}@{HOST}"
    for path in (other, mine):
        path.write_text("partial")
    assert remove_stale_tmp(target) == [mine] and other.exists()

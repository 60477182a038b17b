"""A training job's log file, kept whatever a second job on the same cell does.

Snakemake deletes a job's log file before it starts the job. After a killed Snakemake and `--unlock`, a
rerun of a cell whose trainer was still running once took the log path from under that trainer (its
lines went on into a file without a name) and wrote its own refusal there. `vpo train --log <path>`
writes, once it holds its cell, through two names of one file: its own, `<path>.<pid>@<host>`, which
nothing else deletes, and `<path>` (a hard link: `tail -f <path>` follows the run). A job refused its
cell never writes the log: it links the running job's file back to `<path>` and says so on stderr.

When the job ends, `<path>` names its file again and its own name goes; a failed job's file is also
kept as `<path>.failed-<UTC time>` (Snakemake deletes `<path>` before the next attempt). A killed job
leaves its own name, which the next job at that path renames to `<path>.failed-<time>` once the pid is
dead (a pid of another host is never judged here).
"""

from __future__ import annotations

import os
import sys
import time
from pathlib import Path

from vpo.atomic import HOST, known_dead


def _own(path: Path) -> Path:
    return path.with_name(f"{path.name}.{os.getpid()}@{HOST}")


def _writers(path: Path) -> list[tuple[int, str, Path]]:
    """(pid, host, file) of every `<path>.<pid>@<host>` name."""
    found = []
    for name in path.parent.glob(f"{path.name}.*@*"):
        pid, _, host = name.name[len(path.name) + 1 :].partition("@")
        if pid.isdigit() and host:
            found.append((int(pid), host, name))
    return sorted(found)


def _link(source: Path, target: Path) -> None:
    """Make `target` another name of `source`'s file, replacing whatever `target` was."""
    if target.exists() and os.path.samefile(source, target):
        return  # rename(2) onto another name of the same file does nothing and would leave the temporary
    temporary = target.with_name(f".{target.name}.link-{os.getpid()}")
    temporary.unlink(missing_ok=True)
    os.link(source, temporary)
    os.replace(temporary, target)


def _failed_name(path: Path, seconds: float) -> Path:
    return path.with_name(f"{path.name}.failed-{time.strftime('%Y%m%dT%H%M%S', time.gmtime(seconds))}")


def start(path: str | os.PathLike) -> Path:
    """Send this process's stdout and stderr (its children's too) to `path` through this job's own name;
    files of this host's dead writers become `<path>.failed-<time>`. Returns the own name."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    for pid, host, name in _writers(path):
        if known_dead(pid, host):
            name.replace(_failed_name(path, name.stat().st_mtime))
    own = _own(path)
    fd = os.open(own, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
    _link(own, path)
    sys.stdout.flush()
    sys.stderr.flush()
    os.dup2(fd, 1)
    os.dup2(fd, 2)
    os.close(fd)
    return own


def finish(path: str | os.PathLike, failed: bool) -> None:
    """`path` names this job's file again (a refused job's Snakemake may have deleted it meanwhile);
    a failed job's is kept as `<path>.failed-<UTC time>` too; the own name goes."""
    path, own = Path(path), _own(Path(path))
    sys.stdout.flush()
    sys.stderr.flush()
    if not own.exists():
        return
    _link(own, path)
    if failed:
        _link(own, _failed_name(path, time.time()))
    own.unlink()


def show_running(path: str | os.PathLike) -> str | None:
    """For a job refused its cell: link the log file of the job that holds it (a live writer of this
    host, else the newest of another host) back to `path`; returns that file's name, or None."""
    path = Path(path)
    writers = [(name.stat().st_mtime, name) for pid, host, name in _writers(path) if not known_dead(pid, host)]
    if not writers:
        return None
    running = max(writers)[1]
    _link(running, path)
    return str(running)

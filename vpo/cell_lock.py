"""One trainer per cell: advisory locks (`fcntl.flock`) that the kernel releases when their holder dies.

A job left running by a killed Snakemake (SIGKILL takes the scheduler, not its children) must not
meet a second job writing the same cell after `snakemake --unlock` and a rerun: two trainers
interleave their metrics and checkpoints. Every job that writes into a cell holds the cell's lock
(`<cell>/.cell.lock`) for its life: training exclusively; merging, evaluation and the search
shared (the evaluation seeds of one cell run side by side), each with its own output's lock held
exclusively. A job that cannot take its locks stops at once, naming the cell and the process
holding it. Nothing is left to clean up: a lock dies with its process, and the holder notes
(`<lock>.<pid>@<host>`) of dead processes of this host are ignored and removed (another host's pid
means nothing here: its notes are reported, never judged).
"""

from __future__ import annotations

import contextlib
import fcntl
import os
from pathlib import Path
from typing import Iterator

from vpo.atomic import HOST, known_dead

CELL_LOCK = ".cell.lock"


class CellBusy(RuntimeError):
    """Another live process holds a lock this job needs."""


def holders(lock: Path) -> list[str]:
    """'pid <n> (<what>)' of every live process that noted it holds `lock` (notes `<lock>.<pid>@<host>`);
    stale notes of this host are removed. A note of another host (a cluster's shared filesystem) is
    never judged by a local pid: it is reported, 'pid <n> on <host>'."""
    found = []
    for note in sorted(lock.parent.glob(f"{lock.name}.*")):
        pid, _, host = note.name[len(lock.name) + 1 :].partition("@")
        if not pid.isdigit():
            continue
        what = note.read_text(errors="replace").strip() or "unknown job"
        if host and host != HOST:
            found.append(f"pid {pid} on {host} ({what})")
        elif known_dead(int(pid), HOST):
            note.unlink(missing_ok=True)
        elif int(pid) != os.getpid():
            found.append(f"pid {pid} ({what})")
    return found


@contextlib.contextmanager
def hold(lock: str | os.PathLike, *, what: str, shared: bool = False) -> Iterator[Path]:
    """Hold `lock` (created if missing) for the block, exclusively or shared; CellBusy at once if a
    live process holds it in a conflicting mode. `what` (the job, e.g. 'vpo train maze/vpo/seed0')
    is what a blocked job is told."""
    lock = Path(lock)
    created = not lock.parent.exists()
    lock.parent.mkdir(parents=True, exist_ok=True)
    fd = os.open(lock, os.O_RDWR | os.O_CREAT, 0o644)
    try:
        fcntl.flock(fd, (fcntl.LOCK_SH if shared else fcntl.LOCK_EX) | fcntl.LOCK_NB)
    except BlockingIOError:
        os.close(fd)
        held_by = ", ".join(holders(lock)) or "another process"
        raise CellBusy(
            f"{lock.parent} is in use by {held_by}; {what} would write into it at the same time. "
            "Wait for that job or stop it (a killed Snakemake leaves its jobs running), then rerun"
        ) from None
    holders(lock)  # removes the notes of holders that died
    note = lock.with_name(f"{lock.name}.{os.getpid()}@{HOST}")
    try:
        note.write_text(what + "\n")
        yield lock
    finally:
        note.unlink(missing_ok=True)
        if created and [p.name for p in lock.parent.iterdir()] == [lock.name]:
            # a job that stopped before writing anything (bad input) leaves no directory behind
            lock.unlink(missing_ok=True)
            with contextlib.suppress(OSError):  # another job wrote into it meanwhile: keep it
                lock.parent.rmdir()
        os.close(fd)  # releases the lock


@contextlib.contextmanager
def writing_cell(cell: str | os.PathLike, *, what: str, output: str | None = None) -> Iterator[None]:
    """The locks of a job writing into `cell`: the cell's exclusively when `output` is None (training),
    else the cell's shared and `<cell>/<output>.lock` exclusively (merge, an evaluation seed, the search)."""
    cell = Path(cell)
    with hold(cell / CELL_LOCK, what=what, shared=output is not None):
        if output is None:
            yield
            return
        output_lock = cell / f"{output}.lock"
        with hold(output_lock.with_name("." + output_lock.name), what=what):
            yield


def _cell_of(path: str | os.PathLike) -> Path | None:
    """The cell holding `path`: the nearest folder above it with a cell lock (jobs make one in every
    cell they write), or None."""
    for parent in Path(path).absolute().parents:
        if (parent / CELL_LOCK).is_file():
            return parent
    return None


@contextlib.contextmanager
def reading_cells(paths, *, what: str) -> Iterator[None]:
    """The cells holding `paths`, locked shared for the block: a cell being trained stops the reader at
    once (CellBusy naming the cell and its trainer), and no trainer starts on them meanwhile, so an
    aggregate never reads half a run's metrics."""
    with contextlib.ExitStack() as stack:
        for cell in dict.fromkeys(c for c in map(_cell_of, paths) if c is not None):
            stack.enter_context(hold(cell / CELL_LOCK, what=what, shared=True))
        yield

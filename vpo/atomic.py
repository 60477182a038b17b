"""Writing files and directories so that a killed job never leaves one that looks complete.

Every writer in the project goes through this module: it writes a hidden temporary sibling
(`.<name>.tmp-<pid>`) and renames it over the target, which is atomic on one filesystem. A writer
killed mid-way leaves only its temporary sibling; the next write of the same target removes the
siblings whose process is gone, so they never pile up.

    write_text_atomic / write_json_atomic / write_parquet_atomic   one call per file
    atomic_file(path)   a context manager yielding the temporary path (for savefig, to_csv, ...)
    atomic_dir(path)    the same for a directory (models, checkpoints, installed profiles)
"""

from __future__ import annotations

import contextlib
import json
import os
import re
import shutil
import socket
from pathlib import Path
from typing import Any, Iterator

HOST = socket.gethostname() or "localhost"  # a pid means something on its own machine only (shared filesystems)


def _tmp_sibling(path: Path) -> Path:
    return path.with_name(f".{path.name}.tmp-{os.getpid()}@{HOST}")


def known_dead(pid: int, host: str) -> bool:
    """Whether the writer `<pid>@<host>` of a temporary, lock note or log name is known to have died: a
    pid of this host, not this process, with no process. A pid of another host (a cluster's shared
    filesystem) is never judged by this machine's process table."""
    if host != HOST or pid == os.getpid():
        return False
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return True
    except PermissionError:  # alive, owned by someone else
        return False
    return False


def remove_stale_tmp(path: str | os.PathLike) -> list[Path]:
    """Delete temporary siblings of `path` left by writers that no longer run; returns them."""
    path = Path(path)
    if not path.parent.is_dir():
        return []
    # tmp-<pid>@<host>; a writer of another host is never judged by a local pid (tmp-<pid>: this host's)
    pattern = re.compile(rf"^\.{re.escape(path.name)}\.tmp-(\d+)(?:@(.+))?$")
    removed = []
    for sibling in path.parent.iterdir():
        match = pattern.match(sibling.name)
        if match and known_dead(int(match.group(1)), match.group(2) or HOST):
            if sibling.is_dir() and not sibling.is_symlink():
                shutil.rmtree(sibling, ignore_errors=True)
            else:
                sibling.unlink(missing_ok=True)
            removed.append(sibling)
    return removed


@contextlib.contextmanager
def atomic_file(path: str | os.PathLike) -> Iterator[Path]:
    """Yield a temporary path to write; on a clean exit it is renamed onto `path`.

    An exception removes the temporary file and leaves an existing `path` untouched.
    """
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    remove_stale_tmp(path)
    tmp = _tmp_sibling(path)
    try:
        yield tmp
        os.replace(tmp, path)
    finally:
        tmp.unlink(missing_ok=True)


@contextlib.contextmanager
def atomic_dir(path: str | os.PathLike) -> Iterator[Path]:
    """Yield an empty temporary directory; on a clean exit it replaces the directory `path`.

    An older `path` is moved aside first and deleted only after the new one is in place, so at
    every moment either the old or the new complete directory exists under its name.
    """
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    remove_stale_tmp(path)
    tmp = _tmp_sibling(path)
    shutil.rmtree(tmp, ignore_errors=True)
    tmp.mkdir()
    try:
        yield tmp
        old = path.with_name(f".{path.name}.old-{os.getpid()}")
        if path.exists():
            os.replace(path, old)
        os.replace(tmp, path)
        shutil.rmtree(old, ignore_errors=True)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


def set_aside(path: str | os.PathLike) -> Path:
    """Rename a directory to a new `<name>.stale-<time>[-n]` sibling and delete the older such
    siblings (one set-aside copy is kept, so forced retrains do not pile them up); returns it."""
    import time

    path = Path(path)
    stamp, n = time.strftime("%Y%m%dT%H%M%S"), 0
    while (aside := path.with_name(f"{path.name}.stale-{stamp}" + (f"-{n}" if n else ""))).exists():
        n += 1
    path.rename(aside)
    for older in path.parent.glob(f"{path.name}.stale-*"):
        if older != aside and older.is_dir():
            shutil.rmtree(older, ignore_errors=True)
    return aside


def write_text_atomic(path: str | os.PathLike, text: str) -> Path:
    with atomic_file(path) as tmp:
        tmp.write_text(text)
    return Path(path)


def write_json_atomic(path: str | os.PathLike, payload: Any) -> Path:
    return write_text_atomic(path, json.dumps(payload, indent=2, sort_keys=True, default=float) + "\n")


def write_parquet_atomic(rows: list[dict[str, Any]], path: str | os.PathLike) -> Path:
    """Rows (veRL's row schema or any records) as one parquet file."""
    import pandas as pd

    with atomic_file(path) as tmp:
        pd.DataFrame(rows).to_parquet(tmp, index=False)
    return Path(path)

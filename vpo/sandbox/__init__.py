"""Running untrusted Python programs (model-written code) so that nothing they do reaches the caller.

    run_program(code, stdin, timeout_s=..., memory_mb=...) -> RunResult
    run_programs([Program, ...], workers=N) -> [RunResult, ...]      (in order; N at a time)

Every program runs in a fresh process under the base interpreter (`python -I`, the standard library
only), in an empty environment, in a fresh working directory that is removed afterwards, with
rlimits on CPU seconds, address space, processes, file size and open files, no core files, stdout
and stderr capped, a cap on the memory of all its processes together (a memory cgroup where the
machine allows one, else a watcher that kills the program over the limit), and a wall-clock
timeout that kills the program and everything it started.

Where the machine allows (root, or unprivileged user namespaces), the program also gets its own
PID, network and mount namespaces: no network at all, a root of its own that holds the
interpreter's files and nothing else (no checkout, results, data or home directories), all
read-only except its working directory, only its own processes visible; as root it also runs under
a uid of its own. Where namespaces are not available the process limits,
the timeout and a subreaper still hold, but the program can read and write what the calling user
can and reach the network; `run_program` then warns once per process (see README, "Sandbox").

The launcher that sets this up is `vpo/sandbox/helper.py`.
"""

from __future__ import annotations

import json
import math
import os
import selectors
import shutil
import signal
import subprocess
import sys
import tempfile
import time
import warnings
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from typing import Iterable, Literal

_HELPER = str(Path(__file__).with_name("helper.py"))
PYTHON = os.path.realpath(getattr(sys, "_base_executable", None) or sys.executable)
_PREFIX = os.path.realpath(sys.base_prefix)
STDOUT_LIMIT = 1 << 20  # bytes of stdout kept; a program printing more is killed
_STDERR_LIMIT = 64 << 10  # bytes of stderr kept (the rest is drained and dropped)
Status = Literal["ok", "error", "timeout", "memory", "killed"]
_warned: set[str] = set()


@dataclass(frozen=True)
class Program:
    """One run: the program text, its stdin and its limits."""

    code: str
    stdin: str = ""
    timeout_s: float = 6.0  # wall clock; CPU time is limited to the same, rounded up
    memory_mb: int = 2048  # address space of each process, and resident memory of all of them together
    isolation: str = "auto"  # auto: the strongest the machine allows; uid: no namespaces; none: limits only
    nproc: int = 64  # processes of the program's uid
    file_mb: int = 16  # largest file it may write
    tmpfs_mb: int = 64  # size of its working directory (namespaces only)
    nofile: int = 64  # open files
    memory_cap: str = (
        "auto"  # auto: a memory cgroup where the machine allows one, else the watcher; watcher: always the watcher
    )


@dataclass(frozen=True)
class RunResult:
    # ok: exit 0; error: other exit or a crash; timeout; memory: MemoryError or over the cap; killed: a signal or
    # the stdout cap
    status: Status
    returncode: int | None  # exit code, or None when it ended on a signal or was killed
    signal: int | None  # the signal that ended it, if any
    stdout: str  # at most STDOUT_LIMIT bytes, decoded as UTF-8 with replacement
    stderr: str  # at most _STDERR_LIMIT bytes
    wall_s: float  # seconds from launch to the end of the run
    isolation: str  # what the machine allowed: "namespaces+uid", "namespaces", "uid" or "none"
    uid: int | None = None  # the private uid it ran under (as the machine sees it); None: the caller's
    memory_cap: str = "watcher"  # what capped the program's memory as a whole: "cgroup2", "cgroup1" or "watcher"


def run_program(code: str, stdin: str = "", *, timeout_s: float, memory_mb: int = 2048, **limits) -> RunResult:
    """Run `code` as a Python program with `stdin`; see the module docstring."""
    return _run(Program(code=code, stdin=stdin, timeout_s=timeout_s, memory_mb=memory_mb, **limits))


def run_programs(programs: Iterable[Program], workers: int = 4) -> list[RunResult]:
    """Run programs `workers` at a time (threads waiting on processes); results in input order."""
    programs = list(programs)
    if workers <= 1 or len(programs) <= 1:
        return [_run(p) for p in programs]
    with ThreadPoolExecutor(max_workers=workers) as pool:
        return list(pool.map(_run, programs))


def default_workers() -> int:
    """Parallel programs per reward call: the CPUs this process may use, at most 4."""
    return max(1, min(4, len(os.sched_getaffinity(0))))


def _run(program: Program) -> RunResult:
    if program.timeout_s <= 0 or program.memory_mb <= 0:
        raise ValueError(
            f"sandbox limits must be positive, got timeout_s={program.timeout_s}, memory_mb={program.memory_mb}"
        )
    job = tempfile.mkdtemp(prefix="vpo-sandbox-")
    start = time.monotonic()
    proc = None
    try:
        os.mkdir(os.path.join(job, "work"))
        Path(job, "main.py").write_text(program.code, encoding="utf-8", errors="surrogatepass")
        Path(job, "stdin").write_text(program.stdin, encoding="utf-8", errors="surrogatepass")
        spec = {
            "python": PYTHON,
            "prefix": _PREFIX,
            "isolation": program.isolation,
            "cpu_s": math.ceil(program.timeout_s),
            "memory_mb": int(program.memory_mb),
            "nproc": program.nproc,
            "file_mb": program.file_mb,
            "tmpfs_mb": program.tmpfs_mb,
            "nofile": program.nofile,
            "memory_cap": program.memory_cap,
            "hide": _hidden(),
        }
        Path(job, "spec.json").write_text(json.dumps(spec))
        proc = subprocess.Popen(
            [PYTHON, "-I", "-S", _HELPER, job],
            stdin=subprocess.DEVNULL,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            env={},
            cwd=job,
            start_new_session=True,
            close_fds=True,
        )
        stdout, stderr, overflow, timed_out = _collect(proc, start + program.timeout_s)
        if overflow or timed_out:
            _stop(proc)
        proc.wait()
        wall = time.monotonic() - start
        ended = _read_json(Path(job, "exit.json"))
        report = _read_json(Path(job, "isolation.json"))
        isolation = _isolation(report, program.isolation)
    finally:
        if proc is not None and proc.poll() is None:
            _stop(proc)
        _remove_cgroup((_read_json(Path(job, "isolation.json")) or {}).get("cgroup"))
        shutil.rmtree(job, ignore_errors=True)
    out, err = stdout.decode("utf-8", "replace"), stderr.decode("utf-8", "replace")
    returncode, sig = (ended or {}).get("returncode"), (ended or {}).get("signal")
    if timed_out or sig == signal.SIGXCPU:
        status = "timeout"
    elif (ended or {}).get("memory"):
        status = "memory"
    elif overflow or ended is None or sig in (signal.SIGKILL, signal.SIGTERM):
        status = "killed"
    elif returncode == 0:
        status = "ok"
    elif "MemoryError" in err[-2000:]:
        status = "memory"
    else:
        status = "error"
    report = report or {}
    return RunResult(
        status, returncode, sig, out, err, wall, isolation, report.get("uid"), report.get("memory_cap", "watcher")
    )


def _collect(proc: subprocess.Popen, deadline: float) -> tuple[bytes, bytes, bool, bool]:
    """Read stdout and stderr until both close or the deadline; stop early when stdout overflows."""
    kept = {proc.stdout: bytearray(), proc.stderr: bytearray()}
    limit = {proc.stdout: STDOUT_LIMIT, proc.stderr: _STDERR_LIMIT}
    overflow = timed_out = False
    with selectors.DefaultSelector() as sel:
        for stream in kept:
            sel.register(stream, selectors.EVENT_READ)
        while sel.get_map():
            left = deadline - time.monotonic()
            if left <= 0:
                timed_out = True
                break
            for key, _ in sel.select(left):
                chunk = os.read(key.fd, 65536)
                if not chunk:
                    sel.unregister(key.fileobj)
                    continue
                buf = kept[key.fileobj]
                buf += chunk[: max(0, limit[key.fileobj] - len(buf))]
                if key.fileobj is proc.stdout and len(buf) >= STDOUT_LIMIT:
                    overflow = True
            if overflow:
                break
    if not timed_out and not overflow:  # both closed: the helper is ending; give it the rest of the time
        try:
            proc.wait(max(0.0, deadline - time.monotonic()))
        except subprocess.TimeoutExpired:
            timed_out = True
    return bytes(kept[proc.stdout]), bytes(kept[proc.stderr]), overflow, timed_out


def _stop(proc: subprocess.Popen) -> None:
    """Ask the helper to kill the program and its descendants, then kill the helper's group."""
    try:
        proc.send_signal(signal.SIGTERM)
        proc.wait(2.0)
    except (subprocess.TimeoutExpired, ProcessLookupError):
        pass
    try:
        os.killpg(proc.pid, signal.SIGKILL)
    except (ProcessLookupError, PermissionError):
        pass
    proc.wait()


def _hidden() -> list[str]:
    """Directories covered by an empty one should a program's root show them: the checkout, and the
    caller's working directory and home (results and data live there)."""
    return sorted(
        {
            str(Path(__file__).resolve().parents[2]),
            os.path.realpath(os.getcwd()),
            os.path.realpath(os.path.expanduser("~")),
        }
    )


def _remove_cgroup(path: str | None) -> None:
    """The helper removes its cgroup; when it was killed first, the cgroup is removed here once the
    program's processes have gone (a few milliseconds after their namespace's init died)."""
    for _ in range(100):
        if not path or not os.path.isdir(path):
            return
        try:
            os.rmdir(path)
        except OSError:
            time.sleep(0.01)


def _read_json(path: Path) -> dict | None:
    try:
        return json.loads(path.read_text())
    except (OSError, ValueError):
        return None


def _isolation(report: dict | None, asked: str) -> str:
    report = report or {}
    parts = [
        name for name, on in (("namespaces", report.get("namespaces")), ("uid", report.get("uid") is not None)) if on
    ]
    got = "+".join(parts) or "none"
    if asked == "auto" and "namespaces" not in parts and got not in _warned:
        _warned.add(got)
        warnings.warn(
            f"vpo sandbox: this machine allows no PID/network/mount namespaces (isolation: {got}); programs keep "
            "their rlimits and timeout but can read and write what this user can and reach the network. "
            "Enable unprivileged user namespaces (sysctl kernel.unprivileged_userns_clone=1) for full isolation.",
            RuntimeWarning,
            stacklevel=3,
        )
    return got

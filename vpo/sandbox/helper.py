"""The sandbox's launcher: run as `python -I -S helper.py JOB_DIR` by `vpo.sandbox`, never
imported. Standard library only (it runs under the base interpreter, without the project).

JOB_DIR holds `spec.json`, `main.py` and `stdin`. The helper isolates itself as far as the machine
allows, forks the program, waits for it and writes `exit.json` ({"returncode", "signal", "memory"})
next to `isolation.json` ({"namespaces", "uid", "memory_cap", "cgroup"}); the caller owns the wall
clock and reads both.

Isolation, strongest first (the namespaces, the uid and the root are vpo/sandbox/isolation.py's):
- namespaces: new PID, network and mount namespaces (as root directly; otherwise inside a new
  unprivileged user namespace). The program is PID 1 of its namespace, so every process it starts
  dies with it; it has no network interface but a down loopback; its root is a fresh tmpfs holding
  only the interpreter's files (the system's /usr, /bin and /lib, the interpreter's prefix and the
  directories of the libraries it has loaded), a few devices, a /proc of its own processes, and a
  writable working directory (a small tmpfs), all read-only but that directory. The checkout, the
  results, the data, home directories and scratch directories are not there at all.
- uid: as root, the program runs under a uid of its own (no files, no other processes).
- always: an empty environment, rlimits (CPU seconds, address space, processes, file size, open
  files, no core files), no new privileges, killed when the helper dies; without a PID namespace
  the helper is a child subreaper and kills every descendant left when the program ends.

Memory, for the program as a whole (all its processes together): a memory cgroup where the machine
allows one (cgroup v2 with the memory controller delegated, or v1's memory controller as root),
otherwise a watcher that sums the resident memory of the program's processes every 20 ms; over the
limit, all of the program's processes are killed. `isolation.json` names which one held; `exit.json` says
whether it fired.
"""

import importlib.util
import json
import os
import resource
import signal
import sys
import time


def _sibling(name):
    """The module `name` beside this file: run with -I, Python leaves the script's directory off sys.path."""
    spec = importlib.util.spec_from_file_location(
        name, os.path.join(os.path.dirname(os.path.abspath(__file__)), f"{name}.py")
    )
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


isolation = _sibling("isolation")
libc, under = isolation.libc, isolation.under
PR_SET_PDEATHSIG, PR_CAPBSET_DROP, PR_SET_NO_NEW_PRIVS, PR_SET_CHILD_SUBREAPER = 1, 24, 38, 36
WATCH_S = 0.02  # the memory watcher's period

# ---- memory for the program as a whole ----


def _cgroup_parents():
    """(version, directory) where a memory cgroup may be made, nearest to this process first."""
    mounts = []
    with open("/proc/self/mountinfo") as fh:
        for line in fh:
            head, _, tail = line.partition(" - ")
            fields, (fstype, _, options) = head.split(), tail.split()[:3]
            if fstype == "cgroup2" or (fstype == "cgroup" and "memory" in options.split(",")):
                mounts.append((2 if fstype == "cgroup2" else 1, fields[3], fields[4]))
    own = {}
    with open("/proc/self/cgroup") as fh:
        for line in fh:
            _, controllers, path = line.rstrip("\n").split(":", 2)
            if controllers == "":
                own[2] = path
            elif "memory" in controllers.split(","):
                own[1] = path
    found = []
    for version, root, point in sorted(mounts, reverse=True):  # v2 first
        path = own.get(version, "/")
        parts = [p for p in (path[len(root) :] if under(path, [root]) else "").split("/") if p]
        for directory in (os.path.join(point, *parts[:i]) for i in range(len(parts), -1, -1)):
            if version == 1 or "memory" in read(os.path.join(directory, "cgroup.subtree_control")).split():
                found.append((version, directory))
    return found


def read(path):
    try:
        with open(path) as fh:
            return fh.read()
    except OSError:
        return ""


def write(path, text):
    with open(path, "w") as fh:
        fh.write(text)


def _make_cgroup(limit):
    """A new memory cgroup capped at `limit` bytes: (version, path), or (None, None) where none can be made."""
    for version, parent in _cgroup_parents():
        path = os.path.join(parent, f"vpo-sandbox-{os.getpid()}")
        try:
            os.mkdir(path)
        except OSError:
            continue
        settings = (
            (("memory.max", limit), ("memory.swap.max", 0), ("memory.oom.group", 1))
            if version == 2
            else (("memory.limit_in_bytes", limit), ("memory.memsw.limit_in_bytes", limit))
        )  # the limit first
        try:
            for i, (name, value) in enumerate(settings):
                if i == 0 or os.path.exists(os.path.join(path, name)):  # swap and group kill where the kernel has them
                    write(os.path.join(path, name), str(value))
            return version, path
        except OSError:
            _remove_cgroup(path)
    return None, None


def _cgroup_fired(version, path):
    """Whether the kernel killed a process of the cgroup for memory."""
    name = "memory.events" if version == 2 else "memory.oom_control"
    counts = dict(line.split() for line in read(os.path.join(path, name)).splitlines() if len(line.split()) == 2)
    if "oom_kill" in counts:
        return int(counts["oom_kill"]) > 0
    return version == 1 and read(os.path.join(path, "memory.failcnt")).strip() not in ("", "0")


def _remove_cgroup(path, wait_s=2.0):
    """Kill what is left in the cgroup and remove it (a process takes a moment to leave it)."""
    deadline = time.monotonic() + wait_s
    while os.path.isdir(path) and time.monotonic() < deadline:
        try:
            os.rmdir(path)
        except OSError:
            pass
        for pid in read(os.path.join(path, "cgroup.procs")).split():
            try:
                os.kill(int(pid), signal.SIGKILL)
            except (OSError, ValueError):
                pass
        time.sleep(0.001)


def resident(pids):
    """Resident bytes of these processes (shared pages counted in each: an overestimate, never under)."""
    return sum(int((read(f"/proc/{pid}/statm").split() or [0, 0])[1]) for pid in pids) * resource.getpagesize()


# ---- the program ----


def _set_limits(spec):
    seconds = int(spec["cpu_s"])
    for name, value in (
        ("RLIMIT_CPU", (seconds, seconds + 1)),
        ("RLIMIT_AS", spec["memory_mb"] << 20),
        ("RLIMIT_NPROC", spec["nproc"]),
        ("RLIMIT_FSIZE", spec["file_mb"] << 20),
        ("RLIMIT_NOFILE", spec["nofile"]),
        ("RLIMIT_CORE", 0),
    ):
        soft, hard = value if isinstance(value, tuple) else (value, value)
        resource.setrlimit(getattr(resource, name), (soft, hard))


def _run_child(spec, job, code, stdin_fd, namespaces, uid, ready_fd):
    """In the forked child: wait until the helper has put it in its memory cgroup, finish isolating,
    then exec the interpreter on main.py."""
    os.read(ready_fd, 1)
    box = isolation.seal_mounts(os.path.join(job, "work"), spec) if namespaces else os.path.join(job, "work")
    main = os.path.join(box, "main.py")
    with open(main, "w", encoding="utf-8") as fh:
        fh.write(code)
    os.dup2(stdin_fd, 0)
    if uid is not None:
        os.chown(box, uid, uid)
        os.chown(main, uid, uid)
    os.chdir(box)
    _set_limits(spec)
    if uid is not None:
        os.setgroups([])
        os.setgid(uid)
        os.setuid(uid)
    for cap in range(64):  # an empty bounding set: exec grants no capability, even to root of a user namespace
        libc.prctl(PR_CAPBSET_DROP, cap, 0, 0, 0)
    libc.prctl(PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0)
    libc.prctl(PR_SET_PDEATHSIG, signal.SIGKILL, 0, 0, 0)
    os.execve(spec["python"], [spec["python"], "-I", "-S", "main.py"], {})


def descendants(root):
    """Pids whose parent chain reaches `root` (read from /proc)."""
    parent = {}
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            try:
                with open(f"/proc/{entry}/stat") as fh:
                    parent[int(entry)] = int(fh.read().rsplit(")", 1)[1].split()[1])
            except (OSError, IndexError, ValueError):
                continue
    found, frontier = set(), {root}
    while frontier:
        frontier = {p for p, pp in parent.items() if pp in frontier and p not in found}
        found |= frontier
    return found


def _kill_descendants():
    """Without a PID namespace: SIGKILL everything below the helper (orphans are reparented to it)."""
    for _ in range(50):
        pids = descendants(os.getpid())
        if not pids:
            return
        for pid in pids:
            try:
                os.kill(pid, signal.SIGKILL)
            except OSError:
                pass
        try:
            while os.waitpid(-1, os.WNOHANG)[0]:
                pass
        except ChildProcessError:
            pass


def wait_capped(child, over):
    """Wait for the program, killing all its processes as soon as `over()` says its memory went over
    the cap (the kernel's OOM killer of a v1 cgroup takes one process only); returns (wait status,
    whether it did)."""
    delay = 0.0005  # short programs are seen to end at once; the wait backs off to WATCH_S
    while True:
        pid, status = os.waitpid(child, os.WNOHANG)
        if pid:
            return status, False
        if over():
            for each in descendants(os.getpid()):
                try:
                    os.kill(each, signal.SIGKILL)
                except ProcessLookupError:  # gone with its namespace's init
                    pass
            return os.waitpid(child, 0)[1], True
        time.sleep(delay)
        delay = min(WATCH_S, delay * 1.5)  # capped before it grows: 1.5 ** n overflows a float at n = 1751


def main():
    job = sys.argv[1]
    with open(os.path.join(job, "spec.json")) as fh:
        spec = json.load(fh)
    with open(os.path.join(job, "main.py"), encoding="utf-8") as fh:
        code = fh.read()
    stdin_fd = os.open(os.path.join(job, "stdin"), os.O_RDONLY)
    limit = spec["memory_mb"] << 20
    version, cgroup = _make_cgroup(limit) if spec.get("memory_cap", "auto") == "auto" else (None, None)
    namespaces = spec["isolation"] == "auto" and isolation.enter_namespaces()
    uid = isolation.private_uid(spec["prefix"], namespaces) if spec["isolation"] != "none" else None
    if not namespaces:
        libc.prctl(PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0)
    ready_r, ready_w = os.pipe()
    child = os.fork()
    if child == 0:
        try:
            os.close(ready_w)
            _run_child(spec, job, code, stdin_fd, namespaces, uid, ready_r)
        except BaseException as err:  # the setup failed: say so on the program's stderr
            os.write(2, f"vpo sandbox: setup failed: {err!r}\n".encode())
        os._exit(126)
    if cgroup:
        try:
            write(os.path.join(cgroup, "cgroup.procs"), str(child))
        except OSError:
            _remove_cgroup(cgroup)
            version = cgroup = None
    cap = f"cgroup{version}" if cgroup else "watcher"
    with open(os.path.join(job, "isolation.json"), "w") as fh:
        json.dump({"namespaces": bool(namespaces), "uid": uid, "memory_cap": cap, "cgroup": cgroup}, fh)
    os.write(ready_w, b"1")

    def stop(signum, frame):
        os.kill(child, signal.SIGKILL)
        os.waitpid(child, 0)  # reaped here: an orphaned zombie may never be reaped in a container
        if not namespaces:
            _kill_descendants()
        if cgroup:
            _remove_cgroup(cgroup)
        os._exit(137)

    signal.signal(signal.SIGTERM, stop)
    if cgroup:
        status, fired = wait_capped(child, lambda: _cgroup_fired(version, cgroup))
    else:
        status, fired = wait_capped(child, lambda: resident(descendants(os.getpid())) > limit)
    if not namespaces:
        _kill_descendants()
    if cgroup:
        fired = fired or _cgroup_fired(version, cgroup)
        _remove_cgroup(cgroup)
    with open(os.path.join(job, "exit.json"), "w") as fh:
        json.dump(
            {
                "returncode": os.waitstatus_to_exitcode(status) if os.WIFEXITED(status) else None,
                "signal": os.WTERMSIG(status) if os.WIFSIGNALED(status) else None,
                "memory": fired,
            },
            fh,
        )


if __name__ == "__main__":
    main()

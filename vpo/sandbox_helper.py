"""The sandbox's launcher: run as `python -I -S sandbox_helper.py JOB_DIR` by `vpo.sandbox`, never
imported. Standard library only (it runs under the base interpreter, without the project).

JOB_DIR holds `spec.json`, `main.py` and `stdin`. The helper isolates itself as far as the machine
allows, forks the program, waits for it and writes `exit.json` ({"returncode", "signal", "memory"})
next to `isolation.json` ({"namespaces", "uid", "memory_cap", "cgroup"}); the caller owns the wall
clock and reads both.

Isolation, strongest first:
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
limit, all of the program's processes are killed. `isolation.json` names which one held; `exit.json` says whether it fired.
"""

import ctypes
import json
import os
import resource
import signal
import stat
import sys
import time

CLONE_NEWNS, CLONE_NEWUSER, CLONE_NEWPID, CLONE_NEWNET = 0x00020000, 0x10000000, 0x20000000, 0x40000000
MS_NOSUID, MS_NODEV, MS_NOEXEC, MS_BIND, MS_REC, MS_PRIVATE = 2, 4, 8, 4096, 16384, 1 << 18
MNT_DETACH = 2
PR_SET_PDEATHSIG, PR_CAPBSET_DROP, PR_SET_NO_NEW_PRIVS, PR_SET_CHILD_SUBREAPER = 1, 24, 38, 36
SYS_PIVOT_ROOT, SYS_MOUNT_SETATTR, AT_RECURSIVE, MOUNT_ATTR_RDONLY = 155, 442, 0x8000, 0x1
SYSTEM_DIRS = ("/usr", "/bin", "/sbin", "/lib", "/lib32", "/lib64", "/libx32")  # the dynamic loader's paths
DEVICES = ("null", "zero", "full", "random", "urandom")
BOX = "/tmp/box"  # the program's working directory inside its own root
WATCH_S = 0.02  # the memory watcher's period
libc = ctypes.CDLL(None, use_errno=True)


def check(result, what):
    if result != 0:
        err = ctypes.get_errno()
        raise OSError(err, f"{what}: {os.strerror(err)}")


def mount(source, target, fstype, flags, data=None):
    check(libc.mount(source.encode(), target.encode(), fstype.encode() if fstype else None, flags,
                     data.encode() if data else None), f"mount {target}")


def enter_namespaces():
    """New PID and network namespaces (the mount namespace is the child's own, so that the helper
    keeps seeing the job directory); returns True on success (the caller then forks)."""
    flags = CLONE_NEWPID | CLONE_NEWNET
    if os.geteuid() == 0 and libc.unshare(flags) == 0:
        return True
    uid, gid = os.geteuid(), os.getegid()
    if libc.unshare(flags | CLONE_NEWUSER) != 0:
        return False
    for name, text in (("uid_map", f"0 {uid} 1"), ("setgroups", "deny"), ("gid_map", f"0 {gid} 1")):
        with open(f"/proc/self/{name}", "w") as fh:
            fh.write(text)
    return True


def private_uid(prefix, namespaces):
    """A uid no file or process has (1e9 + helper pid) when we are root and it is mapped here; None
    when not root, or when, without namespaces, that uid could not reach the interpreter."""
    if os.geteuid() != 0 or not os.path.exists("/proc/self/uid_map"):
        return None
    if not namespaces and any(not os.stat(a).st_mode & stat.S_IXOTH for a in ancestors(prefix)):
        return None
    candidate = 1_000_000_000 + os.getpid()
    with open("/proc/self/uid_map") as fh:
        for line in fh:
            inside, _, count = (int(x) for x in line.split())
            if inside <= candidate < inside + count and inside == 0 and count > 1:
                return candidate
    return None


def runtime_paths(spec):
    """What the interpreter needs, as real paths: the system's library and program directories, its
    prefix, and the directory of every shared library this process (the same interpreter) has mapped."""
    paths = [d for d in SYSTEM_DIRS if os.path.lexists(d)] + [spec["prefix"], os.path.dirname(spec["python"])]
    with open("/proc/self/maps") as fh:
        mapped = {line.split(None, 5)[5].strip() for line in fh if len(line.split(None, 5)) == 6}
    paths += [os.path.dirname(f) for f in mapped if f.startswith("/") and ".so" in os.path.basename(f)]
    return paths + ["/etc/ld.so.cache"]


def under(path, roots):
    return any(path == r or path.startswith(r.rstrip("/") + "/") for r in roots)


def seal_mounts(work, spec):
    """Inside a new mount namespace: a new root (a tmpfs on the job's `work` directory) holding the
    runtime paths bound read-only, the devices, a writable tmpfs working directory and a /proc of the
    new PID namespace, made the root of the namespace; paths of the caller's that fall inside a bound directory (the checkout, its
    working directory, the home directory) are covered by empty tmpfs. Returns the working directory."""
    check(libc.unshare(CLONE_NEWNS), "mount namespace")
    mount("none", "/", None, MS_REC | MS_PRIVATE)
    mount("tmpfs", work, "tmpfs", MS_NOSUID | MS_NODEV, "size=1m,mode=0755")
    exposed = []
    for path in sorted(set(runtime_paths(spec)), key=len):
        if under(path, exposed) or not os.path.lexists(path):
            continue
        target = work + path
        os.makedirs(os.path.dirname(target), mode=0o755, exist_ok=True)
        if os.path.islink(path) and os.path.dirname(path) == "/":  # /lib -> usr/lib on merged-/usr systems
            os.symlink(os.readlink(path), target)
            continue
        real = os.path.realpath(path)
        if os.path.isdir(real):
            os.makedirs(target, mode=0o755, exist_ok=True)
        else:
            open(target, "w").close()
        mount(real, target, None, MS_BIND | MS_REC)
        exposed.append(path)
    os.makedirs(work + "/dev", mode=0o755)
    for name in DEVICES:
        if os.path.exists(f"/dev/{name}"):
            open(f"{work}/dev/{name}", "w").close()
            mount(f"/dev/{name}", f"{work}/dev/{name}", None, MS_BIND)
    for path in spec.get("hide", []):
        if under(path, exposed) and os.path.isdir(work + path):
            mount("tmpfs", work + path, "tmpfs", MS_NOSUID | MS_NODEV, "size=4k,mode=0755")
    for directory in ("/proc", BOX, "/.old"):
        os.makedirs(work + directory, mode=0o755, exist_ok=True)
    mount("tmpfs", work + BOX, "tmpfs", MS_NOSUID | MS_NODEV, f"size={spec['tmpfs_mb']}m,mode=0700")
    # before the old root goes: a user namespace may mount a proc only while a full one is visible
    mount("proc", work + "/proc", "proc", MS_NOSUID | MS_NODEV | MS_NOEXEC)
    check(libc.syscall(SYS_PIVOT_ROOT, work.encode(), (work + "/.old").encode()), "pivot_root")
    os.chdir("/")
    check(libc.umount2(b"/.old", MNT_DETACH), "detach the old root")
    os.rmdir("/.old")
    attr = (ctypes.c_uint64 * 4)(MOUNT_ATTR_RDONLY, 0, 0, 0)  # struct mount_attr {set, clr, propagation, userns_fd}
    check(libc.syscall(SYS_MOUNT_SETATTR, -100, b"/", AT_RECURSIVE, ctypes.byref(attr), 32), "read-only mounts")
    attr = (ctypes.c_uint64 * 4)(0, MOUNT_ATTR_RDONLY, 0, 0)
    check(libc.syscall(SYS_MOUNT_SETATTR, -100, BOX.encode(), 0, ctypes.byref(attr), 32), "writable working dir")
    return BOX


def ancestors(path):
    parts = path.strip("/").split("/")
    return ["/" + "/".join(parts[:i]) for i in range(1, len(parts) + 1)]


# ---- memory for the program as a whole ----

def cgroup_parents():
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
        parts = [p for p in (path[len(root):] if under(path, [root]) else "").split("/") if p]
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


def make_cgroup(limit):
    """A new memory cgroup capped at `limit` bytes: (version, path), or (None, None) where none can be made."""
    for version, parent in cgroup_parents():
        path = os.path.join(parent, f"vpo-sandbox-{os.getpid()}")
        try:
            os.mkdir(path)
        except OSError:
            continue
        settings = ((("memory.max", limit), ("memory.swap.max", 0), ("memory.oom.group", 1)) if version == 2 else
                    (("memory.limit_in_bytes", limit), ("memory.memsw.limit_in_bytes", limit)))  # the limit first
        try:
            for i, (name, value) in enumerate(settings):
                if i == 0 or os.path.exists(os.path.join(path, name)):  # swap and group kill where the kernel has them
                    write(os.path.join(path, name), str(value))
            return version, path
        except OSError:
            remove_cgroup(path)
    return None, None


def cgroup_fired(version, path):
    """Whether the kernel killed a process of the cgroup for memory."""
    name = "memory.events" if version == 2 else "memory.oom_control"
    counts = dict(line.split() for line in read(os.path.join(path, name)).splitlines() if len(line.split()) == 2)
    if "oom_kill" in counts:
        return int(counts["oom_kill"]) > 0
    return version == 1 and read(os.path.join(path, "memory.failcnt")).strip() not in ("", "0")


def remove_cgroup(path, wait_s=2.0):
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

def set_limits(spec):
    seconds = int(spec["cpu_s"])
    for name, value in (("RLIMIT_CPU", (seconds, seconds + 1)), ("RLIMIT_AS", spec["memory_mb"] << 20),
                        ("RLIMIT_NPROC", spec["nproc"]), ("RLIMIT_FSIZE", spec["file_mb"] << 20),
                        ("RLIMIT_NOFILE", spec["nofile"]), ("RLIMIT_CORE", 0)):
        soft, hard = value if isinstance(value, tuple) else (value, value)
        resource.setrlimit(getattr(resource, name), (soft, hard))


def run_child(spec, job, code, stdin_fd, namespaces, uid, ready_fd):
    """In the forked child: wait until the helper has put it in its memory cgroup, finish isolating,
    then exec the interpreter on main.py."""
    os.read(ready_fd, 1)
    box = seal_mounts(os.path.join(job, "work"), spec) if namespaces else os.path.join(job, "work")
    main = os.path.join(box, "main.py")
    with open(main, "w", encoding="utf-8") as fh:
        fh.write(code)
    os.dup2(stdin_fd, 0)
    if uid is not None:
        os.chown(box, uid, uid)
        os.chown(main, uid, uid)
    os.chdir(box)
    set_limits(spec)
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


def kill_descendants():
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
    version, cgroup = make_cgroup(limit) if spec.get("memory_cap", "auto") == "auto" else (None, None)
    namespaces = spec["isolation"] == "auto" and enter_namespaces()
    uid = private_uid(spec["prefix"], namespaces) if spec["isolation"] != "none" else None
    if not namespaces:
        libc.prctl(PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0)
    ready_r, ready_w = os.pipe()
    child = os.fork()
    if child == 0:
        try:
            os.close(ready_w)
            run_child(spec, job, code, stdin_fd, namespaces, uid, ready_r)
        except BaseException as err:  # the setup failed: say so on the program's stderr
            os.write(2, f"vpo sandbox: setup failed: {err!r}\n".encode())
        os._exit(126)
    if cgroup:
        try:
            write(os.path.join(cgroup, "cgroup.procs"), str(child))
        except OSError:
            remove_cgroup(cgroup)
            version = cgroup = None
    cap = f"cgroup{version}" if cgroup else "watcher"
    with open(os.path.join(job, "isolation.json"), "w") as fh:
        json.dump({"namespaces": bool(namespaces), "uid": uid, "memory_cap": cap, "cgroup": cgroup}, fh)
    os.write(ready_w, b"1")

    def stop(signum, frame):
        os.kill(child, signal.SIGKILL)
        os.waitpid(child, 0)  # reaped here: an orphaned zombie may never be reaped in a container
        if not namespaces:
            kill_descendants()
        if cgroup:
            remove_cgroup(cgroup)
        os._exit(137)

    signal.signal(signal.SIGTERM, stop)
    if cgroup:
        status, fired = wait_capped(child, lambda: cgroup_fired(version, cgroup))
    else:
        status, fired = wait_capped(child, lambda: resident(descendants(os.getpid())) > limit)
    if not namespaces:
        kill_descendants()
    if cgroup:
        fired = fired or cgroup_fired(version, cgroup)
        remove_cgroup(cgroup)
    with open(os.path.join(job, "exit.json"), "w") as fh:
        json.dump({"returncode": os.waitstatus_to_exitcode(status) if os.WIFEXITED(status) else None,
                   "signal": os.WTERMSIG(status) if os.WIFSIGNALED(status) else None, "memory": fired}, fh)


if __name__ == "__main__":
    main()

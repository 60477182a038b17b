"""The sandbox's launcher: run as `python -I -S sandbox_helper.py JOB_DIR` by `vpo.sandbox`, never
imported. Standard library only (it runs under the base interpreter, without the project).

JOB_DIR holds `spec.json`, `main.py` and `stdin`. The helper isolates itself as far as the machine
allows, forks the program, waits for it and writes `exit.json` ({"returncode", "signal"}) next to
`isolation.json` ({"namespaces", "uid"}); the caller owns the wall clock and reads both.

Isolation, strongest first:
- namespaces: new PID, network and mount namespaces (as root directly; otherwise inside a new
  unprivileged user namespace). The program is PID 1 of its namespace, so every process it starts
  dies with it; it has no network interface but a down loopback; every mount is read-only except
  its working directory (a fresh tmpfs); /proc shows only its own processes; /tmp, /var/tmp,
  /dev/shm and any home directory above the interpreter are replaced by empty tmpfs.
- uid: as root, the program runs under a uid of its own (no files, no other processes).
- always: an empty environment, rlimits (CPU seconds, address space, processes, file size, open
  files, no core files), no new privileges, killed when the helper dies; without a PID namespace
  the helper is a child subreaper and kills every descendant left when the program ends.
"""

import ctypes
import json
import os
import resource
import signal
import stat
import sys

CLONE_NEWNS, CLONE_NEWUSER, CLONE_NEWPID, CLONE_NEWNET = 0x00020000, 0x10000000, 0x20000000, 0x40000000
MS_RDONLY, MS_NOSUID, MS_NODEV, MS_NOEXEC, MS_REMOUNT, MS_BIND, MS_MOVE, MS_REC, MS_PRIVATE = (
    1, 2, 4, 8, 32, 4096, 8192, 16384, 1 << 18)
PR_SET_PDEATHSIG, PR_CAPBSET_DROP, PR_SET_NO_NEW_PRIVS, PR_SET_CHILD_SUBREAPER = 1, 24, 38, 36
SYS_MOUNT_SETATTR, AT_RECURSIVE, MOUNT_ATTR_RDONLY = 442, 0x8000, 0x1
SCRATCH_DIRS = ("/tmp", "/var/tmp", "/dev/shm")
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


def seal_mounts(work, prefix, tmpfs_mb):
    """Inside the new mount namespace: private mounts; empty tmpfs over the scratch dirs, the
    caller's home and any directory above the interpreter that others cannot enter; the interpreter
    re-exposed at its own path (its RUNPATH is absolute); everything read-only but a fresh tmpfs
    working directory; a /proc of the new PID namespace. Returns the working directory."""
    check(libc.unshare(CLONE_NEWNS), "mount namespace")
    mount("none", "/", None, MS_REC | MS_PRIVATE)
    hidden = [d for d in SCRATCH_DIRS if os.path.isdir(d)]
    blocked = next((a for a in ancestors(prefix) if not os.stat(a).st_mode & stat.S_IXOTH), None)
    home = pwd_home(os.getuid())
    for extra in (blocked, home):
        if extra and extra != "/" and os.path.isdir(extra) and extra not in hidden:
            hidden.append(extra)
    shelter_fd = None
    if any(prefix == h or prefix.startswith(h + "/") for h in hidden):
        shelter = os.path.join(work, ".prefix")
        os.mkdir(shelter)
        mount(prefix, shelter, None, MS_BIND | MS_REC)
        shelter_fd = os.open(shelter, os.O_PATH | os.O_DIRECTORY)  # still reachable once /tmp is covered
    for directory in hidden:
        mount("tmpfs", directory, "tmpfs", MS_NOSUID | MS_NODEV, "size=1m,mode=0755")
    if shelter_fd is not None:
        os.makedirs(prefix, mode=0o755, exist_ok=True)
        mount(f"/proc/self/fd/{shelter_fd}", prefix, None, MS_MOVE)
        os.close(shelter_fd)
    box = "/tmp/box" if "/tmp" in hidden else work
    os.makedirs(box, exist_ok=True)
    mount("tmpfs", box, "tmpfs", MS_NOSUID | MS_NODEV, f"size={tmpfs_mb}m,mode=0700")
    attr = (ctypes.c_uint64 * 4)(MOUNT_ATTR_RDONLY, 0, 0, 0)  # struct mount_attr {set, clr, propagation, userns_fd}
    check(libc.syscall(SYS_MOUNT_SETATTR, -100, b"/", AT_RECURSIVE, ctypes.byref(attr), 32), "read-only mounts")
    attr = (ctypes.c_uint64 * 4)(0, MOUNT_ATTR_RDONLY, 0, 0)
    check(libc.syscall(SYS_MOUNT_SETATTR, -100, box.encode(), 0, ctypes.byref(attr), 32), "writable working dir")
    mount("proc", "/proc", "proc", MS_NOSUID | MS_NODEV | MS_NOEXEC)
    return box


def pwd_home(uid):
    try:
        import pwd
        return os.path.realpath(pwd.getpwuid(uid).pw_dir)
    except (KeyError, ImportError):
        return None


def ancestors(path):
    parts = path.strip("/").split("/")
    return ["/" + "/".join(parts[:i]) for i in range(1, len(parts) + 1)]


def set_limits(spec):
    seconds = int(spec["cpu_s"])
    for name, value in (("RLIMIT_CPU", (seconds, seconds + 1)), ("RLIMIT_AS", spec["memory_mb"] << 20),
                        ("RLIMIT_NPROC", spec["nproc"]), ("RLIMIT_FSIZE", spec["file_mb"] << 20),
                        ("RLIMIT_NOFILE", spec["nofile"]), ("RLIMIT_CORE", 0)):
        soft, hard = value if isinstance(value, tuple) else (value, value)
        resource.setrlimit(getattr(resource, name), (soft, hard))


def run_child(spec, job, code, stdin_fd, namespaces, uid):
    """In the forked child: finish isolating, then exec the interpreter on main.py."""
    box = seal_mounts(os.path.join(job, "work"), spec["prefix"], spec["tmpfs_mb"]) if namespaces else os.path.join(job, "work")
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


def main():
    job = sys.argv[1]
    with open(os.path.join(job, "spec.json")) as fh:
        spec = json.load(fh)
    with open(os.path.join(job, "main.py"), encoding="utf-8") as fh:
        code = fh.read()
    stdin_fd = os.open(os.path.join(job, "stdin"), os.O_RDONLY)
    namespaces = spec["isolation"] == "auto" and enter_namespaces()
    uid = private_uid(spec["prefix"], namespaces) if spec["isolation"] != "none" else None
    with open(os.path.join(job, "isolation.json"), "w") as fh:
        json.dump({"namespaces": bool(namespaces), "uid": uid}, fh)
    if not namespaces:
        libc.prctl(PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0)
    child = os.fork()
    if child == 0:
        try:
            run_child(spec, job, code, stdin_fd, namespaces, uid)
        except BaseException as err:  # the setup failed: say so on the program's stderr
            os.write(2, f"vpo sandbox: setup failed: {err!r}\n".encode())
        os._exit(126)

    def stop(signum, frame):
        os.kill(child, signal.SIGKILL)
        os.waitpid(child, 0)  # reaped here: an orphaned zombie may never be reaped in a container
        if not namespaces:
            kill_descendants()
        os._exit(137)

    signal.signal(signal.SIGTERM, stop)
    _, status = os.waitpid(child, 0)
    if not namespaces:
        kill_descendants()
    with open(os.path.join(job, "exit.json"), "w") as fh:
        json.dump({"returncode": os.waitstatus_to_exitcode(status) if os.WIFEXITED(status) else None,
                   "signal": os.WTERMSIG(status) if os.WIFSIGNALED(status) else None}, fh)


if __name__ == "__main__":
    main()

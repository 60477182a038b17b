"""The sandbox's isolation, as far as the machine allows: new PID and network namespaces (in a user
namespace when not root), a uid of its own, and a root of its own (`seal_mounts`: the interpreter's
files read-only, a few devices, a small writable working directory). Read by vpo/sandbox/helper.py,
which runs under the base interpreter: standard library only, never imported by the project.
"""

import ctypes
import os
import stat

CLONE_NEWNS, CLONE_NEWUSER, CLONE_NEWPID, CLONE_NEWNET = 0x00020000, 0x10000000, 0x20000000, 0x40000000
MS_NOSUID, MS_NODEV, MS_NOEXEC, MS_BIND, MS_REC, MS_PRIVATE = 2, 4, 8, 4096, 16384, 1 << 18
_MNT_DETACH = 2
SYS_PIVOT_ROOT, SYS_MOUNT_SETATTR, AT_RECURSIVE, MOUNT_ATTR_RDONLY = 155, 442, 0x8000, 0x1
_SYSTEM_DIRS = ("/usr", "/bin", "/sbin", "/lib", "/lib32", "/lib64", "/libx32")  # the dynamic loader's paths
_DEVICES = ("null", "zero", "full", "random", "urandom")
_BOX = "/tmp/box"  # the program's working directory inside its own root
libc = ctypes.CDLL(None, use_errno=True)


def check(result, what):
    if result != 0:
        err = ctypes.get_errno()
        raise OSError(err, f"{what}: {os.strerror(err)}")


def mount(source, target, fstype, flags, data=None):
    check(
        libc.mount(
            source.encode(),
            target.encode(),
            fstype.encode() if fstype else None,
            flags,
            data.encode() if data else None,
        ),
        f"mount {target}",
    )


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
    if not namespaces and any(not os.stat(a).st_mode & stat.S_IXOTH for a in _ancestors(prefix)):
        return None
    candidate = 1_000_000_000 + os.getpid()
    with open("/proc/self/uid_map") as fh:
        for line in fh:
            inside, _, count = (int(x) for x in line.split())
            if inside <= candidate < inside + count and inside == 0 and count > 1:
                return candidate
    return None


def _runtime_paths(spec):
    """What the interpreter needs, as real paths: the system's library and program directories, its
    prefix, and the directory of every shared library this process (the same interpreter) has mapped."""
    paths = [d for d in _SYSTEM_DIRS if os.path.lexists(d)] + [spec["prefix"], os.path.dirname(spec["python"])]
    with open("/proc/self/maps") as fh:
        mapped = {line.split(None, 5)[5].strip() for line in fh if len(line.split(None, 5)) == 6}
    paths += [os.path.dirname(f) for f in mapped if f.startswith("/") and ".so" in os.path.basename(f)]
    return paths + ["/etc/ld.so.cache"]


def under(path, roots):
    return any(path == r or path.startswith(r.rstrip("/") + "/") for r in roots)


def seal_mounts(work, spec):
    """Inside a new mount namespace: a new root (a tmpfs on the job's `work` directory) holding the
    runtime paths bound read-only, the devices, a writable tmpfs working directory and a /proc of the
    new PID namespace, made the root of the namespace; paths of the caller's that fall inside a bound directory
    (the checkout, its working directory, the home directory) are covered by empty tmpfs. Returns the
    working directory."""
    check(libc.unshare(CLONE_NEWNS), "mount namespace")
    mount("none", "/", None, MS_REC | MS_PRIVATE)
    mount("tmpfs", work, "tmpfs", MS_NOSUID | MS_NODEV, "size=1m,mode=0755")
    exposed = []
    for path in sorted(set(_runtime_paths(spec)), key=len):
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
    for name in _DEVICES:
        if os.path.exists(f"/dev/{name}"):
            open(f"{work}/dev/{name}", "w").close()
            mount(f"/dev/{name}", f"{work}/dev/{name}", None, MS_BIND)
    for path in spec.get("hide", []):
        if under(path, exposed) and os.path.isdir(work + path):
            mount("tmpfs", work + path, "tmpfs", MS_NOSUID | MS_NODEV, "size=4k,mode=0755")
    for directory in ("/proc", _BOX, "/.old"):
        os.makedirs(work + directory, mode=0o755, exist_ok=True)
    mount("tmpfs", work + _BOX, "tmpfs", MS_NOSUID | MS_NODEV, f"size={spec['tmpfs_mb']}m,mode=0700")
    # before the old root goes: a user namespace may mount a proc only while a full one is visible
    mount("proc", work + "/proc", "proc", MS_NOSUID | MS_NODEV | MS_NOEXEC)
    check(libc.syscall(SYS_PIVOT_ROOT, work.encode(), (work + "/.old").encode()), "pivot_root")
    os.chdir("/")
    check(libc.umount2(b"/.old", _MNT_DETACH), "detach the old root")
    os.rmdir("/.old")
    attr = (ctypes.c_uint64 * 4)(MOUNT_ATTR_RDONLY, 0, 0, 0)  # struct mount_attr {set, clr, propagation, userns_fd}
    check(libc.syscall(SYS_MOUNT_SETATTR, -100, b"/", AT_RECURSIVE, ctypes.byref(attr), 32), "read-only mounts")
    attr = (ctypes.c_uint64 * 4)(0, MOUNT_ATTR_RDONLY, 0, 0)
    check(libc.syscall(SYS_MOUNT_SETATTR, -100, _BOX.encode(), 0, ctypes.byref(attr), 32), "writable working dir")
    return _BOX


def _ancestors(path):
    parts = path.strip("/").split("/")
    return ["/" + "/".join(parts[:i]) for i in range(1, len(parts) + 1)]

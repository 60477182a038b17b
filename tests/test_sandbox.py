"""Hostile programs against vpo.sandbox: every one is contained within its timeout + 1 s, and the
test process, its files, its environment, its network ports and the machine's process table are
untouched afterwards. The process checks look for this run's programs only (their private uid, a
mark unique to this test process), so other sandboxes on the machine do not count."""

from __future__ import annotations

import glob
import json
import os
import socket
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import pytest

from vpo.sandbox import STDOUT_LIMIT, Program, run_program, run_programs

TIMEOUT = 1.0  # programs that must time out
ENOUGH = 10.0  # programs that must end: room for a machine loaded by veRL's Ray start-up beside them
MARK = f"31.{os.getpid()}"  # argv of the detached grandchild (seconds to sleep), to find it in the process table


@pytest.fixture(autouse=True, scope="module")
def own_tempdir(tmp_path_factory):
    """The sandbox's job directories go to a temporary directory of this test process, so that the
    left-behind check sees this run's only (pytest's own base directory is made first, where it belongs)."""
    tmp_path_factory.getbasetemp()
    saved = tempfile.tempdir
    tempfile.tempdir = tempfile.mkdtemp(prefix="vpo-sandbox-tests-")
    yield
    os.rmdir(tempfile.tempdir)  # empty: every job directory was removed
    tempfile.tempdir = saved


def processes() -> dict[int, str]:
    """pid -> command line of every process on the machine."""
    found = {}
    for path in glob.glob("/proc/[0-9]*/cmdline"):
        try:
            with open(path, "rb") as fh:
                found[int(path.split("/")[2])] = fh.read().replace(b"\0", b" ").decode(errors="replace")
        except OSError:
            continue
    return found


def pids_of_uid(wanted: int) -> list[int]:
    """Pids running under the uid `wanted`."""
    alive = []
    for path in glob.glob("/proc/[0-9]*/status"):
        try:
            with open(path) as fh:
                uid = next(int(line.split()[1]) for line in fh if line.startswith("Uid:"))
        except (OSError, StopIteration, ValueError):
            continue
        if uid == wanted:
            alive.append(int(path.split("/")[2]))
    return alive


def run(code: str, isolation: str = "auto", timeout_s: float = ENOUGH, grace_s: float = 1.0, **kw):
    before = set(glob.glob(os.path.join(tempfile.gettempdir(), "vpo-sandbox-*")))
    result = run_program(code, timeout_s=timeout_s, isolation=isolation, **kw)
    assert result.wall_s <= timeout_s + grace_s, (result.status, result.wall_s)
    time.sleep(0.05)
    assert not [p for p, cmd in processes().items() if MARK in cmd], "a program's process outlived its run"
    if result.uid is not None:
        assert result.uid >= 1_000_000_000
        assert not pids_of_uid(result.uid), "a process under the program's uid outlived its run"
    assert set(glob.glob(os.path.join(tempfile.gettempdir(), "vpo-sandbox-*"))) <= before, "job directory left behind"
    return result


def test_plain_program_reads_stdin_and_writes_stdout():
    result = run_program("import sys\nprint(sum(map(int, sys.stdin.read().split())))", "1 2 3\n", timeout_s=ENOUGH)
    assert (result.status, result.stdout, result.returncode) == ("ok", "6\n", 0)
    assert (result.uid is not None) == ("uid" in result.isolation)
    assert run_program("print(1)", timeout_s=ENOUGH, isolation="none").uid is None


def test_exit_codes_and_exceptions_are_errors():
    assert run("raise ValueError('x')").status == "error"
    assert run("import sys; sys.exit(3)").returncode == 3
    assert run("import sys; sys.exit(0)").status == "ok"


@pytest.mark.parametrize("isolation", ["auto", "none"])
def test_infinite_loop_and_sleep_time_out(isolation):
    for code in ("while True:\n    pass", "import time\ntime.sleep(100)"):
        result = run(code, isolation, TIMEOUT)
        assert result.status == "timeout" and result.wall_s >= TIMEOUT - 0.05


def test_fork_bomb_is_contained():
    before = len(processes())
    code = "import os\nwhile True:\n    try:\n        os.fork()\n    except OSError:\n        pass"
    # run() checks that nothing under the program's uid is left. The kernel ends a PID namespace's
    # processes one scheduling slice each, and the helper waits for that (else its init would be left
    # a zombie to a container init that may not reap it): on a loaded 2-core machine up to a second more.
    result = run(code, timeout_s=TIMEOUT, grace_s=2.5)
    assert result.status in ("timeout", "killed")
    if result.uid is None:  # no private uid (not root): the machine's process count is all there is to read
        time.sleep(0.2)
        assert len(processes()) <= before + 5


@pytest.mark.parametrize("isolation", ["auto", "none"])
def test_memory_bomb_hits_the_address_space_limit(isolation):
    # a generous clock: filling 256 MB page by page must not be mistaken for a timeout on a busy machine
    assert run("x = bytearray(64 << 30)", isolation, 5.0, memory_mb=256).status == "memory"
    assert run("a = []\nwhile True:\n    a.append(' ' * 10**7)", isolation, 5.0, memory_mb=256).status == "memory"


def test_no_network_to_the_callers_ports():
    server = socket.socket()
    server.bind(("127.0.0.1", 0))
    server.listen(1)
    server.setblocking(False)
    port = server.getsockname()[1]
    code = (
        f"import socket\ns = socket.create_connection(('127.0.0.1', {port}), timeout=1)\n"
        "s.sendall(b'leak')\nprint('connected')"
    )
    try:
        result = run(code)
        assert result.status == "error" and "connected" not in result.stdout
        with pytest.raises(BlockingIOError):
            server.accept()
    finally:
        server.close()


def test_writes_outside_the_working_directory_do_not_land(tmp_path):
    targets = [
        tmp_path / "pwned",
        os.path.join(tempfile.gettempdir(), f"vpo-pwned-{os.getpid()}"),
        os.path.join(os.path.dirname(__file__), "pwned.txt"),
        "/var/tmp/vpo-pwned",
        "/dev/shm/vpo-pwned",
    ]
    code = "\n".join(
        f"try:\n    open({str(t)!r}, 'w').write('x')\nexcept OSError as e:\n    print('refused', e)" for t in targets
    )
    code += "\nopen('inside.txt', 'w').write('fine')\nprint(open('inside.txt').read())"
    result = run(code)
    assert result.status == "ok" and result.stdout.strip().endswith("fine")
    assert not [t for t in targets if os.path.exists(t)]


def test_callers_environment_is_not_visible(monkeypatch):
    monkeypatch.setenv("VPO_TEST_SECRET", "hunter2-secret")
    code = (
        "import os\nprint(dict(os.environ))\n"
        f"for pid in ('self', '1', {os.getpid()!r}, str(os.getppid())):\n"
        "    try:\n        print(open(f'/proc/{pid}/environ', 'rb').read())\n"
        "    except OSError as e:\n        print('refused', e)"
    )
    result = run(code)
    assert result.status == "ok" and "hunter2" not in result.stdout + result.stderr


def test_killing_the_parent_and_everyone_else_fails():
    me = os.getpid()
    code = (
        "import os, signal\n"
        f"for pid in [os.getppid(), {me}, {os.getppid()}] + [int(p) for p in os.listdir('/proc') if p.isdigit()]:\n"
        "    if pid != os.getpid():\n"
        "        try:\n            os.kill(pid, signal.SIGKILL)\n        except OSError:\n            pass\n"
        "print('tried')"
    )
    result = run(code)
    assert result.status == "ok" and "tried" in result.stdout
    assert os.getpid() == me  # still here


@pytest.mark.parametrize("isolation", ["auto", "none"])
def test_stdout_flood_is_capped_and_stopped(isolation):
    result = run("while True:\n    print('x' * 4096)", isolation)
    assert result.status == "killed" and len(result.stdout.encode()) <= STDOUT_LIMIT
    assert result.wall_s < 5.0  # stopped at the cap, not at the timeout


@pytest.mark.parametrize("isolation", ["auto", "none"])
def test_recursion_bomb_and_segfault_are_errors(isolation):
    deep = "import sys\nsys.setrecursionlimit(10**8)\ndef f(n):\n    return f(n + 1)\nf(0)"
    assert run(deep, isolation, TIMEOUT).status in ("error", "memory", "timeout")  # 3.11 frames live on the heap
    crashed = run("import ctypes\nctypes.string_at(0)", isolation)
    assert crashed.status == "error" and crashed.signal == 11


@pytest.mark.parametrize("isolation", ["auto", "uid", "none"])
def test_detached_grandchild_dies_with_the_run(isolation):
    code = (
        "import os, time\n"
        "if os.fork() == 0:\n"
        "    os.setsid()\n"
        "    if os.fork() == 0:\n"
        f"        os.execv('/bin/sleep', ['sleep', '{MARK}'])\n"
        "    os._exit(0)\n"
        "time.sleep(0.3)\nprint('parent done')"
    )
    assert run(code, isolation).status == "ok"


def test_detached_grandchild_dies_when_the_run_times_out():
    code = (
        "import os, time\n"
        "if os.fork() == 0:\n    os.setsid()\n"
        f"    os.execv('/bin/sleep', ['sleep', '{MARK}'])\n"
        "time.sleep(100)"
    )
    assert run(code, timeout_s=TIMEOUT).status == "timeout"
    assert run(code, "uid", TIMEOUT).status == "timeout"
    assert run(code, "none", TIMEOUT).status == "timeout"


LONG_SLEEP = (
    "import os, time\n"
    "if os.fork() == 0:\n    os.setsid()\n"
    f"    os.execv('/bin/sleep', ['sleep', '{MARK}'])\n"
    "time.sleep(3)\nprint('woke')"
)


def test_the_helpers_wait_outlasts_the_poll_count_at_which_its_back_off_once_overflowed(monkeypatch):
    """The helper polls a running program with a delay growing by half to WATCH_S; it once computed
    1.5 ** n, which overflows at n = 1751 (about 35 s of a real program), and the run came back
    `killed`. With WATCH_S made 10 us, a real child of 1.5 s takes thousands of polls: the wait returns
    its exit status, never having slept longer than its first delay."""
    from vpo.sandbox import helper

    real_sleep, delays = time.sleep, []
    monkeypatch.setattr(helper, "WATCH_S", 1e-5)
    monkeypatch.setattr(helper.time, "sleep", lambda s: (delays.append(s), real_sleep(s)))
    pid = os.posix_spawn(sys.executable, [sys.executable, "-c", "import time; time.sleep(1.5)"], dict(os.environ))
    start = time.perf_counter()
    status, killed = helper.wait_capped(pid, lambda: False)
    assert not killed and os.WIFEXITED(status) and os.WEXITSTATUS(status) == 0
    assert len(delays) > 1751 and max(delays) <= 5e-4, (len(delays), max(delays))  # the first: 0.5 ms
    assert time.perf_counter() - start < 3.0


@pytest.mark.slow
def test_a_program_of_seconds_runs_to_its_end_and_its_detached_grandchild_is_gone():
    result = run(LONG_SLEEP, "auto", 8.0)
    assert (result.status, result.stdout.strip()) == ("ok", "woke") and result.wall_s >= 3


@pytest.mark.slow
def test_a_program_of_seconds_is_killed_at_its_timeout_without_namespaces():
    result = run(LONG_SLEEP, "uid", 2.5)
    assert result.status == "timeout" and 2.4 <= result.wall_s <= 3.5, (result.status, result.wall_s)


def test_the_machine_allows_full_isolation_here():
    """This machine (root in a container) has namespaces; a regression in setting them up must show."""
    result = run("import os\nprint(os.getpid(), os.getuid())")
    if sys.platform != "linux":
        pytest.skip("namespaces are Linux only")
    assert result.isolation.startswith("namespaces"), result.stderr
    pid, uid = map(int, result.stdout.split())
    assert pid == 1 and (os.geteuid() != 0 or uid >= 1_000_000_000)


def test_batch_runs_in_order_with_workers():
    programs = [Program(f"print({i} * {i})", timeout_s=ENOUGH) for i in range(6)]
    results = run_programs(programs, workers=2)
    assert [r.stdout.strip() for r in results] == [str(i * i) for i in range(6)]


SYSTEM_PYTHON = "/usr/bin/python3"


@pytest.mark.skipif(
    os.geteuid() != 0 or not os.access(SYSTEM_PYTHON, os.X_OK),
    reason="needs root (to become an unprivileged user) and a system Python others can run",
)
def test_an_unprivileged_caller_gets_a_user_namespace(tmp_path):
    """The path of a cluster node without privileges: the caller is not root, so the helper enters
    a new user namespace; the program is PID 1, cannot write, has no network and no capabilities."""
    script = tmp_path / "check.py"
    script.write_text(
        "import os, sys\n"
        f"sys.path.insert(0, {str(Path(__file__).resolve().parents[1])!r})\n"
        "os.setgroups([]); os.setgid(65534); os.setuid(65534)\n"
        "from vpo.sandbox import run_program\n"
        "code = ('import os, socket\\n'\n"
        "        'print(os.getpid())\\n'\n"
        '        \'for act in (lambda: open("/tmp/x", "w"),\'\n'
        "        '            lambda: socket.create_connection((\"127.0.0.1\", 22), 1)):\\n'\n"
        '        \'    try:\\n        act(); print("allowed")\\n    except OSError:\\n        print("refused")\\n\'\n'
        "        'print(os.system(\"mount -o remount,rw / 2>/dev/null\") != 0)\\n')\n"
        "r = run_program(code, timeout_s=5)\n"
        "print(r.isolation, r.status, r.stdout.split())\n"
    )
    script.chmod(0o755)
    tmp_path.chmod(0o755)
    out = subprocess.run([SYSTEM_PYTHON, str(script)], capture_output=True, text=True, timeout=60)
    assert out.returncode == 0, out.stderr[-2000:]
    assert out.stdout.split("\n")[0] == "namespaces ok ['1', 'refused', 'refused', 'True']", out.stdout + out.stderr


MEMORY_HOG = (
    "import os, time\n"
    "for _ in range({n}):\n"
    "    if os.fork() == 0:\n"
    "        block = bytearray({mb} << 20)\n"
    "        time.sleep({hold})\n"
    "        os._exit(0)\n"
    "for _ in range({n}):\n    os.wait()\n"
    "print('held')"
)


@pytest.mark.parametrize("memory_cap", ["auto", "watcher"])
@pytest.mark.parametrize("isolation", ["auto", "none"])
def test_memory_is_capped_for_the_program_as_a_whole(memory_cap, isolation):
    """Eight processes of 150 MB each stay under a 200 MB address-space limit one by one; together
    they hold 1.2 GB, which the cap on the whole program stops. Three of 40 MB fit and run to the end."""
    hog = run(MEMORY_HOG.format(n=8, mb=150, hold=3), isolation, 5.0, memory_mb=200, memory_cap=memory_cap)
    assert hog.status == "memory" and "held" not in hog.stdout, (hog.status, hog.stderr[-500:])
    fits = run(MEMORY_HOG.format(n=3, mb=40, hold=0.3), isolation, 5.0, memory_mb=200, memory_cap=memory_cap)
    assert fits.status == "ok" and "held" in fits.stdout, (fits.status, fits.stderr[-500:])
    if memory_cap == "watcher":
        assert hog.memory_cap == "watcher"
    elif os.geteuid() == 0 and os.path.isdir("/sys/fs/cgroup"):
        assert hog.memory_cap.startswith("cgroup"), hog.memory_cap  # root here: a memory cgroup is allowed


REPO = Path(__file__).resolve().parents[1]


def test_a_program_sees_the_interpreter_and_nothing_of_the_checkout_results_or_home(tmp_path):
    home_secret = Path.home() / f".vpo-sandbox-test-{os.getpid()}"
    # the caller's home by its path (`~` in the program is the program's own); the home directory itself may
    # be there when the interpreter lives under it, holding the interpreter's files only
    secrets = [
        REPO / "config.yaml",
        REPO / "tests" / "fixtures" / "lcb" / "test.jsonl",
        tmp_path / "results.parquet",
        home_secret,
    ]
    secrets[2].write_text("hidden tests")
    home_secret.write_text("a token")
    try:
        assert all(path.exists() for path in secrets)  # each probe is a real file or directory
        code = (
            "import os, json\n"
            f"for path in {[str(p) for p in secrets]!r}:\n"
            "    try:\n        print('read', path, open(path).read(20) if os.path.isfile(path) else os.listdir(path))\n"
            "    except OSError as e:\n        print('refused', path, e.errno)\n"
            "print(json.dumps(sorted(os.listdir('/'))))"
        )
        result = run(code)
    finally:
        home_secret.unlink()
    assert result.status == "ok", result.stderr
    assert result.stdout.count("refused") == len(secrets), result.stdout
    assert "read" not in result.stdout.split(), result.stdout  # the json module imported: the runtime is there
    if result.isolation.startswith("namespaces"):
        top = json.loads(result.stdout.splitlines()[-1])
        assert set(top) <= {
            "bin",
            "dev",
            "etc",
            "lib",
            "lib32",
            "lib64",
            "libx32",
            "proc",
            "sbin",
            "tmp",
            "usr",
            *Path(sys.base_prefix).resolve().parts[1:2],
        }, top


def test_the_callers_directory_is_hidden_even_inside_the_interpreters_files(monkeypatch):
    """A checkout or working directory under a directory the program needs (a cluster's /usr/local,
    a conda prefix) is covered: the program finds it empty."""
    inside = Path(sys.base_prefix).resolve() / "lib"
    monkeypatch.chdir(inside)
    result = run(f"import os\nprint(len(os.listdir({str(inside)!r})))")
    assert result.status == "ok", result.stderr
    if result.isolation.startswith("namespaces"):
        assert result.stdout.split() == ["0"]

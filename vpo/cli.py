"""The `vpo` command: one subcommand per pipeline stage.

Each subcommand lives in the module that does the work; that module defines
`add_arguments(parser)` and `run(args) -> int`. The module is imported only when its subcommand
runs, so `vpo --help` and the cheap stages never import torch, transformers or veRL.
"""

from __future__ import annotations

import argparse
import importlib
import sys

# name -> (module, one-line help)
COMMANDS: dict[str, tuple[str, str]] = {
    "preprocess": ("vpo.preprocess", "write a task's train/test parquet in veRL's row schema"),
    "base-model": ("vpo.local.base", "build the tiny CPU base model for a task (warm start)"),
    "train": ("vpo.train", "train one method/task/seed cell (local CPU or veRL backend)"),
    "merge": ("vpo.merge", "turn a cell's checkpoints into a Hugging Face model directory"),
    "eval": ("vpo.evaluate", "sample the candidate pool of a model on a task's test split and score it"),
    "aggregate": ("vpo.report.aggregate", "collect every cell's eval results into one table with seed statistics"),
    "claims": ("vpo.report.claims", "check the claims README makes on a run's results, printing the numbers it quotes"),
    "intervals": (
        "vpo.report.intervals",
        "bootstrap intervals over seeds x problems (IQM, mean, P(improvement), profiles) and their tables",
    ),
    "table": ("vpo.report.tables", "write a paper table (csv, md, tex) from aggregated results"),
    "plot": ("vpo.report.plot", "draw a paper figure (figures/<stem>.pdf) from aggregated results"),
    "evolve": ("vpo.search.evolve", "evolutionary search (OpenEvolve): a cell's model on the hardest test problems"),
    "mechanism": ("vpo.mechanism", "train the toy vector-reward bandit with each estimator (mechanism figure data)"),
    "diagnose": ("vpo.diagnose", "what a finished cell's model writes: parse rate per slot, truncation, answer spread"),
    "provenance": (
        "vpo.provenance",
        "what made each result under a folder (commit, packages, threads, machine) and what differs from here",
    ),
    "install-profile": (
        "vpo.profiles",
        "copy profiles/slurm or profiles/lsf into ~/.config/snakemake (never overwrites)",
    ),
}


def build_parser(command: str | None) -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="vpo", description=__doc__.splitlines()[0])
    sub = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")
    for name, (module_name, help_text) in COMMANDS.items():
        sub_parser = sub.add_parser(name, help=help_text, description=help_text)
        if name == command:
            importlib.import_module(module_name).add_arguments(sub_parser)
    return parser


def entry() -> int:
    """The `vpo` command line: an error in a stage ends in one line on stderr (what is wrong, and
    usually the file and the command that rebuilds it) and exit status 1; VPO_DEBUG=1 shows the
    traceback instead."""
    import os

    if not sys.stderr.isatty():  # a job's log file: no carriage-return progress bars (vpo.progress writes lines)
        os.environ.setdefault("HF_HUB_DISABLE_PROGRESS_BARS", "1")
        os.environ.setdefault("TQDM_DISABLE", "1")
    try:
        return main()
    except (KeyboardInterrupt, SystemExit):
        raise
    except Exception as err:
        if os.environ.get("VPO_DEBUG"):
            raise
        command = next((a for a in sys.argv[1:] if not a.startswith("-")), "")
        message = " ".join(str(err).split()) or type(err).__name__
        print(f"vpo {command}: error: {message} (VPO_DEBUG=1 shows the traceback)", file=sys.stderr)
        return 1


def main(argv: list[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    command = next((a for a in argv if not a.startswith("-")), None)
    command = command if command in COMMANDS else None
    args = build_parser(command).parse_args(argv)
    module = importlib.import_module(COMMANDS[args.command][0])
    return int(module.run(args) or 0)


if __name__ == "__main__":
    sys.exit(entry())

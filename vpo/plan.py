"""Checks on the Snakemake plan, run by the Snakefile before any job starts: where the rules write,
and which finished tables and figures were made from a file that is gone."""

from __future__ import annotations

import os
from typing import Callable, Iterable, Sequence


def paths_outside(paths, preset: str) -> list[str]:
    """The paths (a rule's outputs and logs, wildcards unfilled) that leave results/<preset>/,
    figures/ and logs/<preset>/ once normalised: a rule writing there could overwrite the project."""
    roots = (f"results/{preset}/", "figures/", f"logs/{preset}/")
    return [str(p) for p in paths if not (os.path.normpath(str(p)) + "/").startswith(roots)
            or os.path.isabs(str(p))]


def stale_outputs(rules_io: Iterable[tuple[Sequence[str], Sequence[str]]],
                  exists: Callable[[str], bool] = os.path.exists) -> list[tuple[str, list[str]]]:
    """(output, its inputs that are gone) for every output on disk one of whose inputs is not.

    rules_io: (outputs, inputs) of each rule whose paths hold no wildcards (aggregates, tables,
    figures). Snakemake keeps such an output: it remakes a missing intermediate file only for a job
    that runs anyway, so a table would go on showing numbers whose source is gone (an evaluation whose
    forced rerun failed, a file deleted by hand).
    """
    stale = []
    for outputs, inputs in rules_io:
        gone = [str(f) for f in inputs if not exists(str(f))]
        if gone:
            stale += [(str(out), gone) for out in outputs if exists(str(out))]
    return stale

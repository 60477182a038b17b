"""`vpo plot <stem>`: draw one paper figure from aggregated results; one subcommand per entry of
`vpo.report.figures.FIGURES`, its flags the figure's tables and options.

    vpo plot pass_at_k --summary results/cpu/aggregate/summary.csv --per-seed results/cpu/aggregate/per_seed.csv \\
        --methods grpo,vpo --tasks maze --out figures/pass_at_k.pdf figures/pass_at_k.png
    vpo plot mechanism_bandit --bandit results/cpu/mechanism/bandit.csv --out mechanism_bandit.pdf

The first --out file is drawn, the others are the same figure in their formats (the report's PNG).
"""

from __future__ import annotations

import argparse
from pathlib import Path

from vpo.atomic import atomic_file
from vpo.data import read_csv_table
from vpo.report.labels import use_variants

_PNG_DPI = 150  # the HTML report's renderings (browsers show PNG where a PDF frame may stay blank)
_TABLE_HELP = {
    "summary": "aggregate/summary.csv",
    "per_seed": "aggregate/per_seed.csv (each seed drawn when < 3)",
    "training": "aggregate/training_curves.csv (pool_diversity, advantage_draw_std per step)",
    "bandit": "mechanism/bandit.csv (`vpo mechanism bandit`)",
    "sweeps": "mechanism/advantage.csv (`vpo mechanism advantage`)",
    "curves": "aggregate/evolve_{task}.csv",
    "intervals": "aggregate/intervals.csv (`vpo intervals`)",
    "improvement": "aggregate/improvement.csv",
    "profiles": "aggregate/profiles.csv",
    "per_problem": "aggregate/per_problem.csv (`vpo aggregate problems`)",
}
_OPTION_HELP = {
    "methods": "comma-separated methods (legend order)",
    "tasks": "comma-separated tasks (panel order)",
    "task": "the task",
    "scale": "a line naming the preset and scale, shown under the title",
    "ablation": "the ablation (config.yaml `ablations`): components, alpha, sampler or m",
    "values": "JSON {method: the value its ablation varies (alpha, m)}: a panel against that value",
    "variants": "JSON {variant: {method, label}} of config.yaml `variants` (labels and looks)",
}
_OPTIONAL = ("scale", "values", "variants")  # options a figure draws without
_LISTS = ("methods", "tasks")  # options given as comma-separated lists


def add_arguments(parser: argparse.ArgumentParser) -> None:
    from vpo.report.figures import FIGURES

    sub = parser.add_subparsers(dest="figure", required=True, metavar="STEM")
    for stem, figure in FIGURES.items():
        p = sub.add_parser(stem, help=(figure.draw.__doc__ or stem).split("\n")[0].replace("%", "%%"))
        for name in figure.tables:
            p.add_argument(
                f"--{name.replace('_', '-')}", dest=name, required=name not in figure.optional, help=_TABLE_HELP[name]
            )
        for name in figure.options:
            p.add_argument(f"--{name}", required=name not in _OPTIONAL, default=None, help=_OPTION_HELP[name])
        p.add_argument(
            "--out", required=True, nargs="+", help="figure files (.pdf, .png, .svg): one figure, each format"
        )


def draw(args: argparse.Namespace, out: str):
    """The figure `args` asks for, saved to `out`; returns it."""
    from vpo.report.figures import FIGURES

    figure = FIGURES[args.figure]
    kwargs = {name: read_csv_table(getattr(args, name)) for name in figure.tables if getattr(args, name)}
    for name in figure.options:
        value = getattr(args, name)
        if name == "variants":
            use_variants(value)
        else:
            kwargs[name] = value.split(",") if name in _LISTS else value
    return figure.draw(out=out, **kwargs)


def run(args: argparse.Namespace) -> int:
    import matplotlib.pyplot as plt

    first, *others = args.out
    fig = draw(args, first)
    for path in others:  # the same figure in other formats (the workflow's PNG for the report)
        with atomic_file(path) as tmp:
            fig.savefig(tmp, format=Path(path).suffix.lstrip("."), dpi=_PNG_DPI)
    plt.close(fig)
    return 0

"""Figures and tables drawn from aggregated results: panels, lines, bands, labels, formatting."""

import json
import math
import re

import pytest
from matplotlib.collections import PolyCollection

from vpo.report.aggregate import aggregate_evals, aggregate_training
from vpo.report.figures import curves_by_k, diversity_over_training
from vpo.report.table_render import format_cell, render_curve, render_main
from vpo.report.tables import curve_table, main_table

METHODS = ["grpo", "multi_rlvr", "vpo"]
TASKS = ["maze", "tool"]


def caption(fig) -> str:
    """The text under a figure's legend (vpo.report.kit.finish: the scale and seeds), as one line."""
    return " ".join(" ".join(t.get_text() for t in fig.texts).split())


def eval_json(path, task, method, seed, best):
    path.write_text(
        json.dumps(
            {
                "task": task,
                "method": method,
                "train_seed": seed,
                "eval_seed": 0,
                "budget": len(best),
                "n_problems": 2,
                "pass_at_k": [min(1.0, b) for b in best],
                "best_at_k": best,
                "best_at_k_perm": best,
                "expected_best_of_m": best[-1],
                "diversity": 0.1 * (seed + 1),
                "parse_failure_rate": 0.0,
                "objective_means": {},
            }
        )
    )
    return path


def summary_for(tmp_path, seeds):
    paths = []
    for t, task in enumerate(TASKS):
        for m, method in enumerate(METHODS):
            for seed in seeds:
                base = 0.1 * (m + 1) + 0.05 * seed + 0.01 * t
                best = [round(base + 0.02 * k, 4) for k in range(6)]
                paths.append(eval_json(tmp_path / f"{task}_{method}_{seed}.json", task, method, seed, best))
    return aggregate_evals(paths)[1]


def test_curve_figure_has_a_panel_per_task_and_a_band_per_method(tmp_path):
    out = tmp_path / "figures" / "best_at_k.pdf"
    fig = curves_by_k(summary_for(tmp_path, [0, 1, 2]), "best_at_k", METHODS, TASKS, out)
    assert out.read_bytes()[:4] == b"%PDF"
    axes = [ax for ax in fig.axes if ax.get_visible()]
    assert [ax.get_title() for ax in axes] == ["Maze", "ToolRL"]
    for ax in axes:
        assert ax.get_xlabel() == "candidates k (log2 scale)" and ax.get_ylabel().startswith("best@k")
        assert ax.get_xscale() == "log" and list(ax.get_xticks()) == [1, 2, 4, 6]
        assert [line.get_label() for line in ax.get_lines()] == ["GRPO", "Multi-RLVR", "VPO"]
        assert sum(isinstance(c, PolyCollection) for c in ax.collections) == len(METHODS)
        assert list(ax.get_lines()[0].get_xdata()) == [1, 2, 3, 4, 5, 6]
    # the VPO line of the maze panel is the seed mean: base 0.3 + 0.05 * mean seed (1) + 0.02 (k - 1)
    assert list(axes[0].get_lines()[2].get_ydata()) == pytest.approx([0.35 + 0.02 * k for k in range(6)])
    assert [t.get_text() for t in fig.legends[0].get_texts()] == ["GRPO", "Multi-RLVR", "VPO"]


def test_one_seed_draws_no_band(tmp_path):
    fig = curves_by_k(summary_for(tmp_path, [0]), "pass_at_k", METHODS, TASKS, tmp_path / "p.pdf")
    assert not any(isinstance(c, PolyCollection) for ax in fig.axes for c in ax.collections)
    assert "no error band" in caption(fig)


def test_missing_method_is_an_error_not_a_gap(tmp_path):
    with pytest.raises(ValueError, match="method=gdpo"):
        curves_by_k(summary_for(tmp_path, [0]), "best_at_k", METHODS + ["gdpo"], TASKS, tmp_path / "x.pdf")
    assert not (tmp_path / "x.pdf").exists()


def test_diversity_figure_from_both_log_formats(tmp_path):
    markers = []
    for seed, fmt in [(0, "local"), (1, "verl")]:
        for method in METHODS:
            cell = tmp_path / "maze" / method / f"seed{seed}"
            cell.mkdir(parents=True)
            (cell / "train.json").write_text(json.dumps({"task": "maze", "method": method, "seed": seed}))
            lines = []
            for step in range(1, 5):
                value = 0.1 * step * (METHODS.index(method) + 1) + 0.01 * seed
                record = (
                    {"step": step, "pool_diversity": value}
                    if fmt == "local"
                    else {"step": step, "data": {"vpo/pool_diversity": value}}
                )
                lines.append(json.dumps(record) + "\n")
            (cell / "metrics.jsonl").write_text("".join(lines))
            markers.append(cell / "train.json")
    out = tmp_path / "diversity_over_training.pdf"
    fig = diversity_over_training(training=aggregate_training(markers), methods=METHODS, tasks=["maze"], out=out)
    assert out.exists()
    ax = fig.axes[0]
    assert ax.get_xlabel() == "training step" and ax.get_ylabel() == "pool diversity (pairwise L1)"
    # two seeds are too few for a band: per method the per-step dots, the smoothed mean line, then
    # one thin smoothed line per seed. A centred 5-step window over steps 1..4 averages steps
    # (1-3), (1-4), (1-4), (2-4): a linear curve s becomes 2, 2.5, 2.5, 3.
    lines = ax.get_lines()
    assert len(lines) == 3 * 4 and sum(isinstance(c, PolyCollection) for c in ax.collections) == 0
    vpo_dots, vpo_mean, vpo_seed0, vpo_seed1 = lines[8:12]
    assert list(vpo_dots.get_ydata()) == pytest.approx([0.3 * s + 0.005 for s in range(1, 5)])
    assert list(vpo_mean.get_xdata()) == [1, 2, 3, 4]
    smoothed = [2, 2.5, 2.5, 3]
    assert list(vpo_mean.get_ydata()) == pytest.approx([0.3 * s + 0.005 for s in smoothed])
    assert list(vpo_seed0.get_ydata()) == pytest.approx([0.3 * s for s in smoothed])
    assert list(vpo_seed1.get_ydata()) == pytest.approx([0.3 * s + 0.01 for s in smoothed])
    assert "thin: each seed" in caption(fig) and "moving average over 5 steps" in " ".join(caption(fig).split())
    fig = diversity_over_training(
        training=aggregate_training(markers), methods=METHODS, tasks=["maze"], out=out, scale="cpu preset: tiny model"
    )
    assert "cpu preset: tiny model" in caption(fig) and "\n" not in fig._suptitle.get_text()  # a one-line title


def test_the_strategies_figure_reads_the_strategies_column_and_a_run_without_it_is_named(tmp_path):
    from vpo.report.figures import strategies_over_training

    markers = []
    for seed in (0, 1):
        for method in ("grpo", "poly_epo"):
            cell = tmp_path / "maze" / method / f"seed{seed}"
            cell.mkdir(parents=True)
            (cell / "train.json").write_text(json.dumps({"task": "maze", "method": method, "seed": seed}))
            rows = [
                {"step": step, "pool_diversity": 0.5, "strategies_per_group": (2 if method == "grpo" else 4) + seed}
                for step in range(1, 5)
            ]
            (cell / "metrics.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
            markers.append(cell / "train.json")
    training = aggregate_training(markers)
    out = tmp_path / "strategies_over_training.pdf"
    fig = strategies_over_training(training=training, methods=["grpo", "poly_epo"], tasks=["maze"], out=out)
    ax = fig.axes[0]
    assert out.exists() and ax.get_ylabel() == "distinct strategies per group"
    assert list(ax.get_lines()[0].get_ydata()) == pytest.approx([2.5] * 4)  # GRPO's per-step mean of 2 and 3
    assert list(ax.get_lines()[4].get_ydata()) == pytest.approx([4.5] * 4)
    assert "Distinct strategies per group" in fig._suptitle.get_text()
    training["strategies_per_group"] = float("nan")  # a veRL run logs none
    with pytest.raises(ValueError, match="no training curve of strategies_per_group for task=maze method=grpo"):
        strategies_over_training(training=training, methods=["grpo"], tasks=["maze"], out=out)


def test_main_table_formats_mean_and_stderr_and_bolds_the_best(tmp_path):
    summary = summary_for(tmp_path, [0, 1, 2])
    table = main_table(summary, METHODS, TASKS, best_at=6)
    vpo = table[table.method == "vpo"].iloc[0]
    # VPO on maze at k=6: seeds 0.40, 0.45, 0.50 -> mean 0.45, stderr 0.05 / sqrt(3) = 0.0288675
    assert vpo["maze_best_at_6_mean"] == pytest.approx(0.45)
    assert vpo["maze_best_at_6_stderr"] == pytest.approx(0.0288675, abs=1e-6)
    md = squash(render_main(table, TASKS, 6, latex=False))
    # columns grouped by task: best@K then diversity; the header names both
    assert "| Method | Maze best@6 | Maze diversity | ToolRL best@6 | ToolRL diversity |" in md
    assert "| VPO | **0.450 ± 0.029** | 0.200 ± 0.058 |" in md
    tex = render_main(table, TASKS, 6, latex=True)
    assert r"$\mathbf{0.450 \pm 0.029}$" in tex and r"\toprule" in tex
    # one spanning header per task over its two columns; the caption's symbols are LaTeX
    assert r"\multicolumn{2}{c}{Maze} & \multicolumn{2}{c}{ToolRL}" in tex and r"$\pm$ standard error" in tex
    with pytest.raises(ValueError, match="k=30"):
        main_table(summary, METHODS, TASKS, best_at=30)


def test_lead_marks_bold_only_a_clear_leader():
    from vpo.report.table_render import lead_marks

    assert lead_marks([0.5, 0.3, 0.2], [0.05, 0.05, 0.05]) == ([True, False, False], [False] * 3)
    assert lead_marks([0.5, 0.42, 0.2], [0.05, 0.05, 0.05]) == ([False] * 3, [True, True, False])
    assert lead_marks([0.5, 0.3], [math.nan, math.nan]) == ([False, False], [False, False])  # one seed


def test_main_table_marks_ties_and_one_seed_marks_nothing(tmp_path):
    table = main_table(summary_for(tmp_path, [0, 1, 2]), METHODS, TASKS, best_at=6)
    table.loc[table.method == "multi_rlvr", "maze_best_at_6_mean"] = 0.43  # within VPO's 0.450 ± 0.029
    md = squash(render_main(table, TASKS, 6, latex=False))
    assert "| VPO | 0.450 ± 0.029† |" in md and "| Multi-RLVR | 0.430 ± 0.029† |" in md and "**0.45" not in md
    (tmp_path / "one").mkdir()
    one = render_main(main_table(summary_for(tmp_path / "one", [0]), METHODS, TASKS, best_at=6), TASKS, 6, latex=False)
    assert "**" not in one and "†" not in one.split("\n\n", 1)[1] and "no leader marked" in one


def test_curve_table_landmarks_end_at_the_budget(tmp_path):
    summary = summary_for(tmp_path, [0, 1])
    table = curve_table(summary, METHODS, "maze", "best_at_k")
    assert len(table) == len(METHODS) * 6 and table.method.tolist()[:6] == ["grpo"] * 6
    md = render_curve(table, "maze", "best_at_k", latex=False)
    assert squash(md.splitlines()[2]) == "| Method | k=1 | k=2 | k=3 | k=5 | k=6 |"


def squash(text: str) -> str:
    """Markdown with the column padding removed (pandas pads cells to the column width)."""
    return re.sub(r" {2,}", " ", text)


def test_format_cell():
    assert format_cell(0.59312, 0.01234) == "0.593 ± 0.012"
    assert format_cell(0.5, math.nan) == "0.500"
    assert format_cell(0.5, 0.1, latex=True) == r"$0.500 \pm 0.100$"


def test_tables_render_as_html_for_the_report(tmp_path):
    import html.parser

    table = main_table(summary_for(tmp_path, [0, 1, 2]), METHODS, TASKS, best_at=6)
    page = render_main(table, TASKS, 6, latex=False, html=True)
    cells = []

    class Cells(html.parser.HTMLParser):
        def handle_data(self, data):
            if data.strip():
                cells.append(data.strip())

    Cells().feed(page.split("</style>", 1)[1])
    # caption, the task groups, their columns, then each method's row; the leader in bold
    assert cells[1:3] == ["Maze", "ToolRL"] and cells[3:7] == ["best@6", "diversity", "best@6", "diversity"]
    assert cells[cells.index("VPO") : cells.index("VPO") + 3] == ["VPO", "0.450 ± 0.029", "0.200 ± 0.058"]
    assert "<b>0.450 ± 0.029</b>" in page and "**" not in page
    assert render_main(table, TASKS, 6, latex=False, html=True) == page  # no random ids: reruns give the same file


def test_paper_grid_figures_fit_the_text_width_and_tell_methods_apart(tmp_path):
    """Every method of the table (the paper's nine, Poly-EPO and GRPO+DIV) x five tasks, from a synthetic summary."""
    import matplotlib.text

    from vpo.methods import METHODS as ALL
    from vpo.report.kit import FONT_PT, MIN_FONT_PT, TEXT_WIDTH_IN, method_style

    methods, tasks = list(ALL), ["maze", "musique", "eureqa", "tool", "lcb"]
    paths = []
    for t, task in enumerate(tasks):
        for m, method in enumerate(methods):
            for seed in range(3):
                best = [round(0.05 * m + 0.02 * seed + 0.01 * t + 0.03 * math.log(k), 4) for k in range(1, 31)]
                paths.append(eval_json(tmp_path / f"{task}_{method}_{seed}.json", task, method, seed, best))
    summary = aggregate_evals(paths)[1]
    fig = curves_by_k(summary, "best_at_k", methods, tasks, tmp_path / "appendix_best_at_k.png")
    width = fig.get_size_inches()[0]
    smallest = min(t.get_fontsize() for t in fig.findobj(matplotlib.text.Text) if t.get_text().strip())
    assert smallest * min(1.0, TEXT_WIDTH_IN / width) >= MIN_FONT_PT  # scaled to the text width
    assert smallest >= FONT_PT - 1
    styles = [method_style(m) for m in methods]
    assert len({s["color"] for s in styles}) == len(methods)  # a colour each
    assert len({(s["ls"], s["marker"]) for s in styles}) == len(methods)  # and told apart without colour
    lines = [ax.get_lines() for ax in fig.axes if ax.get_visible()]
    assert [line.get_marker() for line in lines[0]] == [s["marker"] for s in styles]


def test_every_figure_has_one_name_for_file_command_rule_and_function(tmp_path):
    """FIGURES, `vpo plot <stem>` and the workflow's rules agree (the rules as Snakemake parses them: most
    are made by a loop in rules/figures.smk): rule figure_<stem> writes <stem>.pdf (evolve: evolve_{task}.pdf,
    ablation: ablation_{ablation}.pdf) through `vpo plot <stem>`, whose function is named <stem>, with each
    table the command reads among its inputs; no figure rule is left out."""
    from pathlib import Path

    from snakemake.api import SnakemakeApi
    from snakemake.settings.enums import Quietness
    from snakemake.settings.types import ConfigSettings, OutputSettings, ResourceSettings, StorageSettings

    from vpo.cli import build_parser
    from vpo.report.figures import FIGURES

    repo = Path(__file__).resolve().parents[1]
    with SnakemakeApi(OutputSettings(dryrun=True, quiet={Quietness.ALL})) as api:
        workflow = api.workflow(
            snakefile=repo / "workflow" / "Snakefile",
            workdir=tmp_path,
            resource_settings=ResourceSettings(cores=1),
            config_settings=ConfigSettings(configfiles=[repo / "config.yaml"], config={"preset": "paper"}),
            storage_settings=StorageSettings(),
        )
        rules = {r.name: r for r in workflow._workflow.rules if r.name.startswith("figure_")}
        assert sorted(rules) == sorted(f"figure_{stem}" for stem in FIGURES)
        for stem, figure in FIGURES.items():
            assert figure.draw.__name__ == stem
            rule = rules[f"figure_{stem}"]
            command = " ".join(str(v) for v in rule.params) if not rule.shellcmd.startswith("python") else rule.shellcmd
            assert f"vpo.cli plot {stem} " in command, (stem, command)
            pdf = {"evolve": "evolve_{task}", "ablation": "ablation_{ablation}"}.get(stem, stem)
            stem_of = pdf.split("{")[0]  # a wildcard's constraint is inlined in the parsed name
            assert any(f"/{stem_of}" in str(o) and str(o).endswith(".pdf") for o in rule.output), (stem, rule.output)
            for name in figure.tables:  # each table the command needs is an input of the rule
                assert name in dict(rule.input._names), (stem, name)
            parsed = build_parser("plot").parse_args(
                [
                    "plot",
                    stem,
                    *[a for name in figure.tables for a in (f"--{name.replace('_', '-')}", "x.csv")],
                    *[a for name in figure.options for a in (f"--{name}", "a")],
                    "--out",
                    f"{stem}.pdf",
                ]
            )
            assert parsed.figure == stem


def test_labels_and_looks_come_from_the_method_table_and_the_task_plugins():
    from vpo.methods import METHODS, UNSTYLED
    from vpo.report.kit import method_style
    from vpo.report.labels import method_label, task_label
    from vpo.task import TASKS

    assert method_label("vpo") == METHODS["vpo"].label == "VPO" and method_label("new_method") == "new_method"
    assert task_label("lcb") == TASKS["lcb"].label == "LiveCodeBench" and task_label("chess") == "chess"
    assert method_style("grpo") == dict(zip(("color", "ls", "marker"), METHODS["grpo"].style))
    assert method_style("new_method") == dict(zip(("color", "ls", "marker"), UNSTYLED))
    assert all(method.label for method in METHODS.values()) and all(task.label for task in TASKS.values())

"""The ablations (config.yaml `ablations`): which cells they add to the grid, the errors that stop a
bad list, their plan (base models per m, figures, table), the table's numbers and the figure's panels."""

from __future__ import annotations

import json
import math
from pathlib import Path

import pandas as pd
import pytest
import yaml

from vpo.config import ConfigError, resolve_config
from vpo.grid import ablation_methods, grid_cells

REPO = Path(__file__).resolve().parents[1]


@pytest.fixture()
def raw():
    return yaml.safe_load((REPO / "config.yaml").read_text())


def test_the_paper_grid_adds_the_ablation_variants_on_maze_only(raw):
    cfg = resolve_config(raw, "paper")
    cells = grid_cells(cfg)
    assert len(cells) == 9 * 5 + 9  # the grid, then nine variants on maze
    extra = [c for c in cells if c[1] not in cfg["methods"]]
    assert {task for task, _ in extra} == {"maze"}
    assert {m for _, m in extra} == {
        "vpo_alpha_0.1",
        "vpo_alpha_0.3",
        "vpo_alpha_3",
        "vpo_alpha_10",
        "vpo_sobol",
        "vpo_m2",
        "vpo_m5",
        "multi_rlvr_m2",
        "multi_rlvr_m5",
    }
    assert ablation_methods(cfg, "sampler") == ["vpo", "vpo_sobol"]
    assert grid_cells(resolve_config(raw, "cpu")) == [("maze", m) for m in ("grpo", "multi_rlvr", "max_at_k", "vpo")]


@pytest.mark.parametrize(
    "ablations, words",
    [
        ({"tasks": ["musique"]}, "ablations.tasks: 'musique' is not in tasks"),
        ({"sampler": ["vpo"]}, "ablations.sampler: ['vpo'] compares nothing"),
        ({"alpha": ["grpo", "vpo"]}, "ablations.alpha: 'grpo' takes no alpha"),
        ({"sampler": ["vpo", "random_weight"]}, "ablations.sampler: 'random_weight' takes no sampler"),
        ({"m": ["vpo_single", "vpo"]}, "ablations.m: 'vpo_single' writes one answer per rollout"),
        ({"components": ["grpo", "vpo_typo"]}, "ablations.components: 'vpo_typo' is neither a method nor a variant"),
    ],
)
def test_a_bad_ablation_stops_the_config_naming_it(raw, ablations, words):
    with pytest.raises(ConfigError, match=words.replace("[", r"\[").replace("]", r"\]")):
        resolve_config(raw, "cpu", overrides={"ablations": {"tasks": ["maze"], **ablations}})


def test_an_ablation_variants_m_must_fill_the_budget(raw):
    raw["variants"]["vpo_m4"] = {"method": "vpo", "m": 4}
    with pytest.raises(ConfigError, match="budget: 30 candidates are not whole groups of m = 4"):
        resolve_config(raw, "cpu", overrides={"ablations": {"tasks": ["maze"], "m": ["vpo", "vpo_m4"]}})


def test_the_ablation_preset_plans_every_ablation_with_a_base_model_per_m(tmp_path):
    from test_workflow_dryrun import dryrun, kinds

    files = dryrun(tmp_path, config={"preset": "ablation"})
    counts = kinds(files)
    # components 5 + alpha 2 + sampler 1 + m 2 methods = 10, x 3 seeds
    assert counts["train.json"] == 30 and counts["json"] == 30
    assert sorted(f for f in files if f.startswith("results/ablation/base/")) == [
        f"results/ablation/base/maze/{form}/base.json" for form in ("multi", "multi_m2", "multi_m5", "single")
    ]
    for name in ("components", "alpha", "sampler", "m"):
        assert f"figures/ablation/ablation_{name}.pdf" in files and f"figures/ablation_{name}.png" in files
    assert {f"results/ablation/tables/ablations.{ext}" for ext in ("csv", "md", "tex", "html")} <= set(files)
    assert "results/ablation/aggregate/ablations/training_curves.csv" in files
    # the cpu default plans none of it
    assert not any("ablation" in f for f in dryrun(tmp_path / "cpu"))


# ---- the table and the figure, from aggregates written here ---------------------------------------
SEEDS = (0, 1, 2)
METHODS = ("vpo", "vpo_alpha_3", "grpo")


def value(method, seed, k):
    """A made-up best@k: rises with k, differs per method and seed."""
    return round(0.1 * METHODS.index(method) + 0.01 * seed + 0.02 * k, 6)


@pytest.fixture()
def aggregates(tmp_path):
    from vpo.data import write_csv
    from vpo.report.aggregate import summarise_seeds

    rows = [
        dict(
            task="maze",
            method=m,
            train_seed=s,
            metric=metric,
            k=k,
            value=value(m, s, k) / (2 if metric == "pass_at_k" else 1),
            n_eval_seeds=1,
        )
        for m in METHODS
        for s in SEEDS
        for metric in ("best_at_k", "pass_at_k")
        for k in range(1, 7)
    ]
    rows += [
        dict(task="maze", method=m, train_seed=s, metric="diversity", k=math.nan, value=0.5 + 0.1 * s, n_eval_seeds=1)
        for m in METHODS
        for s in SEEDS
    ]
    per_seed = pd.DataFrame(rows)
    training = pd.DataFrame(
        [
            dict(
                task="maze",
                method=m,
                seed=s,
                step=step,
                pool_diversity=0.3 + 0.01 * step,
                advantage_draw_std=(0.05 if m != "grpo" else math.nan),
            )
            for m in METHODS
            for s in SEEDS
            for step in range(1, 11)
        ]
    )
    write_csv(per_seed, tmp_path / "per_seed.csv")
    write_csv(summarise_seeds(per_seed), tmp_path / "summary.csv")
    training.to_csv(tmp_path / "training_curves.csv", index=False)
    return tmp_path


VARIANTS = json.dumps({"vpo_alpha_3": {"method": "vpo", "label": "VPO (α = 3)"}})


def test_the_ablation_table_gives_mean_and_standard_error_per_method(aggregates, tmp_path):
    from vpo.cli import main

    out = [str(tmp_path / f"ablations.{ext}") for ext in ("csv", "md", "tex")]
    assert (
        main(
            [
                "table",
                "ablations",
                "--summary",
                str(aggregates / "summary.csv"),
                "--ablation",
                "alpha=vpo,vpo_alpha_3",
                "--ablation",
                "components=grpo,vpo",
                "--tasks",
                "maze",
                "--ks",
                "1,6",
                "--variants",
                VARIANTS,
                "--out",
                *out,
            ]
        )
        == 0
    )
    table = pd.read_csv(out[0])
    assert table[["ablation", "method"]].values.tolist() == [
        ["alpha", "vpo"],
        ["alpha", "vpo_alpha_3"],
        ["components", "grpo"],
        ["components", "vpo"],
    ]
    alpha3 = table.iloc[1]
    seeds = [value("vpo_alpha_3", s, 6) for s in SEEDS]  # 0.22, 0.23, 0.24: mean 0.23, sd 0.01, se 0.01 / sqrt 3
    assert alpha3.best_at_6_mean == pytest.approx(sum(seeds) / 3)
    assert alpha3.best_at_6_stderr == pytest.approx(0.01 / math.sqrt(3))
    assert alpha3.diversity_mean == pytest.approx(0.6) and alpha3.n_seeds == 3
    markdown, latex = Path(out[1]).read_text(), Path(out[2]).read_text()
    assert "alpha: VPO (α = 3)" in markdown and "0.230 ± 0.006" in markdown
    assert r"alpha: VPO ($\alpha$ = 3)" in latex


@pytest.mark.parametrize("ablation, panels", [("sampler", 4), ("alpha", 4), ("components", 3)])
def test_the_ablation_figure_draws_its_panels_with_variant_labels(aggregates, tmp_path, ablation, panels):
    from vpo.report.figures import ablation as draw
    from vpo.report.kit import method_style
    from vpo.report.labels import use_variants

    use_variants(VARIANTS)
    summary, per_seed = pd.read_csv(aggregates / "summary.csv"), pd.read_csv(aggregates / "per_seed.csv")
    training = pd.read_csv(aggregates / "training_curves.csv")
    methods = ["vpo", "vpo_alpha_3"] if ablation != "components" else ["grpo", "vpo"]
    values = json.dumps({"vpo": 1.0, "vpo_alpha_3": 3.0}) if ablation == "alpha" else ""
    fig = draw(
        summary=summary,
        per_seed=per_seed,
        training=training,
        ablation=ablation,
        methods=methods,
        tasks=["maze"],
        values=values,
        out=tmp_path / f"{ablation}.png",
    )
    axes = [ax for ax in fig.axes if ax.get_visible() and ax.has_data()]
    assert len(axes) == panels
    labels = {text.get_text() for legend in fig.legends for text in legend.get_texts()}
    assert ("VPO (α = 3)" in labels) == (ablation != "components")
    if ablation == "sampler":
        assert "weight draws" in axes[3].get_ylabel()
    if ablation == "alpha":  # best@budget of VPO's line at alpha 1 and 3: the two methods' means
        solid = next(line for line in axes[3].get_lines() if line.get_linestyle() == "-")
        assert list(solid.get_xdata()) == [1.0, 3.0]
        assert list(solid.get_ydata()) == pytest.approx([value("vpo", 1, 6), value("vpo_alpha_3", 1, 6)])
        # the values alone label the log axis (its minor ticks, e.g. 2x10^0, once overprinted them)
        ticks = [t.get_text() for t in axes[3].get_xticklabels(minor=True) + axes[3].get_xticklabels() if t.get_text()]
        assert ticks == ["1", "3"]
    assert method_style("vpo_alpha_3") != method_style("vpo")  # a variant has its own look
    assert (tmp_path / f"{ablation}.png").stat().st_size > 0
    import matplotlib.pyplot as plt

    plt.close(fig)

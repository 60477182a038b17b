# Every paper figure, one rule each: rule figure_<stem> runs `vpo plot <stem>` (vpo/report/figures.py,
# FIGURES) on its inputs and writes figures/{preset}/<stem>.pdf and the report's PNG. A figure's
# inputs and params carry the names of its tables and options, which become the command's flags
# (plot_command and figure_files in common.smk).
CURVE_INPUTS = {"summary": rules.aggregate.output.summary, "per_seed": rules.aggregate.output.per_seed}
TRAINING = {"training": rules.aggregate_training.output[0]}
GRID = {"tasks": ",".join(TASKS), "variants": VARIANTS, "scale": SCALE}  # the params of a figure of the grid

# stem -> (inputs, the report's subcategory, its caption file or None for the stem's, params): one rule
# figure_<stem> each, made by the loop below
FIGURE_RULES = {
    "pass_at_k": (CURVE_INPUTS, "main results", None, {"methods": ",".join(main_methods()), **GRID}),
    "best_at_k": (CURVE_INPUTS, "main results", None, {"methods": ",".join(main_methods()), **GRID}),
    "appendix_pass_at_k": (CURVE_INPUTS, "appendix: every method", "appendix_curve", {"methods": ",".join(METHODS), **GRID}),
    "appendix_best_at_k": (CURVE_INPUTS, "appendix: every method", "appendix_curve", {"methods": ",".join(METHODS), **GRID}),
    "diversity_over_training": (TRAINING, "main results", None, {"methods": ",".join(diversity_methods()), **GRID}),
    "strategies_over_training": (TRAINING, "main results", None, {"methods": ",".join(strategy_methods()), **GRID}),
    "mechanism_bandit": ({"bandit": f"{RESULTS}/mechanism/bandit.csv"}, "mechanism", None, {}),
    "mechanism_advantage": ({"sweeps": f"{RESULTS}/mechanism/advantage.csv"}, "mechanism", None, {}),
    "lcb_case_study": (
        {**CURVE_INPUTS, "curves": f"{AGG}/evolve_lcb.csv"},
        "evolutionary search",
        None,
        {"methods": ",".join(case_study_methods()), "variants": VARIANTS, "scale": SCALE},
    ),
    "intervals": (
        {"intervals": rules.intervals.output.intervals, "improvement": rules.intervals.output.improvement},
        "intervals",
        None,
        {"methods": ",".join(METHODS), **GRID},
    ),
    "performance_profiles": (
        {"profiles": rules.intervals.output.profiles, "per_problem": rules.aggregate_problems.output[0]},
        "intervals",
        None,
        {"methods": ",".join(METHODS), **GRID},
    ),
    "pool_quality": ({"intervals": rules.intervals.output.intervals}, "intervals", None, {"methods": ",".join(METHODS), **GRID}),
}

# Snakemake evaluates a rule's shell expression again when its job runs, after this loop has moved on:
# each rule's whole command is made here, while the loop is at its figure, and passed as a param
for _stem, (_inputs, _subcategory, _caption, _params) in FIGURE_RULES.items():

    rule:
        name: f"figure_{_stem}"
        input: **_inputs
        output: **figure_files(_stem, _subcategory, caption=_caption)
        params: **_params, command=plot_shell(_stem, _inputs, _params, log=f"{LOGS}/report/figure_{_stem}.log")
        log: f"{LOGS}/report/figure_{_stem}.log"
        threads: res("report", "threads")
        resources: **job_resources("report")
        conda: "../envs/plot.yaml"
        shell: "{params.command}"


rule figure_evolve:
    input: curves=f"{AGG}/evolve_{{task}}.csv"
    output: **figure_files("evolve_{task}", "evolutionary search", caption="evolve")
    params: task=lambda wc: wc.task, methods=",".join(METHODS), variants=VARIANTS, scale=SCALE
    log: f"{LOGS}/report/figure_evolve_{{task}}.log"
    threads: res("report", "threads")
    resources: **job_resources("report")
    conda: "../envs/plot.yaml"
    shell: plot_command("evolve")


rule figure_ablation:
    input: summary=f"{AGG}/ablations/summary.csv", per_seed=f"{AGG}/ablations/per_seed.csv",
           training=f"{AGG}/ablations/training_curves.csv"
    output: **figure_files("ablation_{ablation}", "ablations", caption="ablation")
    wildcard_constraints: ablation="|".join(ABLATIONS)
    params: ablation=lambda wc: wc.ablation, methods=lambda wc: ",".join(ablation_methods(CFG, wc.ablation)),
            tasks=",".join(ABLATION_TASKS), values=lambda wc: ablation_values(wc.ablation), variants=VARIANTS,
            scale=SCALE
    log: f"{LOGS}/report/figure_ablation_{{ablation}}.log"
    threads: res("report", "threads")
    resources: **job_resources("report")
    conda: "../envs/plot.yaml"
    shell: plot_command("ablation")


# figures/<name>: the latest run's figure, whichever preset made it (its title names the preset, and
# figures/<name>.source says which run: preset, grid, when); rerun when the preset changes, so it always
# follows the run that was asked for last.
rule publish_figure:
    input:
        f"{FIGURES}/{{name}}",
    output:
        figure="figures/{name}",
        source="figures/{name}.source",
    wildcard_constraints:
        name=r"[^/]+\.(pdf|png)",
    params:
        note=lambda wc: figure_source_note(
            f"figures/{wc.name}", f"{FIGURES}/{wc.name}", PRESET, {"tasks": TASKS, "methods": METHODS, "seeds": SEEDS}
        ),
    log:
        f"{LOGS}/publish/{{name}}.log",
    localrule: True
    conda: "../envs/plot.yaml"
    shell:
        "(cp {input} {output.figure} && printf '%s' {params.note:q} > {output.source}"
        " && date -u +'copied: %Y-%m-%dT%H:%M:%SZ' >> {output.source}) > {log} 2>&1"

# Every paper figure, one rule each: rule figure_<stem> runs `vpo plot <stem>` (vpo/report/figures.py,
# FIGURES) on its inputs and writes figures/{preset}/<stem>.pdf and the report's PNG. A figure's
# inputs and params carry the names of its tables and options, which become the command's flags
# (plot_command and figure_files in common.smk).
CURVE_INPUTS = {"summary": f"{RESULTS}/aggregate/summary.csv", "per_seed": f"{RESULTS}/aggregate/per_seed.csv"}


rule figure_pass_at_k:
    input: **CURVE_INPUTS
    output: **figure_files("pass_at_k", "main results")
    params: methods=",".join(main_methods()), tasks=",".join(TASKS), variants=VARIANTS, scale=SCALE
    log: f"{LOGS}/report/figure_pass_at_k.log"
    threads: res("report", "threads")
    resources: **job_resources("report")
    conda: "../envs/plot.yaml"
    shell: plot_command("pass_at_k")


rule figure_best_at_k:
    input: **CURVE_INPUTS
    output: **figure_files("best_at_k", "main results")
    params: methods=",".join(main_methods()), tasks=",".join(TASKS), variants=VARIANTS, scale=SCALE
    log: f"{LOGS}/report/figure_best_at_k.log"
    threads: res("report", "threads")
    resources: **job_resources("report")
    conda: "../envs/plot.yaml"
    shell: plot_command("best_at_k")


rule figure_appendix_pass_at_k:
    input: **CURVE_INPUTS
    output: **figure_files("appendix_pass_at_k", "appendix: every method", caption="appendix_curve")
    params: methods=",".join(METHODS), tasks=",".join(TASKS), variants=VARIANTS, scale=SCALE
    log: f"{LOGS}/report/figure_appendix_pass_at_k.log"
    threads: res("report", "threads")
    resources: **job_resources("report")
    conda: "../envs/plot.yaml"
    shell: plot_command("appendix_pass_at_k")


rule figure_appendix_best_at_k:
    input: **CURVE_INPUTS
    output: **figure_files("appendix_best_at_k", "appendix: every method", caption="appendix_curve")
    params: methods=",".join(METHODS), tasks=",".join(TASKS), variants=VARIANTS, scale=SCALE
    log: f"{LOGS}/report/figure_appendix_best_at_k.log"
    threads: res("report", "threads")
    resources: **job_resources("report")
    conda: "../envs/plot.yaml"
    shell: plot_command("appendix_best_at_k")


rule figure_diversity_over_training:
    input: training=f"{RESULTS}/aggregate/training_curves.csv"
    output: **figure_files("diversity_over_training", "main results")
    params: methods=",".join(diversity_methods()), tasks=",".join(TASKS), variants=VARIANTS, scale=SCALE
    log: f"{LOGS}/report/figure_diversity_over_training.log"
    threads: res("report", "threads")
    resources: **job_resources("report")
    conda: "../envs/plot.yaml"
    shell: plot_command("diversity_over_training")


rule figure_strategies_over_training:
    input: training=f"{RESULTS}/aggregate/training_curves.csv"
    output: **figure_files("strategies_over_training", "main results")
    params: methods=",".join(strategy_methods()), tasks=",".join(TASKS), variants=VARIANTS, scale=SCALE
    log: f"{LOGS}/report/figure_strategies_over_training.log"
    threads: res("report", "threads")
    resources: **job_resources("report")
    conda: "../envs/plot.yaml"
    shell: plot_command("strategies_over_training")


rule figure_mechanism_bandit:
    input: bandit=f"{RESULTS}/mechanism/bandit.csv"
    output: **figure_files("mechanism_bandit", "mechanism")
    log: f"{LOGS}/report/figure_mechanism_bandit.log"
    threads: res("report", "threads")
    resources: **job_resources("report")
    conda: "../envs/plot.yaml"
    shell: plot_command("mechanism_bandit")


rule figure_mechanism_advantage:
    input: sweeps=f"{RESULTS}/mechanism/advantage.csv"
    output: **figure_files("mechanism_advantage", "mechanism")
    log: f"{LOGS}/report/figure_mechanism_advantage.log"
    threads: res("report", "threads")
    resources: **job_resources("report")
    conda: "../envs/plot.yaml"
    shell: plot_command("mechanism_advantage")


rule figure_evolve:
    input: curves=f"{RESULTS}/aggregate/evolve_{{task}}.csv"
    output: **figure_files("evolve_{task}", "evolutionary search", caption="evolve")
    params: task=lambda wc: wc.task, methods=",".join(METHODS), variants=VARIANTS, scale=SCALE
    log: f"{LOGS}/report/figure_evolve_{{task}}.log"
    threads: res("report", "threads")
    resources: **job_resources("report")
    conda: "../envs/plot.yaml"
    shell: plot_command("evolve")


rule figure_lcb_case_study:
    input: **CURVE_INPUTS, curves=f"{RESULTS}/aggregate/evolve_lcb.csv"
    output: **figure_files("lcb_case_study", "evolutionary search")
    params: methods=",".join(case_study_methods()), variants=VARIANTS, scale=SCALE
    log: f"{LOGS}/report/figure_lcb_case_study.log"
    threads: res("report", "threads")
    resources: **job_resources("report")
    conda: "../envs/plot.yaml"
    shell: plot_command("lcb_case_study")


INTERVALS = f"{RESULTS}/aggregate"  # intervals.csv, improvement.csv, profiles.csv (rule intervals)


rule figure_intervals:
    input: intervals=f"{INTERVALS}/intervals.csv", improvement=f"{INTERVALS}/improvement.csv"
    output: **figure_files("intervals", "intervals")
    params: methods=",".join(METHODS), tasks=",".join(TASKS), variants=VARIANTS, scale=SCALE
    log: f"{LOGS}/report/figure_intervals.log"
    threads: res("report", "threads")
    resources: **job_resources("report")
    conda: "../envs/plot.yaml"
    shell: plot_command("intervals")


rule figure_performance_profiles:
    input: profiles=f"{INTERVALS}/profiles.csv", per_problem=f"{INTERVALS}/per_problem.csv"
    output: **figure_files("performance_profiles", "intervals")
    params: methods=",".join(METHODS), tasks=",".join(TASKS), variants=VARIANTS, scale=SCALE
    log: f"{LOGS}/report/figure_performance_profiles.log"
    threads: res("report", "threads")
    resources: **job_resources("report")
    conda: "../envs/plot.yaml"
    shell: plot_command("performance_profiles")


rule figure_pool_quality:
    input: intervals=f"{INTERVALS}/intervals.csv"
    output: **figure_files("pool_quality", "intervals")
    params: methods=",".join(METHODS), tasks=",".join(TASKS), variants=VARIANTS, scale=SCALE
    log: f"{LOGS}/report/figure_pool_quality.log"
    threads: res("report", "threads")
    resources: **job_resources("report")
    conda: "../envs/plot.yaml"
    shell: plot_command("pool_quality")


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

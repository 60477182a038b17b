# Everything after evaluation is cheap and separate from training, so restyling a figure or a
# table never retrains: aggregate (all cells) -> one rule per table; the figures are in figures.smk.

AGG = f"{RESULTS}/aggregate"


rule aggregate:
    input:
        eval_jsons(),
    output:
        summary=f"{AGG}/summary.csv",
        per_seed=f"{AGG}/per_seed.csv",
    params:
        out=parent_dir,
    log:
        f"{LOGS}/report/aggregate.log",
    threads: res("report", "threads")
    resources: **job_resources("report")
    conda: "../envs/plot.yaml"
    shell:
        "python -m vpo.cli aggregate evals --out-dir {params.out:q} {input} > {log} 2>&1"


rule aggregate_training:
    input:
        train_markers(methods=diversity_methods()),
    output:
        f"{AGG}/training_curves.csv",
    log:
        f"{LOGS}/report/aggregate_training.log",
    threads: res("report", "threads")
    resources: **job_resources("report")
    conda: "../envs/plot.yaml"
    shell:
        "python -m vpo.cli aggregate training --out {output} {input} > {log} 2>&1"


rule table_main:
    input:
        rules.aggregate.output.summary,
    output:
        csv=f"{RESULTS}/tables/main_table.csv",
        md=f"{RESULTS}/tables/main_table.md",
        tex=f"{RESULTS}/tables/main_table.tex",
        html=report(f"{RESULTS}/tables/main_table.html", category="Tables", subcategory="main results",
                    caption="../workflow/report/main_table.rst"),
    params:
        best_at=CFG["report"]["best_at"],
        methods=",".join(METHODS),
        tasks=",".join(TASKS),
    log:
        f"{LOGS}/report/table_main.log",
    threads: res("report", "threads")
    resources: **job_resources("report")
    conda: "../envs/plot.yaml"
    shell:
        "python -m vpo.cli table main --summary {input} --best-at {params.best_at:q} --methods {params.methods:q}"
        " --tasks {params.tasks:q} --out {output.csv} {output.md} {output.tex} {output.html} > {log} 2>&1"


rule table_curve:
    input:
        rules.aggregate.output.summary,
    output:
        csv=f"{RESULTS}/tables/{{metric}}_{{task}}.csv",
        md=f"{RESULTS}/tables/{{metric}}_{{task}}.md",
        tex=f"{RESULTS}/tables/{{metric}}_{{task}}.tex",
        html=report(
            f"{RESULTS}/tables/{{metric}}_{{task}}.html",
            category="Tables",
            subcategory="{metric} by task",
            caption="../workflow/report/curve_table.rst",
        ),
    wildcard_constraints:
        metric="best_at_k|pass_at_k",
    params:
        methods=",".join(METHODS),
    log:
        f"{LOGS}/report/{{metric}}_{{task}}.log",
    threads: res("report", "threads")
    resources: **job_resources("report")
    conda: "../envs/plot.yaml"
    shell:
        "python -m vpo.cli table curve --metric {wildcards.metric} --task {wildcards.task} --summary {input}"
        " --methods {params.methods:q} --out {output.csv} {output.md} {output.tex} {output.html} > {log} 2>&1"


rule mechanism_bandit:
    output:
        f"{RESULTS}/mechanism/bandit.csv",
    log:
        f"{LOGS}/report/mechanism_bandit.log",
    threads: res("report", "threads")
    resources: **job_resources("report")
    conda: "../envs/cpu.yaml"
    shell:
        "python -m vpo.cli mechanism bandit --out {output} > {log} 2>&1"


rule mechanism_advantage:
    output:
        f"{RESULTS}/mechanism/advantage.csv",
    log:
        f"{LOGS}/report/mechanism_advantage.log",
    threads: res("report", "threads")
    resources: **job_resources("report")
    conda: "../envs/cpu.yaml"
    shell:
        "python -m vpo.cli mechanism advantage --out {output} > {log} 2>&1"

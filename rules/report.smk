# Everything after evaluation is cheap and separate from training, so restyling a figure or a
# table never retrains: aggregate (all cells) -> one rule per table; the figures are in figures.smk.


rule aggregate:
    input:
        eval_jsons(),
    output:
        summary=f"{AGG}/summary.csv",
        per_seed=f"{AGG}/per_seed.csv",
        provenance=f"{AGG}/provenance.json",  # the HTML report's front page reads it
    params:
        out=parent_dir,
    log:
        f"{LOGS}/report/aggregate.log",
    threads: res("report", "threads")
    resources: **job_resources("report")
    conda: "../envs/plot.yaml"
    shell:
        "python -m vpo.cli aggregate evals --out-dir {params.out:q} {input} > {log} 2>&1"


rule aggregate_problems:  # per problem: best@k and pass@k at report_ks(), the pool as a multi-objective set
    input:
        pools=[path.replace(".json", ".parquet") for path in eval_jsons()],
        results=eval_jsons(),
    output:
        f"{AGG}/per_problem.csv",
    params:
        ks=report_ks(),
        reference=CFG["report"]["hypervolume_reference"],
    log:
        f"{LOGS}/report/aggregate_problems.log",
    threads: res("report", "threads")
    resources: **job_resources("report")
    conda: "../envs/plot.yaml"
    shell:
        "python -m vpo.cli aggregate problems --ks {params.ks} --hv-reference {params.reference}"
        " --out {output} {input.pools} > {log} 2>&1"


rule intervals:
    input:
        rules.aggregate_problems.output,
    output:
        intervals=f"{AGG}/intervals.csv",
        improvement=f"{AGG}/improvement.csv",
        profiles=f"{AGG}/profiles.csv",
    params:
        out=parent_dir,
        reps=CFG["report"]["bootstrap_reps"],
    log:
        f"{LOGS}/report/intervals.log",
    threads: res("report", "threads")
    resources: **job_resources("report")
    conda: "../envs/plot.yaml"
    shell:
        "python -m vpo.cli intervals estimate --per-problem {input} --out-dir {params.out:q} --reference vpo"
        " --reps {params.reps} > {log} 2>&1"


rule table_intervals:
    input:
        intervals=rules.intervals.output.intervals,
        improvement=rules.intervals.output.improvement,
    output:
        csv=f"{RESULTS}/tables/intervals.csv",
        md=f"{RESULTS}/tables/intervals.md",
        tex=f"{RESULTS}/tables/intervals.tex",
        html=report(f"{RESULTS}/tables/intervals.html", category="Tables", subcategory="intervals",
                    caption="../workflow/report/intervals_table.rst"),
    params:
        methods=",".join(METHODS),
        tasks=",".join(TASKS),
        variants=VARIANTS,
    log:
        f"{LOGS}/report/table_intervals.log",
    threads: res("report", "threads")
    resources: **job_resources("report")
    conda: "../envs/plot.yaml"
    shell:
        "python -m vpo.cli intervals table --kind intervals --intervals {input.intervals} --improvement {input.improvement}"
        " --methods {params.methods:q} --tasks {params.tasks:q} --variants {params.variants:q}"
        " --out {output.csv} {output.md} {output.tex} {output.html} > {log} 2>&1"


rule table_pool_quality:
    input:
        rules.intervals.output.intervals,
    output:
        csv=f"{RESULTS}/tables/pool_quality.csv",
        md=f"{RESULTS}/tables/pool_quality.md",
        tex=f"{RESULTS}/tables/pool_quality.tex",
        html=report(f"{RESULTS}/tables/pool_quality.html", category="Tables", subcategory="intervals",
                    caption="../workflow/report/pool_quality_table.rst"),
    params:
        methods=",".join(METHODS),
        tasks=",".join(TASKS),
        variants=VARIANTS,
    log:
        f"{LOGS}/report/table_pool_quality.log",
    threads: res("report", "threads")
    resources: **job_resources("report")
    conda: "../envs/plot.yaml"
    shell:
        "python -m vpo.cli intervals table --kind pool_quality --intervals {input} --methods {params.methods:q} --tasks {params.tasks:q}"
        " --variants {params.variants:q} --out {output.csv} {output.md} {output.tex} {output.html} > {log} 2>&1"


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


rule aggregate_ablations:  # the ablations' cells (config.yaml `ablations`), grid cells among them included
    input:
        evals=ablation_cells("eval/evalseed{e}.json"),
        markers=ablation_cells("train.json"),
    output:
        summary=f"{AGG}/ablations/summary.csv",
        per_seed=f"{AGG}/ablations/per_seed.csv",
        provenance=f"{AGG}/ablations/provenance.json",
        training=f"{AGG}/ablations/training_curves.csv",
    params:
        out=parent_dir,
    log:
        f"{LOGS}/report/aggregate_ablations.log",
    threads: res("report", "threads")
    resources: **job_resources("report")
    conda: "../envs/plot.yaml"
    shell:
        "(python -m vpo.cli aggregate evals --out-dir {params.out:q} {input.evals}"
        " && python -m vpo.cli aggregate training --out {output.training} {input.markers}) > {log} 2>&1"


rule table_ablations:
    input:
        rules.aggregate_ablations.output.summary,
    output:
        csv=f"{RESULTS}/tables/ablations.csv",
        md=f"{RESULTS}/tables/ablations.md",
        tex=f"{RESULTS}/tables/ablations.tex",
        html=report(f"{RESULTS}/tables/ablations.html", category="Tables", subcategory="ablations",
                    caption="../workflow/report/ablations_table.rst"),
    params:
        ablations=lambda wc: " ".join(f"--ablation {name}={','.join(ablation_methods(CFG, name))}"
                                      for name in ablation_names()),
        tasks=",".join(ABLATION_TASKS),
        ks=report_ks(),
        variants=VARIANTS,
    log:
        f"{LOGS}/report/table_ablations.log",
    threads: res("report", "threads")
    resources: **job_resources("report")
    conda: "../envs/plot.yaml"
    shell:
        "python -m vpo.cli table ablations --summary {input} {params.ablations} --tasks {params.tasks:q}"
        " --ks {params.ks} --variants {params.variants:q} --out {output.csv} {output.md} {output.tex} {output.html}"
        " > {log} 2>&1"


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
        variants=VARIANTS,
    log:
        f"{LOGS}/report/table_main.log",
    threads: res("report", "threads")
    resources: **job_resources("report")
    conda: "../envs/plot.yaml"
    shell:
        "python -m vpo.cli table main --summary {input} --best-at {params.best_at:q} --methods {params.methods:q}"
        " --tasks {params.tasks:q} --variants {params.variants:q} --out {output.csv} {output.md} {output.tex}"
        " {output.html} > {log} 2>&1"


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
        variants=VARIANTS,
    log:
        f"{LOGS}/report/{{metric}}_{{task}}.log",
    threads: res("report", "threads")
    resources: **job_resources("report")
    conda: "../envs/plot.yaml"
    shell:
        "python -m vpo.cli table curve --metric {wildcards.metric} --task {wildcards.task} --summary {input}"
        " --methods {params.methods:q} --variants {params.variants:q} --out {output.csv} {output.md} {output.tex}"
        " {output.html} > {log} 2>&1"


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

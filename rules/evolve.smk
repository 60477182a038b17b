# Evolutionary search (paper section 4): per task, the hardest test problems from the standard
# evaluation; one OpenEvolve search per cell with the cell's model; search curves -> figures, table.

rule evolve_select:
    input:
        eval_pools,
    output:
        f"{EVOLVE}/hardest.json",
    params:
        select=lambda wc: [CFG["evolve"]["n_problems"], CFG["report"]["best_at"], CFG["evolve"]["select_methods"]],
    log:
        f"{LOGS}/evolve/{{task}}/select.log",
    threads: res("report", "threads")
    resources: **job_resources("report")
    conda: "../envs/plot.yaml"
    shell:
        "python -m vpo.cli evolve select --out {output} --config \"$VPO_CONFIG_SNAPSHOT\""
        " {input} > {log} 2>&1"


rule evolve_search:
    input:
        model=f"{CELL}/model",
        hardest=rules.evolve_select.output,
        test=rules.preprocess.output.test,
    output:
        scores=f"{CELL}/evolve/scores.parquet",
        summary=f"{CELL}/evolve/summary.json",
    params:
        data=lambda wc, input: os.path.dirname(input.test),
        out=parent_dir,
        # rerun when the search or the model's sampling changes (the job also restarts its own state then)
        evolve_digest=lambda wc: settings_digest([CFG["evolve"], task_settings(CFG, wc.task)["eval"]]),
    log:
        f"{LOGS}/evolve/{{task}}/{{method}}/seed{{seed}}.log",
    threads: res("evolve", "threads")
    resources: **job_resources("evolve", gpus=eval_gpus)
    conda: MODEL_ENV
    shell:
        "OMP_NUM_THREADS={threads} python -m vpo.cli evolve search --model {input.model:q} --task {wildcards.task}"
        " --method {wildcards.method} --data {params.data:q} --hardest {input.hardest} --out {params.out:q}"
        " --config \"$VPO_CONFIG_SNAPSHOT\" > {log} 2>&1"


rule aggregate_evolve:
    input:
        lambda wc: evolve_summaries(wc.task),
    output:
        f"{AGG}/evolve_{{task}}.csv",
    log:
        f"{LOGS}/report/aggregate_evolve_{{task}}.log",
    threads: res("report", "threads")
    resources: **job_resources("report")
    conda: "../envs/plot.yaml"
    shell:
        "python -m vpo.cli aggregate evolve --out {output} {input} > {log} 2>&1"


rule table_evolve:
    input:
        expand(f"{AGG}/evolve_{{task}}.csv", task=TASKS),
    output:
        csv=f"{RESULTS}/tables/evolve.csv",
        md=f"{RESULTS}/tables/evolve.md",
        tex=f"{RESULTS}/tables/evolve.tex",
        html=report(f"{RESULTS}/tables/evolve.html", category="Tables", subcategory="evolutionary search",
                    caption="../workflow/report/evolve_table.rst"),
    params:
        methods=",".join(METHODS),
        at=",".join(str(t) for t in evolve_table_iterations()),
        variants=VARIANTS,
    log:
        f"{LOGS}/report/table_evolve.log",
    threads: res("report", "threads")
    resources: **job_resources("report")
    conda: "../envs/plot.yaml"
    shell:
        "python -m vpo.cli table evolve --methods {params.methods:q} --at {params.at:q} --curves {input}"
        " --variants {params.variants:q} --out {output.csv} {output.md} {output.tex} {output.html} > {log} 2>&1"

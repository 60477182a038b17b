# Everything after evaluation is cheap and separate from training, so restyling a figure or a
# table never retrains: aggregate (all cells) -> one rule per table and per figure.

AGG = "results/aggregate"


rule aggregate:
    input:
        eval_jsons(),
    output:
        summary=f"{AGG}/summary.csv",
        per_seed=f"{AGG}/per_seed.csv",
    params:
        out=parent_dir,
    log:
        "logs/report/aggregate.log",
    threads: res("report", "threads")
    resources:
        mem_mb=per_attempt("report", "mem_mb"),
        runtime=per_attempt("report", "runtime"),
    conda:
        "../envs/plot.yaml"
    shell:
        "python -m vpo.cli aggregate evals --out-dir {params.out:q} {input} > {log} 2>&1"


rule aggregate_training:
    input:
        train_markers(methods=diversity_methods()),
    output:
        f"{AGG}/training_curves.csv",
    log:
        "logs/report/aggregate_training.log",
    threads: res("report", "threads")
    resources:
        mem_mb=per_attempt("report", "mem_mb"),
        runtime=per_attempt("report", "runtime"),
    conda:
        "../envs/plot.yaml"
    shell:
        "python -m vpo.cli aggregate training --out {output} {input} > {log} 2>&1"


rule main_table:
    input:
        rules.aggregate.output.summary,
    output:
        csv="results/tables/main_table.csv",
        md="results/tables/main_table.md",
        tex="results/tables/main_table.tex",
        html=report("results/tables/main_table.html", category="Tables", subcategory="main results",
                    caption="../workflow/report/main_table.rst"),
    params:
        best_at=CFG["report"]["best_at"],
        methods=",".join(METHODS),
        tasks=",".join(TASKS),
    log:
        "logs/report/main_table.log",
    threads: res("report", "threads")
    resources:
        mem_mb=per_attempt("report", "mem_mb"),
        runtime=per_attempt("report", "runtime"),
    conda:
        "../envs/plot.yaml"
    shell:
        "python -m vpo.cli table main --summary {input} --best-at {params.best_at:q} --methods {params.methods:q}"
        " --tasks {params.tasks:q} --out {output.csv} {output.md} {output.tex} {output.html} > {log} 2>&1"


rule curve_table:
    input:
        rules.aggregate.output.summary,
    output:
        csv="results/tables/{metric}_{task}.csv",
        md="results/tables/{metric}_{task}.md",
        tex="results/tables/{metric}_{task}.tex",
        html=report(
            "results/tables/{metric}_{task}.html",
            category="Tables",
            subcategory="{metric} by task",
            caption="../workflow/report/curve_table.rst",
        ),
    wildcard_constraints:
        metric="best_at_k|pass_at_k",
    params:
        methods=",".join(METHODS),
    log:
        "logs/report/{metric}_{task}.log",
    threads: res("report", "threads")
    resources:
        mem_mb=per_attempt("report", "mem_mb"),
        runtime=per_attempt("report", "runtime"),
    conda:
        "../envs/plot.yaml"
    shell:
        "python -m vpo.cli table curve --metric {wildcards.metric} --task {wildcards.task} --summary {input}"
        " --methods {params.methods:q} --out {output.csv} {output.md} {output.tex} {output.html} > {log} 2>&1"


rule figure_pass_at_k:
    input:
        summary=rules.aggregate.output.summary,
        per_seed=rules.aggregate.output.per_seed,
    output:
        pdf="figures/pass_at_k.pdf",
        png=report("figures/pass_at_k.png", category="Figures", subcategory="main results", caption="../workflow/report/pass_at_k.rst"),
    params:
        scale=SCALE,
        methods=",".join(main_methods()),
        tasks=",".join(TASKS),
    log:
        "logs/report/figure_pass_at_k.log",
    threads: res("report", "threads")
    resources:
        mem_mb=per_attempt("report", "mem_mb"),
        runtime=per_attempt("report", "runtime"),
    conda:
        "../envs/plot.yaml"
    shell:
        "python -m vpo.cli plot curve --metric pass_at_k --summary {input.summary} --per-seed {input.per_seed}"
        " --methods {params.methods:q} --tasks {params.tasks:q} --scale {params.scale:q} --out {output.pdf} {output.png} > {log} 2>&1"


rule figure_best_at_k:
    input:
        summary=rules.aggregate.output.summary,
        per_seed=rules.aggregate.output.per_seed,
    output:
        pdf="figures/best_at_k.pdf",
        png=report("figures/best_at_k.png", category="Figures", subcategory="main results", caption="../workflow/report/best_at_k.rst"),
    params:
        scale=SCALE,
        methods=",".join(main_methods()),
        tasks=",".join(TASKS),
    log:
        "logs/report/figure_best_at_k.log",
    threads: res("report", "threads")
    resources:
        mem_mb=per_attempt("report", "mem_mb"),
        runtime=per_attempt("report", "runtime"),
    conda:
        "../envs/plot.yaml"
    shell:
        "python -m vpo.cli plot curve --metric best_at_k --summary {input.summary} --per-seed {input.per_seed}"
        " --methods {params.methods:q} --tasks {params.tasks:q} --scale {params.scale:q} --out {output.pdf} {output.png} > {log} 2>&1"


rule figure_appendix_curve:
    input:
        summary=rules.aggregate.output.summary,
        per_seed=rules.aggregate.output.per_seed,
    output:
        pdf="figures/appendix_{metric}.pdf",
        png=report("figures/appendix_{metric}.png", category="Figures", subcategory="appendix: every method",
                   caption="../workflow/report/appendix_curve.rst"),
    wildcard_constraints:
        metric="best_at_k|pass_at_k",
    params:
        scale=SCALE,
        methods=",".join(METHODS),
        tasks=",".join(TASKS),
    log:
        "logs/report/figure_appendix_{metric}.log",
    threads: res("report", "threads")
    resources:
        mem_mb=per_attempt("report", "mem_mb"),
        runtime=per_attempt("report", "runtime"),
    conda:
        "../envs/plot.yaml"
    shell:
        "python -m vpo.cli plot curve --metric {wildcards.metric} --summary {input.summary} --per-seed {input.per_seed}"
        " --methods {params.methods:q} --tasks {params.tasks:q} --scale {params.scale:q} --out {output.pdf} {output.png} > {log} 2>&1"


rule figure_diversity_over_training:
    input:
        rules.aggregate_training.output,
    output:
        pdf="figures/diversity_over_training.pdf",
        png=report(
            "figures/diversity_over_training.png",
            category="Figures",
            subcategory="main results",
            caption="../workflow/report/diversity_over_training.rst",
        ),
    params:
        scale=SCALE,
        methods=",".join(diversity_methods()),
        tasks=",".join(TASKS),
    log:
        "logs/report/figure_diversity_over_training.log",
    threads: res("report", "threads")
    resources:
        mem_mb=per_attempt("report", "mem_mb"),
        runtime=per_attempt("report", "runtime"),
    conda:
        "../envs/plot.yaml"
    shell:
        "python -m vpo.cli plot diversity --training {input} --methods {params.methods:q} --tasks {params.tasks:q}"
        " --scale {params.scale:q} --out {output.pdf} {output.png} > {log} 2>&1"


rule mechanism_bandit:
    output:
        "results/mechanism/bandit.csv",
    log:
        "logs/report/mechanism_bandit.log",
    threads: res("report", "threads")
    resources:
        mem_mb=per_attempt("report", "mem_mb"),
        runtime=per_attempt("report", "runtime"),
    conda:
        "../envs/cpu.yaml"
    shell:
        "python -m vpo.cli mechanism bandit --out {output} > {log} 2>&1"


rule figure_mechanism_bandit:
    input:
        rules.mechanism_bandit.output,
    output:
        pdf="figures/mechanism_bandit.pdf",
        png=report("figures/mechanism_bandit.png", category="Figures", subcategory="mechanism", caption="../workflow/report/mechanism_bandit.rst"),
    log:
        "logs/report/figure_mechanism_bandit.log",
    threads: res("report", "threads")
    resources:
        mem_mb=per_attempt("report", "mem_mb"),
        runtime=per_attempt("report", "runtime"),
    conda:
        "../envs/plot.yaml"
    shell:
        "python -m vpo.cli plot mechanism --bandit {input} --out {output.pdf} {output.png} > {log} 2>&1"


rule mechanism_advantage:
    output:
        "results/mechanism/advantage.csv",
    log:
        "logs/report/mechanism_advantage.log",
    threads: res("report", "threads")
    resources:
        mem_mb=per_attempt("report", "mem_mb"),
        runtime=per_attempt("report", "runtime"),
    conda:
        "../envs/cpu.yaml"
    shell:
        "python -m vpo.cli mechanism advantage --out {output} > {log} 2>&1"


rule figure_mechanism_advantage:
    input:
        rules.mechanism_advantage.output,
    output:
        pdf="figures/mechanism_advantage.pdf",
        png=report("figures/mechanism_advantage.png", category="Figures", subcategory="mechanism", caption="../workflow/report/mechanism_advantage.rst"),
    log:
        "logs/report/figure_mechanism_advantage.log",
    threads: res("report", "threads")
    resources:
        mem_mb=per_attempt("report", "mem_mb"),
        runtime=per_attempt("report", "runtime"),
    conda:
        "../envs/plot.yaml"
    shell:
        "python -m vpo.cli plot advantage --sweeps {input} --out {output.pdf} {output.png} > {log} 2>&1"


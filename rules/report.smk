# Everything after evaluation is cheap and separate from training, so restyling a figure or a
# table never retrains: aggregate (all cells) -> one rule per table and per figure.

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
        f"{LOGS}/report/aggregate_training.log",
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
        f"{LOGS}/report/main_table.log",
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
        pdf=f"{FIGURES}/pass_at_k.pdf",
        png=report(f"{FIGURES}/pass_at_k.png", category="Figures", subcategory="main results", caption="../workflow/report/pass_at_k.rst"),
    params:
        scale=SCALE,
        methods=",".join(main_methods()),
        tasks=",".join(TASKS),
    log:
        f"{LOGS}/report/figure_pass_at_k.log",
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
        pdf=f"{FIGURES}/best_at_k.pdf",
        png=report(f"{FIGURES}/best_at_k.png", category="Figures", subcategory="main results", caption="../workflow/report/best_at_k.rst"),
    params:
        scale=SCALE,
        methods=",".join(main_methods()),
        tasks=",".join(TASKS),
    log:
        f"{LOGS}/report/figure_best_at_k.log",
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
        pdf=f"{FIGURES}/appendix_{{metric}}.pdf",
        png=report(f"{FIGURES}/appendix_{{metric}}.png", category="Figures", subcategory="appendix: every method",
                   caption="../workflow/report/appendix_curve.rst"),
    wildcard_constraints:
        metric="best_at_k|pass_at_k",
    params:
        scale=SCALE,
        methods=",".join(METHODS),
        tasks=",".join(TASKS),
    log:
        f"{LOGS}/report/figure_appendix_{{metric}}.log",
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
        pdf=f"{FIGURES}/diversity_over_training.pdf",
        png=report(
            f"{FIGURES}/diversity_over_training.png",
            category="Figures",
            subcategory="main results",
            caption="../workflow/report/diversity_over_training.rst",
        ),
    params:
        scale=SCALE,
        methods=",".join(diversity_methods()),
        tasks=",".join(TASKS),
    log:
        f"{LOGS}/report/figure_diversity_over_training.log",
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
        f"{RESULTS}/mechanism/bandit.csv",
    log:
        f"{LOGS}/report/mechanism_bandit.log",
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
        pdf=f"{FIGURES}/mechanism_bandit.pdf",
        png=report(f"{FIGURES}/mechanism_bandit.png", category="Figures", subcategory="mechanism", caption="../workflow/report/mechanism_bandit.rst"),
    log:
        f"{LOGS}/report/figure_mechanism_bandit.log",
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
        f"{RESULTS}/mechanism/advantage.csv",
    log:
        f"{LOGS}/report/mechanism_advantage.log",
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
        pdf=f"{FIGURES}/mechanism_advantage.pdf",
        png=report(f"{FIGURES}/mechanism_advantage.png", category="Figures", subcategory="mechanism", caption="../workflow/report/mechanism_advantage.rst"),
    log:
        f"{LOGS}/report/figure_mechanism_advantage.log",
    threads: res("report", "threads")
    resources:
        mem_mb=per_attempt("report", "mem_mb"),
        runtime=per_attempt("report", "runtime"),
    conda:
        "../envs/plot.yaml"
    shell:
        "python -m vpo.cli plot advantage --sweeps {input} --out {output.pdf} {output.png} > {log} 2>&1"


# figures/<name>: the latest run's figure, whichever preset made it (its title names the preset);
# rerun when the preset changes, so it always follows the run that was asked for last.
rule publish_figure:
    input:
        f"{FIGURES}/{{name}}",
    output:
        "figures/{name}",
    wildcard_constraints:
        name=r"[^/]+\.(pdf|png)",
    params:
        preset=PRESET,
    log:
        f"{LOGS}/publish/{{name}}.log",
    localrule: True
    conda:
        "../envs/plot.yaml"
    shell:
        "cp {input} {output} > {log} 2>&1"

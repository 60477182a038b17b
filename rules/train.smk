# Per cell (method, task, seed): train, then merge the checkpoint into a Hugging Face model.
# The training output is the marker train.json, written last by the trainer. Checkpoints are NOT
# outputs: Snakemake deletes a failed job's outputs, and the checkpoints must survive for the rerun
# to resume. metrics.jsonl sits next to train.json for the same reason.


rule train:
    input:
        unpack(train_inputs),
    output:
        f"{CELL}/train.json",
    params:
        out=parent_dir,
        data=lambda wc, input: os.path.dirname(input.data),
        base_model=lambda wc, input: ["--base-model", os.path.dirname(input.base)] if "base" in input.keys() else [],
        backend=BACKEND,
        settings_digest=cell_digest,
    log:
        f"{LOGS}/train/{{task}}/{{method}}/seed{{seed}}.log",
    threads: res("train", "threads")
    resources: **job_resources("train", gpus=train_gpus)
    conda: MODEL_ENV
    shell:
        # vpo train writes {log} itself once it holds the cell (vpo/joblog.py): a rerun refused the cell
        # leaves the running trainer's log in place; a failed attempt's is kept as <log>.failed-<UTC time>
        "OMP_NUM_THREADS={threads} python -m vpo.cli train --backend {params.backend:q} --task {wildcards.task}"
        " --method {wildcards.method} --seed {wildcards.seed} --data {params.data:q}"
        " {params.base_model:q} --out {params.out:q} --config \"$VPO_CONFIG_SNAPSHOT\" --log {log:q}"


rule merge:
    input:
        f"{CELL}/train.json",
    output:
        directory(f"{CELL}/model"),
    params:
        run=cell_dir_of,
    log:
        f"{LOGS}/merge/{{task}}/{{method}}/seed{{seed}}.log",
    threads: res("merge", "threads")
    resources: **job_resources("merge")
    conda: MODEL_ENV
    shell:
        "python -m vpo.cli merge --run {params.run:q} > {log} 2>&1"

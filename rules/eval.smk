# Per cell and evaluation seed: sample the candidate pool on the task's test split and score it.


rule eval:
    input:
        model=f"{CELL}/model",
        test=rules.preprocess.output.test,
    output:
        # plain outputs, removed when the job starts: a rerun that fails leaves no evaluation, and the next
        # run reruns it. (update() outputs were restored after a failure and recorded as the failed job's
        # result, so an evaluation of the previous model or settings stood for the new one.)
        pool=f"{CELL}/eval/evalseed{{evalseed}}.parquet",
        metrics=f"{CELL}/eval/evalseed{{evalseed}}.json",
    params:
        data=lambda wc, input: os.path.dirname(input.test),
        eval_digest=lambda wc: settings_digest(task_settings(CFG, wc.task)["eval"]),
    log:
        f"{LOGS}/eval/{{task}}/{{method}}/seed{{seed}}/evalseed{{evalseed}}.log",
    threads: res("eval", "threads")
    resources: **job_resources("eval", gpus=eval_gpus)
    conda: MODEL_ENV
    shell:
        "OMP_NUM_THREADS={threads} python -m vpo.cli eval --model {input.model:q} --task {wildcards.task}"
        " --method {wildcards.method} --data {params.data:q} --seed {wildcards.evalseed}"
        " --config \"$VPO_CONFIG_SNAPSHOT\" --out {output.pool} > {log} 2>&1"

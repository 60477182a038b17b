# Per task: the train/test parquet in veRL's row schema, and (local backend) the tiny base model
# of each prompt form the grid's methods use.


rule preprocess:
    input:
        # the task's prompt template files (task_settings.<task>.prompts): an edit reruns preprocessing
        templates=lambda wc: [path for path in (task_settings(CFG, wc.task).get("prompts") or {}).values() if path],
    output:
        train=f"{DATA}/train.parquet",
        test=f"{DATA}/test.parquet",
    params:
        out=parent_dir,
        # rerun when the task's data options change
        data_digest=lambda wc: settings_digest(task_settings(CFG, wc.task)["data"]),
    log:
        f"{LOGS}/preprocess/{{task}}.log",
    threads: res("preprocess", "threads")
    resources: **job_resources("preprocess")
    conda: "../envs/cpu.yaml"
    shell:
        "python -m vpo.cli preprocess --task {wildcards.task} --out {params.out:q} --config \"$VPO_CONFIG_SNAPSHOT\""
        " > {log} 2>&1"


rule base_model:
    input:
        rules.preprocess.output,
    output:
        f"{BASE}/base.json",
    params:
        data=lambda wc, input: os.path.dirname(input[0]),
        out=parent_dir,
        trainer_digest=lambda wc: settings_digest(CFG.get("local_trainer", {})),
        mode=lambda wc: wc.prompt.split("_")[0],
        m=lambda wc: ["--m", wc.prompt.split("_m")[1]] if "_m" in wc.prompt else [],  # base_form's multi_m<m>
    log:
        f"{LOGS}/base_model/{{task}}/{{prompt}}.log",
    threads: res("base_model", "threads")
    resources: **job_resources("base_model")
    conda: "../envs/cpu.yaml"
    shell:
        "OMP_NUM_THREADS={threads} python -m vpo.cli base-model --task {wildcards.task} --mode {params.mode}"
        " {params.m:q} --data {params.data:q}"
        " --config \"$VPO_CONFIG_SNAPSHOT\" --out {params.out:q} > {log} 2>&1"

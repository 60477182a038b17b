# Config, grid, paths and targets shared by every rule file. Logic lives in vpo/; this stays thin.
import json
import os
import re
import shlex
import sys


from snakemake.exceptions import WorkflowError

from vpo.config import ConfigError, cell_settings, settings_digest, task_settings
from vpo.config import answers_per_rollout, method_settings, scale_note, trains_tiny_base
from vpo.config import write_config
from vpo.plan import (
    aggregated_cells,
    backend_missing,
    cell_jobs,
    figure_source_note,
    large_plan_note,
    paths_outside,
    replaced_note,
    stale_note,
    stale_outputs,
)
from vpo.overrides import workflow_config
from vpo.grid import ABLATIONS, ablation_methods, grid_cells
from vpo.methods import PROMPT_KINDS, get_method
from vpo.provenance import front_page_lines
from vpo.task import TaskPluginError
from vpo.record import as_rst, deviations as paper_deviations
from vpo.report.figures import FIGURES as FIGURE_TABLE  # FIGURES is the figures directory (common.smk)


# ---- the experiment: validated, with the active preset applied -------------------------------
# What --configfile sets differently from the project's config.yaml, and whatever --config sets, wins
# over the preset (vpo/overrides.py).
try:
    CFG = workflow_config(config, Path(workflow.basedir).parent, workflow.config_settings.configfiles,
                          workflow.config_settings.config)
except (ConfigError, TaskPluginError) as err:
    raise WorkflowError(str(err)) from None

PRESET = CFG["preset"]
BACKEND = CFG["backend"]
TINY_BASE = trains_tiny_base(CFG)  # the local trainer, and veRL on CPU (verl.device: cpu)
METHODS, TASKS, SEEDS = CFG["methods"], CFG["tasks"], CFG["seeds"]
CELL_METHODS = list(dict.fromkeys(method for _, method in grid_cells(CFG)))  # the grid's and the ablations'
ABLATION_TASKS = CFG["ablations"]["tasks"]
# the variants that train, as `vpo plot` and `vpo table` take them (labels and looks): a changed label redraws
VARIANTS = json.dumps({name: {"method": v["method"], "label": v.get("label")}
                       for name, v in (CFG.get("variants") or {}).items() if name in CELL_METHODS}, sort_keys=True)

# ---- paths -----------------------------------------------------------------------------------
# Each preset has its own tree, so cpu, ci and paper runs in one checkout never redo or overwrite
# each other's outputs; figures/<name> is a copy of the latest run's figure (rule publish_figure).
RESULTS = f"results/{PRESET}"
FIGURES = f"figures/{PRESET}"
LOGS = f"logs/{PRESET}"
DATA = f"{RESULTS}/data/{{task}}"
BASE = f"{RESULTS}/base/{{task}}/{{prompt}}"  # TINY_BASE only: one warm start per prompt form (vpo/local/base.py)
CELL = f"{RESULTS}/runs/{{task}}/{{method}}/seed{{seed}}"
EVOLVE = f"{RESULTS}/evolve/{{task}}"  # the hardest problems of a task (rules/evolve.smk)
AGG = f"{RESULTS}/aggregate"  # every aggregate (rules/report.smk, rules/evolve.smk), which the tables and figures read


# Every `vpo` command reads a snapshot of the resolved config, so --configfile/--config overrides
# reach the commands exactly as the workflow sees them. It is named by its content (no later call
# can change it under a running job) and written when jobs are about to run, never by a dry-run,
# --report or --rulegraph; results/<preset>/config.yaml is a copy for people (the preset's latest run).
# Jobs find it in $VPO_CONFIG_SNAPSHOT (set by the shell prefix below), not in params, so editing a
# key that no cell uses reruns nothing.
CONFIG_SNAPSHOT = f"results/config/{settings_digest(CFG)[:16]}.yaml"


onstart:
    # a real run (never a dry-run, whose plan a machine without the backend may show) whose jobs run in this
    # Python stops here when it cannot import the backend: before any cell is touched
    _missing = None if "conda" in str(workflow.deployment_settings.deployment_method).lower() else backend_missing(BACKEND)
    if _missing:
        raise WorkflowError(f"{_missing} (config: backend={BACKEND})")
    write_config(CFG, CONFIG_SNAPSHOT)
    write_config(CFG, f"{RESULTS}/config.yaml")
# Every job's shell: (unless conda provides the software) the Python that runs Snakemake, so a
# venv need not be activated, and the snapshot's path, which each command gets as --config (the
# snapshot names its preset).
_python_dir = "" if "conda" in str(workflow.deployment_settings.deployment_method).lower() else (
    f"export PATH={Path(sys.executable).parent}:$PATH; "
)
shell.prefix(f"set -euo pipefail; {_python_dir}export VPO_CONFIG_SNAPSHOT={shlex.quote(CONFIG_SNAPSHOT)}; ")


wildcard_constraints:
    task="|".join(TASKS),
    method="|".join(re.escape(m) for m in CELL_METHODS),  # variant names may hold dots
    seed=r"\d+",
    evalseed=r"\d+",
    prompt="|".join(PROMPT_KINDS) + r"|multi_m\d+",  # multi_m<m>: a multi-answer variant's own m (base_form)


def eval_seeds(task):
    return task_settings(CFG, task)["eval"]["seeds"]


def eval_jsons(tasks=None, methods=None):
    """Every eval-seed result of the grid (restricted to tasks/methods when given)."""
    return [
        f"{CELL}/eval/evalseed{e}.json".format(task=t, method=m, seed=s)
        for t in (tasks or TASKS)
        for m in (methods or METHODS)
        for s in SEEDS
        for e in eval_seeds(t)
    ]


def train_markers(tasks=None, methods=None):
    return [
        f"{CELL}/train.json".format(task=t, method=m, seed=s)
        for t in (tasks or TASKS)
        for m in (methods or METHODS)
        for s in SEEDS
    ]


SCALE = scale_note(CFG)  # the preset and scale, named in every figure's title

# The HTML report's front page (workflow/report/workflow.rst) reads `snakemake.config`: make that the
# resolved config (preset and overrides applied), not config.yaml as written. Everything above has
# read the raw values it needs; rules read CFG.
config.clear()
config.update(CFG, scale=SCALE, deviations=[as_rst(line) for line in paper_deviations()],  # docs/reproducibility.md's marked rows
              provenance=[as_rst(line) for line in front_page_lines(f"{AGG}/provenance.json")])


def diversity_methods():
    """The methods of figures/diversity_over_training.pdf that are in the grid."""
    return [m for m in CFG["report"]["diversity_methods"] if m in METHODS]


def strategy_methods():
    """The methods of figures/strategies_over_training.pdf that are in the grid (none: not drawn)."""
    return [m for m in CFG["report"].get("strategy_methods", []) if m in METHODS]


# ---- scheduler resources ---------------------------------------------------------------------
def res(rule_family, key):
    return CFG["resources"][rule_family][key]


def per_attempt(rule_family, key):
    """Memory or runtime that grows with each retry (attempt 1: the configured value; 2: twice it)."""
    base = res(rule_family, key)
    return lambda wildcards, attempt: base * attempt


def job_resources(rule_family, gpus=None):
    """A rule's `resources:` from config.yaml's `resources.<family>`: memory and runtime growing with
    each retry, and for rules that may take GPUs, their count (a function of the wildcards) as
    Slurm's gpu and LSF's -gpu request."""
    out = {"mem_mb": per_attempt(rule_family, "mem_mb"), "runtime": per_attempt(rule_family, "runtime")}
    if gpus is not None:
        out.update(gpu=gpus, lsf_extra=lsf_gpu_request(gpus))
    return out


MODEL_ENV = "../envs/gpu.yaml" if BACKEND == "verl" else "../envs/cpu.yaml"  # rules that load a model


def train_gpus(wildcards):
    return task_settings(CFG, wildcards.task)["gpus"] if BACKEND == "verl" and not TINY_BASE else 0


def eval_gpus(wildcards):
    return task_settings(CFG, wildcards.task)["eval"]["gpus"] if BACKEND == "verl" and not TINY_BASE else 0


def lsf_gpu_request(gpus_of):
    """bsub's GPU request (-gpu num=N) from a rule's GPU count: LSF's executor has no GPU resource and
    passes `lsf_extra` verbatim; Slurm's reads `gpu`. A profile's set-resources may still override it."""
    def request(wildcards):
        gpus = gpus_of(wildcards)
        return f"-gpu num={gpus}" if gpus else ""
    return request


def base_form(task, method):
    """The warm start a cell trains from (TINY_BASE): its method's prompt form, and for a multi-answer
    variant whose m is not the task's, a base taught to write that many answers (multi_m<m>)."""
    form, m = get_method(method).prompt, answers_per_rollout(CFG, task, method)
    return f"multi_m{m}" if form == "multi" and m != task_settings(CFG, task)["m"] else form


def train_inputs(wildcards):
    inputs = {"data": f"{DATA}/train.parquet".format(task=wildcards.task)}
    if TINY_BASE:
        inputs["base"] = f"{BASE}/base.json".format(task=wildcards.task, prompt=base_form(wildcards.task, wildcards.method))
    return inputs


def parent_dir(wildcards, output):
    """The directory holding a rule's first output (what the vpo command is told to write)."""
    return os.path.dirname(output[0])


def cell_dir_of(wildcards, input):
    """The cell directory results/runs/T/M/seedS from its train.json marker."""
    return os.path.dirname(input[0])


def cell_digest(wildcards):
    """Changes when a setting that shapes this cell changes, so only that cell retrains."""
    return settings_digest(cell_settings(CFG, wildcards.task, wildcards.method))


# ---- what `snakemake` builds by default --------------------------------------------------------
TABLE_FORMATS = ["csv", "md", "tex", "html"]  # the numbers; Markdown, LaTeX and HTML (the report's) renderings


def table_outputs():
    main = expand(f"{RESULTS}/tables/main_table.{{ext}}", ext=TABLE_FORMATS)
    per_task = expand(
        f"{RESULTS}/tables/{{metric}}_{{task}}.{{ext}}", metric=["best_at_k", "pass_at_k"], task=TASKS, ext=TABLE_FORMATS
    )
    return main + per_task


def interval_outputs():
    """Bootstrap intervals over seeds x problems (vpo/report/intervals.py): two tables, three figures."""
    tables = expand(f"{RESULTS}/tables/{{name}}.{{ext}}", name=["intervals", "pool_quality"], ext=TABLE_FORMATS)
    return tables + [f"{FIGURES}/{stem}.pdf" for stem in ("intervals", "performance_profiles", "pool_quality")]


def report_ks():
    """k of best@k and pass@k in the interval tables and the ablations table: 1, 10 and report.best_at."""
    return ",".join(str(k) for k in sorted({1, min(10, CFG["report"]["best_at"]), CFG["report"]["best_at"]}))


def main_methods():
    """The methods of the main pass@k and best@k figures (report.main_methods) that are in the grid;
    all of the grid's when none is."""
    return [m for m in CFG["report"]["main_methods"] if m in METHODS] or list(METHODS)


def figure_outputs():
    figures = [f"{FIGURES}/pass_at_k.pdf", f"{FIGURES}/best_at_k.pdf"]
    if set(METHODS) - set(main_methods()):  # every method, in the appendix
        figures += [f"{FIGURES}/appendix_pass_at_k.pdf", f"{FIGURES}/appendix_best_at_k.pdf"]
    if diversity_methods():
        figures.append(f"{FIGURES}/diversity_over_training.pdf")
    if strategy_methods():
        figures.append(f"{FIGURES}/strategies_over_training.pdf")
    return figures + [f"{FIGURES}/mechanism_bandit.pdf", f"{FIGURES}/mechanism_advantage.pdf"]  # seconds, no model




def figure_files(stem, subcategory, caption=None):
    """The figure's PDF and its PNG in the HTML report (caption: workflow/report/<caption or stem>.rst)."""
    png = report(f"{FIGURES}/{stem}.png", category="Figures", subcategory=subcategory,
                 caption=f"../workflow/report/{caption or stem}.rst")
    return {"pdf": f"{FIGURES}/{stem}.pdf", "png": png}


def plot_command(stem):
    """`vpo plot <stem>` with the rule's input of each table and its param of each option (every rule
    whose figure shows methods has params `variants=VARIANTS`)."""
    figure = FIGURE_TABLE[stem]
    flags = [f"--{name.replace('_', '-')} {{input.{name}}}" for name in figure.tables]
    flags += [f"--{name} {{params.{name}:q}}" for name in figure.options]
    return f"python -m vpo.cli plot {stem} {' '.join(flags)} --out {{output.pdf}} {{output.png}} > {{log}} 2>&1"


def plot_shell(stem, inputs, params, *, log):
    """plot_command's command with its inputs, params, outputs and log filled in (for rules made in a loop,
    whose shell expression cannot name the loop's variable: figures.smk)."""
    figure = FIGURE_TABLE[stem]
    flags = [f"--{name.replace('_', '-')} {shlex.quote(str(inputs[name]))}" for name in figure.tables]
    flags += [f"--{name} {shlex.quote(str(params[name]))}" for name in figure.options]
    out = f"{FIGURES}/{stem}.pdf {FIGURES}/{stem}.png"
    return f"python -m vpo.cli plot {stem} {' '.join(flags)} --out {out} > {log} 2>&1"


def eval_pools(wildcards):
    """Every candidate pool of the task's standard evaluation (all methods, training and eval seeds)."""
    return [path.replace(".json", ".parquet") for path in eval_jsons(tasks=[wildcards.task])]


def evolve_summaries(task):
    return [f"{CELL}/evolve/summary.json".format(task=task, method=m, seed=s) for m in METHODS for s in SEEDS]


def case_study_methods():
    """The methods of figures/lcb_case_study.pdf (the paper's: GRPO and VPO) that are in the grid."""
    return [m for m in ("grpo", "vpo") if m in METHODS]


def evolve_table_iterations():
    """Columns of results/tables/evolve.*: a quarter, half and all of the search (paper: 50, 100, 200)."""
    iterations = CFG["evolve"]["iterations"]
    return sorted({max(1, round(iterations * share)) for share in (0.25, 0.5, 1.0)})


def evolve_outputs():
    figures = expand(f"{FIGURES}/evolve_{{task}}.pdf", task=TASKS)
    if "lcb" in TASKS and case_study_methods():
        figures.append(f"{FIGURES}/lcb_case_study.pdf")
    return figures + expand(f"{RESULTS}/tables/evolve.{{ext}}", ext=TABLE_FORMATS)


# ---- ablations (config.yaml `ablations`: their methods on their tasks, beside the grid) ---------------
def ablation_names():
    """The ablations that are drawn: those with methods, when ablations.tasks is not empty."""
    return [name for name in ABLATIONS if ablation_methods(CFG, name)]


def ablation_cells(suffix):
    """A file of every ablation cell: `suffix` under the cell directory (train.json, eval/evalseed<e>.json)."""
    return [f"{CELL}/{suffix}".format(task=t, method=m, seed=s, e=e)
            for t in ABLATION_TASKS for m in ablation_methods(CFG) for s in SEEDS for e in eval_seeds(t)]


def ablation_values(name):
    """JSON {method: the value it varies} for the alpha and m ablations (their figure's panel against
    it; m from the first ablation task), {} for the others (an empty shell argument would vanish)."""
    methods = ablation_methods(CFG, name)
    if name == "alpha":
        return json.dumps({m: method_settings(CFG, m)["alpha"] for m in methods})
    if name == "m":
        return json.dumps({m: answers_per_rollout(CFG, ABLATION_TASKS[0], m) for m in methods})
    return "{}"


def ablation_outputs():
    if not ablation_names():
        return []
    figures = [f"{FIGURES}/ablation_{name}.pdf" for name in ablation_names()]
    return figures + expand(f"{RESULTS}/tables/ablations.{{ext}}", ext=TABLE_FORMATS)


def final_outputs():
    outputs = figure_outputs() + table_outputs() + interval_outputs() + evolve_outputs() + ablation_outputs()
    # every figure also as PNG (the HTML report's rendering): asked for, so a tree from before is completed
    pngs = [path[:-4] + ".png" for path in outputs if path.startswith(f"{FIGURES}/")]
    figures = [path for path in outputs + pngs if path.startswith(f"{FIGURES}/")]
    published = [f"figures/{os.path.basename(path)}" for path in figures]  # rule publish_figure, with its sidecar
    return outputs + pngs + published + [f"{path}.source" for path in published]

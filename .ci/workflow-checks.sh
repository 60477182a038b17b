#!/usr/bin/env bash
# Workflow checks for CI (run as root on Debian 12): lint, the plan of every profile, the ci preset
# through a real single-node Slurm (checking that every job ran as a Slurm job), then the verl_cpu
# preset (veRL's own trainer on CPU), the trl_cpu preset (TRL's GRPOTrainer) and the example task plugin.
set -euo pipefail
cd "$(dirname "$0")/.."
REPO=$PWD
SNAKEMAKE="$REPO/.venv/bin/snakemake"

echo "== snakemake --lint"
"$SNAKEMAKE" --lint

echo "== dry-runs: default (cpu preset), profiles/slurm and profiles/lsf (paper preset)"
plan=$(mktemp -d)
for profile in default slurm lsf; do
  args=(); [ "$profile" = default ] || args=(--profile "$REPO/profiles/$profile")
  total=$("$SNAKEMAKE" -n --snakefile "$REPO/workflow/Snakefile" --directory "$plan" \
          --configfile "$REPO/config.yaml" --workflow-profile "$REPO/profiles/default" "${args[@]}" \
          | awk '$1 == "total" && !seen {print $2; seen = 1}')
  echo "$profile: $total jobs planned"
  [[ -n "$total" && "$total" -gt 0 ]] || { echo "profile $profile planned no jobs"; exit 1; }
done
rm -rf "$plan"

echo "== the ci preset through a real Slurm (profiles/slurm-ci)"
work=$(mktemp -d)
export STATE="$work/.slurm-ci"
bash .ci/start-slurm.sh
trap 'bash "$REPO/.ci/stop-slurm.sh"' EXIT
run=(--snakefile "$REPO/workflow/Snakefile" --directory "$work" --configfile "$REPO/config.yaml")
start=$(date +%s)
# Snakemake ignores SIGTERM while Slurm jobs are outstanding: timeout -k sends SIGKILL after 30 s.
timeout -k 30 1200 "$SNAKEMAKE" "${run[@]}" --workflow-profile none --profile "$REPO/profiles/slurm-ci"
echo "ci preset through Slurm: $(( $(date +%s) - start )) s"

# Every rule except `all` must have run as Slurm jobs, all of them COMPLETED.
squeue -h --states=all -o "%i %T %k" | grep " rule_" | sort -n | tee "$work/slurm-jobs.txt"
n_jobs=$(wc -l < "$work/slurm-jobs.txt")
n_done=$(grep -c " COMPLETED " "$work/slurm-jobs.txt" || true)
n_logs=$(find "$work/.snakemake/slurm_logs" -name '*.log' | wc -l)
# The plan's job counts per rule; `all` and the local copies to figures/ of rule publish_figure run on
# the submitting machine, every other rule of the plan must have run through Slurm.
"$SNAKEMAKE" "${run[@]}" --workflow-profile none --config preset=ci -n --forceall \
  | awk '/^job +count/ && !seen {table = 1; seen = 1; next} $1 == "total" {table = 0} table && NF == 2 && $2 ~ /^[0-9]+$/ {print}' \
  | grep -v -e '^all ' -e '^publish_figure ' > "$work/planned-rules.txt"
expected=$(awk '{n += $2} END {print n}' "$work/planned-rules.txt")
echo "slurm jobs: $n_jobs, completed: $n_done, job logs: $n_logs, workflow jobs besides 'all' and the copies: $expected"
# (one test: under set -e a failure early in an && list would not stop the script)
[[ "$n_jobs" -eq "$expected" && "$n_done" -eq "$expected" && "$n_logs" -eq "$expected" ]] || { echo "not every job ran through Slurm"; exit 1; }
for rule in $(awk '{print $1}' "$work/planned-rules.txt"); do
  [ -d "$work/.snakemake/slurm_logs/rule_$rule" ] || { echo "rule $rule did not run through Slurm"; exit 1; }
done
for target in figures/pass_at_k.pdf figures/ci/best_at_k.pdf figures/ci/diversity_over_training.pdf \
              results/ci/tables/main_table.md figures/ci/evolve_maze.pdf figures/ci/lcb_case_study.pdf \
              results/ci/tables/evolve.md figures/ci/pass_at_k.png results/ci/tables/main_table.html; do
  [ -s "$work/$target" ] || { echo "missing $target"; exit 1; }
done
cat "$work/results/ci/tables/main_table.md" "$work/results/ci/tables/evolve.md"
bash .ci/stop-slurm.sh
trap - EXIT

# trainer_preset PRESET SECONDS: the preset preprocess to figures in a scratch directory, then its
# checks (.ci/check_trainer_preset.py: which backend trained, VPO's diagnostics, the figures)
trainer_preset() {
  local preset=$1 limit=$2 dir start
  dir=$(mktemp -d)
  start=$(date +%s)
  timeout -k 30 "$limit" "$SNAKEMAKE" --snakefile "$REPO/workflow/Snakefile" --directory "$dir" \
    --configfile "$REPO/config.yaml" --workflow-profile "$REPO/profiles/default" --cores all --config preset="$preset"
  echo "$preset preset: $(( $(date +%s) - start )) s"
  "$REPO/.venv/bin/python" .ci/check_trainer_preset.py "$dir" "$preset"
  rm -rf "$dir"
}

echo "== the verl_cpu preset: veRL's own trainer on CPU, preprocess to figures"
trainer_preset verl_cpu 1800

echo "== the trl_cpu preset: TRL's GRPOTrainer with the project's estimators (vpo/trl_ext), preprocess to figures"
trainer_preset trl_cpu 1200

echo "== the example task plugin (examples/vpo-colours-task): its own tests, then the ci preset on it alone"
# installed into a directory of its own, not the project's environment (the suite's registry stays the project's)
plugin=$(mktemp -d)
"$REPO/.venv/bin/pip" install -q --no-deps --target "$plugin/site" "$REPO/examples/vpo-colours-task"
PYTHONPATH="$plugin/site" "$REPO/.venv/bin/python" -m pytest -q -p no:cacheprovider "$REPO/examples/vpo-colours-task/tests"
start=$(date +%s)
PYTHONPATH="$plugin/site" timeout -k 30 900 "$SNAKEMAKE" --snakefile "$REPO/workflow/Snakefile" --directory "$plugin/run" \
  --configfile "$REPO/config.yaml" "$REPO/examples/vpo-colours-task/colours.yaml" \
  --workflow-profile "$REPO/profiles/default" --cores all --config preset=ci 'tasks=["colours"]'
echo "example plugin under the ci preset: $(( $(date +%s) - start )) s"
for target in results/ci/tables/main_table.md figures/ci/best_at_k.pdf figures/ci/diversity_over_training.pdf \
              figures/ci/evolve_colours.pdf; do
  [ -s "$plugin/run/$target" ] || { echo "missing $target"; exit 1; }
done
grep -q "Colours best@" "$plugin/run/results/ci/tables/main_table.md" || { echo "the table does not name the plugin's task"; exit 1; }
rm -rf "$plugin"

echo "== snakemake --report, looked at in headless Chromium"
"$SNAKEMAKE" "${run[@]}" --workflow-profile none --config preset=ci --report "$work/report.html"
[ -s "$work/report.html" ]
if ! command -v chromium-headless-shell > /dev/null; then
  apt-get install -y -q chromium-headless-shell > /dev/null || { apt-get update -q > /dev/null && apt-get install -y -q chromium-headless-shell > /dev/null; }
fi
"$REPO/.venv/bin/python" .ci/check_report.py "$work/report.html" "$REPO/.ci-report" ci
rm -rf "$work"
echo "workflow checks: ok"

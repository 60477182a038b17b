#!/usr/bin/env bash
# Planning time of the workflow: `snakemake -n` wall seconds and job count per profile, from a clean
# directory (goal: the paper grid, 593 jobs, plans in under 10 s). Run from the repository root.
set -euo pipefail
REPO=$(cd "$(dirname "$0")/.." && pwd)
SNAKEMAKE="$REPO/.venv/bin/snakemake"
work=$(mktemp -d); trap 'rm -rf "$work"' EXIT
printf "%-10s %-8s %s\n" profile jobs seconds
for profile in default slurm lsf; do
  args=(); [ "$profile" = default ] || args=(--profile "$REPO/profiles/$profile")
  start=$(date +%s%N)
  jobs=$("$SNAKEMAKE" -n --snakefile "$REPO/workflow/Snakefile" --directory "$work" --configfile "$REPO/config.yaml" \
         --workflow-profile "$REPO/profiles/default" "${args[@]}" | awk '$1 == "total" && !seen {print $2; seen = 1}')
  ms=$(( ($(date +%s%N) - start) / 1000000 ))
  printf "%-10s %-8s %d.%02d\n" "$profile" "$jobs" $((ms / 1000)) $((ms % 1000 / 10))
done

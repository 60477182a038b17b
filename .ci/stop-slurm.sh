#!/usr/bin/env bash
# Stop the daemons started by start-slurm.sh (by pid, newest first) and move slurm.conf away:
# with a slurm.conf but no controller, every later snakemake call waits ~9 s in `scontrol`.
STATE=${STATE:-$PWD/.slurm-ci}
if [ -f "$STATE/pids" ]; then
  tac "$STATE/pids" | while read -r pid; do kill "$pid" 2>/dev/null || true; done
  sleep 1
  rm -f "$STATE/pids"
fi
mv -f /etc/slurm/slurm.conf /etc/slurm/slurm.conf.stopped 2>/dev/null || true
echo "slurm: stopped"

#!/usr/bin/env bash
# A disposable single-node Slurm (Debian 12 slurm-wlm 22.05) for CI, as root, without systemd and
# without slurmdbd: profiles/slurm-ci polls job states with squeue, so finished jobs must stay
# visible for longer than the whole run (MinJobAge=7200; the run is capped at 1200 s, and the
# check counts every job of the run with squeue at its end). State, logs and pid files live in
# $STATE; stop with stop-slurm.sh.
set -euo pipefail
STATE=${STATE:-$PWD/.slurm-ci}
mkdir -p "$STATE"; STATE=$(cd "$STATE" && pwd)
HOST=$(hostname -s); NCPU=$(nproc)
MEM=$(( $(awk '/MemTotal/{print $2}' /proc/meminfo) / 1024 * 8 / 10 ))   # 80% of RAM, MB

pkgs="slurmctld slurmd slurm-client munge"
if ! dpkg -s $pkgs >/dev/null 2>&1; then
  apt-get update -qq
  DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends $pkgs >/dev/null
fi

mkdir -p "$STATE"/{ctld,slurmd,log} /etc/slurm /run/munge
: > "$STATE/pids"

# munge: the package's postinst normally creates the key
[ -s /etc/munge/munge.key ] || mungekey --create --keyfile /etc/munge/munge.key
chown -R munge:munge /etc/munge /run/munge /var/lib/munge /var/log/munge
chmod 700 /etc/munge
runuser -u munge -- /usr/sbin/munged
for _ in $(seq 50); do [ -s /run/munge/munged.pid ] && break; sleep 0.1; done
cat /run/munge/munged.pid >> "$STATE/pids"
munge -n | unmunge >/dev/null

cat > /etc/slurm/slurm.conf <<CONF
ClusterName=ci
SlurmctldHost=${HOST}
AuthType=auth/munge
CredType=cred/munge
SlurmUser=root
SlurmdUser=root
StateSaveLocation=${STATE}/ctld
SlurmdSpoolDir=${STATE}/slurmd
SlurmctldPidFile=${STATE}/slurmctld.pid
SlurmdPidFile=${STATE}/slurmd.pid
SlurmctldLogFile=${STATE}/log/slurmctld.log
SlurmdLogFile=${STATE}/log/slurmd.log
ProctrackType=proctrack/linuxproc
TaskPlugin=task/none
JobAcctGatherType=jobacct_gather/linux
MpiDefault=none
AccountingStorageType=accounting_storage/none
JobCompType=jobcomp/none
SchedulerType=sched/backfill
SelectType=select/cons_tres
SelectTypeParameters=CR_Core_Memory
DefMemPerCPU=500
ReturnToService=2
MinJobAge=7200
NodeName=${HOST} CPUs=${NCPU} RealMemory=${MEM} State=UNKNOWN
PartitionName=cpu Nodes=ALL Default=YES MaxTime=INFINITE State=UP
PartitionName=gpu Nodes=ALL MaxTime=INFINITE State=UP
CONF

/usr/sbin/slurmctld -c -i        # -c: clear any old state
/usr/sbin/slurmd
for _ in $(seq 100); do sinfo -h -o %T 2>/dev/null | grep -qx idle && break; sleep 0.2; done
cat "$STATE/slurmctld.pid" "$STATE/slurmd.pid" >> "$STATE/pids"
sinfo -N -o "%N %P %T %c %m"
sbatch --wait -Q -o /dev/null --wrap true
echo "slurm: up"

#!/usr/bin/env bash
# A real single-node Slurm on this machine, for the tests and for trying profiles/slurm: munge,
# slurmctld and slurmd as root, listening on loopback only, state and logs in STATE_DIR.
#   scripts/slurm_up.sh [STATE_DIR]     (default /tmp/sim2dl-slurm; idempotent)
#   scripts/slurm_down.sh [STATE_DIR]   stops the daemons by their PID files
# Installs slurm-wlm and munge from Debian's apt when they are missing. Every wait is bounded.
set -euo pipefail
STATE=${1:-/tmp/sim2dl-slurm}
HOST=$(hostname -s)
CPUS=${SIM2DL_SLURM_CPUS:-4}  # more than the cores on purpose: tasks of a few small jobs may overlap

if [ "$(id -u)" != 0 ]; then echo "slurm_up: needs root (it starts slurmd and munged)" >&2; exit 1; fi
"$(dirname "$0")/apt_ensure.sh" slurmctld=slurm-wlm sbatch=slurm-client munged=munge

mkdir -p "$STATE"/ctld "$STATE"/d /etc/slurm /run/munge /var/log/munge /var/lib/munge /etc/munge
chown munge:munge /run/munge /var/log/munge /var/lib/munge /etc/munge
chmod 0755 /run/munge
if [ ! -s /etc/munge/munge.key ]; then
  dd if=/dev/urandom of=/etc/munge/munge.key bs=1024 count=1 status=none
fi
chown munge:munge /etc/munge/munge.key && chmod 0400 /etc/munge/munge.key

alive() { [ -s "$1" ] && kill -0 "$(cat "$1")" 2>/dev/null; }

if ! alive /run/munge/munged.pid; then
  runuser -u munge -- /usr/sbin/munged
fi

CONF=/etc/slurm/slurm.conf
if [ -e "$CONF" ] && ! grep -q "^# sim2dl single-node test cluster" "$CONF"; then
  echo "slurm_up: $CONF exists and is not ours; not touching it" >&2; exit 1
fi
MEM=$(( $(awk '/MemTotal/ {print $2}' /proc/meminfo) / 1024 / 2 ))
cat > "$CONF.tmp" <<CONFEOF
# sim2dl single-node test cluster (scripts/slurm_up.sh); loopback only, no accounting daemon.
ClusterName=sim2dl
SlurmctldHost=$HOST(127.0.0.1)
SlurmUser=root
SlurmdUser=root
AuthType=auth/munge
CommunicationParameters=NoCtldInAddrAny,NoInAddrAny
StateSaveLocation=$STATE/ctld
SlurmdSpoolDir=$STATE/d
SlurmctldPidFile=$STATE/slurmctld.pid
SlurmdPidFile=$STATE/slurmd.pid
SlurmctldLogFile=$STATE/slurmctld.log
SlurmdLogFile=$STATE/slurmd.log
$(grep -v "^#" "$(dirname "$0")/slurm-common.conf")
NodeName=$HOST NodeAddr=127.0.0.1 CPUs=$CPUS RealMemory=$MEM State=UNKNOWN
PartitionName=debug Nodes=$HOST Default=YES MaxTime=INFINITE State=UP OverSubscribe=NO
CONFEOF
mv "$CONF.tmp" "$CONF"

alive "$STATE/slurmctld.pid" || slurmctld -i
alive "$STATE/slurmd.pid" || slurmd

for _ in $(seq 1 120); do
  state=$(sinfo -h -n "$HOST" -o %t 2>/dev/null || true)
  case "$state" in
    idle*|mix*|alloc*) echo "slurm_up: node $HOST is $state (state in $STATE)"; exit 0 ;;
    drain*|down*) scontrol update nodename="$HOST" state=resume 2>/dev/null || true ;;
  esac
  sleep 1
done
echo "slurm_up: node $HOST did not become idle within 120 s; logs: $STATE/slurmctld.log $STATE/slurmd.log" >&2
exit 1

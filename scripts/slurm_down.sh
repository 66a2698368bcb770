#!/usr/bin/env bash
# Stop the single-node Slurm started by scripts/slurm_up.sh, by PID file (never by process name).
set -uo pipefail
STATE=${1:-/tmp/sim2dl-slurm}
for pidfile in "$STATE/slurmd.pid" "$STATE/slurmctld.pid" /run/munge/munged.pid; do
  [ -s "$pidfile" ] || continue
  pid=$(cat "$pidfile")
  kill "$pid" 2>/dev/null || continue
  for _ in $(seq 1 50); do kill -0 "$pid" 2>/dev/null || break; sleep 0.2; done
  kill -9 "$pid" 2>/dev/null || true
done
echo "slurm_down: stopped"

#!/usr/bin/env bash
# The cluster tests under load (issue #48): a CPU hog keeps every core busy (stress-ng from apt) while
#
#   scripts/stress_cluster.sh [K]          tests/test_cluster.py runs K times in a row (default 3), or
#   scripts/stress_cluster.sh --suite      `CI=true make test` runs once: set-up and the whole suite, as CI
#                                          runs it (from a fresh clone: the set-up under load too)
#
# Run it from the repository as root (the virtual cluster needs it); the K runs need `make env` first. It prints each run's
# result and time, the slowest test of each, and as its last line one JSON object: passes out of runs, the
# slowest test's seconds, each run's seconds. Exit status 1 when any run failed. The hog is stopped on
# exit, whatever happens. Not part of `make test`: a check to run after changing anything the cluster
# tests touch (Slurm settings, launch, start-up), and before saying the suite is load-proof.
set -Eeuo pipefail
cd "$(dirname "$0")/.."
REPO=$PWD
BIN=$REPO/.venv/bin
scripts/apt_ensure.sh stress-ng=stress-ng
if [ "${1:-}" = --suite ]; then
  runs=1; label=suite; run=(make test PYTEST_ARGS="-p no:cacheprovider")
else
  [ -x "$BIN/pytest" ] || { echo "stress_cluster: run 'make env' first" >&2; exit 2; }
  runs=${1:-3}; label=cluster; run=("$BIN/pytest" tests/test_cluster.py -p no:cacheprovider)
fi
[[ "$runs" =~ ^[1-9][0-9]*$ ]] || { echo "stress_cluster: K must be a positive number, not '$runs'" >&2; exit 2; }
cores=$(nproc)
out=$(mktemp -d /var/tmp/sim2dl-stress-XXXXXX)
stress-ng --cpu "$cores" --cpu-method matrixprod --timeout 0 --quiet &
hog=$!
trap 'kill "$hog" 2>/dev/null || true; wait "$hog" 2>/dev/null || true' EXIT
echo "stress_cluster: $cores busy workers (stress-ng pid $hog); $runs run(s) of ${run[*]}; logs in $out" >&2

passes=0; seconds=(); slowest=0; slowest_test=""
for i in $(seq 1 "$runs"); do
  log=$out/run-$i.log
  start=$(date +%s)
  if CI=true PATH="$BIN:$PATH" TF_USE_LEGACY_KERAS=1 TF_CPP_MIN_LOG_LEVEL=2 \
       timeout -k 30 5400 "${run[@]}" >"$log" 2>&1; then
    passes=$((passes + 1)); result=passed
  else
    result=FAILED
  fi
  took=$(( $(date +%s) - start )); seconds+=("$took")
  # pytest's --durations table (pyproject addopts): the first "call" row is the slowest test
  top=$(grep -m1 -E '^[0-9.]+s call ' "$log" || true)
  t=${top%%s *}; t=${t%.*}
  if [ -n "$top" ] && [ "${t:-0}" -ge "$slowest" ]; then slowest=$t; slowest_test=${top#* call }; fi
  echo "run $i: $result in ${took} s; $(tail -1 "$log"); slowest: ${top:-none}" >&2
done
list=$(IFS=,; echo "${seconds[*]}")
printf '{"check": "stress_%s", "cores_busy": %d, "runs": %d, "passes": %d, "seconds_per_run": [%s], "slowest_test_s": %d, "slowest_test": "%s", "logs": "%s"}\n' \
  "$label" "$cores" "$runs" "$passes" "$list" "$slowest" "$slowest_test" "$out"
[ "$passes" = "$runs" ]

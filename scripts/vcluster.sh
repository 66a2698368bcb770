#!/usr/bin/env bash
# A virtual multi-node Slurm cluster on this one machine (root, Linux namespaces), to run multi-node jobs
# for real before spending an allocation: each node has its own hostname (UTS namespace), network stack
# (a veth on a private bridge), node-local /tmp and /dev/shm (tmpfs), process tree (PID namespace) and
# its own slurmd; the head (this host's namespace, on the bridge's .1 address) runs slurmctld and one
# munged whose socket every node sees. A shared directory plays the parallel file system: the same path
# on every node.
#
#   scripts/vcluster.sh up N [SIZE] [GPUS]   start N nodes (tmpfs SIZE per node, default 2g), each
#                                     declaring GPUS GPUs (default 0) as GRES with stand-in device files:
#                                     Slurm schedules them and binds them to tasks (CUDA_VISIBLE_DEVICES) as
#                                     on a GPU partition; prints the cluster's directory CLUSTER (per-run
#                                     unique) on its last line
#   scripts/vcluster.sh down CLUSTER  stop everything and remove all it made (safe to repeat)
#   scripts/vcluster.sh exec CLUSTER NODE CMD...   run CMD inside node NODE (node1..nodeN)
#   scripts/vcluster.sh kill CLUSTER NODE          a node failure: its processes and namespaces go
#   scripts/vcluster.sh stop CLUSTER NODE          its slurmd stops answering (SIGSTOP); its jobs run on
#
#   . CLUSTER/env   then sinfo / sbatch / srun / snakemake --profile profiles/slurm use this cluster
#                   (SLURM_CONF); jobs must work in CLUSTER/shared (node-local /tmp is each node's own).
#
# Everything it creates (namespaces, bridge, veths, daemons, files) carries the run's unique prefix and
# is removed by `down`, and by `up` itself if it fails. Traffic stays on the private bridge; daemons
# listen on its addresses only. Slurm without cgroups (proctrack/linuxproc, task/none): this host may
# itself be a cgroup sandbox. Time: about 2-5 s up for 3 nodes, 1 s down.
set -Eeuo pipefail  # -E: the ERR trap also fires inside functions
ROOT=${SIM2DL_VCLUSTER_ROOT:-/var/tmp}  # not under /tmp: every node mounts its own /tmp
HERE=$(cd "$(dirname "$0")" && pwd)
REPO=$(cd "$HERE/.." && pwd)

die() { echo "vcluster: $*" >&2; exit 1; }
need_root() { [ "$(id -u)" = 0 ] || die "needs root (network namespaces, slurmd)"; }
node_pid() { cat "$1/nodes/$2.pid" 2>/dev/null || die "no node $2 in $1"; }

enter() {  # enter CLUSTER NODE CMD...: run CMD in the node's namespaces
  local cluster=$1 node=$2 pid
  shift 2
  pid=$(node_pid "$cluster" "$node")
  kill -0 "$pid" 2>/dev/null || die "node $node is down"
  nsenter -t "$pid" --net --uts --ipc --pid --mount -- "$@"
}

free_subnet() {  # a 10.251.X.0/24 that no interface here uses
  local x
  for _ in $(seq 1 50); do
    x=$(( (RANDOM % 250) + 2 ))
    ip -4 -o addr show | grep -q " 10\.251\.$x\." || { echo "$x"; return; }
  done
  die "no free 10.251.X.0/24 subnet"
}

down() {
  local cluster=$1 id pid
  [ -d "$cluster" ] || return 0
  id=$(cat "$cluster/id" 2>/dev/null || true)
  for pidfile in "$cluster"/nodes/*.pid "$cluster"/head/slurmctld.pid "$cluster"/munge/munged.pid; do
    [ -s "$pidfile" ] || continue
    pid=$(cat "$pidfile")
    kill -9 "$pid" 2>/dev/null || true  # a node's init: its PID namespace, slurmd and jobs die with it
  done
  if [ -n "$id" ]; then
    for ns in $(ip netns list | awk '{print $1}' | grep "^$id-" || true); do ip netns del "$ns" || true; done
    ip link del "$id-br" 2>/dev/null || true
  fi
  for _ in $(seq 1 50); do  # tmpfs mounts go with the nodes' mount namespaces once their processes exit
    rm -rf "$cluster" 2>/dev/null && return 0
    sleep 0.1
  done
  die "could not remove $cluster"
}

up() {
  local nodes=${1:-3} size=${2:-2g} gpus=${3:-0}
  need_root
  [[ "$nodes" =~ ^[1-9][0-9]?$ ]] || die "N must be 1..99, not '$nodes'"
  command -v nsenter >/dev/null && command -v ip >/dev/null || die "needs nsenter (util-linux) and ip (iproute2)"
  "$HERE/apt_ensure.sh" slurmctld=slurm-wlm slurmd=slurmd sbatch=slurm-client munged=munge >&2
  local id="s2v$(printf '%04x' $((RANDOM % 65536)))"
  local cluster="$ROOT/sim2dl-vcluster-$id"
  mkdir "$cluster" || die "$cluster exists"
  trap 'echo "vcluster: up failed; removing $cluster" >&2; down "$cluster"' ERR
  echo "$id" > "$cluster/id"
  mkdir -p "$cluster"/{nodes,head/state,munge,logs,shared,etc}
  chmod 0755 "$cluster" "$cluster/shared"
  local x
  x=$(free_subnet)
  local net="10.251.$x" br="$id-br"
  echo "$net" > "$cluster/subnet"

  # Network: a bridge holding .1 (the head), node i at .(10+i), each on a veth whose far end is its eth0.
  ip link add "$br" type bridge
  ip addr add "$net.1/24" dev "$br"
  ip link set "$br" up
  {
    echo "127.0.0.1 localhost"
    echo "$net.1 head"
    for i in $(seq 1 "$nodes"); do echo "$net.$((10 + i)) node$i"; done
  } > "$cluster/hosts"

  # One munged for all: a Unix socket works across network namespaces.
  dd if=/dev/urandom of="$cluster/munge/munge.key" bs=1024 count=1 status=none
  chmod 0400 "$cluster/munge/munge.key"
  chmod 0755 "$cluster/munge"
  local sock="$cluster/munge/munge.socket"
  munged --force --socket="$sock" --key-file="$cluster/munge/munge.key" --pid-file="$cluster/munge/munged.pid" \
    --seed-file="$cluster/munge/munged.seed" --log-file="$cluster/logs/munged.log" 2>>"$cluster/logs/munged.log"

  local port=$(( 20000 + (RANDOM % 20000) ))
  local cpus mem
  cpus=$(nproc)
  mem=$(( $(awk '/MemTotal/ {print $2}' /proc/meminfo) / 1024 / (nodes + 1) ))
  # SlurmdTimeout=10: a dead node is noticed within seconds (the tests kill nodes).
  # In etc/, which every node mounts as its /etc/slurm: the default path, as on a real cluster's nodes
  # (Snakemake's job-step executor drops SLURM_CONF from the environment of the rules it runs).
  cat > "$cluster/etc/slurm.conf" <<EOF
# sim2dl virtual cluster $id (scripts/vcluster.sh): $nodes nodes on $net.0/24
ClusterName=$id
SlurmctldHost=head($net.1)
SlurmctldPort=$port
SlurmdPort=$((port + 1))
SlurmUser=root
SlurmdUser=root
AuthType=auth/munge
AuthInfo=socket=$sock
CredType=cred/munge
CommunicationParameters=NoCtldInAddrAny,NoInAddrAny
StateSaveLocation=$cluster/head/state
SlurmctldPidFile=$cluster/head/slurmctld.pid
SlurmctldLogFile=$cluster/logs/slurmctld.log
SlurmdSpoolDir=/tmp/slurmd
SlurmdPidFile=/tmp/slurmd.pid
SlurmdLogFile=$cluster/logs/%n-slurmd.log
SlurmdTimeout=10
$(grep -v "^#" "$HERE/slurm-common.conf")
NodeName=DEFAULT CPUs=$((cpus * 2)) RealMemory=$mem State=UNKNOWN$( ((gpus)) && echo " Gres=gpu:$gpus")
EOF
  if ((gpus)); then
    # GPUs without GPUs: Slurm 22.05's gres/gpu drops GPUs declared by count alone ("Removing file-less
    # GPU") and sets CUDA_VISIBLE_DEVICES only for files that are character devices, so each "GPU" is a
    # device node aliasing /dev/null (c 1 3). Slurm then schedules, binds and announces them per task.
    mkdir -p "$cluster/gpus"
    for g in $(seq 0 $((gpus - 1))); do mknod "$cluster/gpus/nvidia$g" c 1 3; done
    sed -i "1a GresTypes=gpu" "$cluster/etc/slurm.conf"
    printf 'AutoDetect=off\nName=gpu File=%s/gpus/nvidia[0-%d]\n' "$cluster" $((gpus - 1)) > "$cluster/etc/gres.conf"
  fi
  for i in $(seq 1 "$nodes"); do echo "NodeName=node$i NodeAddr=$net.$((10 + i))" >> "$cluster/etc/slurm.conf"; done
  echo "PartitionName=debug Nodes=node[1-$nodes] Default=YES MaxTime=INFINITE State=UP" >> "$cluster/etc/slurm.conf"
  printf 'export SLURM_CONF=%q\nexport SIM2DL_VCLUSTER=%q\n' "$cluster/etc/slurm.conf" "$cluster" > "$cluster/env"
  export SLURM_CONF="$cluster/etc/slurm.conf"

  # The head: slurmctld with the hostname `head` (which it must match) and the cluster's hosts file, so
  # that it listens on the bridge's address only.
  unshare --uts --mount --propagation private \
    sh -c 'hostname head && mount --bind "$0" /etc/hosts && exec slurmctld -i -f "$1"' "$cluster/hosts" "$SLURM_CONF" \
    </dev/null >>"$cluster/logs/slurmctld.log" 2>&1

  # Paths below /tmp that every node must still see although its /tmp is its own: this repository when
  # it lives there (a CI clone: the nodes run its venv), and SIM2DL_VCLUSTER_SHARE (colon-separated).
  local keep=("$REPO")
  IFS=: read -r -a extra <<< "${SIM2DL_VCLUSTER_SHARE:-}"
  keep+=("${extra[@]}")
  for path in "${keep[@]}"; do case "$path" in /tmp/*) echo "$path" ;; esac; done > "$cluster/keep"

  # Nodes: an init per node in its own namespaces (scripts/vcluster-node.sh).
  for i in $(seq 1 "$nodes"); do
    local ns="$id-n$i"
    ip netns add "$ns"
    ip link add "$id-v$i" type veth peer name eth0 netns "$ns"
    ip link set "$id-v$i" master "$br" up
    ip -n "$ns" addr add "$net.$((10 + i))/24" dev eth0
    ip -n "$ns" link set eth0 up
    ip -n "$ns" link set lo up
    # nsenter, not `ip netns exec`: that one remounts /sys, hiding /sys/fs/cgroup from slurmd
    nsenter --net="/run/netns/$ns" unshare --uts --mount --ipc --pid --fork --propagation private \
      bash "$HERE/vcluster-node.sh" "node$i" "$size" "$cluster" \
      </dev/null >>"$cluster/logs/node$i-init.log" 2>&1 &
    local launcher=$!
    for _ in $(seq 1 100); do [ -e "$cluster/nodes/node$i.ready" ] && break; sleep 0.05; done
    [ -e "$cluster/nodes/node$i.ready" ] || die "node$i did not start (see $cluster/logs/node$i-init.log)"
    pgrep -P "$launcher" > "$cluster/nodes/node$i.pid"  # the init inside the node's PID namespace
    enter "$cluster" "node$i" slurmd -N "node$i" -f "$SLURM_CONF" </dev/null >>"$cluster/logs/node$i-init.log" 2>&1
  done

  for _ in $(seq 1 120); do
    if [ "$(sinfo -h -o '%t %D' 2>/dev/null)" = "idle $nodes" ]; then
      trap - ERR
      echo "vcluster: $nodes nodes idle; . $cluster/env to use it" >&2
      echo "$cluster"
      return 0
    fi
    sleep 0.5
  done
  sinfo >&2 || true
  die "the nodes did not become idle within 60 s (logs in $cluster/logs)"
}

kill_node() {  # a node failure: its init goes, and with it its PID namespace (slurmd, job steps) and tmpfs
  local cluster=$1 node=$2 pid id
  pid=$(node_pid "$cluster" "$node")
  id=$(cat "$cluster/id")
  kill -9 "$pid" 2>/dev/null || true
  ip netns del "$id-n${node#node}" 2>/dev/null || true
}

stop_slurmd() {  # a hung slurmd: the node's jobs go on, but slurmctld hears nothing from it
  enter "$1" "$2" sh -c 'kill -STOP "$(cat /tmp/slurmd.pid)"'
}

case "${1:-}" in
  up) shift; up "$@" ;;
  down) [ $# = 2 ] || die "usage: down CLUSTER"; down "$2" ;;
  exec) [ $# -ge 4 ] || die "usage: exec CLUSTER NODE CMD..."; cluster=$2 node=$3; shift 3; enter "$cluster" "$node" "$@" ;;
  kill) [ $# = 3 ] || die "usage: kill CLUSTER NODE"; kill_node "$2" "$3" ;;
  stop) [ $# = 3 ] || die "usage: stop CLUSTER NODE"; stop_slurmd "$2" "$3" ;;
  *) sed -n '2,20p' "$0" >&2; exit 2 ;;
esac

#!/usr/bin/env bash
# The init of one virtual-cluster node (started by scripts/vcluster.sh inside the node's new UTS, mount,
# IPC and PID namespaces): its hostname, its own /proc, a tmpfs as its node-local /tmp and /dev/shm, the
# cluster's hosts file and Slurm config, and the paths listed in CLUSTER/keep bound back in at the same
# place (they lived below the host's /tmp, which the node's own tmpfs hides). Then it waits: the node
# lives as long as this process.   vcluster-node.sh NAME TMPFS_SIZE CLUSTER
set -euo pipefail
name=$1 size=$2 cluster=$3
hostname "$name"
mount -t proc proc /proc
mapfile -t keep < "$cluster/keep"
i=0
for path in "${keep[@]}"; do  # held open under the cluster's directory (outside /tmp) first
  mkdir -p "$cluster/keep.d/$name-$i" && mount --bind "$path" "$cluster/keep.d/$name-$i"
  i=$((i + 1))
done
mount -t tmpfs -o size="$size" tmpfs /tmp
i=0
for path in "${keep[@]}"; do
  mkdir -p "$path" && mount --bind "$cluster/keep.d/$name-$i" "$path"
  i=$((i + 1))
done
mount -t tmpfs tmpfs /dev/shm
mount --bind "$cluster/hosts" /etc/hosts
mkdir -p /etc/slurm && mount --bind "$cluster/etc" /etc/slurm
echo ready > "$cluster/nodes/$name.ready"
exec sleep infinity

"""Placement: which node each rank is on (MPI's shared-memory split, or virtual nodes of consecutive ranks
on one machine), where staged data lives on a node, and whether a node's staged copy is complete. Used by
staging, train, search, launch and doctor. Memory and time: a few objects per rank.
"""

from __future__ import annotations

import json
import os
import socket
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from pipeline import Sim2dlError
from pipeline.paths import StagedPaths


@dataclass(frozen=True)
class Topology:
    rank: int
    size: int
    node: int
    nodes: int
    node_ranks: tuple[tuple[int, ...], ...]  # global ranks of every node
    hostname: str


def topology(comm: Any, emulate_nodes: int) -> Topology:
    """Group ranks by node: MPI shared-memory split, or `emulate_nodes` groups of consecutive ranks."""
    rank, size = comm.Get_rank(), comm.Get_size()
    if emulate_nodes:
        if emulate_nodes > size:
            raise Sim2dlError(
                f"config key 'stage.emulate_nodes': {emulate_nodes} nodes need at least as many ranks"
            )
        key = rank * emulate_nodes // size
    else:
        from mpi4py import MPI

        node_comm = comm.Split_type(MPI.COMM_TYPE_SHARED, key=rank)
        key = node_comm.allreduce(rank, op=MPI.MIN)  # the node's lowest rank names it
        node_comm.Free()
    keys = comm.allgather(key)
    order = sorted(set(keys))
    node_ranks = tuple(tuple(r for r in range(size) if keys[r] == k) for k in order)
    return Topology(rank, size, order.index(key), len(order), node_ranks, socket.gethostname())


def default_target() -> Path:
    return Path(os.environ.get("TMPDIR") or "/tmp") / "sim2dl-stage"


def target_root(settings: Mapping[str, Any]) -> Path:
    """Where staged datasets go: stage.target, or $TMPDIR/sim2dl-stage."""
    return Path(settings["target"]) if settings["target"] else default_target()


def staged_node_dir(stage_summary: Path, topo: Topology) -> Path | None:
    """This node's staged directory if it holds everything the stage summary promised, else None."""
    try:
        node_dirs = json.loads(stage_summary.read_text())["node_dirs"]
        node_dir = Path(node_dirs[topo.node if len(node_dirs) > 1 else 0])
        listing = json.loads(StagedPaths(node_dir).listing.read_text())
    except (OSError, ValueError, KeyError, IndexError):
        return None
    complete = (
        len(node_dirs) in (1, topo.nodes)
        # sample mode stages one file per rank: those must be this job's ranks
        and (listing["mode"] != "sample" or listing["ranks"] == list(topo.node_ranks[topo.node]))
        and all((node_dir / name).exists() for name in listing["files"])
    )
    return node_dir if complete else None

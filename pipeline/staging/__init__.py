"""Staging: copy merged shards from the shared file system to node-local storage.

Every shard is read from the shared file system by exactly one rank of the whole job, in bounded chunks,
and sent over MPI to one writer rank on each node that needs it, as a chain (each writer forwards each
chunk to the next, and receives the next chunk while it writes and forwards this one); writers verify
the checksum from the merge metadata while writing and rename the file into place only when it matches.
Each rank runs a sender thread (read a chunk, send it on) and a receiver thread (receive a chunk, write
it, send it on), so reading, sending and writing overlap across the job. Memory: a few chunks per rank
(`stage.chunk_mb`) and the plan, a few objects per shard; time: the dataset's bytes over the slowest of
shared-file-system reads, the network and node-local writes.

Placement modes:
- replica: every node gets every shard;
- partition: the shards are split between nodes (balanced by bytes), each byte written once overall;
- sample: every rank gets `samples_per_rank` records drawn from the whole dataset (with or without
  replacement), written per rank as a TFRecord file of the original framed records (uncompressed
  TFRecord shards only); the node's rows are read and sent like shards.
Each node gets `staged.json`, the list of its files that the training input pipeline reads.

On one machine, `emulate_nodes` treats groups of consecutive ranks as separate nodes, each with its own
directory, so tests and benchmarks can exercise 2-4 "nodes".

Here the phases (plan.py: what goes where; copier.py: the copying). The stage step runs `stage_dataset`;
train and search run `ensure_staged` when a node's copy is gone (node-local storage purged after a job).
"""

from __future__ import annotations

import logging
import shutil
import time
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from pipeline import MB, Sim2dlError
from pipeline.formats.metadata import load_metadata
from pipeline.formats.shards import shard_format
from pipeline.paths import StagedPaths
from pipeline.runtime.mpi import all_ok
from pipeline.runtime.placement import Topology, staged_node_dir, target_root, topology
from pipeline.staging.copier import Copier
from pipeline.staging.plan import StagedFile, node_sources, plan, shard_sources
from pipeline.storage.fsutil import file_checksum, remove_stale_temporaries, write_json_atomic

log = logging.getLogger(__name__)  # to stderr (cli): stdout carries only the step's JSON summary


def stage_dataset(
    config: Mapping[str, Any], merged_dir: Path, summary_path: Path, comm: Any
) -> dict[str, Any]:
    """Stage the merged dataset to every node's storage as stage.mode says; rank 0 writes the summary."""
    settings = config["stage"]
    meta = load_metadata(merged_dir)
    topo = topology(comm, settings["emulate_nodes"])
    # One directory per dataset below the target, so datasets never mix and a rerun finds its files. A
    # dataset that grew (merge's generations) keeps its directory where every file is a shard checked by
    # its checksum, so only the new shards are copied; sample mode's files hold other records whenever
    # the dataset changes, so they go to a directory of this plan's own.
    grown_key = meta.get("first_plan_digest", meta["plan_digest"])
    target = target_root(settings) / (meta["plan_digest"] if settings["mode"] == "sample" else grown_key)[:16]
    emulated = settings["emulate_nodes"] > 0
    dirs = {k: target / f"node-{k:03d}" if emulated else target for k in range(topo.nodes)}
    sources = shard_sources(merged_dir, meta)
    # Every rank plans alike, so a bad setting fails on all: one message from rank 0 and a normal exit
    # (each rank printing and aborting lost the message to the abort, now and then).
    per_node, error = {}, missing_sources(sources) if topo.rank == 0 else None
    try:
        per_node = node_sources(settings, merged_dir, meta, topo, sources)
    except Sim2dlError as e:
        error = error or e
    all_ok(comm, error)
    wanted = {k: [src.name for src in per_node[k]] for k in per_node}
    done = already_staged(comm, topo, dirs[topo.node], per_node, meta["format"])
    for k, ranks in enumerate(topo.node_ranks):
        names = set(done[ranks[0]] or [])
        per_node[k] = [s for s in per_node[k] if s.name not in names]
    copier, seconds = copy(comm, topo, plan(per_node, topo), dirs, settings, meta["format"])
    if topo.node_ranks[topo.node][0] == topo.rank:
        write_listing(dirs[topo.node], settings["mode"], topo, wanted[topo.node], meta)
    summary = summarise(comm, topo, copier, seconds, settings["mode"], dirs, done)
    if topo.rank == 0:
        write_json_atomic(summary_path, summary)
    comm.barrier()
    return summary


def missing_sources(sources: list[StagedFile]) -> Sim2dlError | None:
    """Before any transfer: every source shard exists with the size the metadata gives."""
    missing = [s for s in sources if not s.pieces[0][0].exists() or s.pieces[0][0].stat().st_size != s.size]
    if not missing:
        return None
    path, size = missing[0].pieces[0][0], missing[0].size
    what = "missing" if not path.exists() else f"{path.stat().st_size} bytes, metadata says {size}"
    return Sim2dlError(f"source shard {path}: {what} ({len(missing)} of {len(sources)} shards affected)")


def already_staged(
    comm: Any, topo: Topology, my_dir: Path, per_node: Mapping[int, list[StagedFile]], format_name: str
) -> list[list[str] | None]:
    """Per rank (node leaders only), the files its node holds intact from an earlier run, after checking
    that the node's target has room for the rest."""
    node_leader = topo.node_ranks[topo.node][0] == topo.rank
    done_here: list[str] = []
    error = None
    if node_leader:
        try:
            my_dir.mkdir(parents=True, exist_ok=True)
            remove_stale_temporaries(my_dir)
            done_here = [
                s.name for s in per_node[topo.node] if verify_existing(my_dir / s.name, s, format_name)
            ]
            needed = sum(s.size for s in per_node[topo.node] if s.name not in done_here)
            free = shutil.disk_usage(my_dir).free
            if needed > free:
                error = Sim2dlError(
                    f"node {topo.node} ({topo.hostname}): target {my_dir} has {free / 1e9:.2f} GB free, "
                    f"staging needs {needed / 1e9:.2f} GB more (config key 'stage.target')"
                )
        except OSError as e:
            error = Sim2dlError(f"node {topo.node} ({topo.hostname}): cannot use target {my_dir}: {e}")
    all_ok(comm, error)
    return comm.allgather(done_here if node_leader else None)


def verify_existing(path: Path, src: StagedFile, format_name: str) -> bool:
    """A staged file from an earlier run counts only if it is complete and its checksum matches (sampled
    files, which have no checksum of their own, by their records' checks)."""
    if not path.exists() or path.stat().st_size != src.size:
        return False
    if src.checksum is None:
        return shard_format(format_name).verify(path)
    return file_checksum(path) == src.checksum


def copy(
    comm: Any,
    topo: Topology,
    transfers: list,
    dirs: Mapping[int, Path],
    settings: Mapping[str, Any],
    format_name: str,
) -> tuple[Copier, float]:
    """Run the transfers on every rank, with a progress bar on rank 0; errors are raised on every rank."""
    bar = None
    if topo.rank == 0:
        from tqdm import tqdm

        mine = sum(t.source.size for t in transfers for w in t.writers.values() if w == 0)
        bar = tqdm(
            total=mine, unit="B", unit_scale=True, desc=f"stage (rank 0 of {topo.size})", mininterval=2.0
        )
    comm.barrier()
    start = time.perf_counter()
    chunk = int(settings["chunk_mb"] * MB)
    verify = shard_format(format_name).verify
    copier = Copier(comm, topo, transfers, dirs, chunk, verify, settings["direct_io"], progress=bar)
    copier.run()
    comm.barrier()
    seconds = time.perf_counter() - start
    if bar is not None:
        bar.close()
    all_ok(comm, Sim2dlError("; ".join(copier.errors)) if copier.errors else None)
    return copier, seconds


def write_listing(
    node_dir: Path, mode: str, topo: Topology, files: list[str], meta: Mapping[str, Any]
) -> None:
    """The node's list of staged files, which the training input pipeline reads."""
    write_json_atomic(
        StagedPaths(node_dir).listing,
        {
            "mode": mode,
            "node": topo.node,
            "hostname": topo.hostname,
            "ranks": list(topo.node_ranks[topo.node]),
            "files": files,
            "format": meta["format"],
            "compression": meta["compression"],
            "feature_spec": meta["feature_spec"],
        },
    )


def summarise(
    comm: Any, topo: Topology, copier: Copier, seconds: float, mode: str, dirs: Mapping[int, Path], done: list
) -> dict[str, Any]:
    """The step's summary (on rank 0; {} elsewhere): bytes read once from the shared file system, written
    per node, and where each node's copy is."""
    read_total = comm.allreduce(copier.bytes_read)
    written = comm.gather(copier.bytes_written, root=0)
    hosts = comm.gather(topo.hostname, root=0)
    if topo.rank != 0:
        return {}
    assert written is not None and hosts is not None
    per_node_written = [sum(written[r] for r in ranks) for ranks in topo.node_ranks]
    return {
        "mode": mode,
        "nodes": topo.nodes,
        "ranks": topo.size,
        "seconds": round(seconds, 3),
        "bytes_read_shared_fs": read_total,
        "bytes_written_per_node": per_node_written,
        "skipped_already_staged": sum(len(d or []) for d in done),
        "gb_per_s_written": round(sum(per_node_written) / seconds / 1e9, 3) if seconds > 0 else None,
        "node_dirs": [str(dirs[k]) for k in range(topo.nodes)],
        "hosts": [hosts[ranks[0]] for ranks in topo.node_ranks],  # per node
    }


def ensure_staged(
    config: Mapping[str, Any],
    merged_dir: Path,
    stage_summary: Path,
    restage_summary: Path,
    comm: Any,
    topo: Topology,
) -> tuple[Path, Path]:
    """The node's staged directory, and the summary describing it, for a job that reads staged data.

    Node-local storage is often purged when a job ends, and a later job may get other nodes or another
    placement of ranks: then this job stages again itself (each byte read once from the shared file system,
    as in the stage step), recording it in `restage_summary` so the workflow's stage output stays as is."""
    node_dir = staged_node_dir(stage_summary, topo)
    if comm.allreduce(0 if node_dir else 1) == 0:
        assert node_dir is not None
        return node_dir, stage_summary
    if topo.rank == 0:
        log.info(
            "sim2dl: staged files missing or for another placement of ranks (%s): staging again",
            stage_summary,
        )
    stage_dataset(config, merged_dir, restage_summary, comm)
    node_dir = staged_node_dir(restage_summary, topo)
    if node_dir is None:
        raise Sim2dlError(f"rank {topo.rank}: staging again did not complete ({restage_summary})")
    return node_dir, restage_summary

"""stage: copy merged shards from the shared file system to node-local storage.

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
"""

from __future__ import annotations

import json
import logging
import os
import queue
import shutil
import socket
import threading
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from pipeline import MB, Sim2dlError
from pipeline.formats.shards.shard_reader import tfrecord_index
from pipeline.paths import MergedPaths, StagedPaths
from pipeline.runtime.mpi import all_ok
from pipeline.storage.directio import PAGE, RangeReader, aligned_buffer, open_for_reading
from pipeline.storage.fsutil import Checksum, atomic_path, file_checksum, remove_stale_temporaries, write_json_atomic
from pipeline.training.tfdata import load_metadata

log = logging.getLogger(__name__)  # to stderr (cli): stdout carries only the step's JSON summary

MAX_CHUNK_BYTES = (1 << 31) - 1  # MPI counts are C ints
READ_AHEAD_BYTES = 32 << 20  # requested from storage ahead of the chunk being sent


@dataclass(frozen=True)
class Source:
    """One staged file: byte ranges of files on the shared file system, concatenated."""

    name: str  # file name on the node
    pieces: tuple[tuple[Path, int, int], ...]  # (shared file, offset, length), in output order
    checksum: str | None  # of the output (a whole shard); None for sampled files (verified by CRC)

    @property
    def size(self) -> int:
        return sum(length for _, _, length in self.pieces)


@dataclass
class Transfer:
    index: int
    source: Source
    writers: dict[int, int] = field(default_factory=dict)  # node -> global rank writing it there
    first_node: int = 0  # the node whose writer reads the source from the shared file system

    @property
    def reader(self) -> int:
        return self.writers[self.first_node]

    def chain(self) -> list[int]:
        """Writer ranks in forwarding order, the reader first (a pipelined broadcast, as mpifileutils'
        dbcast does): the reader writes its own copy and sends each chunk once, every writer forwards it
        to the next, so no rank's link carries a shard more than twice, however many nodes need it. The
        reader being a writer means a node's own copy never crosses MPI, and partition mode none at all."""
        nodes = sorted(self.writers)
        start = nodes.index(self.first_node)
        return [self.writers[n] for n in nodes[start:] + nodes[:start]]


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
            raise Sim2dlError(f"config key 'stage.emulate_nodes': {emulate_nodes} nodes need at least as many ranks")
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


def shard_sources(merged_dir: Path, meta: Mapping[str, Any]) -> list[Source]:
    sources = []
    for s in meta["shards"]:
        sources.append(Source(s["file"], ((MergedPaths(merged_dir).shard(s["file"]), 0, s["bytes"]),), s["checksum"]))
    return sources


def spread_over_nodes(sources: Sequence[Source], nodes: int) -> list[list[Source]]:
    """stage.mode 'partition' (the config value keeps its name; 'part' is ingest's word): balanced by
    bytes, largest first, each to the node with the fewest bytes so far."""
    loads = [0] * nodes
    shares: list[list[Source]] = [[] for _ in range(nodes)]
    for src in sorted(sources, key=lambda s: (-s.size, s.name)):
        k = loads.index(min(loads))
        shares[k].append(src)
        loads[k] += src.size
    return [sorted(p, key=lambda s: s.name) for p in shares]


def sample_sources(
    merged_dir: Path, meta: Mapping[str, Any], topo: Topology, per_rank: int, replacement: bool, seed: int
) -> dict[int, list[Source]]:
    """Per node: one file per rank holding its sampled records (framed TFRecord byte ranges)."""
    if meta["format"] != "tfrecord" or meta["compression"] != "none":
        raise Sim2dlError(
            "config key 'stage.mode': 'sample' needs uncompressed TFRecord shards "
            f"(this dataset is {meta['format']}, compression {meta['compression']})"
        )
    records = []  # (shard path, offset, length)
    for s in training_shards(meta):
        shard = MergedPaths(merged_dir).shard(s["file"])
        records.extend((shard, int(o), int(n)) for o, n in tfrecord_index(shard))
    if not replacement and per_rank > len(records):
        raise Sim2dlError(
            f"config key 'stage.samples_per_rank': {per_rank} samples without replacement, "
            f"but the dataset has {len(records)} records"
        )
    per_node: dict[int, list[Source]] = {k: [] for k in range(topo.nodes)}
    for node, ranks in enumerate(topo.node_ranks):
        for r in ranks:
            rng = np.random.default_rng([seed, r])
            chosen = rng.choice(len(records), size=per_rank, replace=replacement)
            # Read in file order (sequential on the shared file system); training shuffles anyway.
            pieces = tuple(sorted((records[i] for i in chosen), key=lambda rec: (str(rec[0]), rec[1])))
            per_node[node].append(Source(f"rank-{r:05d}.tfrecord", pieces, None))
    return per_node


def training_shards(meta: Mapping[str, Any]) -> list[Mapping[str, Any]]:
    """The shards training passes read: the 'train' split's, or all where merge made no splits."""
    if "splits" not in meta:
        return list(meta["shards"])
    return [s for s in meta["shards"] if s["split"] == "train"]


def plan(per_node: Mapping[int, Sequence[Source]], topo: Topology) -> list[Transfer]:
    """Who reads what and who writes it where. Writers rotate over a node's ranks, and the node that
    reads a shared source rotates over the nodes that need it, so reading is spread over the job."""
    by_source: dict[Source, Transfer] = {}
    transfers: list[Transfer] = []
    for node in range(topo.nodes):
        for j, src in enumerate(per_node.get(node, [])):
            t = by_source.get(src)
            if t is None:
                t = by_source[src] = Transfer(len(transfers), src)
                transfers.append(t)
            ranks = topo.node_ranks[node]
            t.writers[node] = ranks[j % len(ranks)]
    for t in transfers:
        nodes = sorted(t.writers)
        t.first_node = nodes[t.index % len(nodes)]
    return transfers


def chunk_messages(src: Source, chunk: int) -> list[list[tuple[Path, int, int]]]:
    """The messages of a source: consecutive pieces packed into chunks of at most `chunk` bytes."""
    messages: list[list[tuple[Path, int, int]]] = [[]]
    filled = 0
    for path, offset, length in src.pieces:
        while length:
            if filled == chunk:
                messages.append([])
                filled = 0
            take = min(length, chunk - filled)
            messages[-1].append((path, offset, take))
            offset, length, filled = offset + take, length - take, filled + take
    return [m for m in messages if m]


def verify_existing(path: Path, src: Source) -> bool:
    """A staged file from an earlier run counts only if it is complete and its checksum matches."""
    if not path.exists() or path.stat().st_size != src.size:
        return False
    if src.checksum is None:
        return tfrecord_crc_ok(path)
    return file_checksum(path) == src.checksum


def tfrecord_crc_ok(path: Path) -> bool:
    """Read every record with TensorFlow's reader, which checks the length and data CRCs."""
    import tensorflow as tf

    try:
        for _ in tf.data.TFRecordDataset(str(path)):
            pass
    except tf.errors.DataLossError:
        return False
    return True


def wait_quietly(request: Any) -> None:
    """Wait for an MPI request without spinning on a core: polls with a growing sleep (10 to 100 us).

    MPI's blocking calls busy-poll, which is right with a core per rank; staging runs several ranks, each
    with a reading, a sending and a receiving thread. The cap is short because MPI moves data between
    nodes only inside MPI calls (UCX over TCP sends a large message in pieces, one per progress call):
    with 1 ms sleeps, staging across 3 virtual nodes took 3.6 s where 100 us takes 1.0 s (bench/cluster)."""
    delay = 1e-5
    while not request.Test():
        time.sleep(delay)
        delay = min(delay * 2, 1e-4)


class SourceFiles:
    """The shared files one rank reads, each opened once, with reads ahead of time or direct I/O."""

    def __init__(self, direct: bool, errors: list[str]) -> None:
        self.direct, self.errors = direct, errors
        self.bytes_read = 0
        self._open: dict[Path, Any] = {}  # path -> (fd, direct?) or None when it cannot be opened
        self._advised: dict[Path, int] = {}
        self._ranges = RangeReader()

    def read(self, path: Path, offset: int, view: np.ndarray) -> int:
        """Fill `view` from `path` at `offset`; returns the bytes read (fewer at an unexpected end or an
        I/O error, which is recorded; the writers' checksum check then names the shard)."""
        if path not in self._open:
            self._open[path] = self._open_file(path)
        opened = self._open[path]
        if opened is None:
            return 0
        fd, direct = opened
        try:
            if not direct:
                self._advise(path, fd, offset, view.size)
            n = self._ranges.read(fd, direct, offset, view)
        except OSError as e:
            self.errors.append(f"cannot read source shard {path} at byte {offset}: {e.strerror}")
            return 0
        self.bytes_read += n
        return n

    def _open_file(self, path: Path) -> tuple[int, bool] | None:
        try:
            return open_for_reading(path, self.direct)
        except OSError as e:
            self.errors.append(f"cannot read source shard {path}: {e.strerror}")
            return None

    def _advise(self, path: Path, fd: int, offset: int, length: int) -> None:
        """Keep the storage busy while this rank sends and writes: ask for the next window ahead."""
        ahead = self._advised.get(path, 0)
        if offset + length > ahead - READ_AHEAD_BYTES // 2:
            start = max(ahead, offset)
            os.posix_fadvise(fd, start, READ_AHEAD_BYTES, os.POSIX_FADV_WILLNEED)
            self._advised[path] = start + READ_AHEAD_BYTES

    def close(self) -> None:
        for opened in self._open.values():
            if opened is not None:
                os.close(opened[0])


class Copier:
    """One rank's share of the transfers: the shards it reads (and writes, and sends on) and the shards
    it receives (and writes, and sends on). Reading runs ahead in its own thread, receiving in another,
    so reading, sending and writing overlap across the job; memory is a few chunks per rank."""

    BUFFERS = 3  # chunks in flight per reading rank: one being read, one being sent and written, one spare

    def __init__(
        self,
        comm: Any,
        topo: Topology,
        transfers: Sequence[Transfer],
        dirs: Mapping[int, Path],
        chunk_bytes: int,
        direct_io: bool = False,
        progress: Any = None,
    ) -> None:
        self.comm, self.topo, self.transfers, self.dirs = comm, topo, transfers, dirs
        self.chunk = min(chunk_bytes, MAX_CHUNK_BYTES)
        if direct_io:  # whole pages, so every chunk of a shard starts on a page boundary
            self.chunk = max(PAGE, self.chunk // PAGE * PAGE)
        self.bytes_written = 0
        self.errors: list[str] = []
        self.sources = SourceFiles(direct_io, self.errors)
        self.progress = progress

    @property
    def bytes_read(self) -> int:
        return self.sources.bytes_read

    def chunks(self, src: Source) -> list[list[tuple[Path, int, int]]]:
        return chunk_messages(src, self.chunk)

    @staticmethod
    def message_bytes(message: Sequence[tuple[Path, int, int]]) -> int:
        return sum(length for _, _, length in message)

    def read_all(self) -> None:
        """The shards this rank reads, in transfer order, read ahead by a thread into a few buffers."""
        mine = [t for t in self.transfers if t.reader == self.topo.rank]
        free: queue.Queue[np.ndarray] = queue.Queue()
        for _ in range(self.BUFFERS):
            free.put(aligned_buffer(self.chunk))
        full: queue.Queue[tuple[np.ndarray, int] | BaseException | None] = queue.Queue()
        stop = threading.Event()

        def produce() -> None:
            try:
                for t in mine:
                    for message in self.chunks(t.source):
                        buf, filled = free.get(), 0
                        if stop.is_set():
                            return
                        for path, offset, length in message:
                            view = buf[filled : filled + length]
                            n = self.sources.read(path, offset, view)
                            if n != length:
                                view[n:] = 0  # the writers' checksum check names the shard
                            filled += length
                        full.put((buf, filled))
            except BaseException as e:  # handed to the consumer, which reports it
                full.put(e)
            full.put(None)

        reader = threading.Thread(target=produce, name="stage-read", daemon=True)
        reader.start()

        def filled_chunks(t: Transfer) -> Any:
            for _ in self.chunks(t.source):
                item = full.get()
                if item is None or isinstance(item, BaseException):
                    raise item or RuntimeError("reader stopped early")
                buf, n = item
                yield buf[:n]
                free.put(buf)

        try:
            for t in mine:
                self.deliver(t, filled_chunks(t))
        finally:
            stop.set()
            free.put(np.empty(0, np.uint8))  # wakes the reader if it waits for a buffer
            reader.join()
            self.sources.close()

    def receive_all(self) -> None:
        """The shards this rank writes but another rank reads, received in transfer order."""
        from mpi4py import MPI

        # Two buffers: the next chunk is received while this one is written and forwarded, so the hops of
        # a chain overlap (a pipeline) instead of taking turns.
        buffers = (np.empty(self.chunk, np.uint8), np.empty(self.chunk, np.uint8))
        for t in self.transfers:
            chain = t.chain()
            if self.topo.rank not in chain[1:]:
                continue
            previous = chain[chain.index(self.topo.rank) - 1]

            def received(t: Transfer = t, previous: int = previous) -> Any:
                views = [buffers[k % 2][: self.message_bytes(m)] for k, m in enumerate(self.chunks(t.source))]

                def post(k: int) -> Any:
                    return self.comm.Irecv([views[k], MPI.BYTE], source=previous, tag=t.index)

                pending = post(0) if views else None
                for k, view in enumerate(views):
                    wait_quietly(pending)
                    # the other buffer's chunk was written and its forward completed before this resumed
                    pending = post(k + 1) if k + 1 < len(views) else None
                    yield view

            self.deliver(t, received())

    def deliver(self, t: Transfer, chunks: Any) -> None:
        """Send every chunk on to the next writer, write it here, and keep the file only if its checksum
        matches. After a failure every chunk is still passed on, so no rank waits forever."""
        from mpi4py import MPI

        chain = t.chain()
        position = chain.index(self.topo.rank)
        forward_to = chain[position + 1] if position + 1 < len(chain) else None
        node = self.topo.node
        where = f"node {node} ({self.topo.hostname})"
        final = self.dirs[node] / t.source.name
        checksum = Checksum()
        try:
            with atomic_path(final) as tmp:
                failure = None
                with open(tmp, "wb") as out:
                    for view in chunks:
                        send = None
                        if forward_to is not None:
                            send = self.comm.Isend([view, MPI.BYTE], dest=forward_to, tag=t.index)
                        if failure is None:
                            try:
                                out.write(memoryview(view))
                            except OSError as e:
                                failure = f"cannot write {final} on {where}: {e.strerror}"
                        checksum.update(memoryview(view))
                        self.bytes_written += view.size
                        if self.progress is not None:
                            self.progress.update(view.size)
                        if send is not None:
                            wait_quietly(send)  # the buffer is reused once delivered
                if failure is None:
                    ok = checksum.text() == t.source.checksum if t.source.checksum is not None else tfrecord_crc_ok(tmp)
                    if not ok:
                        failure = (
                            f"shard {t.source.name} on {where}: checksum mismatch (corrupt source "
                            f"{t.source.pieces[0][0]} or copy); the copy was not kept"
                        )
                if failure is not None:
                    raise Sim2dlError(failure)
        except Sim2dlError as e:
            self.errors.append(str(e))

    def run(self) -> None:
        receiver = threading.Thread(target=self._guard(self.receive_all), name="stage-receive")
        receiver.start()
        self._guard(self.read_all)()
        receiver.join()

    def _guard(self, fn: Any) -> Any:
        def run() -> None:
            try:
                fn()
            except Exception as e:  # reported collectively; a thread must not die silently
                self.errors.append(f"{type(e).__name__}: {e}")

        return run


def stage(config: Mapping[str, Any], merged_dir: Path, summary_path: Path, comm: Any) -> dict[str, Any]:
    settings = config["stage"]
    meta = load_metadata(merged_dir)
    emulated = settings["emulate_nodes"] > 0
    topo = topology(comm, settings["emulate_nodes"])
    # One directory per dataset below the target, so datasets never mix and a rerun finds its files.
    target = target_root(settings) / meta["plan_digest"][:16]
    dirs = {k: target / f"node-{k:03d}" if emulated else target for k in range(topo.nodes)}
    my_dir = dirs[topo.node]

    sources = shard_sources(merged_dir, meta)
    mode = settings["mode"]
    if mode == "replica":
        per_node = {k: sources for k in range(topo.nodes)}
    elif mode == "partition":
        per_node = dict(enumerate(spread_over_nodes(sources, topo.nodes)))
    else:
        per_node = sample_sources(
            merged_dir, meta, topo, settings["samples_per_rank"], settings["replacement"], settings["seed"]
        )
        # Samples are drawn from the training split; every node gets the other splits' shards whole.
        others = [src for src, s in zip(sources, meta["shards"], strict=True) if s.get("split", "train") != "train"]
        per_node = {k: [*per_node[k], *others] for k in per_node}

    wanted = {k: [src.name for src in per_node[k]] for k in per_node}

    # Before any transfer: sources exist with the expected size, targets have room; skip what is there.
    error = None
    if topo.rank == 0:
        missing = [s for s in sources if not s.pieces[0][0].exists() or s.pieces[0][0].stat().st_size != s.size]
        if missing:
            path, size = missing[0].pieces[0][0], missing[0].size
            what = "missing" if not path.exists() else f"{path.stat().st_size} bytes, metadata says {size}"
            error = Sim2dlError(f"source shard {path}: {what} ({len(missing)} of {len(sources)} shards affected)")
    all_ok(comm, error)

    node_leader = topo.node_ranks[topo.node][0] == topo.rank
    done_here: list[str] = []
    error = None
    if node_leader:
        try:
            my_dir.mkdir(parents=True, exist_ok=True)
            remove_stale_temporaries(my_dir)
            done_here = [s.name for s in per_node[topo.node] if verify_existing(my_dir / s.name, s)]
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
    done = comm.allgather(done_here if node_leader else None)
    for k, ranks in enumerate(topo.node_ranks):
        names = set(done[ranks[0]] or [])
        per_node[k] = [s for s in per_node[k] if s.name not in names]
    transfers = plan(per_node, topo)

    bar = None
    if topo.rank == 0:
        from tqdm import tqdm

        mine = sum(t.source.size for t in transfers for w in t.writers.values() if w == 0)
        bar = tqdm(total=mine, unit="B", unit_scale=True, desc=f"stage (rank 0 of {topo.size})", mininterval=2.0)
    comm.barrier()
    start = time.perf_counter()
    copier = Copier(comm, topo, transfers, dirs, int(settings["chunk_mb"] * MB), settings["direct_io"], progress=bar)
    copier.run()
    comm.barrier()
    seconds = time.perf_counter() - start
    if bar is not None:
        bar.close()
    all_ok(comm, Sim2dlError("; ".join(copier.errors)) if copier.errors else None)

    read_total = comm.allreduce(copier.bytes_read)
    written = comm.gather(copier.bytes_written, root=0)
    hosts = comm.gather(topo.hostname, root=0)
    # Every node's list of staged files, for the training input pipeline.
    if node_leader:
        files = wanted[topo.node]
        write_json_atomic(
            StagedPaths(my_dir).listing,
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
    summary: dict[str, Any] = {}
    if topo.rank == 0:
        assert written is not None
        per_node_written = [sum(written[r] for r in ranks) for ranks in topo.node_ranks]
        summary = {
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
        write_json_atomic(summary_path, summary)
    comm.barrier()
    return summary


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


def ensure_staged(
    config: Mapping[str, Any], merged_dir: Path, stage_summary: Path, restage_summary: Path, comm: Any, topo: Topology
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
        log.info("sim2dl: staged files missing or for another placement of ranks (%s): staging again", stage_summary)
    stage(config, merged_dir, restage_summary, comm)
    node_dir = staged_node_dir(restage_summary, topo)
    if node_dir is None:
        raise Sim2dlError(f"rank {topo.rank}: staging again did not complete ({restage_summary})")
    return node_dir, restage_summary

"""The staging plan, a pure object: what each node needs (every shard, a balanced share with the slab
files of a shard together, or sampled records), who reads each source from the shared file system and who
writes it on each node, and the chunks it travels in. Memory: a few objects per shard or per rank's
sample file; time: linear in those.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from pipeline import Sim2dlError
from pipeline.formats.shards import shard_format
from pipeline.formats.slabs import slab_of
from pipeline.paths import MergedPaths
from pipeline.runtime.placement import Topology

MAX_CHUNK_BYTES = (1 << 31) - 1  # MPI counts are C ints


@dataclass(frozen=True)
class StagedFile:
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
    source: StagedFile
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


def shard_sources(merged_dir: Path, meta: Mapping[str, Any]) -> list[StagedFile]:
    sources = []
    for s in meta["shards"]:
        sources.append(
            StagedFile(s["file"], ((MergedPaths(merged_dir).shard(s["file"]), 0, s["bytes"]),), s["checksum"])
        )
    return sources


def spread_over_nodes(sources: Sequence[StagedFile], nodes: int) -> list[list[StagedFile]]:
    """stage.mode 'partition' (the config value keeps its name; 'part' is ingest's word): balanced by
    bytes, largest first, each to the node with the fewest bytes so far."""
    loads = [0] * nodes
    shares: list[list[StagedFile]] = [[] for _ in range(nodes)]
    # the slab files of a shard (merge.slabs) go to one node together
    shards: dict[str, list[StagedFile]] = {}
    for src in sources:
        shards.setdefault(slab_of(src.name)[0], []).append(src)
    for files in sorted(shards.values(), key=lambda fs: (-sum(f.size for f in fs), fs[0].name)):
        k = loads.index(min(loads))
        shares[k].extend(files)
        loads[k] += sum(f.size for f in files)
    return [sorted(p, key=lambda s: s.name) for p in shares]


def sample_sources(
    merged_dir: Path, meta: Mapping[str, Any], topo: Topology, per_rank: int, replacement: bool, seed: int
) -> dict[int, list[StagedFile]]:
    """Per node: one file per rank holding its sampled records (framed TFRecord byte ranges)."""
    shards = shard_format(meta["format"])
    if "slabs" in meta:
        raise Sim2dlError(
            f"config key 'stage.mode': 'sample' draws whole records, but merge wrote each shard as "
            f"{meta['slabs']['count']} slab files (merge.slabs): use replica or partition"
        )
    if not shards.samplable(meta["compression"]):
        raise Sim2dlError(
            "config key 'stage.mode': 'sample' needs shards of framed records, uncompressed (TFRecord) "
            f"(this dataset is {meta['format']}, compression {meta['compression']})"
        )
    records = []  # (shard path, offset, length)
    for s in training_shards(meta):
        shard = MergedPaths(merged_dir).shard(s["file"])
        records.extend((shard, int(o), int(n)) for o, n in shards.index(shard))
    if not replacement and per_rank > len(records):
        raise Sim2dlError(
            f"config key 'stage.samples_per_rank': {per_rank} samples without replacement, "
            f"but the dataset has {len(records)} records"
        )
    per_node: dict[int, list[StagedFile]] = {k: [] for k in range(topo.nodes)}
    for node, ranks in enumerate(topo.node_ranks):
        for r in ranks:
            rng = np.random.default_rng([seed, r])
            chosen = rng.choice(len(records), size=per_rank, replace=replacement)
            # Read in file order (sequential on the shared file system); training shuffles anyway.
            pieces = tuple(sorted((records[i] for i in chosen), key=lambda rec: (str(rec[0]), rec[1])))
            per_node[node].append(StagedFile(f"rank-{r:05d}{shards.suffix}", pieces, None))
    return per_node


def training_shards(meta: Mapping[str, Any]) -> list[Mapping[str, Any]]:
    """The shards training passes read: the 'train' split's, or all where merge made no splits."""
    if "splits" not in meta:
        return list(meta["shards"])
    return [s for s in meta["shards"] if s["split"] == "train"]


def plan(per_node: Mapping[int, Sequence[StagedFile]], topo: Topology) -> list[Transfer]:
    """Who reads what and who writes it where. Writers rotate over a node's ranks, and the node that
    reads a shared source rotates over the nodes that need it, so reading is spread over the job."""
    by_source: dict[StagedFile, Transfer] = {}
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


def chunk_messages(src: StagedFile, chunk: int) -> list[list[tuple[Path, int, int]]]:
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


def node_sources(
    settings: Mapping[str, Any],
    merged_dir: Path,
    meta: Mapping[str, Any],
    topo: Topology,
    sources: list[StagedFile],
) -> dict[int, list[StagedFile]]:
    """What each node needs, by stage.mode: every shard (replica), a balanced share (partition), or one
    file of sampled training records per rank plus the other splits' shards whole (sample)."""
    mode = settings["mode"]
    if mode == "replica":
        return {k: list(sources) for k in range(topo.nodes)}
    if mode == "partition":
        return dict(enumerate(spread_over_nodes(sources, topo.nodes)))
    per_node = sample_sources(
        merged_dir, meta, topo, settings["samples_per_rank"], settings["replacement"], settings["seed"]
    )
    others = [
        src for src, s in zip(sources, meta["shards"], strict=True) if s.get("split", "train") != "train"
    ]
    return {k: [*per_node[k], *others] for k in per_node}

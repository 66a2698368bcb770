"""The planners, without MPI: who reads which shard and writes it where (stage), how a source is cut
into messages, how shards are named, and how a reader's work is dealt out. Each is a pure function of
sizes and names; the steps' MPI tests (test_stage, test_merge, test_reader) run what they plan."""

from __future__ import annotations

from pathlib import Path

import numpy as np

from pipeline.data.splits import split_numbers
from pipeline.formats.shards import WRITERS
from pipeline.formats.shards.shard_reader import Unit, plan_units, slot_units
from pipeline.runtime.placement import Topology
from pipeline.staging.plan import StagedFile, chunk_messages, plan, spread_over_nodes
from pipeline.steps.merge.plan import shard_names


def source(name: str, size: int) -> StagedFile:
    return StagedFile(name, ((Path(f"/shared/{name}"), 0, size),), None)


def topology(rank: int, node_ranks: tuple[tuple[int, ...], ...]) -> Topology:
    node = next(k for k, ranks in enumerate(node_ranks) if rank in ranks)
    return Topology(rank, sum(map(len, node_ranks)), node, len(node_ranks), node_ranks, "host")


def test_spread_over_nodes_balances_bytes_and_gives_every_source_to_one_node():
    sources = [source(f"s{i}", size) for i, size in enumerate([90, 10, 50, 50, 40, 30, 30])]
    shares = spread_over_nodes(sources, 3)
    assert sorted(s.name for p in shares for s in p) == sorted(s.name for s in sources)
    loads = [sum(s.size for s in p) for p in shares]
    assert max(loads) - min(loads) <= 30 and sum(loads) == 300  # largest first, to the emptiest node
    assert all(p == sorted(p, key=lambda s: s.name) for p in shares)


def test_spread_over_nodes_keeps_the_slab_files_of_a_shard_on_one_node():
    """merge.slabs: a node's spatial sets read every slab of their shards, so a shard's files travel
    together."""
    sources = [
        source(f"shard-{i:05d}-of-00005.slab-{k}-of-2.tfrecord", 10 * (i + 1))
        for i in range(5)
        for k in (0, 1)
    ]
    shares = spread_over_nodes(sources, 2)
    held = [{s.name.split(".slab-")[0] for s in p} for p in shares]
    assert not held[0] & held[1] and len(held[0] | held[1]) == 5
    assert all(len(p) == 2 * len(h) for p, h in zip(shares, held, strict=True))  # both slabs of each shard
    assert sorted(sum(s.size for s in p) for p in shares) == [140, 160]  # balanced by the shards' bytes


def test_replica_plan_spreads_reading_over_nodes_and_writing_over_ranks():
    """Every node wants every shard: each shard is read once, by a writer on a node that rotates with the
    shard, and forwarded along a chain that visits every node once, starting at the reader."""
    topo = topology(0, ((0, 1), (2, 3), (4, 5)))
    sources = [source(f"s{i}", 100) for i in range(6)]
    transfers = plan({node: sources for node in range(3)}, topo)
    assert [t.source.name for t in transfers] == [s.name for s in sources]
    assert [t.first_node for t in transfers] == [0, 1, 2, 0, 1, 2]
    for t in transfers:
        assert set(t.writers) == {0, 1, 2}
        assert all(rank in topo.node_ranks[node] for node, rank in t.writers.items())
        chain = t.chain()
        assert chain[0] == t.reader and sorted(chain) == sorted(t.writers.values())
    # writers rotate over a node's ranks shard by shard
    assert [t.writers[1] for t in transfers] == [2, 3, 2, 3, 2, 3]


def test_partition_plan_reads_on_the_writing_node_so_nothing_crosses_nodes():
    topo = topology(0, ((0, 1), (2, 3)))
    per_node = dict(enumerate(spread_over_nodes([source(f"s{i}", 10 * (i + 1)) for i in range(5)], 2)))
    for t in plan(per_node, topo):
        assert list(t.writers) == [t.first_node] and t.chain() == [t.reader]


def test_messages_cover_every_byte_once_in_chunks_across_pieces():
    src = StagedFile("sample-0", ((Path("/a"), 100, 7), (Path("/b"), 0, 10), (Path("/a"), 500, 3)), None)
    messages = chunk_messages(src, 4)
    assert all(sum(n for _, _, n in m) <= 4 for m in messages)
    assert [n for m in messages for _, _, n in m] == [4, 3, 1, 4, 4, 1, 3]
    covered = [(p, o + k) for m in messages for p, o, n in m for k in range(n)]
    wanted = [(p, o + k) for p, o, n in src.pieces for k in range(n)]
    assert covered == wanted
    assert chunk_messages(StagedFile("empty", (), None), 4) == []


def test_shard_names_number_within_each_split():
    tfrecord = WRITERS["tfrecord"]
    assert shard_names([0, 0, 0], [], tfrecord) == [f"shard-{i:05d}-of-00003.tfrecord" for i in range(3)]
    names = shard_names([0, 0, 1, 1, 1], ["train", "validation"], tfrecord)
    assert names == [
        "train/shard-00000-of-00002.tfrecord",
        "train/shard-00001-of-00002.tfrecord",
        "validation/shard-00000-of-00003.tfrecord",
        "validation/shard-00001-of-00003.tfrecord",
        "validation/shard-00002-of-00003.tfrecord",
    ]


def test_split_numbers_follow_the_fractions_and_keep_a_parent_together():
    parents = [f"universe-{i // 4}" for i in range(40_000)]  # 4 sub-volumes per universe
    numbers = split_numbers(parents, [0.8, 0.2])
    share = np.bincount(numbers, minlength=2) / len(numbers)
    assert abs(share[0] - 0.8) < 0.02
    assert (numbers.reshape(-1, 4) == numbers.reshape(-1, 4)[:, :1]).all()  # no universe in two splits


def test_reader_units_cover_every_record_once_for_any_slot_count():
    for records, slots in (([5, 7, 3], 2), ([5, 7, 3], 6), ([10], 4), ([0, 4], 3)):
        units = plan_units(records, slots)
        dealt = [slot_units(units, s, slots) for s in range(slots)]
        covered = sorted((u.shard, r) for d in dealt for u in d for r in range(u.first, u.stop))
        assert covered == [(k, r) for k, n in enumerate(records) for r in range(n)], (records, slots)
        sizes = [len(d) for d in dealt]
        assert max(sizes) - min(sizes) <= 1
    assert plan_units([3, 4], 2) == [Unit(0, 0, 3), Unit(1, 0, 4)]  # enough shards: whole ones

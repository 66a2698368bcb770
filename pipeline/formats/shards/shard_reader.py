"""A framework-neutral reader of merged datasets: numpy records (or batches) from TFRecord or HDF5
shards, with no TensorFlow. PyTorch, JAX or plain numpy loops use it as it is (docs/reading.md has the
few lines of a PyTorch IterableDataset).

Each shard format reads its own records (pipeline.formats.shards: TFRecord through the `.idx` files and
a protobuf decoder of its own, HDF5 through h5py, a slice of rows at a time).

Work is split without coordination: the shards, or where there are fewer shards than readers ranges of
records within them (`plan_units`), are dealt round-robin to the (rank, world size) x (worker, workers)
slots (ReaderSlot), so across all ranks and data-loader workers every record is read exactly once per
epoch. Order: each slot's units are shuffled per epoch (seed, epoch and slot), and records pass a
shuffle buffer as in tf.data. Memory: two units' bytes (at most two shards: the next is read while this
one is decoded, into two reused buffers) plus the shuffle buffer's records; time: one large read of each
unit's byte range, and per record a small decode and a copy of its arrays out of the reused buffer.
"""

from __future__ import annotations

import warnings
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass
from itertools import pairwise
from pathlib import Path
from typing import Any

import numpy as np

from pipeline import OLD_NAMES_UNTIL, Sim2dlError
from pipeline.formats.metadata import class_names, fixed, load_metadata
from pipeline.formats.shards import shard_format
from pipeline.formats.shards.base import Loaded, Record
from pipeline.paths import MergedPaths

# ---------------------------------------------------------------- the plan: which records each reader reads


@dataclass(frozen=True)
class Unit:
    """Records first..stop-1 of shard number `shard`."""

    shard: int
    first: int
    stop: int


def plan_units(records_per_shard: Sequence[int], slots: int) -> list[Unit]:
    """Whole shards when there are at least as many as slots, else each shard cut into `slots` ranges
    (so that every slot gets work)."""
    if len(records_per_shard) >= slots:
        return [Unit(k, 0, n) for k, n in enumerate(records_per_shard)]
    units = []
    for k, n in enumerate(records_per_shard):
        edges = [n * j // slots for j in range(slots + 1)]
        units += [Unit(k, a, b) for a, b in pairwise(edges) if b > a]
    return units


def slot_units(units: Sequence[Unit], slot: int, slots: int) -> list[Unit]:
    """The units of one slot (round-robin: sizes differ by at most one unit)."""
    return list(units[slot::slots])


# ---------------------------------------------------------------- the reader


@dataclass(frozen=True)
class ReaderSlot:
    """One reader among all that read a dataset together: process `rank` of `world_size` (the training
    processes, as PyTorch's DistributedSampler counts them) and data-loader worker `worker` of that
    process's `workers`."""

    rank: int = 0
    world_size: int = 1
    worker: int = 0
    workers: int = 1

    def __post_init__(self) -> None:
        if not (0 <= self.rank < self.world_size and 0 <= self.worker < self.workers):
            raise Sim2dlError(
                f"reader slot rank {self.rank} of {self.world_size}, worker {self.worker} of "
                f"{self.workers}: out of range"
            )

    @property
    def index(self) -> int:
        return self.rank * self.workers + self.worker

    @property
    def count(self) -> int:
        return self.world_size * self.workers

    @classmethod
    def from_torch(cls) -> ReaderSlot:
        """The calling process's slot under PyTorch: torch.distributed's rank and world size where a
        process group is initialized (else 0 of 1), and inside a DataLoader worker its id and count (else
        0 of 1). Call it where the records are iterated (an IterableDataset's __iter__), in the worker."""
        import torch
        from torch.utils.data import get_worker_info

        distributed = torch.distributed.is_available() and torch.distributed.is_initialized()
        info = get_worker_info()
        return cls(
            rank=torch.distributed.get_rank() if distributed else 0,
            world_size=torch.distributed.get_world_size() if distributed else 1,
            worker=info.id if info else 0,
            workers=info.num_workers if info else 1,
        )


# The reader's slot keywords before ReaderSlot: they work until OLD_NAMES_UNTIL, with a warning
SLOT_KEYWORDS = ("rank", "world_size", "worker", "workers")


class ShardReader:
    """Records of a merged dataset (`merged_dir`: metadata.json and shards/) for one reader slot.

    split: one of the dataset's splits (merge.splits, e.g. 'train'); None: every record.
    slot: this reader among all (ReaderSlot; ReaderSlot.from_torch() under PyTorch); None: the only one.
    shuffle_buffer: records held to shuffle across (0: file order); seed and epoch (set_epoch) make the
    order reproducible. fields: the fields to return (default all). verify: check each TFRecord record's
    CRC."""

    def __init__(
        self,
        merged_dir: Path | str,
        split: str | None = None,
        *,
        slot: ReaderSlot | None = None,
        shuffle_buffer: int = 0,
        seed: int = 0,
        fields: Sequence[str] | None = None,
        verify: bool = True,
        **slot_keywords: int,
    ) -> None:
        slot = slot_of(slot, slot_keywords)
        self.merged_dir = Path(merged_dir)
        self.metadata = load_metadata(self.merged_dir)
        if "slabs" in self.metadata:
            raise Sim2dlError(
                f"{self.merged_dir} holds each shard as {self.metadata['slabs']['count']} slab files "
                "(merge.slabs) "
                "for spatially split training; this reader reads whole records: merge with slabs: 1"
            )
        self.format = shard_format(self.metadata["format"])
        spec = self.metadata["feature_spec"]
        unknown = sorted(set(fields or ()) - set(spec))
        if unknown:
            raise Sim2dlError(f"fields {unknown} are not in {self.merged_dir} (it has {sorted(spec)})")
        self.spec = {name: spec[name] for name in (fields or spec)}
        # Categorical fields hold class ids; their names, in id order: self.classes[field][id]
        self.classes = {
            name: names for name, names in class_names(self.metadata).items() if name in self.spec
        }
        self.slot, self.slots = slot.index, slot.count
        self.shuffle_buffer, self.seed, self.verify = shuffle_buffer, seed, verify
        self.epoch = 0
        shards = self.metadata["shards"]
        if split is not None:
            known = sorted(self.metadata.get("splits", {}))
            if split not in known:
                raise Sim2dlError(f"{self.merged_dir} has no split '{split}' (its splits: {known or 'none'})")
            shards = [s for s in shards if s["split"] == split]
        self.paths = [MergedPaths(self.merged_dir).shard(s["file"]) for s in shards]
        self.units = slot_units(plan_units([s["records"] for s in shards], self.slots), self.slot, self.slots)

    def set_epoch(self, epoch: int) -> None:
        """A new order for the next pass (as PyTorch's DistributedSampler.set_epoch)."""
        self.epoch = epoch

    def __len__(self) -> int:
        """Records this slot reads per epoch."""
        return sum(u.stop - u.first for u in self.units)

    def _units(self, units: Sequence[Unit]) -> Iterator[tuple[Unit, Loaded]]:
        """Each unit with its records as read, the next read ahead while this one is decoded."""
        extents = [(u.shard, u.first, u.stop) for u in units]
        loaded = self.format.read_ahead(self.paths, extents, self.spec, self.metadata["compression"])
        yield from zip(units, loaded, strict=True)

    def _records(self, unit: Unit, loaded: Loaded) -> Iterator[Record]:
        copy = self.format.reuses_buffers(self.metadata["compression"])  # copy records out of a reused buffer
        return self.format.records(self.paths[unit.shard], loaded, self.spec, self.verify, copy)

    def __iter__(self) -> Iterator[Record]:
        rng = np.random.default_rng([self.seed, self.epoch, self.slot])
        units = list(self.units)
        if self.shuffle_buffer:
            units = [units[k] for k in rng.permutation(len(units))]
        held: list[Record] = []
        for unit, loaded in self._units(units):
            for record in self._records(unit, loaded):
                if not self.shuffle_buffer:
                    yield record
                elif len(held) < self.shuffle_buffer:
                    held.append(record)
                else:  # emit a random held record, keep the new one in its place
                    k = int(rng.integers(len(held)))
                    held[k], record = record, held[k]
                    yield record
        for k in rng.permutation(len(held)) if held else ():
            yield held[k]

    def batches(self, batch_size: int, drop_remainder: bool = False) -> Iterator[Record]:
        """Records stacked into batches: one array per fixed-shape field, a list per variable-shape
        field, and the list of sample ids."""
        batch: list[Record] = []
        for record in self:
            batch.append(record)
            if len(batch) == batch_size:
                yield stack(batch, self.spec)
                batch = []
        if batch and not drop_remainder:
            yield stack(batch, self.spec)


def slot_of(slot: ReaderSlot | None, slot_keywords: Mapping[str, int]) -> ReaderSlot:
    """The reader's slot, from `slot` or the old keywords (rank, world_size, worker, workers), not both."""
    unknown = sorted(set(slot_keywords) - set(SLOT_KEYWORDS))
    if unknown:
        raise TypeError(f"ShardReader got unexpected keyword arguments {unknown}")
    if not slot_keywords:
        return slot or ReaderSlot()
    if slot is not None:
        raise Sim2dlError(f"ShardReader: give slot= or {sorted(slot_keywords)}, not both")
    warnings.warn(
        f"ShardReader({', '.join(f'{k}=' for k in slot_keywords)}...) is now "
        "ShardReader(slot=ReaderSlot(...)) (ReaderSlot.from_torch() under PyTorch): "
        f"the old keywords work until release {OLD_NAMES_UNTIL}",
        DeprecationWarning,
        stacklevel=3,
    )
    return ReaderSlot(**slot_keywords)


def stack(records: Sequence[Record], spec: Mapping[str, Any]) -> Record:
    out: Record = {"sample_id": [r["sample_id"] for r in records]}
    for name, field in spec.items():
        values = [r[name] for r in records]
        out[name] = np.stack(values) if fixed(field) else values
    return out

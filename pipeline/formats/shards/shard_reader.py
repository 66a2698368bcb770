"""A framework-neutral reader of merged datasets: numpy records (or batches) from TFRecord or HDF5
shards, with no TensorFlow. PyTorch, JAX or plain numpy loops use it as it is (docs/reading.md has the
few lines of a PyTorch IterableDataset).

TFRecord shards are framed through their `.idx` files (offset and length of each framed record, the
format NVIDIA DALI's reader takes) and each record's tf.train.Example is decoded here from its protobuf
wire format (`decode_example`), honouring each field's encoding in the feature spec: `bytes` (raw
little-endian values plus NAME_shape), `float_list` or `int64_list`. Compressed shards are inflated
whole (their indexes count uncompressed bytes). HDF5 shards are read through h5py, a slice of rows at a
time.

Work is split without coordination: the shards, or where there are fewer shards than readers ranges of
records within them (`plan_units`), are dealt round-robin to the (rank, world size) x (worker, workers)
slots, so across all ranks and data-loader workers every record is read exactly once per epoch. Order:
each slot's units are shuffled per epoch (seed, epoch and slot), and records pass a shuffle buffer as in
tf.data. Memory: two units' bytes (at most two shards: the next is read while this one is decoded, into
two reused buffers) plus the shuffle buffer's records; time: one large read of each unit's byte range,
and per record a small decode and a copy of its arrays out of the reused buffer.
"""

from __future__ import annotations

import gzip
import zlib
from collections.abc import Iterator, Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from itertools import pairwise
from pathlib import Path
from typing import Any

import h5py
import numpy as np

from pipeline import Sim2dlError
from pipeline.formats.parts import read_batches
from pipeline.formats.shards.tfrecord import masked_crc32c
from pipeline.paths import MergedPaths
from pipeline.training.tfdata import class_names, fixed, load_metadata

Record = dict[str, Any]  # "sample_id": str, and one numpy array per field


# ---------------------------------------------------------------- tf.train.Example, decoded without TensorFlow


def _varint(buf: bytes, pos: int) -> tuple[int, int]:
    value, shift = 0, 0
    while True:
        byte = buf[pos]
        pos += 1
        value |= (byte & 0x7F) << shift
        if byte < 0x80:
            return value, pos
        shift += 7


def _fields(buf: bytes, start: int, end: int) -> Iterator[tuple[int, int, int, int]]:
    """(field number, wire type, start, end) of each field in buf[start:end]; for varints end is the value."""
    pos = start
    while pos < end:
        key, pos = _varint(buf, pos)
        number, wire = key >> 3, key & 7
        if wire == 2:  # length-delimited
            length, pos = _varint(buf, pos)
            yield number, wire, pos, pos + length
            pos += length
        elif wire == 0:
            value, pos = _varint(buf, pos)
            yield number, wire, value, value
        elif wire == 5:
            yield number, wire, pos, pos + 4
            pos += 4
        elif wire == 1:
            yield number, wire, pos, pos + 8
            pos += 8
        else:
            raise ValueError(f"protobuf wire type {wire} is not used by tf.train.Example")


def decode_varints(data: np.ndarray) -> np.ndarray:
    """Packed protobuf varints (uint8 array) as int64 (two's complement, as int64 values are encoded)."""
    if data.size <= 32:  # a shape or a small label: a loop is faster than arrays
        values, pos, raw = [], 0, data.tobytes()
        while pos < len(raw):
            value, pos = _varint(raw, pos)
            values.append(value)
        return np.array(values, np.uint64).view(np.int64)
    last = np.flatnonzero(data < 0x80)
    starts = np.concatenate([[0], last[:-1] + 1])
    within = np.arange(data.size) - np.repeat(starts, last - starts + 1)
    payload = (data & 0x7F).astype(np.uint64) << (7 * within).astype(np.uint64)
    return np.add.reduceat(payload, starts).view(np.int64)


def _values(buf: bytes, start: int, end: int) -> tuple[str, Any]:
    """A Feature's kind and contents: ('bytes', (start, end) of its first value), ('float', float32 array)
    or ('int64', int64 array). Packed and unpacked repeated scalars are both read."""
    for kind, _, s, e in _fields(buf, start, end):
        if kind == 1:  # bytes_list
            for _, _, vs, ve in _fields(buf, s, e):
                return "bytes", (vs, ve)
            return "bytes", (s, s)
        arrays = []
        for _, wire, vs, ve in _fields(buf, s, e):
            if kind == 2:  # float_list: packed (2) or one fixed32 (5) per value
                arrays.append(np.frombuffer(buf, "<f4", (ve - vs) // 4, vs))
            elif wire == 2:  # int64_list, packed
                arrays.append(decode_varints(np.frombuffer(buf, np.uint8, ve - vs, vs)))
            else:
                arrays.append(np.array([vs], np.uint64).view(np.int64))
        if kind in (2, 3):
            dtype = np.float32 if kind == 2 else np.int64
            return ("float" if kind == 2 else "int64"), (np.concatenate(arrays) if arrays else np.zeros(0, dtype))
    return "empty", None


def _map_entries(buf: bytes, start: int, end: int) -> Iterator[tuple[str, tuple[int, int]]]:
    """(key, where its Feature lies) of each map entry of a Features message. The common layout (key
    then value, as TensorFlow and sim2dl write them) is read directly; any other through _fields."""
    pos = start
    while pos < end:
        if buf[pos] != 0x0A:
            raise ValueError(f"protobuf field {buf[pos] >> 3} in Features")
        length, pos = _varint(buf, pos + 1)
        entry_end = pos + length
        if buf[pos] == 0x0A:
            key_length, key_start = _varint(buf, pos + 1)
            value_tag = key_start + key_length
            if value_tag < entry_end and buf[value_tag] == 0x12:
                value_length, value_start = _varint(buf, value_tag + 1)
                if value_start + value_length == entry_end:
                    yield bytes(buf[key_start:value_tag]).decode(), (value_start, entry_end)
                    pos = entry_end
                    continue
        key, value = "", (pos, pos)
        for n, _, ks, ke in _fields(buf, pos, entry_end):
            if n == 1:
                key = bytes(buf[ks:ke]).decode()
            elif n == 2:
                value = (ks, ke)
        yield key, value
        pos = entry_end


def decode_example(
    buf: bytes, start: int, end: int, spec: Mapping[str, Mapping[str, Any]], copy: bool = False
) -> Record:
    """One serialised tf.train.Example in buf[start:end] as a record of the fields in `spec`, decoded
    as each field's encoding says (the module doc). Raw bytes fields are views of buf unless `copy`."""
    found: dict[str, tuple[int, int]] = {}  # feature name -> where its Feature message lies
    for number, _, s, e in _fields(buf, start, end):
        if number == 1:
            found.update(_map_entries(buf, s, e))
    # Decode only what the spec asks for (a fixed shape's NAME_shape is not needed).
    wanted = ["sample_id", *spec, *(f"{n}_shape" for n, f in spec.items() if not fixed(f))]
    features = {key: _values(buf, *found[key]) for key in wanted if key in found}
    out: Record = {}
    kind, where = features.get("sample_id", ("bytes", (0, 0)))
    out["sample_id"] = bytes(buf[where[0] : where[1]]).decode() if kind == "bytes" else ""
    for name, field in spec.items():
        if name not in features:
            raise ValueError(f"the record has no feature '{name}'")
        kind, value = features[name]
        dtype = np.dtype(field["dtype"]).newbyteorder("<")
        if kind == "bytes":
            s, e = value
            array = np.frombuffer(buf, dtype, (e - s) // dtype.itemsize, s)
            if copy:
                array = array.copy()
        else:
            array = value.astype(np.dtype(field["dtype"]), copy=False)
        shape = field["shape"]
        if not fixed(field):
            shape_kind, shape_value = features.get(f"{name}_shape", ("empty", None))
            if shape_kind != "int64":
                raise ValueError(f"field '{name}' has a variable shape but the record has no '{name}_shape'")
            shape = shape_value.tolist()
        out[name] = array.reshape(shape)
    return out


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


# ---------------------------------------------------------------- reading a unit


def tfrecord_index(shard: Path) -> np.ndarray:
    """(offset, length) per record from the shard's .idx file, as an (n, 2) int64 array."""
    index = shard.with_name(shard.name + ".idx")
    try:
        text = index.read_bytes()
    except OSError as e:
        raise Sim2dlError(f"cannot read the index {index}: {e.strerror}") from e
    return np.array(text.split(), np.int64).reshape(-1, 2)


Loaded = tuple[Any, Any]  # a unit's bytes (or arrays) as read, and what locates its records in them


def unit_extent(index: np.ndarray) -> tuple[int, int]:
    """(offset, length) of the bytes holding a unit's records (their index rows)."""
    if not len(index):
        return 0, 0
    return int(index[0, 0]), int(index[-1, 0] + index[-1, 1] - index[0, 0])


def compressed_tfrecord_load(shard: Path, unit: Unit, compression: str) -> Loaded:
    """A unit of a compressed TFRecord shard: the shard inflated whole (its index counts uncompressed
    bytes), from the unit's first record on, and the unit's index rows."""
    index = tfrecord_index(shard)[unit.first : unit.stop]
    raw = shard.read_bytes()
    whole = np.frombuffer(gzip.decompress(raw) if compression == "gzip" else zlib.decompress(raw), np.uint8)
    return whole[unit_extent(index)[0] :].data.cast("B"), index


def tfrecord_records(
    shard: Path, loaded: Loaded, spec: Mapping[str, Any], verify: bool, copy: bool
) -> Iterator[Record]:
    """The records of a loaded unit, checked against their framing (and CRC) and decoded (copy: into
    arrays of their own, when the unit's buffer will be reused)."""
    buf, index = loaded
    base = int(index[0, 0]) if len(index) else 0  # the unit's bytes begin at its first record
    for at, length in index.tolist():
        offset = at - base
        (size,) = np.frombuffer(buf, "<u8", 1, offset)
        where = f"{shard}: the record at byte {at}"
        if size != length - 16:
            raise Sim2dlError(f"{where} is not where its index says")
        start, end = offset + 12, offset + 12 + int(size)
        if verify:
            (crc,) = np.frombuffer(buf, "<u4", 1, end)
            if masked_crc32c(np.frombuffer(buf, np.uint8, end - start, start)) != crc:
                raise Sim2dlError(f"{where} fails its CRC check")
        try:
            yield decode_example(buf, start, end, spec, copy)
        except (ValueError, IndexError) as e:
            raise Sim2dlError(f"{where} cannot be decoded: {e}") from e


def hdf5_load(shard: Path, unit: Unit, spec: Mapping[str, Any]) -> Loaded:
    """A unit of an HDF5 shard (pipeline.formats.shards.hdf5's layout) read: (sample ids, columns)."""
    with h5py.File(shard, "r") as f:
        ids = f["sample_id"][unit.first : unit.stop]
        columns: dict[str, Any] = {}
        for name, field in spec.items():
            if fixed(field):
                columns[name] = f[name][unit.first : unit.stop]
            else:
                offsets = f[name]["offsets"][unit.first : unit.stop + 1]
                values = f[name]["values"][int(offsets[0]) : int(offsets[-1])]
                columns[name] = [values[a - offsets[0] : b - offsets[0]] for a, b in pairwise(offsets)]
    return ids, columns


def hdf5_records(loaded: Loaded, spec: Mapping[str, Any]) -> Iterator[Record]:
    ids, columns = loaded
    for i, sample_id in enumerate(ids):
        yield {"sample_id": sample_id.decode(), **{name: columns[name][i] for name in spec}}


# ---------------------------------------------------------------- the reader


class ShardReader:
    """Records of a merged dataset (`merged_dir`: metadata.json and shards/) for one reader slot.

    split: one of the dataset's splits (merge.splits, e.g. 'train'); None: every record.
    rank, world_size: this process among the training processes; worker, workers: this data-loader
    worker among the process's workers. shuffle_buffer: records held to shuffle across (0: file order);
    seed and epoch (set_epoch) make the order reproducible. fields: the fields to return (default all).
    verify: check each TFRecord record's CRC."""

    def __init__(
        self,
        merged_dir: Path | str,
        split: str | None = None,
        *,
        rank: int = 0,
        world_size: int = 1,
        worker: int = 0,
        workers: int = 1,
        shuffle_buffer: int = 0,
        seed: int = 0,
        fields: Sequence[str] | None = None,
        verify: bool = True,
    ) -> None:
        if not (0 <= rank < world_size and 0 <= worker < workers):
            raise Sim2dlError(f"reader slot rank {rank} of {world_size}, worker {worker} of {workers}: out of range")
        self.merged_dir = Path(merged_dir)
        self.metadata = load_metadata(self.merged_dir)
        spec = self.metadata["feature_spec"]
        unknown = sorted(set(fields or ()) - set(spec))
        if unknown:
            raise Sim2dlError(f"fields {unknown} are not in {self.merged_dir} (it has {sorted(spec)})")
        self.spec = {name: spec[name] for name in (fields or spec)}
        # Categorical fields hold class ids; their names, in id order: self.classes[field][id]
        self.classes = {name: names for name, names in class_names(self.metadata).items() if name in self.spec}
        self.slot, self.slots = rank * workers + worker, world_size * workers
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
        """Each unit with its bytes (or arrays), the next one read by a thread while this one is decoded
        (reads release the GIL): storage and decoding overlap. Uncompressed TFRecord units are read
        into two reused buffers (their records are copied out as they are decoded)."""
        if self.metadata["format"] == "tfrecord" and self.metadata["compression"] == "none":
            indexes: dict[int, np.ndarray] = {}

            def extent(k: int) -> tuple[np.ndarray, ...]:
                unit = units[k]
                indexes[k] = tfrecord_index(self.paths[unit.shard])[unit.first : unit.stop]
                offset, length = unit_extent(indexes[k])
                return np.array([unit.shard]), np.array([offset]), np.array([length])

            # buffered reads: with the kernel's read-ahead, faster here than O_DIRECT for one stream
            for k, (positions, buffer) in enumerate(read_batches(self.paths, len(units), extent, direct=False)):
                index = indexes.pop(k)
                start = int(positions[0])
                yield units[k], (buffer[start : start + unit_extent(index)[1]].data.cast("B"), index)
            return
        with ThreadPoolExecutor(max_workers=1, thread_name_prefix="read-ahead") as pool:
            pending = pool.submit(self._load, units[0]) if units else None
            for k, unit in enumerate(units):
                assert pending is not None
                loaded = pending.result()
                if k + 1 < len(units):
                    pending = pool.submit(self._load, units[k + 1])
                yield unit, loaded

    def _load(self, unit: Unit) -> Loaded:
        path = self.paths[unit.shard]
        if self.metadata["format"] == "tfrecord":
            return compressed_tfrecord_load(path, unit, self.metadata["compression"])
        return hdf5_load(path, unit, self.spec)

    def _records(self, unit: Unit, loaded: Loaded) -> Iterator[Record]:
        if self.metadata["format"] == "tfrecord":
            copy = self.metadata["compression"] == "none"  # the unit's buffer is reused
            return tfrecord_records(self.paths[unit.shard], loaded, self.spec, self.verify, copy)
        return hdf5_records(loaded, self.spec)

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


def stack(records: Sequence[Record], spec: Mapping[str, Any]) -> Record:
    out: Record = {"sample_id": [r["sample_id"] for r in records]}
    for name, field in spec.items():
        values = [r[name] for r in records]
        out[name] = np.stack(values) if fixed(field) else values
    return out

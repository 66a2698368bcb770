"""TFRecord shards read without TensorFlow: the `.idx` index (offset and length of each framed record, the
format NVIDIA DALI's reader takes), a unit of records loaded (compressed shards inflated whole: their
indexes count uncompressed bytes), each record's framing and CRC checked and its tf.train.Example decoded
from the protobuf wire format (`decode_example`), honouring each field's encoding in the feature spec.
Memory: one unit's bytes; time: linear in the records' bytes.
"""

from __future__ import annotations

import gzip
import zlib
from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import Any

import numpy as np

from pipeline import Sim2dlError
from pipeline.formats.metadata import fixed
from pipeline.formats.shards.base import Loaded, Record, index_path
from pipeline.formats.shards.tfrecord.encode import masked_crc32c

# ---------------------------------------------------------------- tf.train.Example, decoded without
# TensorFlow


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
            return ("float" if kind == 2 else "int64"), (
                np.concatenate(arrays) if arrays else np.zeros(0, dtype)
            )
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


def tfrecord_index(shard: Path) -> np.ndarray:
    """(offset, length) per record from the shard's .idx file, as an (n, 2) int64 array."""
    index = index_path(shard)
    try:
        text = index.read_bytes()
    except OSError as e:
        raise Sim2dlError(f"cannot read the index {index}: {e.strerror}") from e
    return np.array(text.split(), np.int64).reshape(-1, 2)


def unit_extent(index: np.ndarray) -> tuple[int, int]:
    """(offset, length) of the bytes holding a unit's records (their index rows)."""
    if not len(index):
        return 0, 0
    return int(index[0, 0]), int(index[-1, 0] + index[-1, 1] - index[0, 0])


def compressed_tfrecord_load(shard: Path, first: int, stop: int, compression: str) -> Loaded:
    """A unit of a compressed TFRecord shard: the shard inflated whole (its index counts uncompressed
    bytes), from the unit's first record on, and the unit's index rows."""
    index = tfrecord_index(shard)[first:stop]
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


def records_ok(path: Path) -> bool:
    """Every framed record of an uncompressed TFRecord file has its length and CRCs right (a file of records
    without an index: a sampled file of staging), read one record at a time."""
    with open(path, "rb") as f:
        while header := f.read(12):
            if len(header) < 12:
                return False
            (length,) = np.frombuffer(header, "<u8", 1)
            (length_crc,) = np.frombuffer(header, "<u4", 1, 8)
            if masked_crc32c(header[:8]) != length_crc:
                return False
            data, crc = f.read(int(length)), f.read(4)
            if len(data) != length or len(crc) != 4 or masked_crc32c(data) != np.frombuffer(crc, "<u4")[0]:
                return False
    return True

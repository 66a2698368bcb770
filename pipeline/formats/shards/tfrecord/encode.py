"""TFRecord shards of tf.train.Example, readable by a plain tf.data.TFRecordDataset.

Feature spec of every record: `sample_id` (bytes), and per field NAME: `NAME` and `NAME_shape` (int64
list). `NAME` is encoded as the field's `encoding` in the feature spec says (merge.encoding): `bytes`
(the default: the array's raw little-endian values in C order, one bytes value), `float_list` (float32
values, as the MLPerf CosmoFlow reference parses its labels) or `int64_list`. `pipeline.training.tfdata`
(tf.data) and `pipeline.formats.shards.shard_reader` (no TensorFlow) decode them with the spec from
metadata.json.

Each Example is encoded here (`example_pieces`: map entries in key order, so a record's bytes depend only
on its content) with the arrays as pieces of their own, never copied into a message. Uncompressed shards
are framed here too (the documented TFRecord framing: length, masked CRC-32C of the length, data, masked
CRC-32C of the data; CRCs by google-crc32c, computed over the pieces in place) and written with direct I/O
through reused buffers, checksummed as they are written: TensorFlow's writer would copy every shard
through the page cache and the checksum would read it back. TensorFlow reads the records back as the
Examples it builds itself (a test checks). Ingest frames its parts the same way (pipeline.formats.parts), so a
shard can be an ingested part as it is. Compressed shards go through tf.io.TFRecordWriter.
"""

from __future__ import annotations

import struct
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import google_crc32c
import numpy as np

from pipeline.formats.shards.base import FeatureSpec, ShardWriter
from pipeline.storage.directio import AppendWriter
from pipeline.storage.fsutil import Checksum

COMPRESSION_TYPES = {"none": "", "gzip": "GZIP", "zlib": "ZLIB"}
FRAME_BYTES = 16  # length (8) + length CRC (4) + data CRC (4) around each record


def _mask(crc: int) -> int:
    """TFRecord's CRC: CRC-32C rotated right by 15 bits plus a constant."""
    return (((crc >> 15) | (crc << 17)) + 0xA282EAD8) & 0xFFFFFFFF


def masked_crc32c(data: Any) -> int:
    return _mask(google_crc32c.value(data))


Piece = bytes | np.ndarray


def _varint(n: int) -> bytes:
    out = bytearray()
    while n > 0x7F:
        out.append(n & 0x7F | 0x80)
        n >>= 7
    out.append(n)
    return bytes(out)


def _delimited(tag: int, length: int) -> bytes:
    """A length-delimited protobuf field's key and length (every field here has a one-byte key)."""
    return bytes((tag,)) + _varint(length)


def _bytes_feature(data: Piece, length: int) -> tuple[list[Piece], int]:
    # Feature{bytes_list (1): BytesList{value (1): data}}
    inner = _delimited(0x0A, length)
    outer = _delimited(0x0A, len(inner) + length)
    return [outer + inner, data], len(outer) + len(inner) + length


def encode_varints(values: Any) -> bytes:
    """int64 values as packed protobuf varints (two's complement: a negative value takes 10 bytes), in
    arrays: a label vector or a whole array encodes without a loop per value."""
    if isinstance(values, tuple):  # a shape: a loop is faster than arrays
        return b"".join(_varint(x) for x in values)
    if np.size(values) <= 16:  # a small label vector: so is this
        return b"".join(
            _varint(x & 0xFFFFFFFFFFFFFFFF) for x in np.asarray(values, np.int64).reshape(-1).tolist()
        )
    v = np.asarray(values).astype(np.int64).reshape(-1).view(np.uint64)
    nbytes = np.ones(v.size, np.int64)
    rest = v >> np.uint64(7)
    while rest.any():
        nbytes += rest > 0
        rest >>= np.uint64(7)
    first = np.cumsum(nbytes) - nbytes
    out = np.empty(int(nbytes.sum()), np.uint8)
    for k in range(int(nbytes.max())):
        has = nbytes > k
        low = (v[has] >> np.uint64(7 * k)) & np.uint64(0x7F)
        out[first[has] + k] = low | np.where(nbytes[has] > k + 1, np.uint64(0x80), np.uint64(0))
    return out.tobytes()


def _int64_feature(values: Any) -> tuple[list[Piece], int]:
    # Feature{int64_list (3): Int64List{value (1): packed varints}}; an empty packed field is left out
    packed = encode_varints(values)
    body = _delimited(0x0A, len(packed)) + packed if packed else b""
    encoded = _delimited(0x1A, len(body)) + body
    return [encoded], len(encoded)


def _float_feature(little: np.ndarray) -> tuple[list[Piece], int]:
    # Feature{float_list (2): FloatList{value (1): packed little-endian float32, the array's own bytes}}
    if not little.nbytes:
        encoded = _delimited(0x12, 0)
        return [encoded], len(encoded)
    inner = _delimited(0x0A, little.nbytes)
    outer = _delimited(0x12, len(inner) + little.nbytes)
    return [outer + inner, little], len(outer) + len(inner) + little.nbytes


def _size(piece: Piece) -> int:
    return len(piece) if isinstance(piece, bytes) else piece.nbytes


ENCODINGS = ("bytes", "float_list", "int64_list")


def example_pieces(
    sample_id: str, arrays: Mapping[str, np.ndarray], encodings: Mapping[str, str] | None = None
) -> tuple[list[Piece], dict[str, int]]:
    """A record's tf.train.Example (the feature spec in the module doc), as pieces whose concatenation is
    the serialised message. Each array is a piece of its own, a view, so it is not copied into a message
    and its place is known. Returns the pieces and the byte offset in the message of each array stored
    as its own bytes (`bytes`, and `float_list` of float32; not `int64_list`, which re-encodes values).
    `encodings`: field -> one of ENCODINGS (default bytes)."""
    sample_id_bytes = sample_id.encode()
    features = {b"sample_id": _bytes_feature(sample_id_bytes, len(sample_id_bytes))}
    array_pieces = {}
    for name, array in arrays.items():
        encoding = (encodings or {}).get(name, "bytes")
        if encoding == "int64_list":
            features[name.encode()] = _int64_feature(array)
        else:
            wanted = np.dtype("<f4") if encoding == "float_list" else array.dtype.newbyteorder("<")
            little = np.ascontiguousarray(array.astype(wanted, copy=False))
            array_pieces[name] = little.reshape(-1).view(np.uint8)
            if encoding == "float_list":
                features[name.encode()] = _float_feature(array_pieces[name])
            else:
                features[name.encode()] = _bytes_feature(array_pieces[name], little.nbytes)
        features[f"{name}_shape".encode()] = _int64_feature(array.shape)
    pieces: list[Piece] = []
    for key in sorted(features):  # deterministic serialisation orders map entries by key
        value, value_length = features[key]
        entry = _delimited(0x0A, len(key)) + key + _delimited(0x12, value_length)
        pieces += [_delimited(0x0A, len(entry) + value_length) + entry, *value]  # Features.feature (1)
    pieces.insert(0, _delimited(0x0A, sum(map(_size, pieces))))  # Example.features (1)
    joined: list[Piece] = []  # runs of encoded bytes joined: fewer, larger writes
    offsets, position = {}, 0
    where = {id(piece): name for name, piece in array_pieces.items()}
    for piece in pieces:
        if id(piece) in where:
            offsets[where[id(piece)]] = position
            joined.append(piece)
        elif joined and isinstance(joined[-1], bytes):
            joined[-1] += piece
        else:
            joined.append(piece)
        position += _size(piece)
    return joined, offsets


def framed_example(
    sample_id: str, arrays: Mapping[str, np.ndarray], encodings: Mapping[str, str] | None = None
) -> tuple[list[Piece], dict[str, int]]:
    """example_pieces with the TFRecord framing around them: one record of a TFRecord file, and each
    array's byte offset in it. CRCs are computed over the pieces in place."""
    pieces, offsets = example_pieces(sample_id, arrays, encodings)
    length = struct.pack("<Q", sum(map(_size, pieces)))
    crc = 0
    for piece in pieces:
        crc = google_crc32c.extend(crc, piece)
    head = length + struct.pack("<I", masked_crc32c(length))
    tail = struct.pack("<I", _mask(crc))
    if isinstance(pieces[-1], bytes):
        pieces[-1] += tail
    else:
        pieces.append(tail)
    if isinstance(pieces[0], bytes):
        pieces[0] = head + pieces[0]
    else:
        pieces.insert(0, head)
    return pieces, {name: len(head) + at for name, at in offsets.items()}


class TFRecordShardWriter(ShardWriter):
    format = "tfrecord"
    suffix = ".tfrecord"
    compressions = tuple(COMPRESSION_TYPES)
    index_meaning = "byte offset and byte length of each framed record in the uncompressed record stream"
    framed_record = staticmethod(framed_example)

    def __init__(self, path: Path, spec: FeatureSpec, compression: str) -> None:
        super().__init__(path, spec, compression)
        self._offset = 0
        self._encodings = {name: field.get("encoding", "bytes") for name, field in spec.items()}
        if compression == "none":
            self._checksum = Checksum()
            self._file: AppendWriter | None = AppendWriter(path, on_data=self._checksum.update)
        else:
            import tensorflow as tf  # only compressed shards need TensorFlow's writer

            self._file = None
            options = tf.io.TFRecordOptions(compression_type=COMPRESSION_TYPES[compression])
            self._writer = tf.io.TFRecordWriter(str(path), options)

    def write(self, sample_id: str, arrays: Mapping[str, np.ndarray]) -> tuple[int, int]:
        if self._file is not None:
            pieces, _ = framed_example(sample_id, arrays, self._encodings)
            for piece in pieces:
                self._file.write(piece)
            length = sum(map(_size, pieces))
        else:
            example, _ = example_pieces(sample_id, arrays, self._encodings)
            self._writer.write(b"".join(p if isinstance(p, bytes) else p.tobytes() for p in example))
            length = sum(map(_size, example)) + FRAME_BYTES
        entry = (self._offset, length)
        self._offset += length
        return entry

    def close(self) -> None:
        if self._file is not None:
            self._file.close()
            self.checksum = self._checksum.text()
        else:
            self._writer.close()

    def abort(self) -> None:
        if self._file is not None:
            self._file.abort()
        else:
            self._writer.close()

    @staticmethod
    def encoding() -> str:
        return (
            "tf.train.Example: 'sample_id' bytes; per field NAME: 'NAME' as the field's encoding in the "
            "feature spec says (bytes: raw little-endian values, C order, dtype from the spec; float_list: "
            "float32 values; int64_list: int64 values; C order) and 'NAME_shape' int64 list"
        )

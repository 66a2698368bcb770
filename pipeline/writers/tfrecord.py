"""TFRecord shards of tf.train.Example, readable by a plain tf.data.TFRecordDataset.

Feature spec of every record: `sample_id` (bytes), and per field NAME: `NAME` (bytes: the array's raw
little-endian values in C order) and `NAME_shape` (int64 list). `pipeline.dataset.parse_example`
decodes them with the spec from metadata.json.

Uncompressed shards are framed here (the documented TFRecord framing: length, masked CRC-32C of the
length, data, masked CRC-32C of the data; CRCs by google-crc32c) and written with direct I/O through
reused buffers, checksummed as they are written: TensorFlow's writer would copy every shard through the
page cache and the checksum would read it back. The bytes are identical to tf.io.TFRecordWriter's (a test
compares them). Compressed shards go through tf.io.TFRecordWriter.
"""

from __future__ import annotations

import struct
from collections.abc import Mapping
from pathlib import Path

import google_crc32c
import numpy as np

from pipeline.directio import AppendWriter
from pipeline.fsutil import Checksum
from pipeline.writers.base import FeatureSpec, ShardWriter

COMPRESSION_TYPES = {"none": "", "gzip": "GZIP", "zlib": "ZLIB"}
FRAME_BYTES = 16  # length (8) + length CRC (4) + data CRC (4) around each record


def masked_crc32c(data: bytes) -> int:
    """TFRecord's CRC: CRC-32C rotated right by 15 bits plus a constant."""
    crc = google_crc32c.value(data)
    return (((crc >> 15) | (crc << 17)) + 0xA282EAD8) & 0xFFFFFFFF


def frame(data: bytes) -> tuple[bytes, bytes]:
    """The bytes before and after `data` in a TFRecord file."""
    length = struct.pack("<Q", len(data))
    return length + struct.pack("<I", masked_crc32c(length)), struct.pack("<I", masked_crc32c(data))


class TFRecordShardWriter(ShardWriter):
    format = "tfrecord"
    suffix = ".tfrecord"
    compressions = tuple(COMPRESSION_TYPES)
    index_meaning = "byte offset and byte length of each framed record in the uncompressed record stream"

    def __init__(self, path: Path, spec: FeatureSpec, compression: str) -> None:
        super().__init__(path, spec, compression)
        import tensorflow as tf

        self._tf = tf
        self._offset = 0
        if compression == "none":
            self._checksum = Checksum()
            self._file: AppendWriter | None = AppendWriter(path, on_data=self._checksum.update)
        else:
            self._file = None
            options = tf.io.TFRecordOptions(compression_type=COMPRESSION_TYPES[compression])
            self._writer = tf.io.TFRecordWriter(str(path), options)

    def write(self, sample_id: str, arrays: Mapping[str, np.ndarray]) -> tuple[int, int]:
        train = self._tf.train
        feature = {"sample_id": train.Feature(bytes_list=train.BytesList(value=[sample_id.encode()]))}
        for name, array in arrays.items():
            little = array.astype(array.dtype.newbyteorder("<"), copy=False)
            feature[name] = train.Feature(bytes_list=train.BytesList(value=[little.tobytes()]))
            feature[f"{name}_shape"] = train.Feature(int64_list=train.Int64List(value=array.shape))
        # deterministic=True sorts the feature map: byte-identical shards across processes and reruns.
        data = train.Example(features=train.Features(feature=feature)).SerializeToString(deterministic=True)
        if self._file is not None:
            head, tail = frame(data)
            self._file.write(head)
            self._file.write(data)
            self._file.write(tail)
        else:
            self._writer.write(data)
        entry = (self._offset, len(data) + FRAME_BYTES)
        self._offset += entry[1]
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
            "tf.train.Example: 'sample_id' bytes; per field NAME: 'NAME' bytes (raw little-endian "
            "values, C order, dtype from the spec) and 'NAME_shape' int64 list"
        )

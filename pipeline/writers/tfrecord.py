"""TFRecord shards of tf.train.Example, readable by a plain tf.data.TFRecordDataset.

Feature spec of every record: `sample_id` (bytes), and per field NAME: `NAME` (bytes: the array's raw
little-endian values in C order) and `NAME_shape` (int64 list). `pipeline.dataset.parse_example`
decodes them with the spec from metadata.json.
"""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path

import numpy as np

from pipeline.writers.base import FeatureSpec, ShardWriter

COMPRESSION_TYPES = {"none": "", "gzip": "GZIP", "zlib": "ZLIB"}
FRAME_BYTES = 16  # length (8) + length CRC (4) + data CRC (4) around each record


class TFRecordShardWriter(ShardWriter):
    format = "tfrecord"
    suffix = ".tfrecord"
    compressions = tuple(COMPRESSION_TYPES)
    index_meaning = "byte offset and byte length of each framed record in the uncompressed record stream"

    def __init__(self, path: Path, spec: FeatureSpec, compression: str) -> None:
        super().__init__(path, spec, compression)
        import tensorflow as tf

        self._tf = tf
        options = tf.io.TFRecordOptions(compression_type=COMPRESSION_TYPES[compression])
        self._writer = tf.io.TFRecordWriter(str(path), options)
        self._offset = 0

    def write(self, sample_id: str, arrays: Mapping[str, np.ndarray]) -> tuple[int, int]:
        train = self._tf.train
        feature = {"sample_id": train.Feature(bytes_list=train.BytesList(value=[sample_id.encode()]))}
        for name, array in arrays.items():
            little = array.astype(array.dtype.newbyteorder("<"), copy=False)
            feature[name] = train.Feature(bytes_list=train.BytesList(value=[little.tobytes()]))
            feature[f"{name}_shape"] = train.Feature(int64_list=train.Int64List(value=array.shape))
        # deterministic=True sorts the feature map: byte-identical shards across processes and reruns.
        data = train.Example(features=train.Features(feature=feature)).SerializeToString(deterministic=True)
        self._writer.write(data)
        entry = (self._offset, len(data) + FRAME_BYTES)
        self._offset += entry[1]
        return entry

    def close(self) -> None:
        self._writer.close()

    @staticmethod
    def encoding() -> str:
        return (
            "tf.train.Example: 'sample_id' bytes; per field NAME: 'NAME' bytes (raw little-endian "
            "values, C order, dtype from the spec) and 'NAME_shape' int64 list"
        )

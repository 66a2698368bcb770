"""TFRecord shards of tf.train.Example, the format's one home: writing (encode.py), reading without
TensorFlow (decode.py) and in tf.data (tfdata.py), brought together by `TFRecordFormat`."""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any

import numpy as np

from pipeline.formats.shards.base import Extent, FeatureSpec, Loaded, Record, ShardFormat
from pipeline.formats.shards.tfrecord.decode import (
    compressed_tfrecord_load,
    records_ok,
    tfrecord_index,
    tfrecord_records,
    unit_extent,
)
from pipeline.formats.shards.tfrecord.encode import ENCODINGS, TFRecordShardWriter
from pipeline.storage.directio import read_batches


class TFRecordFormat(ShardFormat):
    writer = TFRecordShardWriter
    encodings = ENCODINGS
    trainable = True

    def index(self, shard: Path) -> np.ndarray:
        return tfrecord_index(shard)

    def load(self, shard: Path, first: int, stop: int, spec: FeatureSpec, compression: str) -> Loaded:
        if compression != "none":
            return compressed_tfrecord_load(shard, first, stop, compression)
        index = tfrecord_index(shard)[first:stop]
        offset, length = unit_extent(index)
        with open(shard, "rb") as f:
            f.seek(offset)
            return memoryview(f.read(length)), index

    def records(
        self, shard: Path, loaded: Loaded, spec: FeatureSpec, verify: bool, copy: bool
    ) -> Iterator[Record]:
        return tfrecord_records(shard, loaded, spec, verify, copy)

    def reuses_buffers(self, compression: str) -> bool:
        return compression == "none"

    def read_ahead(
        self, paths: Sequence[Path], extents: Sequence[Extent], spec: FeatureSpec, compression: str
    ) -> Iterator[Loaded]:
        """Uncompressed extents are read as byte ranges into two reused buffers (buffered reads: with the
        kernel's read-ahead, faster here than O_DIRECT for one stream); compressed ones as the base does."""
        if compression != "none":
            yield from super().read_ahead(paths, extents, spec, compression)
            return

        indexes: dict[int, np.ndarray] = {}

        def extent(k: int) -> tuple[np.ndarray, ...]:
            shard, first, stop = extents[k]
            indexes[k] = tfrecord_index(paths[shard])[first:stop]
            offset, length = unit_extent(indexes[k])
            return np.array([shard]), np.array([offset]), np.array([length])

        for k, (positions, buffer) in enumerate(read_batches(paths, len(extents), extent, direct=False)):
            index = indexes.pop(k)
            start = int(positions[0])
            yield buffer[start : start + unit_extent(index)[1]].data.cast("B"), index

    def verify(self, path: Path) -> bool:
        return records_ok(path)

    def tf_records(self, files: Sequence[Path], compression: str, parallel_reads: int) -> Any:
        from pipeline.formats.shards.tfrecord.tfdata import record_dataset

        return record_dataset(files, compression, parallel_reads)

"""Shard formats, one home each (a `ShardFormat`: writer, index, reading, verification, tf.data records,
compressions, encodings). Adding one: a module or small package with its ShardFormat, registered here."""

from __future__ import annotations

from pipeline import Sim2dlError
from pipeline.formats.shards.base import FeatureSpec, ShardFormat, ShardWriter
from pipeline.formats.shards.hdf5 import HDF5Format
from pipeline.formats.shards.tfrecord import TFRecordFormat

FORMATS: dict[str, ShardFormat] = {f.name: f for f in (TFRecordFormat(), HDF5Format())}
WRITERS: dict[str, type[ShardWriter]] = {name: f.writer for name, f in FORMATS.items()}


def shard_format(name: str) -> ShardFormat:
    if name not in FORMATS:
        raise Sim2dlError(f"unknown shard format '{name}' (known: {sorted(FORMATS)})")
    return FORMATS[name]


__all__ = ["FORMATS", "WRITERS", "FeatureSpec", "ShardFormat", "ShardWriter", "shard_format"]

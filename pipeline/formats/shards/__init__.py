"""Shard formats. Adding one: a module with a `ShardWriter` subclass, registered in WRITERS."""

from __future__ import annotations

from pipeline.formats.shards.base import FeatureSpec, ShardWriter
from pipeline.formats.shards.hdf5 import HDF5ShardWriter
from pipeline.formats.shards.tfrecord import TFRecordShardWriter

WRITERS: dict[str, type[ShardWriter]] = {w.format: w for w in (TFRecordShardWriter, HDF5ShardWriter)}

__all__ = ["WRITERS", "FeatureSpec", "ShardWriter"]

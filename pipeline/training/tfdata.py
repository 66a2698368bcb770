"""tf.data over merged shards: the dataset's serialized records read by its shard format, and the public
names of TFRecord parsing (`parse_example`, `parse_batch`) that users' own tf.data code imports."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from pipeline import Sim2dlError
from pipeline.formats.metadata import class_names, fixed, load_metadata, shard_paths
from pipeline.formats.shards import shard_format
from pipeline.formats.shards.tfrecord.tfdata import (
    READ_BUFFER_BYTES,
    decode_field,
    feature_description,
    parse_batch,
    parse_example,
)

__all__ = [
    "READ_BUFFER_BYTES",
    "class_names",
    "decode_field",
    "feature_description",
    "fixed",
    "load_metadata",
    "parse_batch",
    "parse_example",
    "raw_records",
    "shard_paths",
]


def raw_records(merged_dir: Path, files: list[Path] | None = None, parallel_reads: int = 4) -> Any:
    """Serialized records of the dataset's shards (all, or `files`) as a tf.data.Dataset; with
    parallel_reads > 1, records of several shards are interleaved."""
    meta = load_metadata(merged_dir)
    if "slabs" in meta and files is None:
        raise Sim2dlError(
            f"{merged_dir} holds each shard as {meta['slabs']['count']} slab files (merge.slabs), whose "
            "records are parts of samples: pass the files of one slab, or merge with slabs: 1 for whole "
            "records"
        )
    chosen = files if files is not None else shard_paths(merged_dir, meta)
    return shard_format(meta["format"]).tf_records(chosen, meta["compression"], parallel_reads)

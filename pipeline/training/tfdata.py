"""Reading merged shards back: the metadata, and tf.data parsing of TFRecord shards with its spec."""

from __future__ import annotations

import json
from collections.abc import Mapping
from itertools import pairwise
from pathlib import Path
from typing import Any

import h5py
import numpy as np

from pipeline import Sim2dlError
from pipeline.paths import MergedPaths


def load_metadata(merged_dir: Path) -> dict[str, Any]:
    path = MergedPaths(merged_dir).metadata
    try:
        return json.loads(path.read_text())
    except OSError as e:
        raise Sim2dlError(f"cannot read dataset metadata {path}: {e.strerror} (run merge first)") from e


def class_names(metadata: Mapping[str, Any]) -> dict[str, list[str]]:
    """The classes of each categorical field, in id order (a record holds the id, int64)."""
    return {name: list(names) for name, names in metadata.get("classes", {}).items()}


def shard_paths(merged_dir: Path, metadata: Mapping[str, Any]) -> list[Path]:
    return [MergedPaths(merged_dir).shard(s["file"]) for s in metadata["shards"]]


def encoding(field: Mapping[str, Any]) -> str:
    return field.get("encoding", "bytes")  # metadata.json of sim2dl before per-field encodings: bytes


def fixed(field: Mapping[str, Any]) -> bool:
    return all(d is not None for d in field["shape"])


def feature_description(spec: Mapping[str, Mapping[str, Any]], names: Any = None) -> dict[str, Any]:
    """tf.io.parse_* feature descriptions of `names` (default every field) and sample_id, as each field's
    encoding says; variable shapes also read NAME_shape."""
    import tensorflow as tf

    description = {"sample_id": tf.io.FixedLenFeature([], tf.string)}
    for name in names if names is not None else spec:
        field = spec[name]
        kind = {"bytes": tf.string, "float_list": tf.float32, "int64_list": tf.int64}[encoding(field)]
        if kind == tf.string:
            description[name] = tf.io.FixedLenFeature([], tf.string)
        elif fixed(field):
            description[name] = tf.io.FixedLenFeature(field["shape"], kind)
        else:
            description[name] = tf.io.VarLenFeature(kind)
        if not fixed(field):
            description[f"{name}_shape"] = tf.io.VarLenFeature(tf.int64)
    return description


def decode_field(parsed: Mapping[str, Any], name: str, field: Mapping[str, Any], batched: bool) -> Any:
    """A parsed field as a tensor of its dtype and shape (batched: fixed shapes only)."""
    import tensorflow as tf

    dtype = tf.dtypes.as_dtype(field["dtype"])
    value = parsed[name]
    if encoding(field) == "bytes":
        value = tf.io.decode_raw(value, dtype, little_endian=True)
    elif isinstance(value, tf.sparse.SparseTensor):
        value = tf.sparse.to_dense(value)
    value = tf.cast(value, dtype)
    if batched:
        return tf.reshape(value, [-1, *field["shape"]])
    if fixed(field):
        return tf.reshape(value, field["shape"])
    shaped = tf.reshape(value, tf.sparse.to_dense(parsed[f"{name}_shape"]))
    shaped.set_shape(field["shape"])  # rank and fixed axes known statically; None axes vary
    return shaped


def parse_example(serialized: Any, spec: Mapping[str, Mapping[str, Any]]) -> dict[str, Any]:
    """Decode one tf.train.Example written by the TFRecord writer into tensors by field name."""
    import tensorflow as tf

    parsed = tf.io.parse_single_example(serialized, feature_description(spec))
    return {"sample_id": parsed["sample_id"], **{n: decode_field(parsed, n, f, False) for n, f in spec.items()}}


# Large reads per shard: TF's default 256 KB buffer costs 2.5x in samples/s (bench/read.py), and with
# 32 MB, four shards read in parallel keep the disk busier than one stream (cold, 64 MB shards: 0.88 of a
# `cat` of the shards with 16 MB, 1.17 with 32 MB). Memory: one buffer per shard being read.
READ_BUFFER_BYTES = 32 << 20


def raw_records(merged_dir: Path, files: list[Path] | None = None, parallel_reads: int = 4) -> Any:
    """Serialized records of the dataset's TFRecord shards (all, or `files`), read with large buffers;
    with parallel_reads > 1, records of several shards are interleaved."""
    import tensorflow as tf

    meta = load_metadata(merged_dir)
    if meta["format"] != "tfrecord":
        raise Sim2dlError(f"{merged_dir} holds {meta['format']} shards, not tfrecord")
    compression = {"none": "", "gzip": "GZIP", "zlib": "ZLIB"}[meta["compression"]]
    names = [str(p) for p in (files if files is not None else shard_paths(merged_dir, meta))]
    return tf.data.TFRecordDataset(
        names,
        compression_type=compression,
        buffer_size=READ_BUFFER_BYTES,
        num_parallel_reads=parallel_reads if parallel_reads > 1 else None,
    )


def tfrecord_dataset(merged_dir: Path) -> Any:
    """All records of a TFRecord dataset in shard order, parsed (for inspection and tests)."""
    spec = load_metadata(merged_dir)["feature_spec"]
    return raw_records(merged_dir, parallel_reads=1).map(lambda s: parse_example(s, spec))


def hdf5_records(shard: Path, spec: Mapping[str, Mapping[str, Any]]) -> list[dict[str, Any]]:
    """All records of one HDF5 shard as dicts of arrays (plus 'sample_id')."""
    records: list[dict[str, Any]] = []
    with h5py.File(shard, "r") as f:
        ids = [s.decode() if isinstance(s, bytes) else s for s in f["sample_id"][()]]
        columns: dict[str, list[np.ndarray]] = {}
        for name, field in spec.items():
            if all(d is not None for d in field["shape"]):
                columns[name] = list(f[name][()])
            else:
                values, offsets = f[name]["values"][()], f[name]["offsets"][()]
                columns[name] = [values[a:b] for a, b in pairwise(offsets)]
        for i, sample_id in enumerate(ids):
            records.append({"sample_id": sample_id, **{n: columns[n][i] for n in spec}})
    return records


def parse_batch(serialized: Any, spec: Mapping[str, Mapping[str, Any]]) -> dict[str, Any]:
    """Decode a batch of serialized Examples at once (fixed-shape fields only): one parse op per batch
    instead of one per record, which is what keeps the input pipeline near the storage read rate."""
    import tensorflow as tf

    variable = [n for n, f in spec.items() if not fixed(f)]
    if variable:
        raise Sim2dlError(f"fields {variable} have variable shapes: parse them record by record (parse_example)")
    parsed = tf.io.parse_example(serialized, feature_description(spec))
    return {"sample_id": parsed["sample_id"], **{n: decode_field(parsed, n, f, True) for n, f in spec.items()}}

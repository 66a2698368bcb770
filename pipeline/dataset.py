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


def load_metadata(merged_dir: Path) -> dict[str, Any]:
    path = merged_dir / "metadata.json"
    try:
        return json.loads(path.read_text())
    except OSError as e:
        raise Sim2dlError(f"cannot read dataset metadata {path}: {e.strerror} (run merge first)") from e


def shard_paths(merged_dir: Path, metadata: Mapping[str, Any]) -> list[Path]:
    return [merged_dir / "shards" / s["file"] for s in metadata["shards"]]


def parse_example(serialized: Any, spec: Mapping[str, Mapping[str, Any]]) -> dict[str, Any]:
    """Decode one tf.train.Example written by the TFRecord writer into tensors by field name."""
    import tensorflow as tf

    description = {"sample_id": tf.io.FixedLenFeature([], tf.string)}
    for name in spec:
        description[name] = tf.io.FixedLenFeature([], tf.string)
        description[f"{name}_shape"] = tf.io.VarLenFeature(tf.int64)
    parsed = tf.io.parse_single_example(serialized, description)
    out = {"sample_id": parsed["sample_id"]}
    for name, field in spec.items():
        values = tf.io.decode_raw(parsed[name], tf.dtypes.as_dtype(field["dtype"]), little_endian=True)
        if all(d is not None for d in field["shape"]):
            out[name] = tf.reshape(values, field["shape"])
        else:
            out[name] = tf.reshape(values, tf.sparse.to_dense(parsed[f"{name}_shape"]))
    return out


# Large sequential reads per shard: TF's default 256 KB buffer costs 2.5x in samples/s (bench/read.py).
READ_BUFFER_BYTES = 16 << 20


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

    variable = [n for n, f in spec.items() if any(d is None for d in f["shape"])]
    if variable:
        raise Sim2dlError(f"fields {variable} have variable shapes: parse them record by record (parse_example)")
    description = {"sample_id": tf.io.FixedLenFeature([], tf.string)}
    description.update({name: tf.io.FixedLenFeature([], tf.string) for name in spec})
    parsed = tf.io.parse_example(serialized, description)
    out = {"sample_id": parsed["sample_id"]}
    for name, field in spec.items():
        values = tf.io.decode_raw(parsed[name], tf.dtypes.as_dtype(field["dtype"]), little_endian=True)
        out[name] = tf.reshape(values, [-1, *field["shape"]])
    return out

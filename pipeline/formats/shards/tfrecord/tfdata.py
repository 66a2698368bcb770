"""TFRecord shards in tf.data: the files' records read with large buffers, and tf.train.Examples parsed into
tensors of each field's dtype and shape as the feature spec (metadata.json) says. TensorFlow is imported
inside the functions, so nothing else pays for it. Memory: one read buffer per shard being read, and the
decoded fields (with `planes`, only those planes of the feature).
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from pipeline import Sim2dlError
from pipeline.formats.metadata import encoding, fixed
from pipeline.formats.shards.tfrecord.encode import COMPRESSION_TYPES


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


def decode_field(
    parsed: Mapping[str, Any],
    name: str,
    field: Mapping[str, Any],
    batched: bool,
    planes: tuple[int, int] | None = None,
) -> Any:
    """A parsed field as a tensor of its dtype and shape (batched: fixed shapes only). planes: only
    [start, stop) of its first axis (spatial parallelism); raw bytes of a fixed shape are cut before they
    are decoded, so only those planes are ever a tensor."""
    import tensorflow as tf

    dtype = tf.dtypes.as_dtype(field["dtype"])
    value = parsed[name]
    if planes is not None:
        start, stop = planes
        if encoding(field) == "bytes" and fixed(field):
            plane = math.prod(field["shape"][1:]) * dtype.size
            value = tf.strings.substr(value, start * plane, (stop - start) * plane)
            field = {**field, "shape": [stop - start, *field["shape"][1:]]}
        else:
            whole = decode_field(parsed, name, field, batched)
            return whole[:, start:stop] if batched else whole[start:stop]
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
    return {
        "sample_id": parsed["sample_id"],
        **{n: decode_field(parsed, n, f, False) for n, f in spec.items()},
    }


def parse_batch(serialized: Any, spec: Mapping[str, Mapping[str, Any]]) -> dict[str, Any]:
    """Decode a batch of serialized Examples at once (fixed-shape fields only): one parse op per batch
    instead of one per record, which is what keeps the input pipeline near the storage read rate."""
    import tensorflow as tf

    variable = [n for n, f in spec.items() if not fixed(f)]
    if variable:
        raise Sim2dlError(
            f"fields {variable} have variable shapes: parse them record by record (parse_example)"
        )
    parsed = tf.io.parse_example(serialized, feature_description(spec))
    return {
        "sample_id": parsed["sample_id"],
        **{n: decode_field(parsed, n, f, True) for n, f in spec.items()},
    }


# Large reads per shard: TF's default 256 KB buffer reads far slower, and with 32 MB four shards read in
# parallel keep the disk busier than one stream (docs/benchmarks.md, design measurements). Memory: one
# buffer per shard being read.
READ_BUFFER_BYTES = 32 << 20


def record_dataset(files: Sequence[Path], compression: str, parallel_reads: int = 4) -> Any:
    """Serialized records of TFRecord files, read with large buffers; with parallel_reads > 1, records of
    several files are interleaved."""
    import tensorflow as tf

    return tf.data.TFRecordDataset(
        [str(p) for p in files],
        compression_type=COMPRESSION_TYPES[compression],
        buffer_size=READ_BUFFER_BYTES,
        num_parallel_reads=parallel_reads if parallel_reads > 1 else None,
    )

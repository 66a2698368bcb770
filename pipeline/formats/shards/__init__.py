"""Shard formats, one home each (a `ShardFormat`: writer, index, reading, verification, tf.data records,
compressions, encodings). Adding one: a module or small package with its ShardFormat, registered here."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

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


def check_settings(merge: Mapping[str, Any], conv: Mapping[str, Any]) -> None:
    """merge's settings that depend on the shard format: its compressions and encodings."""
    allowed = set(FORMATS[merge["format"]].compressions)
    if merge["compression"] not in allowed:
        raise Sim2dlError(
            f"config key 'merge.compression': '{merge['compression']}' is not available for "
            f"format '{merge['format']}' (choose one of {sorted(allowed)})"
        )
    check_encodings(merge, conv)


ENCODED_DTYPES = {
    "float_list": ("float32",),
    "int64_list": ("int8", "int16", "int32", "int64", "uint8", "uint16", "uint32"),
}


def check_encodings(merge: Mapping[str, Any], conv: Mapping[str, Any]) -> None:
    """merge.encoding names converted fields, only for TFRecord shards, and fits convert.dtype where that
    decides the dtype (with convert.dtype 'source', merge checks the ingested dtypes: encoding_errors)."""
    encodings = merge["encoding"]
    unknown = sorted(set(encodings) - {*conv["features"], *conv["labels"]})
    if unknown:
        raise Sim2dlError(
            f"config key 'merge.encoding': {unknown} are not convert.features or convert.labels"
        )
    special = sorted(name for name, encoding in encodings.items() if encoding != "bytes")
    if special and not {encodings[name] for name in special} <= set(FORMATS[merge["format"]].encodings):
        raise Sim2dlError(
            f"config key 'merge.encoding': {special} are encoded for TFRecord, but merge.format is "
            f"'{merge['format']}' (its datasets are typed already)"
        )
    if conv["dtype"] != "source":
        errors = encoding_errors({name: conv["dtype"] for name in encodings}, encodings)
        if errors:
            raise Sim2dlError(f"config key 'merge.encoding': {errors[0]} (convert.dtype is {conv['dtype']})")


def encoding_errors(dtypes: Mapping[str, str], encodings: Mapping[str, str]) -> list[str]:
    """What is wrong with storing fields of these dtypes in these encodings (float_list holds float32,
    int64_list integers that fit in int64)."""
    errors = []
    for name, encoding in sorted(encodings.items()):
        allowed = ENCODED_DTYPES.get(encoding)
        if allowed is not None and name in dtypes and dtypes[name] not in allowed:
            errors.append(f"field '{name}' is {dtypes[name]}: {encoding} holds only {', '.join(allowed)}")
    return errors

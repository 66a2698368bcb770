"""Helpers several test modules share (test modules never import each other; conftest.py holds fixtures
and the commands that run steps)."""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import Any

import h5py

from pipeline.formats.metadata import load_metadata
from pipeline.formats.shards import shard_format
from pipeline.training.tfdata import parse_example, raw_records


def tfrecord_dataset(merged_dir: Path) -> Any:
    """All records of a TFRecord dataset in shard order, parsed by tf.data."""
    spec = load_metadata(merged_dir)["feature_spec"]
    return raw_records(merged_dir, parallel_reads=1).map(lambda s: parse_example(s, spec))


def hdf5_records(shard: Path, spec: Mapping[str, Mapping[str, Any]]) -> list[dict[str, Any]]:
    """All records of one HDF5 shard as dicts of arrays (plus 'sample_id'), by the format's own reader."""
    with h5py.File(shard, "r") as f:
        count = len(f["sample_id"])
    hdf5 = shard_format("hdf5")
    return list(hdf5.records(shard, hdf5.load(shard, 0, count, spec, "none"), spec, True, False))

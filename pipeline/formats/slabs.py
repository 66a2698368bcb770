"""Slab shards (`merge.slabs: C`): each shard written as C files, file k holding planes [k*T, (k+1)*T) of
every feature field (T = depth / C, depth the field's first axis) of the same records in the same order,
with the labels and sample ids in every file. A rank of a spatial set
(train.spatial.ranks_per_sample: S, S dividing C) then reads only the C/S files of its slab: 1/S of the
feature bytes, where whole records would make it read the whole sample to keep a slab of it.

Names: `shard-00003-of-00010.slab-1-of-4.tfrecord` for slab 1 of 4 of `shard-00003-of-00010.tfrecord`.
Pure (names, checks, array views); O(1) memory and time per record.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from pathlib import PurePath
from typing import Any, TypeVar

import numpy as np

from pipeline import Sim2dlError

KEY = "merge.slabs"
_SLAB = re.compile(r"\.slab-(\d+)-of-(\d+)$")

P = TypeVar("P", bound=PurePath)


def slab_name(shard: str, k: int, count: int) -> str:
    """The name of slab k's file of `shard` (the shard's name when count is 1)."""
    if count == 1:
        return shard
    path = PurePath(shard)
    return path.with_name(f"{path.stem}.slab-{k}-of-{count}{path.suffix}").as_posix()


def slab_of(name: str) -> tuple[str, int, int]:
    """(the shard's name, slab number, slab count) of a file name (a whole shard: slab 0 of 1)."""
    path = PurePath(name)
    match = _SLAB.search(path.stem)
    if not match:
        return name, 0, 1
    shard = path.with_name(path.stem[: match.start()] + path.suffix).as_posix()
    return shard, int(match.group(1)), int(match.group(2))


def sibling(path: P, k: int) -> P:
    """The file of slab k of the same shard as the slab file `path`."""
    shard, _, count = slab_of(path.name)
    return path.with_name(slab_name(shard, k, count))


def sliced_fields(spec: Mapping[str, Mapping[str, Any]]) -> list[str]:
    """The fields cut into slabs: the features (labels go whole into every slab file)."""
    return [name for name, field in spec.items() if field.get("role") == "feature"]


def check_slabs(count: int, spec: Mapping[str, Mapping[str, Any]], shard_format: str) -> None:
    """Config errors naming merge.slabs, before any shard is written."""
    if count == 1:
        return
    if shard_format != "tfrecord":
        raise Sim2dlError(
            f"config key '{KEY}': {count}, but slab shards are written as TFRecord only "
            f"(merge.format is {shard_format})"
        )
    for name in sliced_fields(spec):
        shape = spec[name]["shape"]
        if spec[name].get("encoding", "bytes") != "bytes":
            raise Sim2dlError(
                f"config key '{KEY}': feature '{name}' is encoded as {spec[name]['encoding']} "
                "(merge.encoding); slabs cut raw bytes: leave it as bytes"
            )
        if not shape or shape[0] is None or shape[0] % count:
            raise Sim2dlError(
                f"config key '{KEY}': {count} does not divide the first axis of feature '{name}' (shape "
                f"{shape}): slabs need a fixed depth that splits evenly"
            )


def slab_arrays(
    arrays: Mapping[str, np.ndarray], fields: list[str], k: int, count: int
) -> dict[str, np.ndarray]:
    """One record's arrays for slab k: the sliced fields' planes of that slab (views), the rest whole."""
    out = dict(arrays)
    for name in fields:
        thickness = arrays[name].shape[0] // count
        out[name] = arrays[name][k * thickness : (k + 1) * thickness]
    return out


def slabs_read(count: int, split: int, spatial_rank: int) -> range:
    """The slab files spatial rank `spatial_rank` of `split` reads (all of them with split 1): its planes
    are exactly theirs. `split` must divide `count` (checked with the training settings)."""
    per_rank = count // split
    return range(spatial_rank * per_rank, (spatial_rank + 1) * per_rank)


def check_split(count: int, split: int) -> None:
    """train.spatial.ranks_per_sample against the slabs merge wrote: each rank's planes must be whole slab
    files."""
    if count > 1 and count % split:
        raise Sim2dlError(
            f"config key 'train.spatial.ranks_per_sample': {split} does not divide the {count} slab files "
            f"per shard that merge wrote ({KEY}: {count}): set {KEY} to a multiple of the split"
        )

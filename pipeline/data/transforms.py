"""What convert does to one record's arrays, and the normalisation merge applies as it packs each record:
pure functions on arrays (particles deposited onto grids: data/deposit.py, stack, cast, log1p, crop,
split into sub-volumes, masks shaped like their fields,
(x - mean) / std). Memory: one record's arrays and their transformed copies. Time: linear in the record.
"""

from __future__ import annotations

from collections.abc import Collection, Mapping, Sequence
from itertools import product
from typing import Any

import numpy as np

from pipeline.config import MASK_SUFFIX
from pipeline.data.deposit import deposited
from pipeline.formats.readers import SampleError


def central_crop(x: np.ndarray, size: Sequence[int]) -> np.ndarray:
    if len(size) > x.ndim or any(s > d for s, d in zip(size, x.shape, strict=False)):
        raise SampleError(f"cannot crop shape {x.shape} to {tuple(size)}")
    starts = [(d - s) // 2 for s, d in zip(size, x.shape, strict=False)]
    return x[tuple(slice(a, a + s) for a, s in zip(starts, size, strict=True))]


def split_volumes(x: np.ndarray, size: Sequence[int]) -> list[np.ndarray]:
    """Non-overlapping sub-volumes of the leading axes, in C order (as CosmoFlow's split_universe)."""
    if len(size) > x.ndim or any(d % s for s, d in zip(size, x.shape, strict=False)):
        raise SampleError(f"cannot split shape {x.shape} into sub-volumes of {tuple(size)} (must divide)")
    counts = [d // s for s, d in zip(size, x.shape, strict=False)]
    pieces = []
    for corner in product(*(range(c) for c in counts)):
        index = tuple(slice(c * s, (c + 1) * s) for c, s in zip(corner, size, strict=True))
        pieces.append(np.ascontiguousarray(x[index]))
    return pieces


def transform(
    arrays: Mapping[str, np.ndarray], settings: Mapping[str, Any], categorical: Collection[str] = ()
) -> list[dict[str, np.ndarray]]:
    """One ingested record -> one or more converted samples (several when split into sub-volumes).
    Categorical fields keep their int64 class ids, and integer labels neither log1p'd nor normalised keep
    their integer type (class ids, masks); everything else is cast to convert.dtype."""
    dtype = None if settings["dtype"] == "source" else np.dtype(settings["dtype"])
    arrays = stacked(deposited(arrays, settings.get("deposit", {})), settings.get("stack", {}))
    selected = {}
    for name in (*settings["features"], *settings["labels"]):
        # Class ids keep their integers: categorical fields, and integer labels that are not transformed.
        integer_label = name in settings["labels"] and arrays[name].dtype.kind in "iu"
        untouched = name not in settings["log1p"] and name not in settings["normalise"]
        keep = dtype is None or name in categorical or (integer_label and untouched)
        x = arrays[name] if keep else arrays[name].astype(dtype, copy=False)  # unchanged: same object
        if name in settings["log1p"]:
            if x.size and x.min() <= -1:
                raise SampleError(f"field '{name}': log1p of values <= -1")
            x = np.log1p(x)
        if name in settings["features"] and settings["crop"]:
            x = central_crop(x, settings["crop"])
        selected[name] = x
    if not settings["subvolume"]:
        return [selected]
    per_feature = {
        name: split_volumes(selected[name], settings["subvolume"]) for name in settings["features"]
    }
    pieces = len(next(iter(per_feature.values())))
    if any(len(p) != pieces for p in per_feature.values()):
        raise SampleError("features split into different numbers of sub-volumes")
    labels = {name: selected[name] for name in settings["labels"]}
    return [{**{n: per_feature[n][k] for n in per_feature}, **labels} for k in range(pieces)]


def stack_component_names(convert: Mapping[str, Any], spec: Mapping[str, Any]) -> dict[str, list[str]]:
    """A convert.stack's entries along its last axis are its members, in order (metadata.json's
    component_names: what a surrogate scores and names per field)."""
    return {name: list(members) for name, members in (convert.get("stack") or {}).items() if name in spec}


def stacked(
    arrays: Mapping[str, np.ndarray], stacks: Mapping[str, Sequence[str]]
) -> Mapping[str, np.ndarray]:
    """The record's fields with each convert.stack added: its members stacked along a new last axis (their
    common dtype); SampleError when the members' shapes differ in this sample."""
    if not stacks:
        return arrays
    out = dict(arrays)
    for name, members in stacks.items():
        shapes = {member: arrays[member].shape for member in members}
        if len(set(shapes.values())) > 1:
            told = ", ".join(f"{m} {s}" for m, s in shapes.items())
            raise SampleError(f"stack '{name}': its fields' shapes differ ({told})")
        out[name] = np.stack([arrays[member] for member in members], axis=-1)
    return out


def missing_masks(
    arrays: Mapping[str, np.ndarray], settings: Mapping[str, Any], pieces: int
) -> list[dict[str, Any]]:
    """Per converted sample, the masks of missing values (ingest's NAME_mask, readers/cf.py) of the fields
    with statistics, cropped and split as their fields are, so that statistics leave missing values out."""
    masks = {
        name: arrays[name + MASK_SUFFIX] for name in settings["normalise"] if name + MASK_SUFFIX in arrays
    }
    if not masks:
        return [{}] * pieces
    features = [name for name in settings["features"] if name in masks]
    shaped = {
        **settings,
        "features": features,
        "labels": [n for n in settings["labels"] if n in masks],
        "log1p": [],
        "normalise": [],
        "dtype": "source",
    }
    if settings["subvolume"] and not features:
        return [masks] * pieces  # labels are not split: every piece has the same
    return transform(masks, shaped)


def normalise(
    arrays: Mapping[str, np.ndarray], stats: Mapping[str, Mapping[str, Any]]
) -> dict[str, np.ndarray]:
    """(x - mean) / std for every field that has statistics; other fields pass through."""
    out = dict(arrays)
    for name, s in stats.items():
        x = arrays[name]
        mean = np.asarray(s["mean"], dtype=x.dtype)
        std = np.asarray(s["std"], dtype=np.float64)
        scale = (1.0 / np.where(std > 0, std, 1.0)).astype(x.dtype)
        out[name] = (x - mean) * scale
    return out

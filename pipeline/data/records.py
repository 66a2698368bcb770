"""One input file's sample as every step that reads inputs gets it: read by its format's reader, each
field checked (shape, finite values) and cast to its declared dtype without changing a value. Used by
ingest (pipeline.steps.ingest) and by online training (pipeline.online), so that both accept and reject
exactly the same samples for the same reasons. Memory and time: one sample's arrays.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import numpy as np

from pipeline.formats.readers import FieldSpec, SampleError, reader_for
from pipeline.formats.readers.base import EMPTY, readable_size, unreadable
from pipeline.storage.directio import ContentsOrError


def validate_sample(
    arrays: Mapping[str, np.ndarray], fields: Sequence[FieldSpec], check_finite: bool
) -> dict[str, np.ndarray]:
    """The sample's arrays with each field's channel axis moved last (a field's `channel_axis`), checked
    and cast to its declared dtype (`cast_to`); SampleError names the field and the reason."""
    checked = dict(arrays)
    for field in fields:
        checked[field.name] = array = field.fields_last(arrays[field.name])
        if field.dtype is not None and array.dtype != np.dtype(field.dtype):
            checked[field.name] = array = cast_to(array, np.dtype(field.dtype), field.name)
        if field.shape is not None and (
            len(array.shape) != len(field.shape)
            or any(
                want is not None and got != want for got, want in zip(array.shape, field.shape, strict=True)
            )
        ):
            expected = tuple("any" if d is None else d for d in field.shape)
            raise SampleError(f"field '{field.name}': shape {array.shape}, expected {expected}")
        if check_finite and np.issubdtype(array.dtype, np.floating):
            bad = array.size - int(np.count_nonzero(np.isfinite(array)))
            if bad:
                raise SampleError(f"field '{field.name}': {bad} non-finite values (NaN/Inf)")
    return checked


def cast_to(array: np.ndarray, dtype: np.dtype, name: str) -> np.ndarray:
    """The array in `dtype` when no value changes (ints to wider ints or floats, float64 to float32 within
    range, integral floats to ints in range, 0/1 to bool); SampleError naming the first value that would."""
    if array.dtype.kind not in "biuf":
        raise SampleError(f"field '{name}': dtype {array.dtype} cannot be cast to {dtype}")
    if np.can_cast(array.dtype, dtype, "safe") or not array.size:
        return array.astype(dtype)
    with np.errstate(all="ignore"):
        cast = array.astype(dtype)
        back = cast.astype(array.dtype)
    if dtype.kind == "f":  # precision may drop (float64 -> float32, int64 -> float32); overflow may not
        lost = np.isfinite(array) & ~np.isfinite(cast) if array.dtype.kind == "f" else ~np.isfinite(cast)
    else:
        lost = back != array
        if array.dtype.kind == "f":
            lost |= ~np.isfinite(array)
    if lost.any():
        first = array.reshape(-1)[int(np.argmax(lost.reshape(-1)))].item()
        raise SampleError(
            f"field '{name}': dtype {array.dtype} cannot be cast to {dtype} without changing values "
            f"({int(lost.sum())} of {array.size}, e.g. {first!r})"
        )
    return cast


def read_one(
    path: Path,
    contents: ContentsOrError,
    root: Path,
    source: Mapping[str, Any],
    fields: Sequence[FieldSpec],
    check_finite: bool,
) -> tuple[dict[str, np.ndarray], str, int]:
    """Validate one file, from its bytes (`contents`, read ahead) or, for readers that open files
    themselves (contents None), from its path. Raises SampleError with the reason it cannot be used."""
    if isinstance(contents, OSError):
        raise unreadable(contents)
    reader = reader_for(path, source["format"])
    size = readable_size(path) if contents is None else contents.size
    if size == 0:
        raise SampleError(EMPTY)
    id_attr = source["sample_id"]["attr"] if source["sample_id"] else None
    if contents is None:
        arrays, sample_id = reader.read(path, fields, id_attr)
    else:
        arrays, sample_id = reader.read_contents(contents, path, fields, id_attr)
    arrays = validate_sample(arrays, fields, check_finite)
    if sample_id is None:
        sample_id = str((path.relative_to(root) if path.is_relative_to(root) else path).with_suffix(""))
    return arrays, sample_id, size

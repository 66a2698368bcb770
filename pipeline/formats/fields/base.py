"""The interface of a field's source of per-file values, and what they are given about a file."""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import numpy as np

from pipeline.formats.readers.base import FieldSpec, OpenFile, SampleError, as_text


@dataclass
class FileInfo:
    """One input file as the value sources see it."""

    path: str  # as listed (absolute)
    relative: str  # relative to source.path (the path itself when outside it)
    opened: OpenFile | None  # None until a source needs the file open
    file_id: str  # the file's id: source.sample_id's attribute, or `relative` without its suffix
    table_key: str | None = None  # what is looked up in source.labels_table's key column


class ValueSource(ABC):
    """One value per file for one field (text or a number); every sample of the file gets it."""

    kind: str  # the field's key in source.fields that selects this source

    def __init__(self, field: FieldSpec, source: Mapping[str, Any], table: Any) -> None:
        self.field = field

    @abstractmethod
    def raw(self, info: FileInfo) -> Any:
        """The file's value as stored (text, a number, a small array); SampleError with the reason when
        the file has none."""


def numeric_value(value: Any, field: FieldSpec, where: str) -> np.ndarray:
    """A non-categorical per-file value as an array: numbers as they are (cast to the field's dtype when
    one is declared), text parsed as a number."""
    array = np.asarray(value)
    if array.dtype.kind in "SUO":
        text = as_text(value)
        try:
            array = np.asarray(float(text))
        except ValueError:
            raise SampleError(
                f"field '{field.name}': {where} is '{text}', not a number (categorical: true makes text a "
                "class)"
            ) from None
    if array.dtype.kind not in "biuf":
        raise SampleError(f"field '{field.name}': {where} is not numeric (dtype {array.dtype})")
    return array.astype(field.dtype, copy=False) if field.dtype else array

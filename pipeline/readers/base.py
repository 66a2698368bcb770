"""The interface every input format implements: read the declared fields of one file, and describe
what a file holds (for `sim2dl inspect`)."""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np


class SampleError(Exception):
    """This file cannot become a sample; the message is the reason recorded in the rejects list."""


@dataclass(frozen=True)
class FieldSpec:
    name: str  # logical name used by every later step
    path: str  # where the field lives inside a file of this format
    dtype: str | None = None  # None: any numeric dtype
    shape: tuple[int | None, ...] | None = None  # None: any shape; None entries: any length

    @classmethod
    def from_config(cls, name: str, spec: Mapping[str, Any]) -> FieldSpec:
        shape = spec.get("shape")
        return cls(name, spec["path"], spec.get("dtype"), None if shape is None else tuple(shape))


@dataclass(frozen=True)
class ArrayInfo:
    """One array a file holds: its path in the format's terms (a field's `path`), shape and dtype."""

    path: str
    shape: tuple[int, ...]
    dtype: str  # numpy's name, e.g. 'int16'; the kind tells numbers from text


@dataclass(frozen=True)
class Contents:
    """What one file holds: its arrays, and the scalar attributes that could name the sample (text or
    integers, by name: a root attribute, a global attribute, a string array, a TNamed's title)."""

    arrays: tuple[ArrayInfo, ...]
    attributes: dict[str, str]


class Reader(ABC):
    """Reads one file. Raises SampleError (never anything else) for a file that cannot be used."""

    name: str
    suffixes: tuple[str, ...]
    # True: `read_contents` parses the file's bytes, which ingest reads itself (whole, ahead, direct I/O).
    reads_contents = False

    @abstractmethod
    def read(
        self, path: Path, fields: Sequence[FieldSpec], id_attr: str | None
    ) -> tuple[dict[str, np.ndarray], str | None]:
        """Return the arrays by logical field name, and the sample id stored in the file (if asked)."""

    @abstractmethod
    def describe(self, path: Path) -> Contents:
        """Every array in the file with its shape and dtype, without reading the data where the format
        allows. Raises SampleError for a file that cannot be opened."""

    def read_contents(
        self, contents: np.ndarray, path: Path, fields: Sequence[FieldSpec], id_attr: str | None
    ) -> tuple[dict[str, np.ndarray], str | None]:
        """As `read`, from the file's bytes (`path` names it in messages); for readers with reads_contents.
        The arrays may be views of `contents`, valid as long as it is."""
        raise NotImplementedError


def as_array(value: Any, field: FieldSpec) -> np.ndarray:
    array = np.asarray(value)
    if array.dtype == object or not (np.issubdtype(array.dtype, np.number) or array.dtype == bool):
        raise SampleError(f"field '{field.name}' ({field.path}) is not a numeric array (dtype {array.dtype})")
    return array


def as_text(value: Any) -> str:
    if isinstance(value, bytes):
        return value.decode()
    if isinstance(value, np.ndarray) and value.shape == ():
        return as_text(value.item())
    return str(value)


def scalar_text(value: Any) -> str | None:
    """An attribute's value as text if it could be a sample id (a string or an integer), else None."""
    array = np.asarray(value)
    if array.size != 1 or array.dtype.kind not in "SUOiu":
        return None
    try:
        return as_text(array.reshape(()))
    except UnicodeDecodeError:
        return None

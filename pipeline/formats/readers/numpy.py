"""NumPy files: `.npz` (field path = array name) and `.npy` (one array; field path '.').
Pickled objects are refused: loading them would run code from the file. Samples along an axis: a .npy
is memory-mapped (a range of samples reads only its pages); an .npz member is a zip entry, loaded whole
the first time a range of it is asked for (keep such files small, or use .npy, HDF5 or Zarr)."""

from __future__ import annotations

import math
import zipfile
from collections.abc import Sequence
from pathlib import Path
from typing import BinaryIO

import numpy as np

from pipeline.formats.readers.base import (
    Contents,
    FieldSpec,
    MissingArray,
    OpenFile,
    Reader,
    SampleError,
    array_info,
    as_array,
    as_text,
    scalar_text,
)

NUMPY_ERRORS = (OSError, ValueError, EOFError, zipfile.BadZipFile)


class NumpyFile(OpenFile):
    def __init__(self, path: Path) -> None:
        super().__init__(path)
        try:
            self.loaded = np.load(path, allow_pickle=False, mmap_mode="r")
        except NUMPY_ERRORS as e:
            raise SampleError(f"cannot load as NumPy file (truncated or corrupt?): {e}") from None
        self._members: dict[str, np.ndarray] = {}

    def _array(self, array: str) -> np.ndarray:
        if isinstance(self.loaded, np.ndarray):
            if array != ".":
                raise MissingArray(f"no array '{array}' (a .npy file holds one array: path '.')")
            return self.loaded
        if array not in self._members:
            if array not in self.loaded.files:
                raise MissingArray(f"no array '{array}'")
            try:
                self._members[array] = self.loaded[array]
            except NUMPY_ERRORS as e:
                raise SampleError(f"corrupt .npz member '{array}': {e}") from None
        return self._members[array]

    def shape(self, array: str) -> tuple[int, ...]:
        return tuple(self._array(array).shape)

    def read(self, array: str, index: tuple[slice, ...]) -> np.ndarray:
        return np.array(self._array(array)[index])

    def attribute(self, name: str) -> object:
        """A one-element member of an .npz (the format has no attributes)."""
        if isinstance(self.loaded, np.ndarray) or name not in self.loaded.files:
            raise SampleError(f"no one-element array '{name}' (an .npz's attributes are its scalar members)")
        value = self._array(name)
        if value.size != 1:
            raise SampleError(f"array '{name}' has {value.size} elements, not one: not an attribute")
        return value.reshape(())

    def close(self) -> None:
        if not isinstance(self.loaded, np.ndarray):
            self.loaded.close()


class NumpyReader(Reader):
    name = "numpy"
    suffixes = (".npy", ".npz")

    def open(self, path: Path) -> NumpyFile:
        return NumpyFile(path)

    def describe(self, path: Path) -> Contents:
        """Shapes and dtypes from the arrays' headers; only small text arrays (id candidates) are read."""
        try:
            if path.suffix.lower() == ".npy":
                with open(path, "rb") as f:
                    shape, dtype = _header(f)
                return Contents((array_info(".", shape, dtype, {}),), {})
            arrays, texts = [], {}
            with zipfile.ZipFile(path) as archive:
                for member in archive.namelist():
                    if not member.endswith(".npy"):
                        continue
                    with archive.open(member) as f:
                        shape, dtype = _header(f)
                    name = member.removesuffix(".npy")
                    arrays.append(array_info(name, shape, dtype, {}))
                    if dtype.kind in "SU" and math.prod(shape) == 1:
                        with archive.open(member) as f:
                            text = scalar_text(np.lib.format.read_array(f, allow_pickle=False))
                        if text is not None:
                            texts[name] = text
            return Contents(tuple(arrays), texts)
        except (OSError, ValueError, EOFError, zipfile.BadZipFile) as e:
            raise SampleError(f"cannot load as NumPy file (truncated or corrupt?): {e}") from None

    def read(
        self, path: Path, fields: Sequence[FieldSpec], id_attr: str | None
    ) -> tuple[dict[str, np.ndarray], str | None]:
        try:
            loaded = np.load(path, allow_pickle=False)
        except (OSError, ValueError, EOFError, zipfile.BadZipFile) as e:
            raise SampleError(f"cannot load as NumPy file (truncated or corrupt?): {e}") from None
        if isinstance(loaded, np.ndarray):
            if len(fields) != 1 or fields[0].path != ".":
                raise SampleError("a .npy file holds one array: declare exactly one field with path '.'")
            if id_attr is not None:
                raise SampleError("a .npy file has no attributes: set source.sample_id to null")
            return {fields[0].name: as_array(loaded, fields[0])}, None
        with loaded:
            try:
                arrays = {}
                for field in fields:
                    if field.path not in loaded.files:
                        raise SampleError(f"missing field '{field.name}': no array '{field.path}'")
                    arrays[field.name] = as_array(loaded[field.path], field)
                sample_id = None
                if id_attr is not None:
                    if id_attr not in loaded.files:
                        raise SampleError(f"missing sample id array '{id_attr}'")
                    sample_id = as_text(loaded[id_attr])
            except (OSError, ValueError, zipfile.BadZipFile, EOFError) as e:
                raise SampleError(f"corrupt .npz member: {e}") from None
        return arrays, sample_id


def _header(f: BinaryIO) -> tuple[tuple[int, ...], np.dtype]:
    """The shape and dtype in a .npy header (the data is not read)."""
    version = np.lib.format.read_magic(f)
    fmt = np.lib.format
    shape, _, dtype = (fmt.read_array_header_1_0 if version == (1, 0) else fmt.read_array_header_2_0)(f)
    return tuple(shape), dtype

"""Zarr stores via zarr-python 3 (local directory stores, Zarr formats 2 and 3). An input is a store: a
directory named `*.zarr` holding a group (field path = an array's path in it, groups with `/`) or one
array (field path '.'). Attributes are the root group's. Dimension names come from Zarr 3's
`dimension_names` or, for Zarr 2, xarray's `_ARRAY_DIMENSIONS` attribute, so source.samples_along may
name a dimension (`time`) as for NetCDF. Reads are chunk-aware: a range of samples reads only the
chunks that hold it. Memory: the range read and the chunks it touches (decompressed); time: one read per
chunk touched."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np

from pipeline.formats.readers.base import (
    Contents,
    MissingArray,
    OpenFile,
    Reader,
    SampleError,
    array_info,
    scalar_numbers,
    scalar_text,
)
from pipeline.formats.readers.cf import cf_attributes


def _open(path: Path) -> Any:
    import zarr

    if not path.is_dir():
        raise SampleError("not a Zarr store (a directory)")
    try:
        return zarr.open(store=str(path), mode="r")
    except Exception as e:  # zarr raises several types for stores it cannot read
        raise SampleError(f"cannot open as Zarr: {type(e).__name__}: {e}") from None


def dimension_names(array: Any) -> tuple[str, ...] | None:
    names = getattr(array.metadata, "dimension_names", None)  # Zarr format 3
    if names is None:
        names = array.attrs.get("_ARRAY_DIMENSIONS")  # Zarr format 2, as xarray writes it
    return None if names is None or any(n is None for n in names) else tuple(map(str, names))


def zarr_cf_attributes(array: Any) -> dict[str, Any]:
    """The array's CF attributes (xarray writes _FillValue as one in Zarr 3), and a NaN fill_value of its
    metadata as its _FillValue. Any other fill_value is not taken as missing: zarr gives every array one (0
    by default) and skips writing chunks that hold only it, so it cannot tell a missing value from data."""
    found = cf_attributes(array.attrs)
    fill = getattr(array.metadata, "fill_value", None)
    try:
        nan_fill = fill is not None and bool(np.isnan(fill))
    except TypeError:  # text or structured fill values
        nan_fill = False
    if nan_fill and "_FillValue" not in found:
        found["_FillValue"] = fill
    return found


class ZarrFile(OpenFile):
    def __init__(self, path: Path) -> None:
        super().__init__(path)
        self.store = _open(path)

    def _array(self, array: str) -> Any:
        import zarr

        if array == "." and isinstance(self.store, zarr.Array):
            return self.store
        try:
            node = self.store[array.strip("/")]
        except (KeyError, TypeError):
            node = None
        if not isinstance(node, zarr.Array):
            raise MissingArray(f"no array '{array}'")
        return node

    def shape(self, array: str) -> tuple[int, ...]:
        return tuple(self._array(array).shape)

    def dims(self, array: str) -> tuple[str, ...] | None:
        return dimension_names(self._array(array))

    def attributes(self, array: str) -> dict[str, Any]:
        return zarr_cf_attributes(self._array(array))

    def stored_dtype(self, array: str) -> np.dtype:
        return np.dtype(self._array(array).dtype)

    def read(self, array: str, index: tuple[slice, ...]) -> np.ndarray:
        try:
            return np.asarray(self._array(array)[index or ...])
        except SampleError:
            raise
        except Exception as e:  # a missing or corrupt chunk, a codec error
            raise SampleError(f"cannot read Zarr array '{array}': {type(e).__name__}: {e}") from None

    def attribute(self, name: str) -> Any:
        attrs = self.store.attrs
        if name not in attrs:
            raise SampleError(f"no root attribute '{name}'")
        return attrs[name]


def _arrays(store: Any) -> list[tuple[str, Any]]:
    import zarr

    if isinstance(store, zarr.Array):
        return [(".", store)]
    return sorted(
        (name, node) for name, node in store.members(max_depth=None) if isinstance(node, zarr.Array)
    )


class ZarrReader(Reader):
    name = "zarr"
    suffixes = (".zarr",)
    directories = True  # an input is a directory

    def open(self, path: Path) -> ZarrFile:
        return ZarrFile(path)

    def describe(self, path: Path) -> Contents:
        store = _open(path)
        arrays = _arrays(store)
        coordinates = {name for name, a in arrays if dimension_names(a) == (name.split("/")[-1],)}
        for _, a in arrays:
            coordinates.update(
                str(a.attrs.get("bounds", "")).split() + str(a.attrs.get("coordinates", "")).split()
            )
        infos = tuple(
            array_info(
                name,
                tuple(a.shape),
                np.dtype(a.dtype),
                zarr_cf_attributes(a),
                dimension_names(a),
                name in coordinates,
            )
            for name, a in arrays
        )
        texts = {name: scalar_text(value) for name, value in dict(store.attrs).items()}
        return Contents(
            infos,
            {name: text for name, text in texts.items() if text is not None},
            numbers=scalar_numbers(dict(store.attrs)),
        )

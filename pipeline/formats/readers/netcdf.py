"""NetCDF-4 files via netCDF4 (climate output). Field paths name variables, with groups as `a/b/var`.
Samples along a dimension (source.samples_along: its name) are read by hyperslab, a range at a time."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np

from pipeline.formats.readers.base import (
    ArrayInfo,
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
    import netCDF4

    try:
        ds = netCDF4.Dataset(str(path), "r")
    except OSError as e:
        raise SampleError(f"cannot open as NetCDF: {e}") from None
    # Raw values: CF decoding (fill values, packing) is readers/cf.py's, the same for every format, so
    # that a missing value is told apart (and named) per sample, not hidden in a masked array or a NaN.
    ds.set_auto_maskandscale(False)
    return ds


def coordinate_names(variables: dict[str, Any]) -> set[str]:
    """CF coordinates among a group's variables: 1-D variables named as their dimension, the variables a
    `bounds` attribute names, those listed in `coordinates` attributes, and grid mappings."""
    names = {name for name, var in variables.items() if var.dimensions == (name,)}
    for var in variables.values():
        attrs = set(var.ncattrs())
        for attribute in ("bounds", "grid_mapping"):
            if attribute in attrs:
                names.add(str(var.getncattr(attribute)).split(":")[0])
        if "coordinates" in attrs:
            names.update(str(var.getncattr("coordinates")).split())
    return names


def variable_cf_attributes(variable: Any) -> dict[str, Any]:
    """A variable's CF attributes (readers/cf.py), read by name."""
    return cf_attributes({name: variable.getncattr(name) for name in variable.ncattrs()})


class NetCDFFile(OpenFile):
    default_fill = True  # a value never written reads as netCDF's default fill (9.97e36 for floats)

    def __init__(self, path: Path) -> None:
        super().__init__(path)
        self.ds = _open(path)

    def _variable(self, array: str) -> Any:
        *groups, var_name = array.strip("/").split("/")
        node = self.ds
        try:
            for g in groups:
                node = node.groups[g]
            return node.variables[var_name]
        except KeyError:
            raise MissingArray(f"no variable '{array}'") from None

    def shape(self, array: str) -> tuple[int, ...]:
        return tuple(self._variable(array).shape)

    def dims(self, array: str) -> tuple[str, ...]:
        return tuple(self._variable(array).dimensions)

    def attributes(self, array: str) -> dict[str, Any]:
        return variable_cf_attributes(self._variable(array))

    def stored_dtype(self, array: str) -> np.dtype:
        dtype = self._variable(array).dtype
        return dtype if isinstance(dtype, np.dtype) else np.dtype(object)  # str: variable-length text

    def read(self, array: str, index: tuple[slice, ...]) -> np.ndarray:
        try:
            return np.asarray(self._variable(array)[index or ...])
        except (RuntimeError, OSError, IndexError) as e:
            raise SampleError(f"corrupt NetCDF variable '{array}': {e}") from None

    def attribute(self, name: str) -> Any:
        if name not in self.ds.ncattrs():
            raise SampleError(f"no global attribute '{name}'")
        return self.ds.getncattr(name)

    def close(self) -> None:
        self.ds.close()


class NetCDFReader(Reader):
    name = "netcdf"
    suffixes = (".nc", ".nc4", ".netcdf")

    def open(self, path: Path) -> NetCDFFile:
        return NetCDFFile(path)

    def describe(self, path: Path) -> Contents:
        with _open(path) as ds:
            arrays: list[ArrayInfo] = []
            groups = [("", ds)]
            while groups:  # every group, breadth first; variables named with their group path
                prefix, group = groups.pop(0)
                coordinates = coordinate_names(group.variables)
                for name, var in group.variables.items():
                    dtype = np.dtype(var.dtype) if isinstance(var.dtype, np.dtype) else np.dtype(object)
                    attributes = variable_cf_attributes(var)
                    info = array_info(
                        prefix + name,
                        tuple(var.shape),
                        dtype,
                        attributes,
                        tuple(var.dimensions),
                        name in coordinates,
                        default_fill=True,
                    )
                    arrays.append(info)
                groups += [(f"{prefix}{name}/", sub) for name, sub in group.groups.items()]
            texts = {name: scalar_text(ds.getncattr(name)) for name in ds.ncattrs()}
            numbers = scalar_numbers({name: ds.getncattr(name) for name in ds.ncattrs()})
            return Contents(
                tuple(arrays),
                {name: text for name, text in texts.items() if text is not None},
                numbers=numbers,
            )

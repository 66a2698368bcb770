"""NetCDF-4 files via netCDF4 (climate output). Field paths name variables, with groups as `a/b/var`."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

import numpy as np

from pipeline.readers.base import ArrayInfo, Contents, FieldSpec, Reader, SampleError, as_array, as_text, scalar_text


class NetCDFReader(Reader):
    name = "netcdf"
    suffixes = (".nc", ".nc4", ".netcdf")

    def describe(self, path: Path) -> Contents:
        import netCDF4

        try:
            ds = netCDF4.Dataset(str(path), "r")
        except OSError as e:
            raise SampleError(f"cannot open as NetCDF: {e}") from None
        with ds:
            arrays: list[ArrayInfo] = []
            groups = [("", ds)]
            while groups:  # every group, breadth first; variables named with their group path
                prefix, group = groups.pop(0)
                for name, var in group.variables.items():
                    dtype = np.dtype(var.dtype) if isinstance(var.dtype, np.dtype) else np.dtype(object)
                    arrays.append(ArrayInfo(prefix + name, tuple(var.shape), str(dtype)))
                groups += [(f"{prefix}{name}/", sub) for name, sub in group.groups.items()]
            texts = {name: scalar_text(ds.getncattr(name)) for name in ds.ncattrs()}
            return Contents(tuple(arrays), {name: text for name, text in texts.items() if text is not None})

    def read(
        self, path: Path, fields: Sequence[FieldSpec], id_attr: str | None
    ) -> tuple[dict[str, np.ndarray], str | None]:
        import netCDF4

        try:
            ds = netCDF4.Dataset(str(path), "r")
        except OSError as e:
            raise SampleError(f"cannot open as NetCDF: {e}") from None
        try:
            ds.set_auto_mask(False)  # masked arrays would hide fill values from the finite check
            arrays = {}
            for field in fields:
                *groups, var_name = field.path.strip("/").split("/")
                node = ds
                try:
                    for g in groups:
                        node = node.groups[g]
                    var = node.variables[var_name]
                except KeyError:
                    raise SampleError(f"missing field '{field.name}': no variable '{field.path}'") from None
                arrays[field.name] = as_array(var[...], field)
            sample_id = None
            if id_attr is not None:
                if id_attr not in ds.ncattrs():
                    raise SampleError(f"missing sample id attribute '{id_attr}'")
                sample_id = as_text(ds.getncattr(id_attr))
            return arrays, sample_id
        except (RuntimeError, OSError, IndexError) as e:
            raise SampleError(f"corrupt NetCDF: {e}") from None
        finally:
            ds.close()

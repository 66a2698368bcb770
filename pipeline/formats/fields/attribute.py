"""{attr: NAME}: a global attribute of the file (HDF5 root group, NetCDF global attribute, Zarr root
group, a ROOT TNamed's title, an .npz one-element array). A dataset's own attribute is not a global
attribute: write it out as a one-element array, or name the file's global one. Memory and time: one attribute
read per file."""

from __future__ import annotations

from typing import Any

from pipeline.formats.fields.base import FileInfo, ValueSource
from pipeline.formats.readers.base import SampleError


class AttributeSource(ValueSource):
    kind = "attr"

    def raw(self, info: FileInfo) -> Any:
        assert info.opened is not None
        try:
            return info.opened.attribute(self.field.path)
        except SampleError as e:
            raise SampleError(f"field '{self.field.name}': {e}") from None

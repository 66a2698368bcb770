"""HDF5 files via h5py's low-level API.

Ingest reads each (small) file whole and this reader opens that image in memory (the `core` driver with a
file image): one read per file instead of HDF5's many small metadata reads, which parallel file systems
serve badly. `read` (from a path) does the same through the `core` driver. Contiguous datasets are not
read through HDF5 at all: their arrays are views of the image's bytes where HDF5 says they are. The
low-level calls cost about a quarter of the high-level `h5py.File` objects per file, which matters with
millions of files.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from pathlib import Path

import h5py
import numpy as np

from pipeline.readers.base import FieldSpec, Reader, SampleError, as_array, as_text

_FILE_ACCESS = h5py.h5p.create(h5py.h5p.FILE_ACCESS)
_FILE_ACCESS.set_fapl_core(backing_store=False)


def _read_dataset(file_id: h5py.h5f.FileID, field: FieldSpec, image: np.ndarray | None) -> np.ndarray:
    try:
        dataset = h5py.h5d.open(file_id, field.path.encode())
    except KeyError:
        raise SampleError(f"missing field '{field.name}': no dataset '{field.path}'") from None
    try:
        shape, dtype = dataset.shape, dataset.dtype
        if image is not None and dtype.kind in "biufc" and not dtype.hasobject:
            # Contiguous data stored in the image: a view of those bytes (no read through HDF5, no copy).
            offset = dataset.get_offset()  # None for chunked, compressed, external or unwritten data
            if offset is not None:
                nbytes = dtype.itemsize * math.prod(shape)
                if offset + nbytes > image.size:
                    raise SampleError(f"dataset '{field.path}' ends past the end of the file (truncated?)")
                return as_array(image[offset : offset + nbytes].view(dtype).reshape(shape), field)
        data = np.empty(shape, dtype=dtype)
        if data.size:
            dataset.read(h5py.h5s.ALL, h5py.h5s.ALL, data)
    except (OSError, TypeError, ValueError) as e:
        raise SampleError(f"cannot read dataset '{field.path}' (corrupt?): {e}") from None
    return as_array(data, field)


def _read_root_attr(file_id: h5py.h5f.FileID, name: str) -> str:
    try:
        attr = h5py.h5a.open(file_id, name.encode())  # an attribute of the root group
    except KeyError:
        raise SampleError(f"missing sample id attribute '{name}'") from None
    value = np.empty(attr.shape, dtype=attr.dtype)
    attr.read(value)
    return as_text(value)


class HDF5Reader(Reader):
    name = "hdf5"
    suffixes = (".h5", ".hdf5", ".hdf", ".he5")
    reads_images = True

    def __init__(self) -> None:
        self._image_access: h5py.h5p.PropFAID | None = None  # reused: set_file_image replaces the image

    def read(
        self, path: Path, fields: Sequence[FieldSpec], id_attr: str | None
    ) -> tuple[dict[str, np.ndarray], str | None]:
        return self._read(str(path).encode(), _FILE_ACCESS, fields, id_attr, None)

    def read_image(
        self, image: np.ndarray, path: Path, fields: Sequence[FieldSpec], id_attr: str | None
    ) -> tuple[dict[str, np.ndarray], str | None]:
        if self._image_access is None:
            self._image_access = h5py.h5p.create(h5py.h5p.FILE_ACCESS)
            self._image_access.set_fapl_core(backing_store=False)
        self._image_access.set_file_image(image)  # HDF5 copies it: the caller's buffer is free again
        # The name only labels the image (a path would make HDF5 look for that file on disk).
        return self._read(b"sim2dl-file-image", self._image_access, fields, id_attr, image)

    def _read(
        self,
        name: bytes,
        access: h5py.h5p.PropFAID,
        fields: Sequence[FieldSpec],
        id_attr: str | None,
        image: np.ndarray | None,
    ) -> tuple[dict[str, np.ndarray], str | None]:
        try:
            file_id = h5py.h5f.open(name, h5py.h5f.ACC_RDONLY, fapl=access)
        except OSError as e:
            raise SampleError(f"cannot open as HDF5 (truncated or corrupt?): {e}") from None
        try:
            arrays = {field.name: _read_dataset(file_id, field, image) for field in fields}
            sample_id = _read_root_attr(file_id, id_attr) if id_attr is not None else None
            return arrays, sample_id
        except (OSError, RuntimeError, KeyError, ValueError) as e:
            raise SampleError(f"corrupt HDF5 structure: {e}") from None
        finally:
            file_id.close()

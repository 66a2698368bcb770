"""HDF5 files via h5py. The file is opened with the in-memory `core` driver: one read of the whole
(small) file instead of many small metadata reads, which is what parallel file systems serve well."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

import h5py
import numpy as np

from pipeline.readers.base import FieldSpec, Reader, SampleError, as_array, as_text

_FILE_ACCESS = h5py.h5p.create(h5py.h5p.FILE_ACCESS)
_FILE_ACCESS.set_fapl_core(backing_store=False)


class HDF5Reader(Reader):
    name = "hdf5"
    suffixes = (".h5", ".hdf5", ".hdf", ".he5")

    def read(
        self, path: Path, fields: Sequence[FieldSpec], id_attr: str | None
    ) -> tuple[dict[str, np.ndarray], str | None]:
        try:
            file_id = h5py.h5f.open(str(path).encode(), h5py.h5f.ACC_RDONLY, fapl=_FILE_ACCESS)
        except OSError as e:
            raise SampleError(f"cannot open as HDF5 (truncated or corrupt?): {e}") from None
        try:
            f = h5py.File(file_id)
            arrays = {}
            for field in fields:
                node = f.get(field.path)
                if not isinstance(node, h5py.Dataset):
                    raise SampleError(f"missing field '{field.name}': no dataset '{field.path}'")
                try:
                    data = np.empty(node.shape, dtype=node.dtype)
                    if data.size:
                        node.id.read(h5py.h5s.ALL, h5py.h5s.ALL, data)
                except (OSError, TypeError) as e:
                    raise SampleError(f"cannot read dataset '{field.path}' (corrupt?): {e}") from None
                arrays[field.name] = as_array(data, field)
            sample_id = None
            if id_attr is not None:
                if id_attr not in f.attrs:
                    raise SampleError(f"missing sample id attribute '{id_attr}'")
                sample_id = as_text(f.attrs[id_attr])
            return arrays, sample_id
        except (OSError, RuntimeError, KeyError, ValueError) as e:
            raise SampleError(f"corrupt HDF5 structure: {e}") from None
        finally:
            file_id.close()

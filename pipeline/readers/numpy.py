"""NumPy files: `.npz` (field path = array name) and `.npy` (one array; field path '.').
Pickled objects are refused: loading them would run code from the file."""

from __future__ import annotations

import zipfile
from collections.abc import Sequence
from pathlib import Path

import numpy as np

from pipeline.readers.base import FieldSpec, Reader, SampleError, as_array, as_text


class NumpyReader(Reader):
    name = "numpy"
    suffixes = (".npy", ".npz")

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

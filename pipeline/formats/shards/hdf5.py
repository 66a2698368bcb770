"""HDF5 shards: one chunked dataset per field. Fixed-shape fields are (records, *shape) with one record
per chunk; variable-length fields are NAME/values (concatenated along the first axis) + NAME/offsets.
Read back through h5py, a slice of rows at a time. Memory: one record (writing), one range of rows
(reading); time: linear in the records."""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from itertools import pairwise
from pathlib import Path
from typing import Any

import h5py
import numpy as np

from pipeline.formats.metadata import fixed
from pipeline.formats.shards.base import FeatureSpec, Loaded, Record, ShardFormat, ShardWriter

FILTERS = {"none": None, "gzip": "gzip", "lzf": "lzf"}


class HDF5ShardWriter(ShardWriter):
    format = "hdf5"
    suffix = ".h5"
    compressions = tuple(FILTERS)
    index_meaning = (
        "row offset and row count of each record along the first axis of the first field's dataset"
    )

    def __init__(self, path: Path, spec: FeatureSpec, compression: str) -> None:
        super().__init__(path, spec, compression)
        # A shard is bounded by merge.shard_size_mb, so its records are gathered and written at close.
        self._records: list[Mapping[str, np.ndarray]] = []
        self._ids: list[str] = []
        self._rows = 0

    def write(self, sample_id: str, arrays: Mapping[str, np.ndarray]) -> tuple[int, int]:
        self._records.append({k: np.array(v) for k, v in arrays.items()})
        self._ids.append(sample_id)
        first = next(iter(self.spec))
        if fixed(self.spec[first]):
            entry = (len(self._records) - 1, 1)
        else:
            length = arrays[first].shape[0]
            entry = (self._rows, length)
            self._rows += length
        return entry

    def close(self) -> None:
        comp = FILTERS[self.compression]
        # No object timestamps anywhere (root group included): shards must be byte-identical on reruns.
        file_create = h5py.h5p.create(h5py.h5p.FILE_CREATE)
        file_create.set_obj_track_times(False)
        file_access = h5py.h5p.create(h5py.h5p.FILE_ACCESS)
        file_access.set_libver_bounds(h5py.h5f.LIBVER_V110, h5py.h5f.LIBVER_V110)
        file_id = h5py.h5f.create(
            str(self.path).encode(), h5py.h5f.ACC_TRUNC, fcpl=file_create, fapl=file_access
        )
        group_create = h5py.h5p.create(h5py.h5p.GROUP_CREATE)
        group_create.set_obj_track_times(False)
        with h5py.File(file_id) as f:
            # Fixed-length UTF-8 bytes: variable-length strings go to a global heap whose padding is not
            # deterministic, and shards must be byte-identical on every run.
            ids = np.array([i.encode() for i in self._ids], dtype=np.bytes_)
            f.create_dataset("sample_id", data=ids, track_times=False)
            for name, field in self.spec.items():
                values = [r[name] for r in self._records]
                if fixed(field):
                    data = np.stack(values) if values else np.zeros((0, *field["shape"]), field["dtype"])
                    chunks = (1, *data.shape[1:]) if data.size else None
                    f.create_dataset(name, data=data, chunks=chunks, compression=comp, track_times=False)
                else:
                    group = h5py.Group(h5py.h5g.create(f.id, name.encode(), gcpl=group_create))
                    offsets = np.concatenate([[0], np.cumsum([v.shape[0] for v in values])]).astype(np.int64)
                    data = np.concatenate(values) if values else np.zeros((0,), field["dtype"])
                    group.create_dataset(
                        "values",
                        data=data,
                        chunks=True if data.size else None,
                        compression=comp,
                        track_times=False,
                    )
                    group.create_dataset("offsets", data=offsets, track_times=False)
        self._records.clear()

    @staticmethod
    def encoding() -> str:
        return (
            "HDF5: dataset 'sample_id'; fixed-shape field NAME as dataset NAME (records, *shape); "
            "variable-length field NAME as NAME/values + NAME/offsets (records + 1)"
        )


def hdf5_load(shard: Path, first: int, stop: int, spec: FeatureSpec) -> Loaded:
    """A unit of an HDF5 shard (pipeline.formats.shards.hdf5's layout) read: (sample ids, columns)."""
    with h5py.File(shard, "r") as f:
        ids = f["sample_id"][first:stop]
        columns: dict[str, Any] = {}
        for name, field in spec.items():
            if fixed(field):
                columns[name] = f[name][first:stop]
            else:
                offsets = f[name]["offsets"][first : stop + 1]
                values = f[name]["values"][int(offsets[0]) : int(offsets[-1])]
                columns[name] = [values[a - offsets[0] : b - offsets[0]] for a, b in pairwise(offsets)]
    return ids, columns


def hdf5_records(loaded: Loaded, spec: FeatureSpec) -> Iterator[Record]:
    ids, columns = loaded
    for i, sample_id in enumerate(ids):
        yield {"sample_id": sample_id.decode(), **{name: columns[name][i] for name in spec}}


class HDF5Format(ShardFormat):
    writer = HDF5ShardWriter

    def load(self, shard: Path, first: int, stop: int, spec: FeatureSpec, compression: str) -> Loaded:
        return hdf5_load(shard, first, stop, spec)

    def records(
        self, shard: Path, loaded: Loaded, spec: FeatureSpec, verify: bool, copy: bool
    ) -> Iterator[Record]:
        return hdf5_records(loaded, spec)

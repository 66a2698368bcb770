"""Parts: the large intermediate files that ingest and convert write instead of many small ones.

A part is `NAME.bin` (the records' arrays back to back, C order) plus `NAME.jsonl` (a line per record:
its metadata and where each field's bytes are, streamed as records are written so a writer's memory
does not grow with the number of records; a last line holds the total size). Readers memory-map the
.bin, so a record is a zero-copy view. A field may instead refer to bytes in another part's .bin
(`ref`): convert does that for fields it leaves unchanged, so pass-through data is not copied again.
A part may be framed: each record written as the shard format writes it (`framing`, for example a
TFRecord of a tf.train.Example), the fields' entries pointing at the arrays inside, the record's place
in `frame` and the file's checksum in the last line; the .bin is then a valid shard as it is (see merge).
The index is written last and both files appear atomically: a part without its index is an
interrupted write and is ignored.
"""

from __future__ import annotations

import json
import math
import os
from collections.abc import Iterator, Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import numpy as np

from pipeline.directio import AppendWriter, aligned_buffer, read_ranges
from pipeline.fsutil import Checksum, atomic_path, remove_stale_temporaries
from pipeline.writers.base import Framing

INDEX_SUFFIX = ".jsonl"


class PartWriter:
    """Appends records to a part; the .bin is written with direct I/O (see pipeline.directio)."""

    def __init__(self, path_stem: Path, framing: Framing | None = None, about: Mapping[str, Any] | None = None) -> None:
        """`framing`: write each record framed (see the module doc); `about`: added to the index's last line."""
        self.bin_path = path_stem.with_suffix(".bin")
        self.index_path = path_stem.with_suffix(INDEX_SUFFIX)
        self._framing, self._about = framing, dict(about or {})
        self._checksum = Checksum() if framing else None
        self._bin_ctx = atomic_path(self.bin_path)
        self._index_ctx = atomic_path(self.index_path)
        on_data = self._checksum.update if self._checksum else None
        self._file = AppendWriter(self._bin_ctx.__enter__(), on_data=on_data)
        self._index = open(self._index_ctx.__enter__(), "w")  # noqa: SIM115 - closed in close()/abort()
        self._offset = 0
        self.count = 0

    def append(
        self,
        arrays: Mapping[str, np.ndarray],
        meta: Mapping[str, Any],
        refs: Mapping[str, tuple[Path, int]] | None = None,
    ) -> int:
        """Append a record. `refs`: field -> (another part's .bin, byte offset) holding its bytes already."""
        line: dict[str, Any] = {"meta": dict(meta)}
        if self._framing is not None:
            assert not refs, "a framed part holds every field of its records"
            pieces, at = self._framing(meta["sample_id"], arrays)
            for piece in pieces:
                self._file.write(piece)
            length = sum(len(p) if isinstance(p, bytes) else p.nbytes for p in pieces)
            line["fields"] = {  # framed arrays are stored little-endian
                name: [self._offset + at[name], a.dtype.newbyteorder("<").str, list(a.shape)]
                for name, a in arrays.items()
            }
            line["frame"] = [self._offset, length]
            self._offset += length
        else:
            line["fields"] = {}
            for name, array in arrays.items():
                if refs and name in refs:
                    bin_path, offset = refs[name]
                    ref = os.path.relpath(bin_path, self.bin_path.parent)
                    line["fields"][name] = [offset, array.dtype.str, list(array.shape), ref]
                    continue
                array = np.ascontiguousarray(array)
                self._file.write(array)
                line["fields"][name] = [self._offset, array.dtype.str, list(array.shape)]
                self._offset += array.nbytes
        self._index.write(json.dumps(line, separators=(",", ":")) + "\n")
        self.count += 1
        return self.count - 1

    def close(self) -> None:
        self._file.close()
        last = {**self._about, "bytes": self._offset}
        if self._checksum is not None:
            last["checksum"] = self._checksum.text()
        self._index.write(json.dumps(last) + "\n")
        self._index.close()
        self._bin_ctx.__exit__(None, None, None)
        self._index_ctx.__exit__(None, None, None)  # the index appears last: it marks the part complete

    def abort(self) -> None:
        self._file.abort()
        self._index.close()
        self._bin_ctx.__exit__(RuntimeError, RuntimeError("aborted"), None)
        self._index_ctx.__exit__(RuntimeError, RuntimeError("aborted"), None)

    def __enter__(self) -> PartWriter:
        return self

    def __exit__(self, exc_type: Any, exc: Any, tb: Any) -> None:
        if exc_type is None:
            self.close()
        else:
            self.abort()


class Part:
    def __init__(self, path_stem: Path) -> None:
        self.bin_path = path_stem.with_suffix(".bin")
        lines = path_stem.with_suffix(INDEX_SUFFIX).read_text().splitlines()
        self.records: list[dict[str, Any]] = json.loads(f"[{','.join(lines)}]")  # one parse, not one per line
        index = self.records.pop() if self.records and "bytes" in self.records[-1] else {}
        self.about: dict[str, Any] = index  # the last line: size, and for framed parts framing and checksum
        if "bytes" not in index:
            raise OSError(f"part index {path_stem.with_suffix(INDEX_SUFFIX)} is incomplete")
        size = os.path.getsize(self.bin_path)
        if size != index["bytes"]:
            raise OSError(f"part {self.bin_path} has {size} bytes, its index says {index['bytes']}")
        self._data = np.memmap(self.bin_path, dtype=np.uint8, mode="r") if size else np.zeros(0, np.uint8)
        self._refs: dict[str, np.ndarray] = {}

    def __len__(self) -> int:
        return len(self.records)

    def meta(self, i: int) -> dict[str, Any]:
        return self.records[i]["meta"]

    def read(self, i: int) -> dict[str, np.ndarray]:
        arrays = {}
        for name, (offset, dtype, shape, *ref) in self.records[i]["fields"].items():
            dt = np.dtype(dtype)
            count = math.prod(shape)
            data = self._referenced(ref[0]) if ref else self._data
            if offset + count * dt.itemsize > data.size:
                raise OSError(f"record {i} field '{name}' lies beyond the end of {ref[0] if ref else self.bin_path}")
            arrays[name] = data[offset : offset + count * dt.itemsize].view(dt).reshape(shape)
        return arrays

    def location(self, i: int, name: str) -> tuple[Path, int]:
        """The .bin file and byte offset holding field `name` of record `i` (for references)."""
        offset, _, _, *ref = self.records[i]["fields"][name]
        return (self.bin_path.parent / ref[0] if ref else self.bin_path), offset

    def _referenced(self, relative: str) -> np.ndarray:
        data = self._refs.get(relative)
        if data is None:
            path = self.bin_path.parent / relative
            data = self._refs[relative] = (
                np.memmap(path, dtype=np.uint8, mode="r") if path.stat().st_size else np.zeros(0, np.uint8)
            )
        return data

    def extents(self, i: int, names: Sequence[str]) -> list[tuple[Path, int, np.dtype, list[int]]]:
        """(file, byte offset, dtype, shape) of the named fields of record `i`."""
        fields = self.records[i]["fields"]
        located = []
        for name in names:
            offset, dtype, shape, *ref = fields[name]
            located.append((self.bin_path.parent / ref[0] if ref else self.bin_path, offset, np.dtype(dtype), shape))
        return located

    def nbytes(self, i: int) -> int:
        return sum(np.dtype(d).itemsize * math.prod(s) for _, d, s, *_ in self.records[i]["fields"].values())

    def __iter__(self) -> Iterator[tuple[dict[str, Any], dict[str, np.ndarray]]]:
        for i in range(len(self)):
            yield self.meta(i), self.read(i)


Records = Sequence[tuple[Part, int]]


def read_records(
    records: Records, names: Sequence[str], buffer: np.ndarray
) -> tuple[list[dict[str, np.ndarray]], np.ndarray]:
    """The named fields of each (part, record), read with few large direct reads into `buffer`
    (records stored next to each other are read together; see pipeline.directio.read_ranges).
    Returns views into the buffer, and the buffer (a larger one if it had to grow)."""
    located = [part.extents(i, names) for part, i in records]
    requests = [
        (path, offset, dtype.itemsize * math.prod(shape)) for fields in located for path, offset, dtype, shape in fields
    ]
    views, buffer = read_ranges(requests, True, buffer)
    out, k = [], 0
    for fields in located:
        arrays = {}
        for name, (_, _, dtype, shape) in zip(names, fields, strict=True):
            arrays[name] = views[k].view(dtype).reshape(shape)
            k += 1
        out.append(arrays)
    return out, buffer


def read_batches(batches: Sequence[Records], names: Sequence[str]) -> Iterator[list[dict[str, np.ndarray]]]:
    """read_records for each batch in turn, the next one read by a thread while the caller uses this one.
    A batch's arrays are valid until the next-but-one batch is taken (two buffers alternate)."""
    buffers = [aligned_buffer(0), aligned_buffer(0)]
    with ThreadPoolExecutor(max_workers=1, thread_name_prefix="read-ahead") as pool:
        pending = pool.submit(read_records, batches[0], names, buffers[0]) if batches else None
        for k in range(len(batches)):
            assert pending is not None
            arrays, buffers[k % 2] = pending.result()
            if k + 1 < len(batches):
                pending = pool.submit(read_records, batches[k + 1], names, buffers[(k + 1) % 2])
            yield arrays


def part_stem(directory: Path, rank: int, size: int) -> Path:
    return directory / f"part-{rank:05d}-of-{size:05d}"


def list_parts(directory: Path) -> list[Path]:
    """Complete parts (those with an index), in name order."""
    return sorted(p.with_suffix("") for p in directory.glob(f"part-*{INDEX_SUFFIX}"))


def clear_parts(directory: Path) -> None:
    """Remove the parts (and temporaries) of an earlier run, which may have used another rank count."""
    directory.mkdir(parents=True, exist_ok=True)
    for stem in list_parts(directory):
        stem.with_suffix(INDEX_SUFFIX).unlink()
        stem.with_suffix(".bin").unlink(missing_ok=True)
    remove_stale_temporaries(directory)

"""Parts: the large intermediate files that ingest and convert write instead of many small ones.

A part is `NAME.bin` (the records' arrays back to back, C order) plus `NAME.jsonl` (a line per record:
its metadata and where each field's bytes are, streamed as records are written so a writer's memory
does not grow with the number of records; a last line holds the total size). Readers memory-map the
.bin, so a record is a zero-copy view. A field may instead refer to bytes in another part's .bin
(`ref`): convert does that for fields it leaves unchanged, so pass-through data is not copied again.
A part may be framed: each record written as the shard format writes it (`framing`, for example a
TFRecord of a tf.train.Example), the fields' entries pointing at the arrays inside, the record's place
in `frame` and the file's checksum in the last line; the .bin is then a valid shard as it is (see merge).
The index's last line summarises the part (size, record count, each field's dtype and shape with
varying axes as null, the longest text of each meta value, the files its records lie in), so a step can
plan from those lines alone (`read_about`). The index is written last and both files appear atomically:
a part without its index is an interrupted write and is ignored.

Memory: a writer holds one record at a time; a `Part` opened for reading holds its index as compact
columns (numbers in arrays, texts in Arrow arrays), a few bytes per record, never a dict per record.
"""

from __future__ import annotations

import itertools
import json
import math
import os
import re
from collections.abc import Collection, Iterator, Mapping, Sequence
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa

from pipeline.formats.shards.base import Framing
from pipeline.storage.directio import AppendWriter, Extents, read_batches  # noqa: F401 (re-exported)
from pipeline.storage.fsutil import Checksum, atomic_path, remove_stale_temporaries

INDEX_SUFFIX = ".jsonl"
CHUNK_NAME = re.compile(r"part-(?:g\d+-)?\d+-of-\d+")  # part-K-of-N, or part-gG-K-of-N
# ingest writes at least this many parts per rank: ranks differ by at most one part of work
PARTS_PER_RANK = 4


class PartWriter:
    """Appends records to a part; the .bin is written with direct I/O (see pipeline.storage.directio)."""

    def __init__(
        self, path_stem: Path, framing: Framing | None = None, about: Mapping[str, Any] | None = None
    ) -> None:
        """`framing`: write each record framed (see the module doc); `about`: added to the index's last
        line."""
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
        # What the index holds, in its last line (read without parsing the records: see read_about).
        self._fields: dict[str, tuple[str, list[int | None]]] = {}  # dtype, shape (None: varies)
        self._widths: dict[str, int] = {}  # text meta value -> its longest UTF-8 length
        self._files: set[str] = {""}  # references ("" is the part's own .bin)

    def describe(self, **about: Any) -> None:
        """Add `about` to the index's last line (what the writer learned while writing the records)."""
        self._about.update(about)

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
                # a scalar stays 0-d (numpy makes it 1-d)
                array = np.ascontiguousarray(array).reshape(array.shape)
                self._file.write(array)
                line["fields"][name] = [self._offset, array.dtype.str, list(array.shape)]
                self._offset += array.nbytes
        self._index.write(json.dumps(line, separators=(",", ":")) + "\n")
        self._summarise(line)
        self.count += 1
        return self.count - 1

    def _summarise(self, line: Mapping[str, Any]) -> None:
        for name, value in line["meta"].items():
            if isinstance(value, str):
                self._widths[name] = max(self._widths.get(name, 0), len(value.encode()))
        for name, (_, dtype, shape, *ref) in line["fields"].items():
            known = self._fields.setdefault(name, (dtype, list(shape)))
            if known[0] != dtype or len(known[1]) != len(shape):
                self._fields[name] = ("mixed", known[1])
            else:
                self._fields[name] = (
                    dtype,
                    [k if k == d else None for k, d in zip(known[1], shape, strict=True)],
                )
            self._files.add(ref[0] if ref else "")

    def close(self) -> None:
        self._file.close()
        last = {
            **self._about,
            "records": self.count,
            "fields": {name: {"dtype": d, "shape": shape} for name, (d, shape) in self._fields.items()},
            "text_widths": self._widths,
            "files": sorted(self._files),
            "bytes": self._offset,
        }
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


PARSE_BATCH = 8192  # index lines parsed at a time: the transient Python objects of a parse
# A field entry in a part's index line is a JSON list, compact because there is one per field per record:
# [byte offset, dtype string, shape] in the part's own .bin, plus the relative path of another part's .bin
# when the bytes lie there (a reference). Written by PartWriter.append, read by FieldColumn.add.
OFFSET, DTYPE, SHAPE, REF = range(4)


class FieldColumn:
    """Where one field of every record of a part lies: compact arrays, not a Python object per record.
    Built a batch of index entries at a time (`add`), then `finish`ed."""

    def __init__(self) -> None:
        self.dtypes: list[np.dtype] = []  # distinct, in first-seen order
        self.refs: list[str] = []  # distinct references ("" is the part's own .bin), in first-seen order
        self._codes: dict[str, int] = {}
        self._ref_codes: dict[str, int] = {}
        self._pieces: list[tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]] = []

    def add(self, entries: Sequence[Sequence[Any]]) -> None:
        """A batch of field entries (OFFSET, DTYPE, SHAPE[, REF]: see above)."""
        for e in entries:
            if e[DTYPE] not in self._codes:
                self._codes[e[DTYPE]] = len(self.dtypes)
                self.dtypes.append(np.dtype(e[DTYPE]))
            ref = e[REF] if len(e) > REF else ""
            if ref not in self._ref_codes:
                self._ref_codes[ref] = len(self.refs)
                self.refs.append(ref)
        ndims = {len(e[SHAPE]) for e in entries}
        if len(ndims) > 1 or (self._pieces and ndims and ndims != {self._pieces[0][2].shape[1]}):
            raise OSError(
                f"records of one part hold a field with different numbers of axes ({sorted(ndims)})"
            )
        self._pieces.append(
            (
                np.fromiter((e[OFFSET] for e in entries), np.int64, len(entries)),
                np.fromiter((self._codes[e[DTYPE]] for e in entries), np.int16, len(entries)),
                np.array([e[SHAPE] for e in entries], np.int32).reshape(
                    len(entries), ndims.pop() if ndims else 0
                ),
                np.fromiter(
                    (self._ref_codes[e[REF] if len(e) > REF else ""] for e in entries), np.int16, len(entries)
                ),
            )
        )

    def finish(self) -> FieldColumn:
        offsets, dtype_codes, shapes, ref_codes = (
            (np.concatenate([p[k] for p in self._pieces]) for k in range(4))
            if self._pieces
            else (
                np.zeros(0, np.int64),
                np.zeros(0, np.int16),
                np.zeros((0, 0), np.int32),
                np.zeros(0, np.int16),
            )
        )
        self._pieces = []
        if len(shapes) and (shapes == shapes[0]).all():  # one shape for all: stored once
            shapes = np.broadcast_to(shapes[0].copy(), shapes.shape)
        self.offsets, self.dtype_codes, self.shapes, self.ref_codes = offsets, dtype_codes, shapes, ref_codes
        itemsizes = np.array([d.itemsize for d in self.dtypes] or [0], np.int64)
        self.nbytes = itemsizes[self.dtype_codes] * np.prod(self.shapes, axis=1, dtype=np.int64)
        return self

    def dtype(self, i: int) -> np.dtype:
        return self.dtypes[self.dtype_codes[i]]

    def shape(self, i: int) -> list[int]:
        return self.shapes[i].tolist()

    def ref(self, i: int) -> str:
        return self.refs[self.ref_codes[i]]


class Part:
    """A part opened for reading. Its index is parsed once into compact columns (`meta` values per
    record as arrays, `fields` as FieldColumn), so a rank that opens many parts holds a few bytes per
    record, not a dict; the parse itself goes PARSE_BATCH lines at a time."""

    def __init__(self, path_stem: Path) -> None:
        self.bin_path = path_stem.with_suffix(".bin")
        index_path = path_stem.with_suffix(INDEX_SUFFIX)
        index: dict[str, Any] = {}
        meta: dict[str, list[Any]] = {}
        fields: dict[str, FieldColumn] = {}
        frames: list[np.ndarray] = []
        self.count = 0
        with open(index_path) as f:
            while batch := list(itertools.islice(f, PARSE_BATCH)):
                records: list[dict[str, Any]] = json.loads(f"[{','.join(batch)}]")  # one parse per batch
                if records and "meta" not in records[-1]:
                    index = records.pop()  # the last line: size, and for framed parts framing and checksum
                if not records:
                    continue
                for name in records[0]["meta"]:
                    values = [r["meta"][name] for r in records]
                    # numbers as arrays; text as Arrow arrays (their bytes back to back, not a str each)
                    piece = (
                        np.array(values, np.int64)
                        if isinstance(values[0], int)
                        else pa.array(values, pa.string())
                    )
                    meta.setdefault(name, []).append(piece)
                for name in records[0]["fields"]:
                    fields.setdefault(name, FieldColumn()).add([r["fields"][name] for r in records])
                if "frame" in records[0]:
                    frames.append(np.array([r["frame"] for r in records], np.int64).reshape(-1, 2))
                self.count += len(records)
        self.about = index
        if "bytes" not in index:
            raise OSError(f"part index {index_path} is incomplete")
        size = os.path.getsize(self.bin_path)
        if size != index["bytes"]:
            raise OSError(f"part {self.bin_path} has {size} bytes, its index says {index['bytes']}")
        self._data = np.memmap(self.bin_path, dtype=np.uint8, mode="r") if size else np.zeros(0, np.uint8)
        self._refs: dict[str, np.ndarray] = {}
        self.meta_columns: dict[str, Any] = {
            name: np.concatenate(pieces) if isinstance(pieces[0], np.ndarray) else pa.concat_arrays(pieces)
            for name, pieces in meta.items()
        }
        self.fields = {name: column.finish() for name, column in fields.items()}
        self.frames = np.concatenate(frames) if frames else None
        self.record_nbytes = sum((f.nbytes for f in self.fields.values()), np.zeros(self.count, np.int64))

    def __len__(self) -> int:
        return self.count

    def meta(self, i: int) -> dict[str, Any]:
        return {
            name: column[i].item() if isinstance(column, np.ndarray) else column[i].as_py()
            for name, column in self.meta_columns.items()
        }

    def texts(self, name: str) -> list[str]:
        """A text meta column as Python strings (for a part's worth of records at a time)."""
        return self.meta_columns[name].to_pylist()

    def read(self, i: int) -> dict[str, np.ndarray]:
        arrays = {}
        for name, column in self.fields.items():
            offset, dt, shape, ref = int(column.offsets[i]), column.dtype(i), column.shape(i), column.ref(i)
            count = math.prod(shape)
            data = self._referenced(ref) if ref else self._data
            if offset + count * dt.itemsize > data.size:
                raise OSError(f"record {i} field '{name}' lies beyond the end of {ref or self.bin_path}")
            arrays[name] = data[offset : offset + count * dt.itemsize].view(dt).reshape(shape)
        return arrays

    def file_of(self, name: str, i: int) -> Path:
        """The .bin file holding field `name` of record `i`."""
        ref = self.fields[name].ref(i)
        return self.bin_path.parent / ref if ref else self.bin_path

    def location(self, i: int, name: str) -> tuple[Path, int]:
        """The .bin file and byte offset holding field `name` of record `i` (for references)."""
        return self.file_of(name, i), int(self.fields[name].offsets[i])

    def _referenced(self, relative: str) -> np.ndarray:
        data = self._refs.get(relative)
        if data is None:
            path = self.bin_path.parent / relative
            data = self._refs[relative] = (
                np.memmap(path, dtype=np.uint8, mode="r") if path.stat().st_size else np.zeros(0, np.uint8)
            )
        return data

    def __iter__(self) -> Iterator[tuple[dict[str, Any], dict[str, np.ndarray]]]:
        for i in range(len(self)):
            yield self.meta(i), self.read(i)


def read_about(path_stem: Path) -> dict[str, Any]:
    """The last line of a part's index (its size, record count, fields' dtypes and shapes, longest texts,
    the files its records lie in), read from the end of the file without parsing the records."""
    index = path_stem.with_suffix(INDEX_SUFFIX)
    with open(index, "rb") as f:
        size = f.seek(0, os.SEEK_END)
        tail = b""
        while size and tail.count(b"\n") < 2 and len(tail) < size:
            step = min(size - len(tail), max(65_536, 2 * len(tail)))
            f.seek(size - len(tail) - step)
            tail = f.read(step) + tail
    about = json.loads(tail.rstrip(b"\n").rsplit(b"\n", 1)[-1])
    if "bytes" not in about:
        raise OSError(f"part index {index} is incomplete")
    return about


def part_stem(directory: Path, number: int, parts: int, generation: int = 0) -> Path:
    """Part `number` of `parts`; those of a later ingest generation (pipeline.steps.ingest.generations)
    name it, so that they sort after the earlier generations' parts."""
    grown = f"g{generation:04d}-" if generation else ""
    return directory / f"part-{grown}{number:05d}-of-{parts:05d}"


def split_part_stem(chunk_stem: Path, split: str) -> Path:
    """The part of one split's records of an ingest chunk (see ingest's PartSequence)."""
    return chunk_stem.with_name(f"{chunk_stem.name}-{split}")


def chunk_name(part_name: str) -> str:
    """The ingest chunk a part's records came from (its manifest piece's name): the part's own name, or
    that of the chunk it holds one split of."""
    match = CHUNK_NAME.match(part_name)
    if match is None:
        raise ValueError(f"not a part's name: {part_name}")
    return match.group(0)


def list_parts(directory: Path) -> list[Path]:
    """Complete parts (those with an index), in name order."""
    return sorted(p.with_suffix("") for p in directory.glob(f"part-*{INDEX_SUFFIX}"))


def clear_parts(directory: Path, keep: Collection[str] = ()) -> None:
    """Remove the parts (and temporaries) of an earlier run, which may have used another rank count,
    but those named in `keep`."""
    directory.mkdir(parents=True, exist_ok=True)
    for stem in (s for s in list_parts(directory) if s.name not in keep):
        stem.with_suffix(INDEX_SUFFIX).unlink()
        stem.with_suffix(".bin").unlink(missing_ok=True)
    remove_stale_temporaries(directory)

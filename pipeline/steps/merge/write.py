"""merge's writing: each rank writes its shards from the plan's rows, a chunk of records at a time (records
gathered from their homes by byte ranges, normalised, and framed by the shard format), or copies records
that ingest framed already as they are (runs of them, in the kernel), or links a whole part that already
is a shard; then the provenance of its records. Memory: WRITE_CHUNK records' objects and their bytes (a
copy: three numbers per run of records); time: the records' bytes read and written once (a copy: once
in the kernel, and read once more for the checksum, from the page cache)."""

from __future__ import annotations

import os
import re
import shutil
from collections.abc import Mapping, Sequence
from contextlib import ExitStack
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa

from pipeline.data.tables import PROVENANCE_SCHEMA, parquet_writer
from pipeline.data.transforms import normalise
from pipeline.formats.parts import Part, read_about
from pipeline.formats.shards import ShardWriter
from pipeline.formats.shards.base import SHARD_INDEX_SUFFIX, index_path
from pipeline.formats.slabs import slab_arrays, slab_name, sliced_fields
from pipeline.paths import MergedPaths
from pipeline.runtime.mpi import exchange, owner_ranks
from pipeline.steps.merge.plan import (
    NUMERIC_KEYS,
)
from pipeline.storage.fsutil import atomic_path, copy_range, file_checksum, remove_stale_temporaries


def sample_ids(rows: np.ndarray, id_width: int) -> list[str]:
    """The sample ids in the rows' keys (the key's last id_width bytes, NUL-padded)."""
    width = rows.dtype["key"].itemsize
    raw = np.ascontiguousarray(rows["key"]).view(np.uint8).reshape(len(rows), width)[:, width - id_width :]
    return [b.decode() for b in np.ascontiguousarray(raw).view(f"S{id_width}").ravel()]


def extents(rows: np.ndarray, spec: Mapping[str, Mapping[str, Any]]) -> tuple[np.ndarray, ...]:
    """File numbers, offsets and lengths of every field of every row, row by row (arrays)."""
    columns = range(len(spec))
    files = np.stack([rows[f"file{f}"] for f in columns], axis=1).ravel()
    offsets = np.stack([rows[f"offset{f}"] for f in columns], axis=1).ravel()
    lengths = np.stack([field_sizes(rows, f, field) for f, field in enumerate(spec.values())], axis=1).ravel()
    return files, offsets, lengths


def field_shapes(rows: np.ndarray, f: int, field: Mapping[str, Any]) -> list[tuple[int, ...]]:
    """The shape of field number f of each row (its varying axes from the row)."""
    varying = {axis: rows[f"dim{f}_{axis}"].tolist() for axis, d in enumerate(field["shape"]) if d is None}
    if not varying:
        return [tuple(field["shape"])] * len(rows)
    return [
        tuple(varying[axis][i] if d is None else d for axis, d in enumerate(field["shape"]))
        for i in range(len(rows))
    ]


def field_sizes(rows: np.ndarray, f: int, field: Mapping[str, Any]) -> np.ndarray:
    """Per row, the bytes of field number f (its dtype's size times its shape, varying axes from the row)."""
    size = np.full(len(rows), np.dtype(field["dtype"]).itemsize, np.int64)
    for axis, d in enumerate(field["shape"]):
        size *= rows[f"dim{f}_{axis}"].astype(np.int64) if d is None else d
    return size


WRITE_CHUNK = 4096  # records whose per-record Python objects (ids, shapes, array views) exist at once


@dataclass(frozen=True)
class Encoding:
    """How shards are encoded: the fields' spec, the shard format's writer, its compression, the
    statistics records are normalised with, and the slab files per shard (merge.slabs)."""

    spec: Mapping[str, Any]
    writer_class: type[ShardWriter]
    compression: str
    stats: Mapping[str, Any]
    slabs: int = 1


def write_shard(
    path: Path, rows: np.ndarray, id_width: int, located: tuple[np.ndarray, np.ndarray], encoding: Encoding
) -> list[str]:
    """Write one shard (its records' field bytes lie in a buffer at the given positions, row by row) and
    its index atomically: the index first, the shard's rename last. With `slabs` > 1 (merge.slabs), the
    shard is that many files of the same records, each with its slab of the features' planes
    (pipeline.formats.slabs). Returns each file's checksum.

    Records go through in chunks of WRITE_CHUNK rows: a shard of many small records (sorted by length,
    the shortest shard holds tens of thousands) costs a chunk's Python objects, not a shard's."""
    spec, compression, stats, slabs = encoding.spec, encoding.compression, encoding.stats, encoding.slabs
    positions, buffer = located
    dtypes = [np.dtype(field["dtype"]) for field in spec.values()]
    starts = positions.reshape(len(rows), len(spec))
    sliced = sliced_fields(spec) if slabs > 1 else []
    index = np.empty((slabs, len(rows), 2), np.int64)
    finals = [path.with_name(slab_name(path.name, k, slabs)) for k in range(slabs)]
    with ExitStack() as files:
        temporaries = [files.enter_context(atomic_path(final)) for final in finals]
        writers = [encoding.writer_class(tmp, spec, compression) for tmp in temporaries]
        try:
            for first in range(0, len(rows), WRITE_CHUNK):
                chunk = rows[first : first + WRITE_CHUNK]
                fields = [
                    (name, dtype, field_shapes(chunk, f, field), field_sizes(chunk, f, field).tolist())
                    for f, ((name, field), dtype) in enumerate(zip(spec.items(), dtypes, strict=True))
                ]
                chunk_starts = starts[first : first + WRITE_CHUNK].tolist()
                for i, sample_id in enumerate(sample_ids(chunk, id_width)):
                    arrays = normalise(
                        {
                            name: buffer[chunk_starts[i][f] : chunk_starts[i][f] + sizes[i]]
                            .view(dtype)
                            .reshape(shapes[i])
                            for f, (name, dtype, shapes, sizes) in enumerate(fields)
                        },
                        stats,
                    )
                    for k, writer in enumerate(writers):
                        index[k, first + i] = writer.write(sample_id, slab_arrays(arrays, sliced, k, slabs))
        except BaseException:
            for writer in writers:
                writer.abort()
            raise
        for writer, final, slab_index in zip(writers, finals, index, strict=True):
            writer.close()
            write_index(final, slab_index)
    # the files are renamed in order as the stack closes (last in, first out): slab 0's last
    return [writer.checksum or file_checksum(final) for writer, final in zip(writers, finals, strict=True)]


def write_index(shard: Path, frames: np.ndarray) -> None:
    """A shard's index atomically: a line per record, its framed bytes' offset and length."""
    with atomic_path(index_path(shard)) as tmp, open(tmp, "w") as f:
        for first in range(0, len(frames), WRITE_CHUNK):
            f.write("".join(f"{o} {n}\n" for o, n in frames[first : first + WRITE_CHUNK].tolist()))


def framed_runs(rows: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """The rows' framed records as runs of adjacent bytes: each run's home file number, offset, length."""
    home, start = rows["home"].astype(np.int64), rows["frame"]
    length = rows["frame_length"].astype(np.int64)
    joins = (home[1:] == home[:-1]) & (start[1:] == start[:-1] + length[:-1])
    first = np.flatnonzero(np.concatenate([[True], ~joins])) if len(rows) else np.zeros(0, np.int64)
    return home[first], start[first], np.add.reduceat(length, first) if len(rows) else length


def copy_framed_shard(path: Path, rows: np.ndarray, home_files: Sequence[str]) -> str:
    """Write one shard whose records all lie framed in their homes exactly as this shard holds them (merge
    changes nothing of them): their bytes copied run by run, the index from their lengths; the index
    first, the shard's rename last, as write_shard. Returns the shard's checksum."""
    runs = framed_runs(rows)
    lengths = rows["frame_length"].astype(np.int64)
    with ExitStack() as opened, atomic_path(path) as tmp:
        sources: dict[int, int] = {}
        with open(tmp, "wb", buffering=0) as out:
            for number, offset, count in zip(*(r.tolist() for r in runs), strict=True):
                if number not in sources:
                    sources[number] = opened.enter_context(
                        open(home_files[number], "rb", buffering=0)
                    ).fileno()
                copy_range(sources[number], out.fileno(), offset, count)
        write_index(path, np.stack([np.cumsum(lengths) - lengths, lengths], axis=1))
        return file_checksum(tmp)


def link_shard(home: Path, path: Path, rows: np.ndarray) -> str:
    """Make a framed ingest part (its .bin: `home`, whose records `rows` are, whole and in order) the shard
    at `path` without copying it: a hard link, or a copy where the file system cannot link. The index
    (from the rows' frames) first, the shard's rename last, as write_shard. Returns the shard's checksum,
    computed when the part was written (read from its index's last line, not the records)."""
    with atomic_path(path) as tmp:
        tmp.unlink()
        try:
            os.link(home, tmp)
        except OSError:  # another file system, or one without hard links: same bytes, copied
            shutil.copyfile(home, tmp)
        write_index(path, np.stack([rows["frame"], rows["frame_length"]], axis=1).astype(np.int64))
    return read_about(home.with_suffix(""))["checksum"]


def _key_value(row: np.void, sort_by: str, widths: tuple[int, int], prefix: int) -> Any:
    """A row's sort key as the value it was made from (for metadata.json)."""
    raw = bytes(row["key"]).ljust(row.dtype["key"].itemsize, b"\0")[prefix:]  # after any split byte
    if sort_by in NUMERIC_KEYS:
        unsigned = int.from_bytes(raw[:8], "big") ^ (1 << 63)
        return unsigned - (1 << 64) if unsigned >= 1 << 63 else unsigned
    return raw[: widths[0]].rstrip(b"\0").decode()


def placements(rows: np.ndarray, numbers: np.ndarray, my_shards: Sequence[slice]) -> np.ndarray:
    """Where each row's record went: its part and record there, its shard and place in the shard."""
    placed = np.empty(len(rows), [("part", "<i4"), ("record", "<i4"), ("shard", "<i8"), ("position", "<i8")])
    placed["part"], placed["record"], placed["shard"] = rows["part"], rows["record"], numbers
    for shard in my_shards:
        placed["position"][shard] = np.arange(shard.stop - shard.start)
    return placed


def provenance_name(generation: int, rank: int, size: int) -> str:
    grown = f"g{generation:04d}-" if generation else ""
    return f"provenance-{grown}{rank:05d}-of-{size:05d}.parquet"


def provenance_generation(name: str) -> int:
    """The merge generation a provenance file is of (its name's gGGGG, or 0)."""
    match = re.match(r"provenance-g(\d+)-", name)
    return int(match.group(1)) if match else 0


def write_provenance(
    comm: Any,
    held: list[np.ndarray],
    my_stems: Sequence[Path],
    first_part: int,
    n_parts: int,
    directory: Path,
    generation: int,
) -> None:
    """A Parquet file per rank (and merge generation): shard, record, sample id and source of every
    record of this rank's parts, a row group per part (in each, rows by shard and place). Each record's
    placement (`held`, handed over so that it can be let go) is sent to the rank holding its part: one
    all-to-all."""
    size = comm.Get_size()
    placed = held.pop()
    part_starts = np.array([r * n_parts // size for r in range(size)], np.int64)
    mine = exchange(comm, placed, owner_ranks(part_starts, placed["part"]))
    del placed
    mine = mine[np.lexsort((mine["position"], mine["shard"], mine["part"]))]
    bounds = np.searchsorted(mine["part"], np.arange(first_part, first_part + len(my_stems) + 1))
    path = directory / provenance_name(generation, comm.Get_rank(), size)
    with parquet_writer(path, PROVENANCE_SCHEMA) as writer:
        for k, stem in enumerate(my_stems):  # texts taken from the part's Arrow arrays: no str per record
            placed_here = mine[bounds[k] : bounds[k + 1]]
            if len(placed_here):
                part, records = Part(stem), pa.array(placed_here["record"])
                columns = {
                    "shard": placed_here["shard"],
                    "record": placed_here["position"],
                    "sample_id": part.meta_columns["sample_id"].take(records),
                    "source": part.meta_columns["source"].take(records),
                    "index": sample_indices(part, placed_here["record"]),
                }
                writer.write_table(pa.table(columns, schema=PROVENANCE_SCHEMA))


def sample_indices(part: Part, records: np.ndarray) -> pa.Array:
    """The records' indices along source.samples_along in their files; null where a file is one sample."""
    indices = part.meta_columns.get("index")
    if indices is None:
        return pa.nulls(len(records), pa.int64())
    taken = np.asarray(indices)[records]
    return pa.array(taken, pa.int64(), mask=taken < 0)


def prepare_shard_dir(paths: MergedPaths, digest: str, names: set[str], kept: set[str]) -> None:
    """Keep complete shards of the same plan (resume) and those of kept generations; remove the rest."""
    shards_dir, plan_file = paths.shards, paths.plan_digest
    shards_dir.mkdir(parents=True, exist_ok=True)
    remove_stale_temporaries(shards_dir)
    same_plan = plan_file.exists() and plan_file.read_text().strip() == digest
    for p in sorted(shards_dir.rglob("*"), reverse=True):  # a split directory after its files
        name = p.relative_to(shards_dir).as_posix()
        if p.is_dir():
            if not any(p.iterdir()):
                p.rmdir()
            continue
        if name == "plan.digest" or name in kept:
            continue
        shard_name_of = name.removesuffix(SHARD_INDEX_SUFFIX)
        if not same_plan or shard_name_of not in names:
            p.unlink()
    if not same_plan:
        with atomic_path(plan_file) as tmp:
            tmp.write_text(digest + "\n")

"""merge's plan, a pure object computed collectively: every record's sort key and home (part, offset, length)
as rows of one numpy structured array per rank, sorted across ranks (sample sort), and cut into shards of the
target size per split. Memory: one row per record held by this rank (a few dozen bytes), never a Python object
per record; time: a parallel sort of the rows."""

from __future__ import annotations

import itertools
import json
import os
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import xxhash

from pipeline import MB, Sim2dlError
from pipeline.data.splits import part_split_numbers
from pipeline.formats.parts import Part, read_about
from pipeline.formats.shards import WRITERS, ShardWriter, encoding_errors
from pipeline.formats.slabs import check_slabs
from pipeline.paths import ConvertPaths
from pipeline.runtime.mpi import block, exchange, exclusive_sum, sample_sort

NUMERIC_KEYS = {"sort_key": "length", "length": "length", "bytes": "bytes"}  # sort_by -> meta column


TEXT_KEYS = {"sample_id": "parent", "path": "source"}


SIGN = np.uint64(1 << 63)


def about_field_shapes(
    abouts: Mapping[str, Mapping[str, Any]],
) -> Iterable[tuple[str, str, Sequence[int | None]]]:
    """(field, dtype, shape) of the fields of the parts, from their indexes' last lines."""
    for name, about in abouts.items():
        for field, seen in about["fields"].items():
            if seen["dtype"] == "mixed":
                raise Sim2dlError(f"field '{field}' has records of different dtypes or ranks in part {name}")
            yield field, np.dtype(seen["dtype"]).name, seen["shape"]


def feature_spec(
    observed: Iterable[tuple[str, str, Sequence[int | None]]], features: Sequence[str], labels: Sequence[str]
) -> dict[str, dict[str, Any]]:
    """Dtype and shape of every field over all observations; axes whose length varies become None.

    Observations are records' shapes, or (to combine ranks) other specs' shapes, which may hold None."""
    shapes: dict[str, list[int | None]] = {}
    dtypes: dict[str, str] = {}
    for name, dtype, shape in observed:
        if dtypes.setdefault(name, dtype) != dtype:
            raise Sim2dlError(
                f"field '{name}' has records of dtypes {dtypes[name]} and {dtype}: set its dtype"
            )
        known = shapes.setdefault(name, list(shape))
        if len(known) != len(shape):
            raise Sim2dlError(f"field '{name}' has records of different ranks ({known} and {list(shape)})")
        shapes[name] = [k if k == s else None for k, s in zip(known, shape, strict=True)]
    return {
        name: {
            "dtype": dtypes[name],
            "shape": shapes[name],
            "role": "feature" if name in features else "label",
        }
        for name in (*features, *labels)
        if name in shapes
    }


def encoded_spec(
    spec: Mapping[str, Mapping[str, Any]], encodings: Mapping[str, str], stats: Mapping[str, Any]
) -> dict[str, dict[str, Any]]:
    """The spec with each field's encoding (merge.encoding, default bytes), checked against the fields'
    dtypes as converted (convert.dtype 'source' keeps whatever the inputs held)."""
    dtypes = {name: field["dtype"] for name, field in spec.items()}
    errors = encoding_errors(dtypes, encodings)
    errors += [
        f"field '{name}' is {dtypes[name]} and listed in convert.normalise, which needs a float dtype"
        for name in stats
        if name in dtypes and np.dtype(dtypes[name]).kind not in "fc"
    ]
    if errors:
        raise Sim2dlError("config keys 'merge.encoding' / 'convert': " + "; ".join(errors))
    return {name: {**field, "encoding": encodings.get(name, "bytes")} for name, field in spec.items()}


def row_dtype(key_width: int, spec: Mapping[str, Mapping[str, Any]], framed: bool = False) -> np.dtype:
    """One row per record: the sort key, where it came from, its size, its home, where its fields lie
    (and, where records may have homes, `framed`, where the record lies framed in its home)."""
    columns = [
        ("key", f"S{key_width}"),
        ("part", "<i4"),  # the converted part (its number in name order) and the record in it
        ("record", "<i4"),
        ("nbytes", "<i8"),
        ("home", "<i4"),  # the home's file number (-1: none) and the record's number in it
        ("home_record", "<i4"),
    ]
    if framed:  # the framed record's byte offset and length in its home (copied as it is)
        columns += [("frame", "<i8"), ("frame_length", "<i4")]
    for k, field in enumerate(spec.values()):
        columns += [(f"file{k}", "<i4"), (f"offset{k}", "<i8")]
        columns += [(f"dim{k}_{axis}", "<i4") for axis, d in enumerate(field["shape"]) if d is None]
    return np.dtype(columns)


def text_bytes(values: Iterable[str], width: int) -> np.ndarray:
    """UTF-8 texts as a fixed-width byte array (byte order is code point order, as Python compares)."""
    return np.array([v.encode() for v in values], f"S{max(width, 1)}")


def sort_keys(
    part: Part,
    sort_by: str,
    key_width: int,
    id_width: int,
    fractions: Sequence[float],
    split_by: str = "sample",
) -> np.ndarray:
    """Each record's (split, sort key, sample id) as one byte string that sorts in that order (the split
    byte, 1 + its number, only when there are splits)."""
    ids = text_bytes(part.texts("sample_id"), id_width).view(np.uint8).reshape(len(part), -1)
    if sort_by in NUMERIC_KEYS:
        values = part.meta_columns[NUMERIC_KEYS[sort_by]].view(np.uint64) ^ SIGN  # signed order as unsigned
        key = values.astype(">u8").view(np.uint8).reshape(len(part), 8)
    else:
        key = text_bytes(part.texts(TEXT_KEYS[sort_by]), key_width).view(np.uint8).reshape(len(part), -1)
    pieces = [key, ids]
    if fractions:
        pieces.insert(0, 1 + part_split_numbers(part, "parent", fractions, split_by).reshape(-1, 1))
    width = sum(p.shape[1] for p in pieces)
    return np.ascontiguousarray(np.hstack(pieces)).view(f"S{width}").ravel()


def row_splits(rows: np.ndarray, split: bool) -> np.ndarray:
    """Each row's split number (all 0 without splits), from its key's first byte."""
    if not split or not len(rows):
        return np.zeros(len(rows), np.int64)
    width = rows.dtype["key"].itemsize
    return (
        np.ascontiguousarray(rows["key"]).view(np.uint8).reshape(len(rows), width)[:, 0].astype(np.int64) - 1
    )


def bin_file(part_bin: Path, ref: str) -> str:
    """The .bin file a field of a part lies in: the part's own, or the one its reference names."""
    return os.path.normpath(part_bin.parent / ref) if ref else str(part_bin)


class Files:
    """Numbers for the .bin files records lie in (a converted part's own, or the ingest part it refers
    to), the same on every rank: each rank names the files of its parts, and all agree on one list."""

    def __init__(self, comm: Any, parts_dir: Path, abouts: Mapping[str, Mapping[str, Any]]) -> None:
        mine = list(
            dict.fromkeys(
                bin_file(parts_dir / f"{name}.bin", ref) for name, a in abouts.items() for ref in a["files"]
            )
        )
        self.paths = list(dict.fromkeys(p for rank_paths in comm.allgather(mine) for p in rank_paths))
        self.number = {p: k for k, p in enumerate(self.paths)}


def homes(
    part: Part, names: Sequence[str], framing: str, shard_bytes: int
) -> tuple[str, np.ndarray, np.ndarray, int] | None:
    """The framed ingest part holding this part's records exactly as a shard would (every field of the
    record, and no other, referenced there unchanged), with each record's number in it (-1: not there),
    its frame there (offset, length) and how many records it holds; None if the records have no such home."""
    if not len(part) or sorted(part.fields) != sorted(names):
        return None
    columns = [part.fields[n] for n in names]
    if any(len(c.refs) != 1 or not c.refs[0] for c in columns) or len({c.refs[0] for c in columns}) != 1:
        return None
    home_bin = bin_file(part.bin_path, columns[0].refs[0])
    home = Part(Path(home_bin).with_suffix(""))
    if home.about.get("framing") != framing or home.about.get("shard_bytes") != shard_bytes:
        return None
    if sorted(home.fields) != sorted(names):
        return None
    first = home.fields[names[0]].offsets
    at = np.minimum(np.searchsorted(first, columns[0].offsets), max(len(home) - 1, 0))
    found = np.ones(len(part), bool) if len(home) else np.zeros(len(part), bool)
    for name, column in zip(names, columns, strict=True):
        found &= home.fields[name].offsets[at] == column.offsets
    if home.frames is None:
        return None
    frames = home.frames[at] if len(home) else np.zeros((len(part), 2), np.int64)
    return home_bin, np.where(found, at, -1), frames, len(home)


@dataclass(frozen=True)
class RowKeys:
    """How rows are keyed: merge.sort_by, the widths of its text (0 for a number) and of the sample ids over
    every rank, and the splits' fractions (none: no splits) with what they split by (merge.split_by)."""

    sort_by: str
    widths: tuple[int, int]
    fractions: Sequence[float] = ()
    split_by: str = "sample"

    def of(self, part: Part) -> np.ndarray:
        """Each record's key (sort_keys)."""
        key_width, id_width = self.widths
        return sort_keys(part, self.sort_by, key_width, id_width, self.fractions, self.split_by)

    @property
    def width(self) -> int:
        """A key's bytes."""
        prefix = 1 if self.fractions else 0
        return prefix + (sum(self.widths) if self.sort_by not in NUMERIC_KEYS else 8 + self.widths[1])


def row_keys(comm: Any, settings: Mapping[str, Any], abouts: Mapping[str, Any]) -> RowKeys:
    """The keys of merge's settings, the text widths agreed over the ranks from their parts' `abouts`."""
    key_column = TEXT_KEYS.get(settings["sort_by"])

    def widest(column: str) -> int:
        return max(comm.allgather(max((a["text_widths"].get(column, 1) for a in abouts.values()), default=1)))

    widths = (widest(key_column) if key_column else 0, widest("sample_id"))
    fractions = [settings["splits"][name] for name in sorted(settings["splits"])]
    return RowKeys(settings["sort_by"], widths, fractions, settings["split_by"])


def local_rows(
    stems: Sequence[Path],
    first_part: int,
    files: Files,
    spec: Mapping[str, Mapping[str, Any]],
    keys: RowKeys,
    framed: tuple[str, int] | None,
) -> tuple[np.ndarray, dict[int, int]]:
    """The rows of this rank's parts (unsorted; each part opened in turn and let go), and the record count
    of each home file seen."""
    dtype = row_dtype(keys.width, spec, bool(framed))
    chunks, home_counts = [], {}
    names = list(spec)
    for k, stem in enumerate(stems):
        part = Part(stem)
        if not len(part):  # every record of the part was rejected
            continue
        rows = np.zeros(len(part), dtype)
        rows["key"] = keys.of(part)
        rows["part"], rows["record"] = first_part + k, np.arange(len(part))
        rows["nbytes"] = part.record_nbytes
        rows["home"], rows["home_record"] = -1, -1
        found = homes(part, names, *framed) if framed else None
        if found is not None:
            home_file, at, frames, count = found
            number = files.number.get(home_file, -1)
            if number >= 0:  # a home is one of the files the records lie in (it is their only one)
                rows["home"], rows["home_record"] = np.where(at >= 0, number, -1), at
                rows["frame"], rows["frame_length"] = frames[:, 0], frames[:, 1]
                home_counts[number] = count
        for f, (name, field) in enumerate(spec.items()):
            column = part.fields[name]
            if len(part) and any(np.dtype(field["dtype"]) != d for d in column.dtypes):
                raise Sim2dlError(
                    f"field '{name}': records of another dtype than {field['dtype']} in {part.bin_path}"
                )
            file_numbers = np.array(
                [files.number[bin_file(part.bin_path, ref)] for ref in column.refs], np.int32
            )
            rows[f"file{f}"] = file_numbers[column.ref_codes] if len(part) else 0
            rows[f"offset{f}"] = column.offsets
            for axis, d in enumerate(field["shape"]):
                if d is None:
                    rows[f"dim{f}_{axis}"] = column.shapes[:, axis]
        chunks.append(rows)
    return (np.concatenate(chunks) if chunks else np.zeros(0, dtype)), home_counts


def split_of(row: np.void | None, keyed: bool) -> int:
    """One row's split number (row_splits'); -1 for no row (the global start)."""
    if row is None:
        return -1
    held = np.empty(1, row.dtype)
    held[0] = row
    return int(row_splits(held, keyed)[0])


def shard_starts(
    comm: Any, rows: np.ndarray, shard_bytes: int, n_splits: int, keyed: bool, counts: np.ndarray | None
) -> tuple[np.ndarray, np.ndarray]:
    """Where each shard begins among the (globally sorted) rows, and which splits' shards are framed
    ingest parts as they are: a split's homes (home_starts, where `counts` gives every home's records),
    else cuts by size (size_starts)."""
    starts = size_starts(comm, rows, shard_bytes, n_splits, keyed)
    if counts is None:
        return starts, np.zeros(n_splits, bool)
    at_homes, linked = home_starts(comm, rows, counts, n_splits, keyed, shard_bytes)
    return np.where(linked[row_splits(rows, keyed)], at_homes, starts), linked


def previous_row(comm: Any, rows: np.ndarray) -> tuple[np.void | None, bool]:
    """The row just before this rank's first in the global order (None on the rank holding the global
    start), and whether this rank holds the global end."""
    lasts = comm.allgather(rows[-1:].copy())
    rank = comm.Get_rank()
    previous = next((r[0] for r in reversed(lasts[:rank]) if len(r)), None)
    return previous, all(not len(r) for r in lasts[rank + 1 :])


def home_starts(
    comm: Any, rows: np.ndarray, home_counts: np.ndarray, n_splits: int, keyed: bool, shard_bytes: int
) -> tuple[np.ndarray, np.ndarray]:
    """Where each home begins among the (globally sorted) rows, and which splits are their homes as they
    are (the same on every rank): a split whose rows are every one of its homes' records, whole and in
    order (ingest wrote a part per split), and whose homes hold on average half a shard, or half what the
    largest split's hold where ingest cut parts smaller than a shard (a small dataset: PARTS_PER_RANK), so
    that linking makes no small shards: a split of a tenth of the records, say, is copied into shards of
    full size."""
    previous, holds_end = previous_row(comm, rows)
    home, at, splits = rows["home"], rows["home_record"], row_splits(rows, keyed)
    before_home = np.concatenate([[-1 if previous is None else previous["home"]], home[:-1]]).astype(np.int64)
    before_at = np.concatenate([[-1 if previous is None else previous["home_record"]], at[:-1]]).astype(
        np.int64
    )
    before_split = np.concatenate([[split_of(previous, keyed)], splits[:-1]])
    finished = (before_home < 0) | (before_at == home_counts[np.maximum(before_home, 0)] - 1)
    new_split = splits != before_split
    starts = (at == 0) & (finished | new_split)
    continues = (home == before_home) & (at == before_at + 1) & ~new_split
    broken = np.zeros(n_splits, bool)
    broken[splits[(home < 0) | ~(starts | continues)]] = True
    # a split ends in a home cut short
    broken[before_split[new_split & ~finished & (before_split >= 0)]] = True
    if holds_end and len(rows) and at[-1] != home_counts[home[-1]] - 1:
        broken[splits[-1]] = True
    nbytes = np.zeros(n_splits, np.int64)
    np.add.at(nbytes, splits, rows["nbytes"].astype(np.int64))
    homes = np.bincount(splits[starts], minlength=n_splits)
    broken, nbytes, homes = (np.sum(comm.allgather(a), axis=0) for a in (broken, nbytes, homes))
    mean = nbytes / np.maximum(homes, 1)
    small = mean < min(shard_bytes, mean.max()) / 2  # (without splits never: every part is linked, as before)
    return starts, (broken == 0) & (homes > 0) & ~small


def size_starts(comm: Any, rows: np.ndarray, shard_bytes: int, n_splits: int, keyed: bool) -> np.ndarray:
    """Shards of equal size within each split: n = ceil(total / shard_bytes) of them per split, one
    starting where the bytes of its split before a (globally sorted) record pass a multiple of total / n,
    and one at each split's first record (keyed: the keys begin with the split, see sort_keys). Each is
    at most about shard_bytes, none is a small remainder, and the cut is at the same records for any
    rank count."""
    previous, _ = previous_row(comm, rows)
    splits = row_splits(rows, keyed)
    nbytes = rows["nbytes"].astype(np.int64)
    mine = np.zeros(n_splits, np.int64)
    np.add.at(mine, splits, nbytes)
    per_rank = np.array(comm.allgather(mine)).reshape(-1, n_splits)
    earlier, total = per_rank[: comm.Get_rank()].sum(axis=0), per_rank.sum(axis=0)
    per_byte = -(-total // shard_bytes) / np.maximum(total, 1)  # shards per byte, per split
    before_row = np.cumsum(nbytes) - nbytes
    before_in_split = earlier[splits] + before_row - before_row[np.searchsorted(splits, splits, side="left")]
    bins = np.floor(before_in_split * per_byte[splits])
    first_bin, first_split = -1.0, split_of(previous, keyed)
    if previous is not None:
        first_bin = np.floor((earlier[first_split] - int(previous["nbytes"])) * per_byte[first_split])
    previous_bins = np.concatenate([[first_bin], bins[:-1]])
    previous_splits = np.concatenate([[first_split], splits[:-1]])
    return (bins != previous_bins) | (splits != previous_splits)


def gather_shards(comm: Any, rows: np.ndarray, starts: np.ndarray) -> tuple[np.ndarray, np.ndarray, int, int]:
    """Send the rows of a shard that began on an earlier rank to that rank; returns this rank's rows,
    the shard number of each, the number of its first shard, and the number of shards in all."""
    rank = comm.Get_rank()
    begun = comm.allgather(bool(starts.any()))
    head = np.flatnonzero(starts)[0] if starts.any() else len(rows)
    owner = next((q for q in range(rank - 1, -1, -1) if begun[q]), rank)
    destinations = np.full(len(rows), rank)
    destinations[:head] = owner
    kept = exchange(comm, rows, destinations)
    kept_starts = exchange(comm, starts, destinations)
    first = exclusive_sum(comm, int(kept_starts.sum()))
    numbers = first + np.cumsum(kept_starts) - 1
    return kept, numbers, first, sum(comm.allgather(int(kept_starts.sum())))


def shard_name(index: int, count: int, writer: type[ShardWriter], generation: int = 0) -> str:
    """A shard's file name: its number, the count of shards, the format's suffix; those of a later
    generation (pipeline.steps.merge.generations) name it."""
    grown = f"g{generation:04d}-" if generation else ""
    return f"shard-{grown}{index:05d}-of-{count:05d}{writer.suffix}"


def shard_names(
    shard_splits: Sequence[int], split_names: Sequence[str], writer: type[ShardWriter], generation: int = 0
) -> list[str]:
    """Each shard's file name below shards/: numbered within its split, in the split's directory."""
    if not split_names:
        return [shard_name(i, len(shard_splits), writer, generation) for i in range(len(shard_splits))]
    counts = np.bincount(np.asarray(shard_splits, np.int64), minlength=len(split_names))
    seen = [0] * len(split_names)
    names = []
    for k in shard_splits:
        names.append(f"{split_names[k]}/{shard_name(seen[k], int(counts[k]), writer, generation)}")
        seen[k] += 1
    return names


@dataclass(frozen=True)
class Grown:
    """A later generation's plan: its number, and the statistics (and their description) its shards are
    normalised with, those of the first generation."""

    number: int
    statistics: dict[str, Any]
    statistics_from: dict[str, Any]


@dataclass
class MergePlan:
    """What this rank writes, as all ranks agreed it: its rows (sorted, cut into its shards), every
    shard's name and split, and the digest of the whole plan (a rerun with the same digest keeps the
    shards already written). Memory: this rank's rows, about 100 bytes per record of its shards (12 more
    where ingest's framed records may be copied)."""

    settings: Mapping[str, Any]
    writer_class: type[ShardWriter]
    spec: dict[str, dict[str, Any]]
    stats_doc: dict[str, Any]
    widths: tuple[int, int]
    files: Files
    part_names: list[str]
    my_stems: list[Path]
    first_part: int
    split_names: list[str]
    rows: np.ndarray
    numbers: np.ndarray
    my_shards: list[slice]
    first_shard: int
    n_shards: int
    shard_splits: list[int]
    names: list[str]
    digest: str
    linked: list[bool]  # per split: its shards are framed ingest parts as they are (see home_starts)
    total: int

    @property
    def mine(self) -> list[int]:
        return list(range(self.first_shard, self.first_shard + len(self.my_shards)))

    def shard_rows(self, i: int) -> np.ndarray:
        return self.rows[self.my_shards[i - self.first_shard]]  # a view

    def is_linked(self, i: int) -> bool:
        """Whether shard i is a framed ingest part as it is."""
        return self.linked[self.shard_splits[i]]


@dataclass
class Shards:
    """The shards as cut, as the MergePlan holds them: this rank's rows (globally sorted), the shard number
    of each, its first shard and the shards in all, its shards as slices of its rows, every shard's split,
    and which splits' shards are framed ingest parts as they are (see home_starts)."""

    rows: np.ndarray
    numbers: np.ndarray
    first_shard: int
    n_shards: int
    my_shards: list[slice]
    shard_splits: list[int]
    linked: list[bool]


def shard_slices(
    comm: Any, rows: np.ndarray, numbers: np.ndarray, keyed: bool
) -> tuple[list[slice], list[int]]:
    """Collective, on this rank's gathered rows (`numbers`: the shard of each): its shards as slices of
    its rows, and every shard's split."""
    cuts = np.flatnonzero(np.diff(numbers)) + 1
    edges = [0, *cuts.tolist(), len(rows)] if len(rows) else [0]
    my_shards = [slice(a, b) for a, b in itertools.pairwise(edges)]  # contiguous: rows[s] is a view
    my_splits = row_splits(rows[[s.start for s in my_shards]], keyed).tolist() if my_shards else []
    return my_shards, [k for rank_splits in comm.allgather(my_splits) for k in rank_splits]


def plan_merge(
    config: Mapping[str, Any],
    convert_dir: Path,
    comm: Any,
    part_names: Sequence[str],
    generation: Grown | None = None,
) -> MergePlan:
    """Collective: the rows of `part_names`, sorted over all ranks (sample sort), cut into shards (whole
    framed parts, or by size within each split), each shard on the rank where it begins. A later
    generation's (`generation`: its number and the statistics of the first) are named for it."""
    rank, size = comm.Get_rank(), comm.Get_size()
    settings = config["merge"]
    writer_class = WRITERS[settings["format"]]
    converted = ConvertPaths(convert_dir)
    parts_dir = converted.parts
    stats_doc = statistics_document(converted, generation)
    stats = stats_doc["statistics"]
    shard_bytes = int(settings["shard_size_mb"] * MB)

    # 1. This rank's block of parts, as rows: first what their indexes' last lines say, then the records.
    part_names = list(part_names)
    if not part_names:
        raise Sim2dlError(f"no converted parts in {parts_dir}: run convert first")
    first_part = rank * len(part_names) // size
    my_stems = [parts_dir / name for name in block(part_names, rank, size)]
    abouts = {stem.name: read_about(stem) for stem in my_stems}
    spec = common_spec(comm, abouts, config["convert"], settings, stats)
    keys = row_keys(comm, settings, abouts)
    files = Files(comm, parts_dir, abouts)
    split_names = sorted(settings["splits"])
    framed = framed_layout(writer_class, settings, spec, stats, shard_bytes)
    rows, local_homes = local_rows(my_stems, first_part, files, spec, keys, framed)
    total = sum(comm.allgather(len(rows)))
    if not total:
        raise Sim2dlError(f"the converted parts in {parts_dir} hold no samples")

    # 2. The global order; 3. shards, each on the rank where it begins (rebinding `rows` frees the last).
    rows = sample_sort(comm, rows, "key")  # keys are unique (sample ids are)
    counts = None if framed is None else home_counts(comm, local_homes, len(files.paths))
    keyed = bool(split_names)
    starts, linked = shard_starts(comm, rows, shard_bytes, max(len(split_names), 1), keyed, counts)
    rows, numbers, first_shard, n_shards = gather_shards(comm, rows, starts)
    my_shards, shard_splits = shard_slices(comm, rows, numbers, keyed)
    shards = Shards(rows, numbers, first_shard, n_shards, my_shards, shard_splits, linked.tolist())
    return MergePlan(
        settings=settings,
        writer_class=writer_class,
        spec=spec,
        stats_doc=stats_doc,
        widths=keys.widths,
        files=files,
        part_names=part_names,
        my_stems=my_stems,
        first_part=first_part,
        split_names=split_names,
        names=shard_names(shard_splits, split_names, writer_class, generation.number if generation else 0),
        digest=plan_digest(comm, settings, stats, spec, [shard_digest(rows[s]) for s in my_shards]),
        total=total,
        **vars(shards),
    )


def framed_layout(
    writer_class: type[ShardWriter],
    settings: Mapping[str, Any],
    spec: Mapping[str, Any],
    stats: Any,
    shard_bytes: int,
) -> tuple[str, int] | None:
    """(format, shard size) where the records framed by ingest stay as they are: a split's parts linked
    as its shards, or each record copied framed as it is (write.copy_framed_shard) instead of decoded and
    encoded again; None where merge has to change the records."""
    plain = all(field["encoding"] == "bytes" for field in spec.values())
    unchanged = (
        writer_class.framed_record
        and settings["compression"] == "none"
        and not stats
        and plain
        and settings["slabs"] == 1
    )
    return (writer_class.format, shard_bytes) if unchanged else None


def statistics_document(converted: ConvertPaths, generation: Grown | None) -> dict[str, Any]:
    """Convert's statistics document, with the statistics the shards are normalised with: a later
    generation's are the first generation's (pipeline.steps.merge.generations)."""
    stats_doc = json.loads(converted.stats.read_text())
    if generation is not None:
        stats_doc.update(statistics=generation.statistics, statistics_from=generation.statistics_from)
    return stats_doc


def common_spec(
    comm: Any, abouts: Mapping[str, Any], conv: Mapping[str, Any], settings: Mapping[str, Any], stats: Any
) -> dict[str, Any]:
    """The feature spec every rank's parts agree on (shapes and dtypes from their indexes), with the
    shard encoding of each field; the slabs checked against it."""
    local_spec = feature_spec(about_field_shapes(abouts), conv["features"], conv["labels"])
    spec = feature_spec(
        (
            (name, f["dtype"], f["shape"])
            for rank_spec in comm.allgather(local_spec)
            for name, f in rank_spec.items()
        ),
        conv["features"],
        conv["labels"],
    )
    spec = encoded_spec(spec, settings["encoding"], stats)
    check_slabs(settings["slabs"], spec, settings["format"])
    return spec


def home_counts(comm: Any, local_homes: Mapping[int, int], files: int) -> np.ndarray:
    """The records of every part file (framed parts that become shards whole), from every rank's."""
    counts = np.zeros(files, np.int64)
    for rank_homes in comm.allgather(local_homes):
        for number, count in rank_homes.items():
            counts[number] = count
    return counts


def plan_digest(comm: Any, settings: Mapping[str, Any], stats: Any, spec: Any, digests: list[str]) -> str:
    """What the whole plan writes: the settings, statistics and spec, and every shard's digest in order."""
    h = xxhash.xxh3_128(json.dumps([dict(settings), stats, spec], sort_keys=True).encode())
    for d in (d for rank_digests in comm.allgather(digests) for d in rank_digests):
        h.update(d.encode())
    return h.hexdigest()


def shard_digest(rows: np.ndarray) -> str:
    """What a shard holds, in order: its records' keys and where they came from."""
    h = xxhash.xxh3_128()
    h.update(np.ascontiguousarray(rows[["key", "part", "record"]]).tobytes())
    return h.hexdigest()

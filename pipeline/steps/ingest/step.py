"""ingest: scan many small simulation files, validate each, and pack the good ones into a few parts.

Listing (listing.py): no rank holds the whole listing. For `source.glob` under `source.path`, rank 0 cuts
the directory walk into pieces (a directory and the rest of the pattern), every rank walks its own pieces,
and the names are sorted across ranks (a sample sort); a `source.list` file (one input per line, as
LBANN/Merlin sample lists) is read by every rank from its block of the file's bytes, in the list's order.
Every rank writes its stretch of `inputs.txt` in place, then gets its block of whole parts (an all-to-all
of names between neighbours).

Each file is read exactly once in the whole workflow, whole, `ingest.prefetch` files ahead by
`ingest.read_threads` background threads (with O_DIRECT unless `ingest.direct_io` is off): its declared
fields are parsed from those bytes, checked (names, shapes, dtypes, finite values) and appended to a
part, so no later step touches the small files again. A part holds a run of consecutive files, about one
shard's worth, the same for any number of ranks as long as each rank gets several (ranks take
consecutive runs; see `part_files`); records are framed as the shard format writes them when it can, so
merge can make a part a shard as it is. With `merge.splits` and framed records, each split's records of a
run go to a part of their own (`part-K-of-N-SPLIT`), the run sized so that the largest split's part is
about a shard: merge then links the training split's parts instead of copying every record.

The manifest lists every input file (accepted or rejected, with the reason) as Parquet, one file per
part, written by the rank that ingested it (pipeline.data.tables). Duplicate sample ids are found without
gathering them: each accepted id's 128-bit hash goes to the rank that owns that hash value (one
all-to-all of 24 bytes per record), which reports every later copy to the rank holding it; the first
file in input order keeps the id. The rejects list (CSV) gives one reason per rejected file. The run
goes on past bad files and fails only when the rejected fraction exceeds `ingest.max_reject_fraction`.
`summary.json` (counts), written last, marks the step complete.

A listing that grew since the last ingest (the same inputs first, new ones after: an ensemble continued)
is read for its new inputs only, as generation g with parts of its own; what earlier generations made is
kept, checked unchanged (pipeline/steps/ingest/generations.py).

Memory per rank: its stretch of the listing (about the relative paths' length per file, the longest
path's length per file while sorting: the names are fixed-width bytes) and its block of it, 24 bytes per
accepted record for the duplicate check, and one run's manifest rows at a time, with a part open per
split (two write buffers each); the same on rank 0 as on the others. Time: one pass over the files and
one sort of their names, split evenly across ranks. Over a grown listing: one pass over the new files,
a stat per kept file and one read of the kept manifest (its ids' hashes and names: 24 bytes and a path
per kept record of the rank's block, a bytes array), split across ranks.
"""

from __future__ import annotations

import os
import time
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from pipeline import MB, Sim2dlError, gc_paused
from pipeline.config import primary_field
from pipeline.data.records import read_one, validate_sample
from pipeline.data.splits import SplitPlan
from pipeline.data.tables import Reject
from pipeline.formats.fields import Categories
from pipeline.formats.parts import PARTS_PER_RANK, PartWriter, split_part_stem
from pipeline.formats.readers import FieldSpec, SampleError, field_descriptions, reader_for
from pipeline.formats.readers.base import resolve_missing
from pipeline.formats.shards import WRITERS
from pipeline.formats.shards.base import Framing
from pipeline.paths import IngestPaths
from pipeline.reporting.progress import progress, progress_bar
from pipeline.runtime.mpi import all_ok, block, gather_range
from pipeline.steps.ingest.generations import (
    Generation,
    candidates,
    clear_others,
    grown_counts,
    last_changes,
    record_generations,
    settings_digest,
    unchanged,
)
from pipeline.steps.ingest.listing import Listing, SampleNames, start_listing
from pipeline.steps.ingest.manifest import (
    HASHED,
    ManifestPiece,
    RankRecords,
    conclude,
    id_hash,
    read_kept,
    size_or_zero,
)
from pipeline.steps.ingest.samples import (
    FileOpener,
    FileSamples,
    SamplePlan,
    plan_samples,
    reads_samples,
)
from pipeline.storage.directio import FileContents


def record_length(arrays: Mapping[str, np.ndarray], primary: str) -> int:
    """The record's length: the primary (first) feature's extent along its first axis."""
    first = arrays[primary]
    return int(first.shape[0]) if first.ndim else 1


def shape_text(arrays: Mapping[str, np.ndarray]) -> str:
    """The arrays' shapes as one manifest cell: `name=AxBxC;...` ('scalar' for 0-d)."""
    return ";".join(f"{name}={'x'.join(map(str, a.shape)) or 'scalar'}" for name, a in arrays.items())


PART_SIZE_SAMPLE = 64  # files whose median size sets the files per part


def sampled_files(files: int, sample: int = PART_SIZE_SAMPLE) -> np.ndarray:
    """The numbers of up to `sample` evenly spaced files of `files`."""
    return np.arange(0, files, max(1, files // sample))[:sample]


def file_sizes(paths: Iterable[str | Path]) -> list[int]:
    sizes = []
    for path in paths:
        try:
            sizes.append(os.stat(path).st_size)
        except OSError:
            continue  # reported when its turn comes
    return sizes


def files_per_part(sizes: Sequence[int], files: int, shard_bytes: int, ranks: int) -> int:
    """Files per part: about one shard's worth at the median of `sizes` (sampled_files' sizes). Parts are
    consecutive runs of the sorted file list, the same for any number of ranks, so parts (and the shards
    that can be parts as they are) do not depend on how many ranks ingested them, unless that would give
    fewer than PARTS_PER_RANK parts per rank: then parts are smaller, so that every rank has work and none
    has much more than another."""
    median = int(np.median(sizes)) if sizes else 0
    balanced = files // (PARTS_PER_RANK * ranks)  # gives at least PARTS_PER_RANK parts per rank
    return max(1, min(shard_bytes // max(median, 1), balanced))


def part_files(files: Sequence[str | Path], shard_bytes: int, ranks: int) -> int:
    """files_per_part of a list of files."""
    return files_per_part(
        file_sizes(files[i] for i in sampled_files(len(files))), len(files), shard_bytes, ranks
    )


def reads_contents(path: Path, format_name: str) -> bool:
    """Whether the file's reader takes its whole contents read ahead (else it opens the path itself)."""
    try:
        return reader_for(path, format_name).reads_contents
    except SampleError:
        return False  # unknown suffix: rejected when its turn comes, without reading it


@gc_paused()
def ingest(config: Mapping[str, Any], root: Path, out_dir: Path, comm: Any) -> dict[str, Any]:
    """Scan `root`, validate and pack files across ranks; every rank writes the manifest of its parts.
    Inputs an earlier ingest already packed (a listing that grew: pipeline.steps.ingest.generations) are
    kept as they are, not read again."""
    if reads_samples(config["source"]):
        return ingest_samples(config, root, out_dir, comm)
    rank, size = comm.Get_rank(), comm.Get_size()
    source, settings = config["source"], config["ingest"]
    fields = [FieldSpec.from_config(name, spec) for name, spec in source["fields"].items()]
    paths = IngestPaths(out_dir)
    framing, about, splits, part_bytes = part_layout(config)
    digest = settings_digest(config, root)

    started = time.time_ns()
    names, held, total = start_listing(comm, root, source, paths, clear=False)
    kept, described = kept_generations(comm, paths, digest, Listing(root, names), held, total)
    first_new = kept[-1].stop if kept else 0
    mine, first, chunk, chunks = plan_listing(comm, root, names, held, total, first_new, part_bytes)
    del names  # the rank's stretch of the listing: its block (mine) is what it reads
    generation = Generation(len(kept), first_new, total, first_new, total, chunk, chunks, started)
    starts = np.array(comm.allgather(first), np.int64)  # rank r holds files [starts[r], starts[r + 1])
    parts = PartSequence(paths, generation, framing, about, splits)
    hashed, rejects, counts = pack_files(config, root, mine, first, parts, fields, rank, size)
    if not kept and rank == 0 and len(mine):
        described = field_descriptions(Path(mine[0]), source["format"], fields)
    extra = {**described, **grown_counts(kept, generation)}
    new = RankRecords(hashed, mine, starts, rejects, counts)
    summary = conclude(
        comm, paths, new, settings, generation, extra, read_kept(paths, kept, rank, size, samples=False)
    )
    if rank == 0:
        record_generations(paths, digest, kept, generation, described)
    return summary


def kept_generations(
    comm: Any, paths: IngestPaths, digest: str, names: Listing, held: int, total: int
) -> tuple[list[Generation], dict[str, Any]]:
    """On every rank: the earlier generations kept (pipeline.steps.ingest.generations: the same settings,
    a listing that begins with theirs, no input changed since they read it) and their description; rank 0
    removes the parts of any other. Every rank checks its stretch of the listing (`names`, from `held`)."""
    rank = comm.Get_rank()
    error = None
    found: tuple[list[Generation], dict[str, Any]] = ([], {})
    if rank == 0:
        try:
            found = candidates(paths, digest, total)
        except OSError as e:
            error = Sim2dlError(f"ingest: cannot read what an earlier ingest left in {paths.root}: {e}")
    all_ok(comm, error)
    generations, described = comm.bcast(found, root=0)
    latest = np.array(comm.allgather(last_changes(generations, names, held)), np.int64)
    kept = unchanged(generations, latest.max(axis=0).tolist()) if generations else []
    if rank == 0:
        try:
            clear_others(paths, kept)
        except OSError as e:
            error = Sim2dlError(f"ingest: cannot clear what an earlier ingest left in {paths.root}: {e}")
    all_ok(comm, error)
    return kept, described if kept else {}


def file_contents(mine: Listing, source: Mapping[str, Any], settings: Mapping[str, Any]) -> FileContents:
    """This rank's files as they are read: ahead by ingest.prefetch on ingest.read_threads threads, with
    direct I/O where ingest.direct_io says, whole contents only for the formats that read from them."""
    return FileContents(
        (Path(p) for p in mine),
        settings["prefetch"],
        settings["direct_io"],
        lambda p: reads_contents(p, source["format"]),
        settings["read_threads"],
    )


def pack_files(
    config: Mapping[str, Any],
    root: Path,
    mine: Listing,
    first: int,
    parts: PartSequence,
    fields: list[FieldSpec],
    rank: int,
    size: int,
) -> tuple[np.ndarray, list[Reject], tuple[int, int, int]]:
    """Read and check this rank's files (numbers from `first`), each a record of its part or a reject: the
    accepted ids' hashes, the rejects, and (files, accepted, rejected)."""
    source, settings = config["source"], config["ingest"]
    hashed = np.empty(len(mine), HASHED)
    accepted = rejected = 0
    rejects: list[Reject] = []
    try:
        files = file_contents(mine, source, settings)
        for number, (path, contents) in enumerate(progress(files, len(mine), "ingest", rank, size), first):
            piece = parts.at(number)
            try:
                arrays, sample_id, nbytes = read_one(
                    path, contents, root, source, fields, settings["check_finite"]
                )
            except SampleError as e:
                piece.add(
                    path=str(path), bytes=size_or_zero(path), status="rejected", reason=str(e), sample_id=""
                )
                rejects.append(Reject(str(path), "", str(e)))
                rejected += 1
                continue
            length = record_length(arrays, primary_field(config["convert"]))
            part = parts.part(sample_id, None)
            record = part.append(
                arrays, {"sample_id": sample_id, "source": str(path), "length": length, "bytes": nbytes}
            )
            piece.add(
                path=str(path),
                bytes=nbytes,
                sample_id=sample_id,
                shape=shape_text(arrays),
                length=length,
                sort_key=length,
                status="accepted",
                part=part.bin_path.stem,
                record=record,
                reason="",
            )
            high, low = id_hash(sample_id)
            hashed[accepted] = (high, low, number)
            accepted += 1
    except BaseException:
        parts.abort()
        raise
    parts.close()
    return hashed[:accepted], rejects, (len(mine), accepted, rejected)


def plan_listing(
    comm: Any, root: Path, names: np.ndarray, held: int, total: int, first_new: int, part_bytes: int
) -> tuple[Listing, int, int, int]:
    """Give each rank a block of whole chunks of about `part_bytes` of the inputs from `first_new` on
    (`names`: this rank's stretch of the listing, from number `held`): its files, the number of its
    first, the files per chunk and the number of chunks."""
    rank, size = comm.Get_rank(), comm.Get_size()
    new = total - first_new
    here = Listing(root, names)
    sampled = first_new + sampled_files(new)
    sizes = file_sizes(here[int(i) - held] for i in sampled if held <= i < held + len(names))
    chunk = files_per_part(
        [s for rank_sizes in comm.allgather(sizes) for s in rank_sizes], new, part_bytes, size
    )
    chunks = -(-new // chunk)
    chunk_range = block(range(chunks), rank, size)  # a range, possibly empty
    first, stop = (min(total, first_new + c * chunk) for c in (chunk_range.start, chunk_range.stop))
    return Listing(root, gather_range(comm, names, held, range(first, stop))), first, chunk, chunks


@dataclass
class NewInputs:
    """The inputs this ingest reads: the listing's files from number `first` to `total`. Each rank holds
    its stretch of the listing (`names`, from number `held`); `lines` gathers any range of the new files'
    paths from the ranks that hold them (collective)."""

    comm: Any
    root: Path
    names: np.ndarray
    held: int
    first: int
    total: int

    @property
    def count(self) -> int:
        return self.total - self.first

    def lines(self, files: range) -> Listing:
        """The paths of new files `files`, numbered from 0."""
        wanted = range(self.first + files.start, self.first + files.stop)
        return Listing(self.root, gather_range(self.comm, self.names, self.held, wanted))


def ingest_samples(config: Mapping[str, Any], root: Path, out_dir: Path, comm: Any) -> dict[str, Any]:
    """Ingest of files holding many samples, or fields that are the file's values
    (pipeline.steps.ingest.samples): samples (their numbers) instead of files are split into parts and across
    ranks. A listing that grew is ingested for its new files only (pipeline.steps.ingest.generations), unless
    a field is categorical (its classes are numbered over every file: all are read again)."""
    rank, size = comm.Get_rank(), comm.Get_size()
    source, settings = config["source"], config["ingest"]
    fields = [FieldSpec.from_config(name, spec) for name, spec in source["fields"].items()]
    paths = IngestPaths(out_dir)
    framing, about, splits, part_bytes = part_layout(config)
    grows = not any(f.categorical for f in fields)
    digest = settings_digest(config, root)
    opener = open_samples(comm, root, source, fields)
    started = time.time_ns()
    names, held, n_files = start_listing(comm, root, source, paths, clear=not grows)
    kept, described = (
        kept_generations(comm, paths, digest, Listing(root, names), held, n_files) if grows else ([], {})
    )
    inputs = NewInputs(comm, root, names, held, kept[-1].files if kept else 0, n_files)
    del names  # inputs holds the stretch until it is freed below
    first_number = kept[-1].stop if kept else 0
    surveyed = inputs.lines(block(range(inputs.count), rank, size))
    first_input = inputs.lines(range(1 if rank == 0 and inputs.count else 0))  # its fields' description
    plan, categories = plan_samples(
        comm, opener, surveyed, rank * inputs.count // size, inputs.count, part_bytes
    )
    del surveyed
    numbers = plan.rank_samples(rank)  # of the new samples, from 0
    files = plan.files_of(numbers)
    listing = inputs.lines(files)
    inputs.names = inputs.names[:0]  # the stretch is freed: every rank has gathered what it reads
    stop = first_number + plan.total
    generation = Generation(
        len(kept), first_number, stop, inputs.first, n_files, plan.per_part, plan.parts, started
    )
    paths.manifest.mkdir(parents=True, exist_ok=True)
    parts = PartSequence(paths, generation, framing, about, splits)
    writer = SampleRecords(parts, len(numbers), primary_field(config["convert"]), first_number)
    bar = progress_bar(len(numbers), "ingest", rank, size, unit="sample")
    SampleReader(writer, opener, categories, settings, bar).read(listing, files, numbers, plan)
    bar.close()
    if not kept and len(first_input):
        described = field_descriptions(Path(first_input[0]), source["format"], fields)
    extra = {"inputs": n_files, "samples": plan.total, "classes": categories.classes, **described}
    extra.update(grown_counts(kept, generation))
    # rank r: [starts[r], starts[r + 1])
    starts = first_number + np.array(comm.allgather(numbers.start), np.int64)
    sample_names = SampleNames(listing, plan.starts, files.start, numbers.start)
    counts = (len(numbers), writer.accepted, writer.rejected)
    new = RankRecords(writer.hashed[: writer.accepted], sample_names, starts, writer.rejects, counts)
    summary = conclude(
        comm, paths, new, settings, generation, extra, read_kept(paths, kept, rank, size, samples=True)
    )
    if rank == 0 and grows:
        record_generations(paths, digest, kept, generation, described)
    return summary


def open_samples(comm: Any, root: Path, source: Mapping[str, Any], fields: list[FieldSpec]) -> FileOpener:
    """The opener of the inputs' samples, on every rank (a bad setting fails every rank alike)."""
    opener: FileOpener | None = None
    error: BaseException | None = None
    try:
        opener = FileOpener(root, source, fields)
    except Sim2dlError as e:
        error = e
    all_ok(comm, error)
    assert opener is not None
    return opener


class SampleRecords:
    """One rank's records of ingest in samples: each sample number becomes a record or a reject, with its
    manifest row in the part that number belongs to, and its id's hash for the duplicate check."""

    def __init__(self, parts: PartSequence, count: int, primary: str, first: int = 0) -> None:
        self.parts, self.primary, self.first = parts, primary, first  # first: the number of sample 0
        self.hashed = np.empty(count, HASHED)
        self.accepted = self.rejected = 0
        self.rejects: list[Reject] = []

    def reject(self, number: int, path: str, index: int | None, sample_id: str, reason: str) -> None:
        number += self.first
        piece = self.parts.at(number)
        piece.add(path=path, bytes=0, sample_id=sample_id, index=index, status="rejected", reason=reason)
        self.rejects.append(Reject(path, sample_id, reason))
        self.rejected += 1

    def accept(
        self, number: int, path: str, index: int | None, sample_id: str, arrays: dict[str, np.ndarray]
    ) -> None:
        number += self.first
        piece = self.parts.at(number)
        part = self.parts.part(sample_id, index)
        length = record_length(arrays, self.primary)
        nbytes = sum(a.nbytes for a in arrays.values())
        meta = {
            "sample_id": sample_id,
            "source": path,
            "index": -1 if index is None else index,
            "length": length,
            "bytes": nbytes,
        }
        record = part.append(arrays, meta)
        piece.add(
            path=path,
            bytes=nbytes,
            sample_id=sample_id,
            index=index,
            shape=shape_text(arrays),
            length=length,
            sort_key=length,
            status="accepted",
            part=part.bin_path.stem,
            record=record,
            reason="",
        )
        self.hashed[self.accepted] = (*id_hash(sample_id), number)
        self.accepted += 1


@dataclass
class SampleReader:
    """Reads this rank's sample numbers into `writer`, each a record or a reject: the opener of the
    inputs, the classes agreed over every file, ingest's settings and the rank's progress bar."""

    writer: SampleRecords
    opener: FileOpener
    categories: Categories
    settings: Mapping[str, Any]
    bar: Any

    def read(self, listing: Listing, files: range, numbers: range, plan: SamplePlan) -> None:
        """The rank's numbers `numbers`, in the files `files` of the plan (`listing`: their paths); its
        parts closed, or aborted on an error."""
        file_starts = plan.starts
        try:
            for k, path in enumerate(listing):
                f = files.start + k
                first, stop = int(file_starts[f]), int(file_starts[f + 1])
                mine = range(max(numbers.start, first), min(numbers.stop, stop))
                self.read_file(path, mine, first, int(plan.counts[f]))
        except BaseException:
            self.writer.parts.abort()
            raise
        self.writer.parts.close()

    def read_file(self, path: str, mine: range, base: int, counted: int) -> None:
        """This rank's sample numbers `mine` of one file (its sample 0 is number `base`; the survey counted
        `counted` samples), each a record or a reject."""
        writer, categories, bar = self.writer, self.categories, self.bar
        try:
            samples = self.opener.open(path)
        except SampleError as e:  # not counted: one number; each number gets a row
            for number in mine:
                writer.reject(number, path, None if counted == 1 else number - base, "", str(e))
            bar.update(len(mine))
            return
        along = samples.indexed
        file_id = samples.info.file_id

        def sample_id(index: int) -> str:
            return f"{file_id}#{index}" if along else file_id

        with samples.opened:
            try:
                if samples.count != counted:
                    raise SampleError(
                        f"changed since it was surveyed ({counted} samples, now {samples.count})"
                    )
                shared = samples.shared(categories)
            except SampleError as e:
                for number in mine:
                    index = number - base
                    writer.reject(number, path, index if along else None, sample_id(index), str(e))
                bar.update(len(mine))
                return
            batch_bytes = int(self.settings["batch_mb"] * MB)
            for start, count, batch in samples.batches(mine.start - base, mine.stop - base, batch_bytes):
                bar.update(count)
                for index in range(start, start + count):
                    try:
                        if isinstance(batch, SampleError):
                            raise batch
                        arrays = sample_arrays(batch, index - start, shared, samples, categories)
                        arrays = validate_sample(arrays, samples.fields, self.settings["check_finite"])
                    except SampleError as e:
                        writer.reject(base + index, path, index if along else None, sample_id(index), str(e))
                        continue
                    writer.accept(base + index, path, index if along else None, sample_id(index), arrays)


def sample_arrays(
    batch: Mapping[str, Any],
    j: int,
    shared: Mapping[str, np.ndarray],
    samples: FileSamples,
    categories: Categories,
) -> dict[str, np.ndarray]:
    """Sample j of a batch, with the file's shared values, in the fields' order; categorical arrays as ids;
    missing values (CF) handled by each field's `missing` (a reject, or filled with a mask beside)."""
    arrays = {}
    for field in samples.fields:
        if field.name in batch:
            value = batch[field.name][j]
            if field.categorical:
                arrays[field.name] = categories.id_of(field.name, value)
            else:
                arrays.update(resolve_missing(field, value, samples.markers(field)))
        else:
            arrays[field.name] = shared[field.name]
            if field.mask_name is not None:
                arrays[field.mask_name] = shared[field.mask_name]
    return arrays


def part_layout(config: Mapping[str, Any]) -> tuple[Framing | None, dict[str, Any], SplitPlan, int]:
    """How ingest frames its records (as merge will write them, when it can), what a part's index says of
    it, the splits (merge.splits) and about how many bytes of inputs a chunk holds: a shard's worth, or
    with parts per split (see PartSequence) enough that the largest split's part is about a shard."""
    shard_bytes = int(config["merge"]["shard_size_mb"] * MB)
    writer_class = WRITERS[config["merge"]["format"]]
    framing = writer_class.framed_record if config["merge"]["compression"] == "none" else None
    about = {"framing": writer_class.format, "shard_bytes": shard_bytes} if framing else {}
    splits = SplitPlan(config["merge"])
    return framing, about, splits, int(shard_bytes / splits.largest) if splits and framing else shard_bytes


class PartSequence:
    """The parts a rank writes, one chunk after another: chunk k of a generation holds numbers
    first + [k * per_part, (k + 1) * per_part) (files, or samples), with one manifest piece written when
    the chunk is complete. With merge.splits and
    framed records, each split's records of a chunk go to a part of their own (named after the chunk and
    the split), so that merge can make the parts of a split its shards as they are instead of copying
    every record out of parts that mix splits (issue 67); otherwise a chunk is one part."""

    def __init__(
        self,
        paths: IngestPaths,
        generation: Generation,
        framing: Framing | None,
        about: dict[str, Any],
        splits: SplitPlan,
    ) -> None:
        self.paths, self.generation, self.framing, self.about = paths, generation, framing, about
        self.splits = splits if splits and framing is not None else None
        self.stem: Path | None = None  # the current chunk's
        self.parts: dict[int, PartWriter] = {}  # split number (0 without splits) -> its part
        self.piece: ManifestPiece | None = None

    def at(self, number: int) -> ManifestPiece:
        """The manifest piece for `number`, starting the next chunk at a chunk boundary."""
        chunk, at = divmod(number - self.generation.first, self.generation.per_part)
        if self.piece is None or at == 0:
            self.close()
            self.stem = self.generation.stem(self.paths.parts, chunk)
            self.piece = ManifestPiece(self.paths.manifest_piece(self.stem.name))
        return self.piece

    def part(self, sample_id: str, index: int | None) -> PartWriter:
        """The current chunk's part for a record (its split's), started when first needed."""
        assert self.stem is not None
        split = 0 if self.splits is None else self.splits.record_split(sample_id, index)
        if split not in self.parts:
            stem = self.stem if self.splits is None else split_part_stem(self.stem, self.splits.names[split])
            self.parts[split] = PartWriter(stem, self.framing, self.about)
        return self.parts[split]

    def close(self) -> None:
        if self.piece is not None:
            if not self.parts:  # every file of the chunk rejected: an empty part still stands for it
                self.parts[0] = PartWriter(self.stem, self.framing, self.about)  # type: ignore[arg-type]
            for part in self.parts.values():
                part.close()
            self.piece.write()
            self.parts, self.piece = {}, None

    def abort(self) -> None:
        for part in self.parts.values():
            part.abort()
        self.parts, self.piece = {}, None

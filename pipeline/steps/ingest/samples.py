"""ingest of files that are not one sample each: many samples along an axis (source.samples_along), one
per event of event-indexed tables (fields with columns and ragged_by / group_by / key:
pipeline/formats/readers/events.py), and fields whose values are the file's (attributes, labels_table columns,
path groups, categorical).

Samples are numbered across the sorted input listing (a sample number; a file whose samples cannot be
counted, because it cannot be opened or its fields disagree along the axis, has one number: its reject),
so a file's samples are consecutive; parts are runs of `per_part` consecutive numbers, and ranks take
consecutive blocks of parts: a few huge files spread over every rank (ranks take ranges of a file's
samples), many small ones are packed as before. Every number ends as one manifest row: a record, or a
reject with its reason. The plan is a pure object (`SamplePlan`); ingest executes it under MPI:

1. survey: each rank opens a block of the files (metadata only) and counts their samples; the values of
   categorical fields are collected there too, so the class ids (sorted values) are fixed before any
   record is written, the same for any rank count;
2. read: each rank reads its samples file by file, `ingest.batch_mb` of samples at a time (one hyperslab
   per field: a file of 100,000 samples is never read whole), checks each sample and appends it to the
   part its number belongs to.

Memory per rank: the listing's line offsets and the per-file sample counts (16 bytes per file), one batch
of samples, one part's manifest rows, 24 bytes per accepted record for the duplicate check, the labels
table (compact), and for the open file's tables 16 to 24 bytes per event (its index and ids). Time: one
metadata pass and one data pass over the files, split across ranks.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from pipeline import MB, Sim2dlError
from pipeline.config import labels_table_file
from pipeline.formats.fields import (
    Categories,
    FileInfo,
    LabelsTable,
    ValueSource,
    numeric_value,
    value_sources,
)
from pipeline.formats.fields.categories import class_text, sorted_classes
from pipeline.formats.fields.column import RUN_DIRECTORY, run_directory, table_settings
from pipeline.formats.parts import PARTS_PER_RANK
from pipeline.formats.readers import FieldSpec, SampleError, reader_for
from pipeline.formats.readers.base import EMPTY, OpenFile, as_text, readable_size, resolve_missing
from pipeline.formats.readers.events import Events, Keyed, event_samples, keyed_samples, table_rows
from pipeline.runtime.mpi import all_ok, block

Arrays = dict[str, np.ndarray]
# At most this many samples per part: ingest (a part's manifest rows), convert and merge (a part's index,
# parsed) hold a part's bookkeeping at once, about 1 KB per record, so small samples (a few hundred bytes:
# 60,000 to a 16 MB shard) would make that grow with the shard's record count (docs/benchmarks.md, design
# measurements). Merge gathers a shard from several parts (as it does for sorted merges) at about the same
# speed.
PART_SAMPLES_MAX = 8192
GROWTH = 16  # a file's next range of samples is at most this many times the last


def reads_samples(source: Mapping[str, Any]) -> bool:
    """Whether ingest goes through this module: samples along an axis, or fields that are not arrays."""
    fields = (FieldSpec.from_config(name, spec) for name, spec in source["fields"].items())
    return source["samples_along"] is not None or any(
        not f.in_file or f.categorical or f.events or f.keyed for f in fields
    )


@dataclass(frozen=True)
class SamplePlan:
    """Which samples exist (their numbers), which part each goes to and which rank writes each part."""

    counts: np.ndarray  # per file: its samples (1 when they cannot be counted)
    per_part: int  # samples per part
    ranks: int

    @property
    def starts(self) -> np.ndarray:
        """File f's numbers are [starts[f], starts[f + 1])."""
        return np.concatenate([[0], np.cumsum(self.counts, dtype=np.int64)])

    @property
    def total(self) -> int:
        return int(self.counts.sum())

    @property
    def parts(self) -> int:
        return -(-self.total // self.per_part)

    def rank_samples(self, rank: int) -> range:
        """The sample numbers rank `rank` reads: those of its block of parts."""
        parts = block(range(self.parts), rank, self.ranks)
        return range(
            min(self.total, parts.start * self.per_part), min(self.total, parts.stop * self.per_part)
        )

    def files_of(self, numbers: range) -> range:
        """The files holding any of these numbers."""
        if not len(numbers):
            return range(0)
        starts = self.starts
        first = int(np.searchsorted(starts, numbers.start, "right")) - 1
        last = int(np.searchsorted(starts, numbers.stop - 1, "right")) - 1
        return range(first, last + 1)

    @classmethod
    def make(cls, counts: np.ndarray, sample_bytes: int, shard_bytes: int, ranks: int) -> SamplePlan:
        """Parts of about a shard's worth of samples, at most PART_SAMPLES_MAX, and at least PARTS_PER_RANK
        parts per rank."""
        total = int(counts.sum())
        balanced = total // (PARTS_PER_RANK * ranks)
        per_part = min(shard_bytes // max(sample_bytes, 1), balanced, PART_SAMPLES_MAX)
        return cls(counts.astype(np.int64), max(1, per_part), ranks)


class FileSamples:
    """The samples of one opened file: the fields along the sample axis (with their axis position), the
    per-file values every sample shares, and the file's sample count."""

    def __init__(
        self,
        opened: OpenFile,
        info: FileInfo,
        fields: Sequence[FieldSpec],
        samples_along: int | str | None,
        values: Mapping[str, ValueSource],
    ) -> None:
        self.opened, self.info, self.fields, self.values = opened, info, fields, values
        self.axes: dict[str, int] = {}  # field -> position of the sample axis in its array
        self.tables: dict[str, Events] = {}  # fields with ragged_by or group_by: their events
        self.keyed: dict[str, Keyed] = {}  # fields with key: their table's rows by event id
        self.events: Events | None = None  # the events keyed fields look up (the first table's)
        # whether a sample is one index of many in the file (an index along samples_along, or an event)
        self.indexed = samples_along is not None or any(f.events for f in fields)
        if any(f.events for f in fields):
            self._count_events()
            return
        for field in fields:
            if field.in_file and samples_along is not None:
                try:
                    axis = opened.along(field, samples_along)
                except SampleError as e:
                    raise SampleError(f"field '{field.name}': {e}") from None
                if axis is not None:
                    self.axes[field.name] = axis
        if samples_along is None:
            self.count = 1
            return
        if not self.axes:
            raise SampleError(f"no field has the sample axis {samples_along!r} (source.samples_along)")
        lengths = {name: opened.length(self.field(name).path, axis) for name, axis in self.axes.items()}
        if len(set(lengths.values())) > 1:
            told = ", ".join(f"{name}={n}" for name, n in lengths.items())
            raise SampleError(f"fields disagree in length along {samples_along!r}: {told}")
        self.count = next(iter(lengths.values()))
        if self.count == 0:
            raise SampleError(f"no samples along {samples_along!r} (length 0)")

    def _count_events(self) -> None:
        """One sample per event of the event-indexed tables (readers/events.py); every such field must
        have as many events."""
        for field in self.fields:
            if not (field.events or field.keyed):
                continue
            columns = list(field.columns or ())
            if field.ragged_by is not None:
                rows = table_rows(self.opened, field.path, columns[0])
                self.tables[field.name] = Events.ragged(self.opened, field.ragged_by, rows, field.path)
            elif field.group_by is not None:
                self.tables[field.name] = Events.grouped(self.opened, field.path, field.group_by)
            else:
                self.keyed[field.name] = Keyed(self.opened, field.path, str(field.key))
            self.axes[field.name] = 0
        counts = {name: len(events) for name, events in self.tables.items()}
        if len(set(counts.values())) > 1:
            told = ", ".join(f"{name}={n}" for name, n in counts.items())
            raise SampleError(f"fields disagree in their number of events: {told}")
        self.events = next(iter(self.tables.values()))  # the ids keyed fields look up
        self.count = len(self.events)
        if self.count == 0:
            raise SampleError("no events (the index table or the id column is empty)")

    def field(self, name: str) -> FieldSpec:
        return next(f for f in self.fields if f.name == name)

    def markers(self, field: FieldSpec) -> str:
        """The field's CF missing-value markers (tables: none)."""
        return "" if field.name in self.tables or field.name in self.keyed else self.opened.markers(field)

    def shared(self, categories: Categories) -> Arrays:
        """The values every sample of the file shares: per-file arrays and the value sources' values
        (categorical ones as class ids). SampleError: the file has no such value."""
        arrays: Arrays = {}
        for field in self.fields:
            if field.name in self.axes:
                continue
            if field.in_file and not field.categorical:
                arrays.update(resolve_missing(field, self.opened.whole(field), self.opened.markers(field)))
                continue
            if field.in_file:
                value: Any = self.opened.read(field.path, ())
                where = f"array '{field.path}'"
            else:
                value = self.values[field.name].raw(self.info)
                where = f"{field.kind} '{field.path}'"
            arrays[field.name] = (
                categories.id_of(field.name, value)
                if field.categorical
                else numeric_value(value, field, where)
            )
        return arrays

    def batches(
        self, start: int, stop: int, batch_bytes: int
    ) -> Iterator[tuple[int, int, dict[str, Any] | SampleError]]:
        """(first index, samples, field -> samples) for ranges of [start, stop): one sample first, then as
        many as fit in batch_bytes at the size seen (at most GROWTH times the last range). A range that
        cannot be read is read again a sample at a time, so that an unreadable chunk costs only the
        samples in it (given as the SampleError)."""
        size = 1
        while start < stop:
            end = min(stop, start + size)
            try:
                batch = self.read(start, end)
            except SampleError as e:
                if end - start == 1:
                    yield start, 1, e
                    start = end
                    continue
                for index in range(start, end):
                    try:
                        yield index, 1, self.read(index, index + 1)
                    except SampleError as single:
                        yield index, 1, single
                start = end
                continue
            yield start, end - start, batch
            nbytes = sum(
                a.nbytes if isinstance(a, np.ndarray) else sum(x.nbytes for x in a) for a in batch.values()
            )
            # at the size seen, but growing at most GROWTH-fold: samples of variable size (jagged events, the
            # first one empty) must not make one read cover the rest of a large file
            size = max(1, min(size * GROWTH, int(batch_bytes * (end - start) // max(nbytes, 1))))
            start = end

    def read(self, start: int, stop: int) -> dict[str, Any]:
        batch: dict[str, Any] = {}
        for name, axis in self.axes.items():
            field = self.field(name)
            if name in self.tables:
                batch[name] = event_samples(self.opened, field, self.tables[name], start, stop)
            elif name in self.keyed:
                assert self.events is not None
                batch[name] = keyed_samples(self.opened, field, self.keyed[name], self.events, start, stop)
            else:
                batch[name] = self.opened.samples(field, axis, start, stop)
        return batch

    def class_values(self) -> dict[str, set[str]]:
        """The categorical values this file holds, by field (for the classes found in the data)."""
        found: dict[str, set[str]] = {}
        for field in self.fields:
            if not field.categorical or field.classes is not None:
                continue
            try:
                if field.in_file:
                    data = self.opened.read(field.path, ())
                    axis = self.axes.get(field.name)
                    items = [data] if axis is None else list(np.unique(np.asarray(data)))
                    found[field.name] = {class_text(v) for v in items}
                else:
                    found[field.name] = {class_text(self.values[field.name].raw(self.info))}
            except SampleError:
                continue  # the file's reject says why, when its samples are read
        return found


class FileOpener:
    """Opens inputs as FileSamples: the readers, value sources and labels table of one ingest run."""

    def __init__(self, root: Path, source: Mapping[str, Any], fields: Sequence[FieldSpec]) -> None:
        self.root, self.source, self.fields = root, source, fields
        settings = table_settings(source)
        table = None
        if settings is not None:
            table = LabelsTable(labels_table_file(source, root), settings["key"])  # type: ignore[arg-type]
            match = settings["match"]
            is_field = match in source["fields"] and "path" not in source["fields"][match]
            if match is not None and match != RUN_DIRECTORY and not is_field:
                raise Sim2dlError(
                    f"config key 'source.labels_table.match': '{match}' is not a field with attr or "
                    "path_group"
                )
        self.match = None if settings is None else settings["match"]
        self.values = value_sources(list(fields), source, table)
        self.id_attr = source["sample_id"]["attr"] if source["sample_id"] else None

    def table_key(self, info: FileInfo) -> str:
        """What the file's row in source.labels_table is looked up by."""
        if self.match is None:
            return info.file_id
        if self.match == RUN_DIRECTORY:
            run = run_directory(info.relative)
            if run is None:
                raise SampleError(f"no directory of {info.relative} is named like a run (run-NNNNNN)")
            return run
        return class_text(self.values[self.match].raw(info))

    def relative(self, path: str) -> str:
        p = Path(path)
        return str(p.relative_to(self.root) if p.is_relative_to(self.root) else p)

    def open(self, path: str) -> FileSamples:
        """The file opened and counted; SampleError: it cannot be read as samples (one sample number,
        rejected)."""
        if readable_size(path) == 0:  # the reasons the small-file path gives (ingest.read_one)
            raise SampleError(EMPTY)
        opened = reader_for(Path(path), self.source["format"]).open(Path(path))
        try:
            relative = self.relative(path)
            file_id = str(Path(relative).with_suffix("")) if self.id_attr is None else ""
            info = FileInfo(path, relative, opened, file_id)
            if self.id_attr is not None:
                try:
                    info.file_id = as_text(opened.attribute(self.id_attr))
                except SampleError:
                    raise SampleError(f"missing sample id attribute '{self.id_attr}'") from None
            info.table_key = self.table_key(info)
            return FileSamples(opened, info, self.fields, self.source["samples_along"], self.values)
        except BaseException:
            opened.close()
            raise


def survey(opener: FileOpener, paths: Sequence[str]) -> tuple[np.ndarray, dict[str, set[str]], int]:
    """Per file: its samples (1 when they cannot be counted); the categorical values found; the
    bytes of one sample (of the first file counted; 0 if none)."""
    counts = np.ones(len(paths), np.int64)
    found: dict[str, set[str]] = {}
    sample_bytes = 0
    for i, path in enumerate(paths):
        try:
            samples = opener.open(path)
        except SampleError:
            continue  # rejected with its reason when its turn comes
        with samples.opened:
            counts[i] = samples.count
            for name, values in samples.class_values().items():
                found.setdefault(name, set()).update(values)
            if not sample_bytes and samples.axes:
                try:
                    batch = samples.read(0, 1)
                    sample_bytes = sum(
                        a.nbytes if isinstance(a, np.ndarray) else a[0].nbytes for a in batch.values()
                    )
                except SampleError:
                    pass
    return counts, found, sample_bytes


def agree_on_classes(comm: Any, fields: Sequence[FieldSpec], found: Mapping[str, set[str]]) -> Categories:
    """The classes of every categorical field: as configured, or the union of what every rank found,
    sorted."""
    everywhere: dict[str, set[str]] = {}
    for rank_found in comm.allgather({name: sorted(values) for name, values in found.items()}):
        for name, values in rank_found.items():
            everywhere.setdefault(name, set()).update(values)
    classes = {}
    for field in fields:
        if field.categorical:
            classes[field.name] = (
                list(field.classes)
                if field.classes is not None
                else sorted_classes(everywhere.get(field.name, set()))
            )
    return Categories(classes)


def plan_samples(
    comm: Any, opener: FileOpener, listing: Sequence[str], first: int, total_files: int, shard_bytes: int
) -> tuple[SamplePlan, Categories]:
    """Every rank surveys its block of the files (`listing`, starting at file `first`); the sample counts
    are gathered (8 bytes per file) and the classes agreed."""
    error: BaseException | None = None
    try:
        counts, found, sample_bytes = survey(opener, listing)
    except Sim2dlError as e:
        counts, found, sample_bytes, error = np.ones(len(listing), np.int64), {}, 0, e
    all_ok(comm, error)
    gathered = comm.allgather((first, counts))
    every = np.ones(total_files, np.int64)
    for start, counts in gathered:
        every[start : start + len(counts)] = counts
    sample_bytes = max(comm.allgather(sample_bytes))
    categories = agree_on_classes(comm, opener.fields, found)
    return SamplePlan.make(every, sample_bytes, shard_bytes, comm.Get_size()), categories


def batch_bytes(settings: Mapping[str, Any]) -> int:
    """ingest.batch_mb in bytes: about how much of a file's samples one read takes."""
    return int(settings["batch_mb"] * MB)

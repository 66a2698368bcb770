"""convert: select features and labels, cast, log1p, crop or split into sub-volumes, and compute the
global statistics used for normalisation (over the training split's records alone: merge.splits' 'train'
split, or without splits the records train does not hold out, so that nothing of the validation data
leaks into training) and the class counts of integer labels per split, in one parallel pass over
the ingested parts: each rank takes
a block of the ingest parts and converts each into a part of the same name (so the output does not
depend on the rank count), reading from the manifest only which of the part's records are accepted.
Memory: one part's records in flight; statistics per part, merged on rank 0 in part order. Time: one
pass over the records, split across ranks; a rerun passes only over the parts whose ingest part or
settings changed (a grown ingest's new parts): each converted part's statistics are kept beside it.

The per-part statistics (count, mean, M2, min, max, merged with Chan et al.'s pairwise formula, which
stays accurate over billions of values) are gathered and combined in part order. Normalisation
itself, (x - mean) / std, is applied by `normalise` as merge packs each record, so the converted data is
read and written once.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from pipeline import Sim2dlError, __version__, gc_paused, json_digest
from pipeline.data.splits import SampleSplits
from pipeline.data.statistics import RunningStats
from pipeline.data.tables import REJECT_COLUMNS, Reject, accepted_records, write_csv
from pipeline.data.transforms import missing_masks, transform
from pipeline.formats.parts import (
    INDEX_SUFFIX,
    Part,
    PartWriter,
    chunk_name,
    clear_parts,
    list_parts,
    read_about,
)
from pipeline.formats.readers import SampleError
from pipeline.paths import ConvertPaths, IngestPaths
from pipeline.reporting.progress import progress_bar
from pipeline.runtime.mpi import block
from pipeline.storage.fsutil import file_signature, write_json_atomic

# Integer labels with ids up to this are counted per class (class ids, masks); larger ones only ranged.
MAX_COUNTED_ID = 1 << 16


@dataclass
class ClassCounts:
    """Per split, how many values of an integer label field are each id (a class id per sample, or per
    pixel of a mask), and the smallest and largest value: what train checks the task's classes against
    and derives class weights from. Memory: one count per id and split."""

    minimum: int | None = None
    maximum: int | None = None
    counts: dict[int, np.ndarray] = field(default_factory=dict)  # split number -> counts by id

    def update(self, x: np.ndarray, split: int) -> None:
        if not x.size:
            return
        low, high = int(x.min()), int(x.max())
        self.minimum = low if self.minimum is None else min(self.minimum, low)
        self.maximum = high if self.maximum is None else max(self.maximum, high)
        if self.minimum >= 0 and self.maximum < MAX_COUNTED_ID:
            self._add(split, np.bincount(x.ravel().astype(np.int64)))

    def _add(self, split: int, counts: np.ndarray) -> None:
        have = self.counts.get(split, np.zeros(0, np.int64))
        size = max(len(have), len(counts))
        self.counts[split] = np.pad(have, (0, size - len(have))) + np.pad(counts, (0, size - len(counts)))

    def merge(self, other: ClassCounts) -> None:
        if other.minimum is None or other.maximum is None:
            return
        self.minimum = other.minimum if self.minimum is None else min(self.minimum, other.minimum)
        self.maximum = other.maximum if self.maximum is None else max(self.maximum, other.maximum)
        for split, counts in other.counts.items():
            self._add(split, counts)

    def state(self) -> dict[str, Any]:
        return {
            "min": self.minimum,
            "max": self.maximum,
            "counts": {str(k): c.tolist() for k, c in self.counts.items()},
        }

    @classmethod
    def from_state(cls, state: Mapping[str, Any]) -> ClassCounts:
        counts = {int(k): np.asarray(c, np.int64) for k, c in state["counts"].items()}
        return cls(state["min"], state["max"], counts)

    def as_dict(self, split_names: Sequence[str]) -> dict[str, Any]:
        """{min, max, counts: {split name: [count of id 0, 1, ..., max]}} (counts None for ids that are
        negative or too large to be classes)."""
        if self.minimum is None or self.maximum is None or self.minimum < 0 or self.maximum >= MAX_COUNTED_ID:
            return {"min": self.minimum, "max": self.maximum, "counts": None}
        width = self.maximum + 1
        counts = {}
        for number, name in enumerate(split_names):
            have = self.counts.get(number, np.zeros(0, np.int64))
            counts[name] = np.pad(have, (0, width - len(have))).tolist()
        return {"min": self.minimum, "max": self.maximum, "counts": counts}


def categorical_fields(ingest: IngestPaths) -> set[str]:
    """The fields ingest made class ids of (its summary lists their classes)."""
    try:
        return set(json.loads(ingest.summary.read_text()).get("classes", {}))
    except OSError as e:
        raise Sim2dlError(f"cannot read {ingest.summary}: {e.strerror} (run ingest first)") from None


@dataclass
class ConvertedPart:
    """What converting one part gave: its statistics (training split), class counts, rejects, the
    records it read and wrote; kept in the part's index (`state`) so that a rerun need not read it again."""

    name: str
    stats: dict[str, RunningStats]
    counts: dict[str, ClassCounts]
    rejects: list[Reject]
    written: int
    read: int = 0

    def state(self) -> dict[str, Any]:
        return {
            "name": self.name,
            "stats": {f: s.state() for f, s in self.stats.items()},
            "counts": {f: c.state() for f, c in self.counts.items()},
            "rejects": [list(r) for r in self.rejects],
            "written": self.written,
            "read": self.read,
        }

    @classmethod
    def from_state(cls, state: Mapping[str, Any]) -> ConvertedPart:
        return cls(
            state["name"],
            {f: RunningStats.from_state(s) for f, s in state["stats"].items()},
            {f: ClassCounts.from_state(c) for f, c in state["counts"].items()},
            [Reject(*r) for r in state["rejects"]],
            state["written"],
            state["read"],
        )


def convert_part(
    source_part: Part,
    records: np.ndarray,
    out_path: Path,
    settings: Mapping[str, Any],
    categorical: set[str],
    splits: SampleSplits,
    bar: Any,
    origin: Mapping[str, Any],
) -> ConvertedPart:
    """Convert the accepted `records` of one ingested part into the part at `out_path`, whose index's
    last line keeps what converting it gave, and from what (`origin`), for a rerun (kept_part)."""
    record_splits: np.ndarray | None = np.zeros(0, np.uint8)
    if len(source_part):
        record_splits = splits.of_records(source_part)  # one hash per record of the part, at once
        # train's hold-out: a sample's id is its record's
        if record_splits is None and not settings["subvolume"]:
            record_splits = splits.of_samples(source_part.texts("sample_id"))
    stats = {f: RunningStats(f in settings["per_channel"]) for f in settings["normalise"]}
    counts: dict[str, ClassCounts] = {}
    rejects: list[Reject] = []
    written = 0
    with PartWriter(out_path) as part:
        for record in records.tolist():
            arrays, meta = source_part.read(record), source_part.meta(record)
            bar.update(1)
            try:
                samples = transform(arrays, settings, categorical)
            except SampleError as e:
                rejects.append(Reject(meta["source"], meta["sample_id"], str(e)))
                continue
            out_ids = [
                f"{meta['sample_id']}#{k}" if len(samples) > 1 else meta["sample_id"]
                for k in range(len(samples))
            ]
            if record_splits is not None:
                numbers = np.full(len(samples), record_splits[record])
            else:
                numbers = splits.of_samples(out_ids)
            masks = missing_masks(arrays, settings, len(samples)) if stats else [{}] * len(samples)
            for sample, missing, out_id, number in zip(samples, masks, out_ids, numbers, strict=True):
                if splits.training in (None, number):
                    for field_name, s in stats.items():
                        s.update(sample[field_name], missing.get(field_name))
                for label in settings["labels"]:
                    if sample[label].dtype.kind in "iu":
                        counts.setdefault(label, ClassCounts()).update(sample[label], int(number))
                # Fields the transform left untouched are referenced in the ingest part, not copied.
                unchanged = {
                    n: source_part.location(record, n) for n, x in sample.items() if x is arrays.get(n)
                }
                part.append(
                    sample, {**meta, "sample_id": out_id, "parent": meta["sample_id"]}, refs=unchanged
                )
                written += 1
        converted = ConvertedPart(out_path.name, stats, counts, rejects, written, len(records))
        part.describe(converted={**origin, "part": converted.state()})
    return converted


def statistics_document(
    converted: Sequence[ConvertedPart], settings: Mapping[str, Any], splits: SampleSplits
) -> dict:
    """The statistics and class counts of every part, merged in part order (the same for any rank count)."""
    merged = {f: RunningStats(f in settings["per_channel"]) for f in settings["normalise"]}
    classes: dict[str, ClassCounts] = {}
    for item in sorted(converted, key=lambda c: c.name):
        for field_name, s in item.stats.items():
            merged[field_name].merge(s)
        for field_name, c in item.counts.items():
            classes.setdefault(field_name, ClassCounts()).merge(c)
    return {
        "statistics": {name: s.as_dict() for name, s in merged.items()},
        "statistics_from": splits.describe(),
        "class_counts": {name: c.as_dict(splits.names) for name, c in classes.items()},
    }


def settings_digest(config: Mapping[str, Any], categorical: set[str]) -> str:
    """What a converted part depends on besides its ingest part: convert's settings, the splits its
    statistics are taken over, the categorical fields, and the code's version."""
    merge = config["merge"]
    depends = [
        __version__,
        dict(config["convert"]),
        merge["splits"],
        merge.get("split_by"),
        config["train"]["validation_fraction"],
        sorted(categorical),
    ]
    return json_digest(depends)


def source_signature(ingest: IngestPaths, name: str) -> list[int]:
    """The ingest part and its manifest piece as they are on disk (a rewritten one differs)."""
    index = (ingest.parts / name).with_suffix(INDEX_SUFFIX)
    return file_signature(index, ingest.manifest_piece(chunk_name(name)))


def kept_part(ingest: IngestPaths, paths: ConvertPaths, name: str, digest: str) -> ConvertedPart | None:
    """The converted part `name` as an earlier run left it, when it was converted from this very ingest
    part under the same settings (its index's last line says); None when it must be converted (again)."""
    try:
        kept = read_about(paths.parts / name)["converted"]
        if kept["settings_digest"] == digest and kept["source"] == source_signature(ingest, name):
            return ConvertedPart.from_state(kept["part"])
    except (OSError, ValueError, KeyError):
        pass  # no such part, or one an older convert wrote: convert the part again
    return None


def counts_over_ranks(converted: list[Any], fresh: list[Any], comm: Any) -> tuple[int, int, int]:
    """Over every rank's parts: (samples read from ingest, samples written, samples read by this run: the
    parts converted now, not kept)."""
    mine = (sum(c.read for c in converted), sum(c.written for c in converted), sum(c.read for c in fresh))
    inputs, written, read_now = (sum(column) for column in zip(*comm.allgather(mine), strict=True))
    return inputs, written, read_now


@gc_paused()
def convert(config: Mapping[str, Any], ingest_dir: Path, out_dir: Path, comm: Any) -> dict[str, Any]:
    """Each rank converts a block of the ingest parts that need it, each into a converted part of the
    same name (so the parts, and the statistics, which are merged in part order, are the same for any
    rank count). A part converted before, from the same ingest part and under the same settings, is
    kept with its statistics and not read: a grown ingest (a continued design) converts its new parts."""
    rank, size = comm.Get_rank(), comm.Get_size()
    settings = config["convert"]
    ingest, paths = IngestPaths(ingest_dir), ConvertPaths(out_dir)
    names = [stem.name for stem in list_parts(ingest.parts)]
    if rank == 0:  # the parts of ingest parts that are gone, and interrupted writes
        clear_parts(paths.parts, keep=set(names))
    comm.barrier()
    categorical = categorical_fields(ingest)
    digest = settings_digest(config, categorical)
    # Which parts are kept is decided in blocks; the parts to convert are then dealt out afresh, so that
    # a grown ingest's new parts (last in name order) are shared by all ranks.
    kept = [part for name in block(names, rank, size) if (part := kept_part(ingest, paths, name, digest))]
    kept_names = {name for rank_kept in comm.allgather([p.name for p in kept]) for name in rank_kept}
    to_convert = [name for name in names if name not in kept_names]
    splits = SampleSplits(config["merge"], config["train"]["validation_fraction"])
    mine = {
        name: accepted_records(ingest.manifest_piece(chunk_name(name)), name)
        for name in block(to_convert, rank, size)
    }
    bar = progress_bar(sum(len(r) for r in mine.values()), "convert", rank, size, unit="sample")
    fresh = []
    for name, records in mine.items():
        origin = {"settings_digest": digest, "source": source_signature(ingest, name)}
        part = Part(ingest.parts / name)
        fresh.append(
            convert_part(part, records, paths.parts / name, settings, categorical, splits, bar, origin)
        )
    bar.close()
    converted = fresh + kept

    everything = comm.gather(converted, root=0)
    inputs, total_written, inputs_read = counts_over_ranks(converted, fresh, comm)
    if not inputs:
        raise Sim2dlError(f"no accepted samples in {ingest.manifest}: nothing to convert")
    summary = {
        "inputs": inputs,
        "samples": total_written,
        "inputs_read": inputs_read,
        "parts_kept": len(kept_names),
    }
    if rank == 0:
        assert everything is not None
        flat = [item for rank_items in everything for item in rank_items]
        flat_rejects = sorted(r for item in flat for r in item.rejects)
        write_csv(paths.rejects, REJECT_COLUMNS, flat_rejects)
        summary["rejected"] = len(flat_rejects)
        doc = statistics_document(flat, settings, splits)
        write_json_atomic(paths.stats, {**doc, "settings": dict(settings), **summary})
    comm.barrier()
    return summary

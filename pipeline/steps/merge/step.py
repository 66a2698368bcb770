"""merge: pack converted samples into shards of a target size, globally sorted by a key.

Plan, in parallel and in compact arrays (no Python object per record):
1. Each rank reads the indexes of its block of converted parts into one structured array, a row per
   record: its sort key and sample id as one fixed-width byte string that sorts as (key, sample id),
   where its fields lie (file number, offset, and the lengths of any varying axes), its size, and its
   home (below).
2. A sample sort: each rank sorts its rows; regularly spaced samples of every rank's keys give splitters;
   one all-to-all sends each row to the rank owning its key range, which sorts what it received. Rank r
   then holds the r-th stretch of the global order.
3. Shard numbers from exclusive scans over ranks: n = ceil(total bytes / `merge.shard_size_mb`) shards
   of equal size, a record starting a new one when the bytes before it pass a multiple of total / n (cut
   where they would be whatever the rank count), or, when the framed ingest parts are the shards already
   (below), where a part begins. A shard that began on an earlier rank is sent back to that rank, so every
   shard is written by one rank.

Splits (`merge.splits`): a record's split (a stable hash of its parent sample id, or with `merge.split_by:
file` of its file's id, `pipeline.data.splits`) is the
first byte of its key, so the same sort groups the splits, step 3 cuts each split into its own equal
shards, and they are written to shards/NAME/. One byte per record more, and one hash per record of a
rank's share.

All ranks agree on one order (sort key, then sample id) and the boundaries depend only on record sizes,
so the shards are byte-identical for any number of ranks and on every rerun. Each shard is written to a
temporary file, checksummed, indexed and renamed; a rerun keeps shards already complete for the same
plan (a digest of every shard's records) and writes the rest.

A record's home is the framed ingest part (pipeline.formats.parts) that holds it byte for byte as a shard of
this format and size would, when convert left it unchanged. Where a split's sorted records are exactly
its homes' records, whole and in order, each of those parts is hard-linked as its shard: the same bytes
as writing it record by record (a test compares them), none read or written. With merge.splits ingest
writes each split's records of a chunk to a part of its own, so the training split's parts are linked;
a split whose parts are small (a tenth of the records: under half of a shard, or of what the largest
split's parts hold) would make small shards, so its records, and those of parts that mix splits (written
before), are copied framed as they are into shards of full size, a run of adjacent ones at a time
(copy_file_range), neither decoded nor encoded (the same bytes again, tested).

Outputs: the shards with their `.idx` indexes (DALI's TFRecord index format), `provenance/` (Parquet,
a row per record: shard, record, sample id, source file; written by the ranks holding the records'
parts), and `metadata.json`, written last, about the dataset as a whole (feature spec, encoding, counts,
statistics, a checksum per shard), whose size does not grow with the records.

Memory per rank: a row of about 40 bytes (52 where records may be copied framed) plus the sample id per
record of its share, twice while the all-to-all runs, and the compact indexes of its own parts; buffers
of a shard or two. Time: the sort and the writing are split across ranks; the scans exchange a few
numbers per rank.

Growing (merge.grow): when the converted parts grew by new ones (a grown ingest) and those merged before
are unchanged, the shards written are kept and the plan above runs over the new parts alone, its shards
named for their generation and normalised with the first shards' statistics (generations.py).

Modules: plan.py (steps 1-3, a pure object per rank), write.py (shards, links, provenance), metadata.py
(metadata.json), generations.py (what a grown merge keeps); this one runs them.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from pipeline import Sim2dlError, gc_paused
from pipeline.formats.parts import list_parts, read_about, read_batches
from pipeline.formats.shards import WRITERS
from pipeline.formats.shards.base import index_path
from pipeline.formats.slabs import slab_name
from pipeline.paths import ConvertPaths, IngestPaths, MergedPaths
from pipeline.reporting.progress import progress_bar
from pipeline.runtime.mpi import all_ok
from pipeline.steps.merge.generations import (
    MergeGeneration,
    MergeHistory,
    kept_history,
    part_signatures,
    settings_digest,
    write_history,
)
from pipeline.steps.merge.metadata import metadata
from pipeline.steps.merge.plan import Grown, MergePlan, plan_merge
from pipeline.steps.merge.write import (
    Encoding,
    _key_value,
    copy_framed_shard,
    extents,
    link_shard,
    placements,
    prepare_shard_dir,
    provenance_generation,
    write_provenance,
    write_shard,
)
from pipeline.storage.fsutil import file_checksum, write_json_atomic


@gc_paused()  # the plan parses every part's index into many small acyclic objects (see gc_paused)
def merge(
    config: Mapping[str, Any], ingest_dir: Path, convert_dir: Path, out_dir: Path, comm: Any
) -> dict[str, Any]:
    """Plan (collectively), then write this rank's shards, the provenance, and (rank 0) metadata.json:
    of the parts an earlier merge has not (its generations kept), or else of every part."""
    paths, parts_dir = MergedPaths(out_dir), ConvertPaths(convert_dir).parts
    names = [stem.name for stem in list_parts(parts_dir)]
    history, why = kept_history(config, paths, parts_dir) if comm.Get_rank() == 0 else (None, "")
    history, why = comm.bcast((history, why), root=0)
    if history is not None:
        new = [name for name in names if name not in history.parts]
        grown = Grown(
            len(history.generations), history.statistics, {**history.statistics_from, "generation": 0}
        )
        if not any(read_about(parts_dir / name)["records"] for name in new):  # nothing to add
            return write_merge(config, None, history, new, ingest_dir, convert_dir, out_dir, comm)
        plan = plan_merge(config, convert_dir, comm, new, grown)
        if plan.spec == history.spec:
            return write_merge(config, plan, history, new, ingest_dir, convert_dir, out_dir, comm)
        why = "the new parts' fields differ in dtype or shape"
    plan = plan_merge(config, convert_dir, comm, names)
    return {**write_merge(config, plan, None, names, ingest_dir, convert_dir, out_dir, comm), "afresh": why}


def prepare_output(
    plan: MergePlan | None, history: MergeHistory | None, paths: MergedPaths, comm: Any
) -> None:
    """Rank 0 clears what neither the plan nor the kept generations keep of an earlier run, and the
    provenance of generations not kept; all ranks wait."""
    error = None
    if comm.Get_rank() == 0:
        kept = history.files() if history else set()
        try:
            if history is None:  # what it says no longer holds, whatever this run leaves
                paths.generations.unlink(missing_ok=True)
            if plan is not None:
                slabs = plan.settings["slabs"]
                names = {slab_name(n, k, slabs) for n in plan.names for k in range(slabs)}
                prepare_shard_dir(paths, plan.digest, names, kept)
            paths.provenance.mkdir(parents=True, exist_ok=True)
            kept_generations = len(history.generations) if history else 0
            for file in paths.provenance.iterdir():
                if provenance_generation(file.name) >= kept_generations:
                    file.unlink()
        except OSError as e:
            error = Sim2dlError(f"cannot prepare {paths.shards}: {e}")
    all_ok(comm, error)


def write_my_shards(
    plan: MergePlan, files_of: Mapping[int, list[str]], shards_dir: Path, rank: int, size: int
) -> tuple[dict[int, list[str]], dict[str, int]]:
    """Write this rank's shards (or keep those a rerun finds complete): each shard's file checksums, and
    how many shards were made each way: reused (complete from a rerun), linked (a framed ingest part as it
    is), copied (records framed by ingest, copied as they are) or encoded (record by record)."""
    mine, names = plan.mine, plan.names
    reused = [
        i
        for i in mine
        if all((shards_dir / f).exists() and index_path(shards_dir / f).exists() for f in files_of[i])
    ]
    checksums = {i: [file_checksum(shards_dir / f) for f in files_of[i]] for i in reused}
    to_write = [i for i in mine if i not in checksums]
    framed = [i for i in to_write if len(plan.shard_rows(i)) and (plan.shard_rows(i)["home"] >= 0).all()]
    copyable = set(framed)
    encoded = [i for i in to_write if i not in copyable]
    linked = sum(plan.is_linked(i) for i in framed)
    ways = {"reused": len(reused), "linked": linked, "copied": len(framed) - linked, "encoded": len(encoded)}
    with progress_bar(len(to_write), "merge", rank, size, unit="shard") as bar:
        for i in framed:
            rows, shard = plan.shard_rows(i), shards_dir / names[i]
            if plan.is_linked(i):  # the shard is a framed part already
                checksums[i] = [link_shard(Path(plan.files.paths[rows["home"][0]]), shard, rows)]
            else:
                checksums[i] = [copy_framed_shard(shard, rows, plan.files.paths)]
            bar.update(1)
        settings, spec, stats = plan.settings, plan.spec, plan.stats_doc["statistics"]
        shard_rows = [plan.shard_rows(i) for i in encoded]  # views
        home_files = [Path(p) for p in plan.files.paths]
        batches = read_batches(home_files, len(shard_rows), lambda k: extents(shard_rows[k], spec))
        encoding = Encoding(spec, plan.writer_class, settings["compression"], stats, settings["slabs"])
        for i, these, located in zip(encoded, shard_rows, batches, strict=True):
            checksums[i] = write_shard(shards_dir / names[i], these, plan.widths[1], located, encoding)
            bar.update(1)
    return checksums, ways


def shard_entries(
    plan: MergePlan, files_of: Mapping[int, list[str]], checksums: Mapping[int, list[str]], shards_dir: Path
) -> list[dict[str, Any]]:
    """metadata.json's entry of each file of this rank's shards."""
    settings, widths, split_names = plan.settings, plan.widths, plan.split_names
    prefix = 1 if split_names else 0
    return [
        {
            "file": file,
            "index": index_path(Path(file)).as_posix(),
            "records": len(plan.shard_rows(i)),
            "bytes": (shards_dir / file).stat().st_size,
            "checksum": checksum,
            **({"split": split_names[plan.shard_splits[i]]} if split_names else {}),
            **({"slab": k} if settings["slabs"] > 1 else {}),
            "first_key": _key_value(plan.shard_rows(i)[0], settings["sort_by"], widths, prefix),
            "last_key": _key_value(plan.shard_rows(i)[-1], settings["sort_by"], widths, prefix),
        }
        for i in plan.mine
        for k, (file, checksum) in enumerate(zip(files_of[i], checksums[i], strict=True))
    ]


def write_generation(
    plan: MergePlan, paths: MergedPaths, generation: int, shard_offset: int, comm: Any
) -> Added:
    """Carry out the plan: this rank's shards (kept when a rerun finds them complete for the same plan),
    and where each record went (provenance, its shards numbered after the `shard_offset` kept ones)."""
    rank, size = comm.Get_rank(), comm.Get_size()
    slabs = plan.settings["slabs"]
    files_of = {i: [slab_name(plan.names[i], k, slabs) for k in range(slabs)] for i in plan.mine}
    checksums, ways = write_my_shards(plan, files_of, paths.shards, rank, size)
    results = shard_entries(plan, files_of, checksums, paths.shards)
    held = [placements(plan.rows, plan.numbers + shard_offset, plan.my_shards)]
    my_stems, first_part, n_parts = plan.my_stems, plan.first_part, len(plan.part_names)
    added = Added([], {}, plan.total, plan.n_shards, plan.digest, plan.spec, plan.stats_doc)
    del plan  # the rows: provenance then holds only where each record went
    write_provenance(comm, held, my_stems, first_part, n_parts, paths.provenance, generation)
    gathered = comm.gather(results, root=0)
    added.entries = [r for rank_results in gathered for r in rank_results] if gathered is not None else []
    all_ways = comm.allgather(ways)
    added.ways = {way: sum(w[way] for w in all_ways) for way in ways}
    return added


@dataclass
class Added:
    """What one merge's plan wrote: its shard files' metadata entries (on rank 0), how many shards were
    made each way, its records and shards, its plan's digest, spec and statistics."""

    entries: list[dict[str, Any]]
    ways: dict[str, int]
    records: int
    n_shards: int
    digest: str
    spec: dict[str, Any]
    stats_doc: dict[str, Any]


def write_metadata(
    settings: Mapping[str, Any],
    history: MergeHistory,
    ingest_dir: Path,
    convert_dir: Path,
    paths: MergedPaths,
) -> None:
    """metadata.json of every generation in history, with convert's statistics document (its statistics
    those of the first generation) and ingest's summary; then the generations file."""
    converted = json.loads(ConvertPaths(convert_dir).stats.read_text())
    statistics_from = {
        **history.statistics_from,
        **({"generation": 0} if len(history.generations) > 1 else {}),
    }
    stats_doc = {**converted, "statistics": history.statistics, "statistics_from": statistics_from}
    ingested = json.loads(IngestPaths(ingest_dir).summary.read_text())
    doc = metadata(settings, WRITERS[settings["format"]], history, stats_doc, ingested)
    write_json_atomic(paths.metadata, doc)
    write_history(paths.generations, history)


def write_merge(
    config: Mapping[str, Any],
    plan: MergePlan | None,
    history: MergeHistory | None,
    part_names: list[str],
    ingest_dir: Path,
    convert_dir: Path,
    out_dir: Path,
    comm: Any,
) -> dict[str, Any]:
    """Write the plan's shards (None: the kept generations' new parts hold no records) after those of
    the kept generations, then on rank 0, last, metadata.json of them all and the generations."""
    paths = MergedPaths(out_dir)
    prepare_output(plan, history, paths, comm)
    number = len(history.generations) if history else 0
    if plan is not None:
        added = write_generation(plan, paths, number, history.n_shards if history else 0, comm)
    else:
        assert history is not None
        ways = {"reused": 0, "linked": 0, "copied": 0, "encoded": 0}
        added = Added([], ways, 0, 0, "", history.spec, {})
    if history is None:
        stats_doc = added.stats_doc
        history = MergeHistory(
            settings_digest(config),
            added.spec,
            stats_doc["statistics"],
            stats_doc.get("statistics_from", {"split": None}),
        )
    ways = dict(added.ways)
    summary = {
        "records": history.records + added.records,
        "shards": history.n_shards + added.n_shards,
        "reused_shards": ways.pop("reused"),
        "shards_made": ways,
        "slabs": config["merge"]["slabs"],
        "kept_shards": history.n_shards,
        "generations": number + bool(part_names),
    }
    if comm.Get_rank() == 0:  # with nothing new, metadata.json is written again (Snakemake removed it)
        if part_names:
            signatures = part_signatures(ConvertPaths(convert_dir).parts, part_names)
            history.generations.append(
                MergeGeneration(
                    number, signatures, added.entries, added.n_shards, added.records, added.digest
                )
            )
        write_metadata(config["merge"], history, ingest_dir, convert_dir, paths)
    comm.barrier()
    return summary

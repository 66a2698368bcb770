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
   (below), where a part begins. A shard that began on an earlier rank is sent back to that rank, so every shard is
   written by one rank.

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

Modules: plan.py (steps 1-3, a pure object per rank), write.py (shards, links, provenance), metadata.py
(metadata.json); this one runs them.
"""

from __future__ import annotations

import json
import shutil
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from pipeline import Sim2dlError, gc_paused
from pipeline.formats.parts import read_batches
from pipeline.formats.shards.base import index_path
from pipeline.formats.slabs import slab_name
from pipeline.paths import IngestPaths, MergedPaths
from pipeline.reporting.progress import progress_bar
from pipeline.runtime.mpi import all_ok
from pipeline.steps.merge.metadata import metadata
from pipeline.steps.merge.plan import (
    MergePlan,
    plan_merge,
)
from pipeline.steps.merge.write import (
    _key_value,
    copy_framed_shard,
    extents,
    link_shard,
    placements,
    prepare_shard_dir,
    write_provenance,
    write_shard,
)
from pipeline.storage.fsutil import file_checksum, write_json_atomic


@gc_paused()  # the plan parses every part's index into many small acyclic objects (see gc_paused)
def merge(config: Mapping[str, Any], ingest_dir: Path, convert_dir: Path, out_dir: Path, comm: Any) -> dict[str, Any]:
    """Plan (collectively), then write this rank's shards, the provenance, and (rank 0) metadata.json."""
    return write_merge(plan_merge(config, convert_dir, comm), ingest_dir, out_dir, comm)


def prepare_output(plan: MergePlan, paths: MergedPaths, comm: Any) -> None:
    """Rank 0 clears what the plan will not keep of an earlier run, and the provenance; all ranks wait."""
    error = None
    if comm.Get_rank() == 0:
        slabs, names = plan.settings["slabs"], plan.names
        try:
            prepare_shard_dir(paths, plan.digest, {slab_name(n, k, slabs) for n in names for k in range(slabs)})
            shutil.rmtree(paths.provenance, ignore_errors=True)
            paths.provenance.mkdir(parents=True)
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
    reused = [i for i in mine if all((shards_dir / f).exists() and index_path(shards_dir / f).exists()
                                     for f in files_of[i])]  # fmt: skip
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
        for i, these, located in zip(encoded, shard_rows, batches, strict=True):
            checksums[i] = write_shard(shards_dir / names[i], these, plan.widths[1], located, spec, plan.writer_class,
                                       settings["compression"], stats, settings["slabs"])  # fmt: skip
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


def write_merge(plan: MergePlan, ingest_dir: Path, out_dir: Path, comm: Any) -> dict[str, Any]:
    """Carry out the plan: this rank's shards (kept when a rerun finds them complete for the same plan),
    where each record went (provenance), and on rank 0, last, metadata.json."""
    rank, size = comm.Get_rank(), comm.Get_size()
    paths = MergedPaths(out_dir)
    slabs = plan.settings["slabs"]
    files_of = {i: [slab_name(plan.names[i], k, slabs) for k in range(slabs)] for i in plan.mine}
    prepare_output(plan, paths, comm)
    checksums, ways = write_my_shards(plan, files_of, paths.shards, rank, size)
    results = shard_entries(plan, files_of, checksums, paths.shards)
    held = [placements(plan.rows, plan.numbers, plan.my_shards)]
    settings, writer_class, spec, split_names = plan.settings, plan.writer_class, plan.spec, plan.split_names
    total, n_shards = plan.total, plan.n_shards
    my_stems, first_part, n_parts, stats_doc, digest = (plan.my_stems, plan.first_part, len(plan.part_names),
                                                        plan.stats_doc, plan.digest)  # fmt: skip
    del plan  # the rows: provenance then holds only where each record went
    write_provenance(comm, held, my_stems, first_part, n_parts, paths.provenance)
    gathered = comm.gather(results, root=0)
    all_ways = comm.allgather(ways)
    made = {way: sum(w[way] for w in all_ways) for way in ways}
    summary = {"records": total, "shards": n_shards, "reused_shards": made.pop("reused"), "shards_made": made,
               "slabs": slabs}  # fmt: skip
    if rank == 0:
        assert gathered is not None
        shard_info = [r for rank_results in gathered for r in rank_results]
        ingested = json.loads(IngestPaths(ingest_dir).summary.read_text())
        write_json_atomic(
            paths.metadata,
            metadata(settings, writer_class, spec, stats_doc, shard_info, total, ingested, digest, split_names),
        )
    comm.barrier()
    return summary

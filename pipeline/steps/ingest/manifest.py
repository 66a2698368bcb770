"""ingest's manifest and its conclusion: a Parquet piece per part (one row per input file or sample),
duplicate sample ids found across ranks by hashes (an all-to-all of 24 bytes per record), and the summary with
the reject threshold; over a grown listing, the kept generations' pieces read back (`read_kept`) so that new
ids are checked against theirs and the counts and rejects cover every generation. Memory: one part's rows, and
a hash per record of a rank's share (with a kept generation, also each kept record's name in a bytes array);
time: linear in the records."""

from __future__ import annotations

import os
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow.parquet as pq
import xxhash

from pipeline import CollectiveError, Sim2dlError
from pipeline.data.tables import MANIFEST_SCHEMA, REJECT_COLUMNS, Reject, write_csv, write_parquet
from pipeline.paths import IngestPaths
from pipeline.runtime.mpi import block, exchange, owner_ranks
from pipeline.steps.ingest.generations import Generation
from pipeline.steps.ingest.listing import Listing, paths_of
from pipeline.storage.fsutil import write_json_atomic


class ManifestPiece:
    """The manifest rows of one part (a run of consecutive input files), written when the part is."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self.columns: dict[str, list[Any]] = {name: [] for name in MANIFEST_SCHEMA.names}

    def add(self, **row: Any) -> None:
        for name, values in self.columns.items():
            values.append(row.get(name))

    def write(self) -> None:
        write_parquet(self.path, self.columns, MANIFEST_SCHEMA)


def id_hash(sample_id: str) -> tuple[int, int]:
    """A sample id's 128-bit hash as (high, low) 64-bit halves: what duplicates are found by."""
    digest = xxhash.xxh3_128_intdigest(sample_id.encode())
    return digest >> 64, digest & 0xFFFF_FFFF_FFFF_FFFF


HASHED = np.dtype([("high", "<u8"), ("low", "<u8"), ("index", "<i8")])


def duplicates(comm: Any, hashed: np.ndarray, starts: np.ndarray) -> np.ndarray:
    """(index, first index) of every accepted record whose sample id an earlier input already has, for
    the records this rank holds. Ids are compared by a 128-bit hash (xxh3: a chance collision among ten
    million ids is below 1e-24). Each hash goes to the rank owning its value, which finds the copies;
    each copy is reported back to the rank holding it. Two all-to-alls of a few bytes per record."""
    size = comm.Get_size()
    received = exchange(comm, hashed, (hashed["low"] % size).astype(np.int64))
    received.sort(order=["high", "low", "index"])
    same = (received["high"][1:] == received["high"][:-1]) & (received["low"][1:] == received["low"][:-1])
    later = np.flatnonzero(same) + 1
    # the first of each run of equal hashes: the largest run start at or before each position
    run_start = np.maximum.accumulate(np.where(np.concatenate([[True], ~same]), np.arange(len(received)), 0))
    found = np.empty(len(later), [("index", "<i8"), ("first", "<i8")])
    found["index"] = received["index"][later]
    found["first"] = received["index"][run_start[later]]
    return exchange(comm, found, owner_ranks(starts, found["index"]))


@dataclass
class RankRecords:
    """One rank's block of a generation's numbers (or of the kept generations' manifest pieces), numbers
    [starts[rank], starts[rank + 1]): the accepted records' id hashes with their numbers, what each number
    is called in messages (the kept ones as the ingest that made them named them, in bytes), the
    rejects, and (numbers, accepted, rejected)."""

    hashed: np.ndarray
    names: np.ndarray | Sequence[str]
    starts: np.ndarray
    rejects: list[Reject]
    counts: tuple[int, int, int]

    @staticmethod
    def none(size: int) -> RankRecords:
        return RankRecords(np.empty(0, HASHED), np.empty(0, "S1"), np.zeros(size, np.int64), [], (0, 0, 0))


def read_kept(
    paths: IngestPaths, generations: Sequence[Generation], rank: int, size: int, samples: bool
) -> RankRecords:
    """This rank's block of the kept generations' manifest pieces (a row per number, in order): an
    ingest that grew checks its new ids against these, and counts and lists them as its own. `samples`:
    numbers are samples, named 'PATH (sample I)' as SampleNames names them."""
    pieces = [(g, k) for g in generations for k in range(g.parts)]
    end = generations[-1].stop if generations else 0
    firsts = [block(pieces, r, size) for r in range(size)]
    starts = np.array(
        [b[0][0].first + b[0][1] * b[0][0].per_part if len(b) else end for b in firsts], np.int64
    )
    starts = np.minimum.accumulate(starts[::-1])[::-1]  # a rank without pieces starts where the next does
    hashed, names, rejects = [], [], []
    for generation, k in firsts[rank]:
        table = pq.read_table(
            paths.manifest_piece(generation.stem(paths.parts, k).name),
            columns=["path", "sample_id", "status", "reason", "index"],
        ).to_pydict()
        first = generation.first + k * generation.per_part
        rows = [row for row, status in enumerate(table["status"]) if status == "accepted"]
        piece = np.empty(len(rows), HASHED)
        for j, row in enumerate(rows):
            piece[j] = (*id_hash(table["sample_id"][row]), first + row)
        hashed.append(piece)
        called = (
            f"{p} (sample {i or 0})" if samples else p
            for p, i in zip(table["path"], table["index"], strict=True)
        )
        names.append(np.array([os.fsencode(name) for name in called], "S"))
        rejects += [
            Reject(table["path"][row], table["sample_id"][row] or "", table["reason"][row])
            for row, status in enumerate(table["status"])
            if status != "accepted"
        ]
    together = np.concatenate(hashed) if hashed else np.empty(0, HASHED)
    width = max((n.dtype.itemsize for n in names), default=1)
    named = np.concatenate([n.astype(f"S{width}") for n in names]) if names else np.empty(0, "S1")
    return RankRecords(
        together, named, starts, rejects, (len(named), len(together), len(named) - len(together))
    )


def conclude(
    comm: Any,
    paths: IngestPaths,
    new: RankRecords,
    settings: Mapping[str, Any],
    generation: Generation,
    extra: Mapping[str, Any],
    kept: RankRecords | None = None,
) -> dict[str, Any]:
    """After every rank has written its parts (`new`: this rank's of this generation): duplicate ids are
    rejected (the first in input order keeps the id, an earlier generation's included: `kept`), the
    rejects list and summary.json are written, and the counts returned. Numbers are files, or samples
    with `extra['samples']` set."""
    kept = kept or RankRecords.none(comm.Get_size())
    starts, rejects = new.starts, list(new.rejects)
    found = duplicates(comm, np.concatenate([kept.hashed, new.hashed]), starts)
    earlier = found["first"] < generation.first
    firsts = np.empty(len(found), object)
    firsts[earlier] = paths_of(comm, found["first"][earlier], kept.starts, Listing("", kept.names))
    firsts[~earlier] = paths_of(comm, found["first"][~earlier], starts, new.names)
    rejects += kept.rejects + mark_duplicates(paths, found, list(firsts), generation)
    held, accepted, rejected = (c + k for c, k in zip(new.counts, kept.counts, strict=True))
    totals = np.array(comm.allgather((held, accepted - len(found), rejected + len(found)))).sum(axis=0)
    gathered = comm.gather(rejects, root=0)
    summary: dict[str, Any] = {
        "inputs": int(totals[0]),
        "accepted": int(totals[1]),
        "rejected": int(totals[2]),
    }
    summary.update(extra)
    # what this run read (0 where nothing was new; files or samples); `extra` has parts and generations
    summary["inputs_read"] = generation.stop - generation.first
    if "samples" in extra:
        summary["samples"] = int(totals[0])
        summary["inputs"] = extra["inputs"]
    if comm.Get_rank() == 0:
        assert gathered is not None
        summary["error"] = finish(paths, gathered, summary, settings["max_reject_fraction"], generation)
    summary = comm.bcast(summary, root=0)
    if summary["error"]:  # every rank knows it: printed once, and no rank aborts the others
        raise CollectiveError(summary["error"], 0) if comm.Get_size() > 1 else Sim2dlError(summary["error"])
    return summary


def mark_duplicates(
    paths: IngestPaths, found: np.ndarray, firsts: Sequence[str], generation: Generation
) -> list[Reject]:
    """Mark the duplicates this rank holds (all of this generation: an earlier one's were marked then) as
    rejected in their parts' manifests (rewritten atomically); returns their rejects rows."""
    rejects = []
    by_piece: dict[int, list[tuple[int, str]]] = {}
    for index, first_path in zip(found["index"].tolist(), firsts, strict=True):
        number = index - generation.first
        by_piece.setdefault(number // generation.per_part, []).append(
            (number % generation.per_part, first_path)
        )
    for number, rows in sorted(by_piece.items()):
        path = paths.manifest_piece(generation.stem(paths.parts, number).name)
        columns = pq.read_table(path).to_pydict()
        for row, first_path in rows:
            sample_id = columns["sample_id"][row]
            reason = f"duplicate sample id '{sample_id}' (first seen in {first_path})"
            columns["status"][row], columns["reason"][row] = "rejected", reason
            rejects.append(Reject(columns["path"][row], sample_id, reason))
        write_parquet(path, columns, MANIFEST_SCHEMA)
    return rejects


def size_or_zero(path: Path) -> int:
    """A file's size, 0 where it cannot be read (the summary's byte counts)."""
    try:
        return os.stat(path).st_size
    except OSError:
        return 0


def finish(
    paths: IngestPaths,
    gathered: Sequence[Sequence[Reject]],
    counts: Mapping[str, int],
    max_reject_fraction: float,
    generation: Generation,
) -> str | None:
    """Rank 0: the rejects list, then summary.json (last: it marks the step complete), and the error if
    too many files were rejected."""
    rejects = sorted((row for rows in gathered for row in rows), key=lambda r: r[0])
    write_csv(paths.rejects, REJECT_COLUMNS, rejects)
    found, what = (counts["samples"], "samples") if "samples" in counts else (counts["inputs"], "input files")
    fraction = counts["rejected"] / max(found, 1)
    if fraction > max_reject_fraction:
        shown = "\n".join(
            f"  {r.path} {r.sample_id}: {r.reason}" if r.sample_id else f"  {r.path}: {r.reason}"
            for r in rejects[:5]
        )
        return (
            f"{counts['rejected']} of {found} {what} rejected ({fraction:.1%}), more than "
            f"ingest.max_reject_fraction={max_reject_fraction:g}; see {paths.rejects}:\n{shown}"
        )
    per_part = "samples_per_part" if "samples" in counts else "files_per_part"
    write_json_atomic(paths.summary, {**counts, per_part: generation.per_part})  # parts: every generation's
    return None

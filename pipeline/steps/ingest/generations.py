"""ingest's generations: a rerun whose listing extends the last ingest's keeps what that ingest did.

An adaptive design's continued rounds (a larger simulate.adaptive.budget), or any ensemble that grows,
lists the same inputs first, in the same order, and new ones after them. Ingest then reads only the new
inputs: they are generation g, after the generations kept, with parts of their own
(`part-gGGGG-K-of-N`; generation 0's are `part-K-of-N`, as an ingest that never grew names them), their
manifest pieces beside the earlier ones', their duplicate ids found against every earlier accepted id, and
one rejects list and summary over all generations. `generations.json` (written last, after the summary)
records each generation's inputs, its parts and a digest of the listing up to its end; it survives
Snakemake removing the step's outputs before a rerun, which is how a rerun knows what it may keep.

A generation is kept when the settings that shape ingest's output (source, ingest's checks, merge's
layout and splits, convert's primary field) are the same and the new listing begins with the bytes of
the listing up to that generation's end (a streamed xxh3 digest). Anything else (an input removed,
renamed or changed order, other settings, a part or manifest piece missing) starts afresh from the first
generation that no longer holds. Parts and pieces of generations not kept (an interrupted one's among
them) are removed before any is written.

Memory: a few numbers per generation, and on the reading ranks one manifest piece at a time while the
kept records' id hashes (24 bytes per record) are gathered for the duplicate check; time: one pass over
the kept listing's bytes (rank 0) and over the kept manifest pieces (split across ranks), no input file
read again.
"""

from __future__ import annotations

import json
import math
import os
import time
from collections.abc import Mapping, Sequence
from dataclasses import asdict, dataclass, replace
from pathlib import Path
from typing import Any

import xxhash

from pipeline import json_digest
from pipeline.config import primary_field
from pipeline.formats.parts import INDEX_SUFFIX, chunk_name, list_parts, part_stem
from pipeline.paths import IngestPaths
from pipeline.storage.fsutil import remove_stale_temporaries, write_json_atomic

RUNTIME_KEYS = ("prefetch", "read_threads", "batch_mb", "direct_io")  # how ingest reads, not what it makes
READ_BYTES = 1 << 22


@dataclass(frozen=True)
class Generation:
    """What one ingest added: numbers [first, stop) (input files, or samples where ingest reads samples),
    in `parts` parts of `per_part` numbers each, from the listing's files [first_file, files)."""

    number: int
    first: int
    stop: int
    first_file: int
    files: int
    per_part: int
    parts: int
    started: int  # when its ingest began (ns since the epoch): an input changed since is read again
    listing_bytes: int = 0  # inputs.txt's bytes up to this generation's last input (with_listing)
    listing_digest: str = ""  # their xxh3-128, hex

    def stem(self, directory: Path, chunk: int) -> Path:
        return part_stem(directory, chunk, self.parts, self.number)

    def chunk_names(self, directory: Path) -> list[str]:
        return [self.stem(directory, k).name for k in range(self.parts)]


def settings_digest(config: Mapping[str, Any], root: Path) -> str:
    """What ingest's parts and manifest depend on, as a digest: a change starts ingest afresh."""
    ingest = {k: v for k, v in config["ingest"].items() if k not in RUNTIME_KEYS}
    shaped = {
        "root": str(root),
        "source": config["source"],
        "ingest": ingest,
        "merge": config["merge"],
        "primary": primary_field(config["convert"]),
    }
    return json_digest(shaped)


def read_generations(paths: IngestPaths, digest: str) -> tuple[list[Generation], dict[str, Any]]:
    """The generations an earlier ingest with the same settings completed, and its fields' description;
    none when there is no record, it is unreadable, or the settings differ."""
    try:
        recorded = json.loads(paths.generations.read_text())
        if recorded["settings"] != digest:
            return [], {}
        return [Generation(**g) for g in recorded["generations"]], dict(recorded.get("described", {}))
    except (OSError, ValueError, KeyError, TypeError):
        return [], {}


def hashed_bytes(f: Any, digest: Any, limit: float) -> int:
    """Feed `digest` from `f` until `limit` bytes (or the end); returns the bytes read."""
    read = 0
    while read < limit and (data := f.read(int(min(READ_BYTES, limit - read)))):
        digest.update(data)
        read += len(data)
    return read


def listing_prefixes(listing: Path, generations: Sequence[Generation]) -> int:
    """How many of `generations` (in order) the listing still begins with: their listing's bytes, read
    once and hashed as a stream, compared at each generation's end."""
    kept = read = 0
    digest = xxhash.xxh3_128()
    try:
        with open(listing, "rb") as f:
            for generation in generations:
                read += hashed_bytes(f, digest, generation.listing_bytes - read)
                if read != generation.listing_bytes or digest.hexdigest() != generation.listing_digest:
                    return kept
                kept += 1
    except OSError:
        return kept
    return kept


def candidates(paths: IngestPaths, digest: str, inputs: int) -> tuple[list[Generation], dict[str, Any]]:
    """Rank 0, once the new listing is written: the earlier generations that may be kept (with the same
    settings, complete, whose listing the new one begins with, within `inputs`), and their description."""
    generations, described = read_generations(paths, digest)
    generations = [g for g in generations[: listing_prefixes(paths.inputs, generations)] if g.files <= inputs]
    indexed = {chunk_of(stem.name) for stem in list_parts(paths.parts)} if paths.parts.is_dir() else set()
    for k, generation in enumerate(generations):
        names = generation.chunk_names(paths.parts)
        if not all(name in indexed and paths.manifest_piece(name).exists() for name in names):
            return generations[:k], described
    return generations, described


def last_changes(generations: Sequence[Generation], names: Sequence[str], held: int) -> list[int]:
    """Per generation, the latest change (ctime or mtime, ns) of its inputs among `names` (this rank's
    stretch of the listing, numbered from `held`); 0 where it has none; a file gone counts as changed now."""
    latest = [0] * len(generations)
    for k, generation in enumerate(generations):
        for number in range(max(generation.first_file, held), min(generation.files, held + len(names))):
            try:
                status = os.stat(names[number - held])
                latest[k] = max(latest[k], status.st_ctime_ns, status.st_mtime_ns)
            except OSError:
                latest[k] = max(latest[k], time.time_ns())
    return latest


def unchanged(generations: Sequence[Generation], latest: Sequence[int]) -> list[Generation]:
    """The generations up to the first whose inputs changed after it began reading them."""
    for k, (generation, changed) in enumerate(zip(generations, latest, strict=True)):
        if changed >= generation.started:
            return list(generations[:k])
    return list(generations)


def clear_others(paths: IngestPaths, kept: Sequence[Generation]) -> None:
    """Rank 0: remove every part and manifest piece that is not of a kept generation (and the record of
    the generations when none is kept)."""
    names = {name for g in kept for name in g.chunk_names(paths.parts)}
    paths.parts.mkdir(parents=True, exist_ok=True)
    paths.manifest.mkdir(parents=True, exist_ok=True)
    for stem in list_parts(paths.parts):
        if chunk_of(stem.name) not in names:
            stem.with_suffix(INDEX_SUFFIX).unlink()
            stem.with_suffix(".bin").unlink(missing_ok=True)
    remove_stale_temporaries(paths.parts)
    for piece in paths.manifest.glob("*.parquet"):
        if piece.stem not in names:
            piece.unlink()
    if not kept:
        paths.generations.unlink(missing_ok=True)


def chunk_of(part_name: str) -> str | None:
    try:
        return chunk_name(part_name)
    except ValueError:
        return None


def with_listing(generation: Generation, listing: Path) -> Generation:
    """The generation (its inputs the listing's last) with the length and digest of the whole listing."""
    digest = xxhash.xxh3_128()
    with open(listing, "rb") as f:
        read = hashed_bytes(f, digest, math.inf)
    return replace(generation, listing_bytes=read, listing_digest=digest.hexdigest())


def record_generations(
    paths: IngestPaths,
    digest: str,
    kept: Sequence[Generation],
    generation: Generation,
    described: Mapping[str, Any],
) -> None:
    """Rank 0, written last: the kept generations and this run's (where it read anything)."""
    grown = [with_listing(generation, paths.inputs)] if generation.parts else []
    write_json_atomic(
        paths.generations,
        {
            "settings": digest,
            "generations": [asdict(g) for g in [*kept, *grown]],
            "described": dict(described),
        },
    )


def grown_counts(kept: Sequence[Generation], generation: Generation) -> dict[str, int]:
    """The summary's parts and generations, over the kept generations and this run's."""
    return {
        "parts": sum(g.parts for g in kept) + generation.parts,
        "generations": len(kept) + (generation.parts > 0),
    }

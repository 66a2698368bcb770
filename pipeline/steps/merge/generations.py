"""merge's generations: a merge whose converted parts grew (a continued design's new runs, ingested and
converted as parts of their own) keeps the shards it wrote and adds shards of the new parts alone.

The new shards are normalised with the statistics the first generation's shards were written with
(metadata.json's `statistics`, `statistics_from.generation`), so the kept shards stay right as they are
and a model warm-started from the last round sees its inputs scaled as before. For an adaptive design
that is the better estimate too: the first generation is the space-filling initial design, while later
runs crowd where the acquisition looked. Each generation's shards are sorted within themselves (by
merge.sort_by); the order does not run across generations, which training, shuffling, does not need.

The shards are kept when merge.grow holds, the settings are the same (merge's, and convert's features,
labels and normalised fields), every part the kept generations merged is there unchanged (a stat of its
index each: convert writes a part again under a new inode), and every kept shard file is there with its
size. Otherwise merge starts afresh: generation 0, over every part, with convert's statistics.

`generations.json` (MergedPaths.generations, written last; not a declared output, so it outlives
Snakemake's removal of metadata.json before a rerun) holds what a next generation needs: the frozen
statistics, the spec, and per generation its parts' signatures and its shards' metadata entries.

Memory: a few numbers per part and per shard file, on rank 0. Time: a stat per kept part and shard file.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import xxhash

from pipeline import __version__, json_digest
from pipeline.formats.parts import INDEX_SUFFIX
from pipeline.paths import MergedPaths
from pipeline.storage.fsutil import file_signature, write_json_atomic

LAYOUT = 1  # of generations.json: a file of another layout is not read (the merge starts afresh)


@dataclass
class MergeGeneration:
    """What one merge added: the converted parts it read (name -> signature), its shard files'
    metadata entries, and the digest of its plan."""

    number: int
    parts: dict[str, list[int]]
    shards: list[dict[str, Any]]
    n_shards: int
    records: int
    digest: str


@dataclass
class MergeHistory:
    """The generations merged so far, and what every later one must share with them."""

    settings_digest: str
    spec: dict[str, Any]
    statistics: dict[str, Any]
    statistics_from: dict[str, Any]
    generations: list[MergeGeneration] = field(default_factory=list)
    layout: int = LAYOUT

    @property
    def parts(self) -> set[str]:
        return {name for g in self.generations for name in g.parts}

    @property
    def shards(self) -> list[dict[str, Any]]:
        return [entry for g in self.generations for entry in g.shards]

    @property
    def n_shards(self) -> int:
        return sum(g.n_shards for g in self.generations)

    @property
    def records(self) -> int:
        return sum(g.records for g in self.generations)

    @property
    def digest(self) -> str:
        """Of every generation's plan: what metadata.json's plan_digest says of the whole."""
        if len(self.generations) == 1:
            return self.generations[0].digest
        return xxhash.xxh3_128("".join(g.digest for g in self.generations).encode()).hexdigest()

    def files(self) -> set[str]:
        """The kept shard files and their indexes, by their names below shards/."""
        return {name for entry in self.shards for name in (entry["file"], entry["index"])}

    def summary(self) -> list[dict[str, int]]:
        """metadata.json's `generations`: what each added."""
        return [
            {"number": g.number, "parts": len(g.parts), "shards": g.n_shards, "records": g.records}
            for g in self.generations
        ]


def settings_digest(config: Mapping[str, Any]) -> str:
    """What every generation's shards must share: merge's settings but grow, the fields and the code."""
    merge = {k: v for k, v in config["merge"].items() if k != "grow"}
    convert = {k: config["convert"].get(k) for k in ("features", "labels", "normalise", "per_channel")}
    return json_digest([__version__, merge, convert])


def part_signatures(parts_dir: Path, names: Sequence[str]) -> dict[str, list[int]]:
    return {name: file_signature((parts_dir / name).with_suffix(INDEX_SUFFIX)) for name in names}


def read_history(path: Path) -> MergeHistory | None:
    try:
        doc = json.loads(path.read_text())
        if doc.get("layout") != LAYOUT:
            return None
        generations = [MergeGeneration(**g) for g in doc.pop("generations")]
        return MergeHistory(**doc, generations=generations)
    except (OSError, ValueError, TypeError, KeyError):
        return None


def write_history(path: Path, history: MergeHistory) -> None:
    write_json_atomic(path, asdict(history))


def kept_history(
    config: Mapping[str, Any], paths: MergedPaths, parts_dir: Path
) -> tuple[MergeHistory | None, str]:
    """The generations whose shards a merge keeps, or None and why it starts afresh (rank 0's part)."""
    if not config["merge"]["grow"]:
        return None, "merge.grow is false"
    history = read_history(paths.generations)
    if history is None:
        return None, f"no earlier merge recorded in {paths.generations}"
    if history.settings_digest != settings_digest(config):
        return None, "the settings changed"
    for generation in history.generations:
        for name, signature in generation.parts.items():
            try:
                now = file_signature((parts_dir / name).with_suffix(INDEX_SUFFIX))
            except OSError:
                return None, f"converted part {name} is gone"
            if now != signature:
                return None, f"converted part {name} was written again"
    for entry in history.shards:
        for name in (entry["file"], entry["index"]):
            if not paths.shard(name).is_file():
                return None, f"shard file {name} is gone"
        if paths.shard(entry["file"]).stat().st_size != entry["bytes"]:
            return None, f"shard {entry['file']} changed size"
    return history, ""

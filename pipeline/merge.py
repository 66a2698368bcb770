"""merge: pack converted samples into shards of a target size, globally sorted by a key.

All ranks agree on one global order (sort key, then sample id) and on shard boundaries that depend only
on record sizes, so the shards are byte-identical for any number of ranks and on every rerun. Ranks then
write disjoint shards (round robin). Each shard is written to a temporary file, checksummed, indexed and
renamed; a rerun keeps shards that are already complete for the same plan and writes the rest.
When the sorted records are the framed ingest parts' records, whole and in order, and nothing changed
them since (`Homes`), the shards are cut at the parts' boundaries and each part is hard-linked as its
shard: the same bytes as writing it record by record (a test compares them), none read or written.
`metadata.json`, written last, describes the whole dataset: feature spec, counts, statistics, a checksum
per shard and the provenance of every record.
"""

from __future__ import annotations

import json
import os
import shutil
from collections.abc import Iterable, Iterator, Mapping, Sequence
from pathlib import Path
from typing import Any, NamedTuple

import numpy as np
import xxhash

from pipeline import MB, Sim2dlError, __version__, bookkeeping_step
from pipeline.convert import normalise
from pipeline.fsutil import atomic_path, file_checksum, remove_stale_temporaries, write_json_atomic
from pipeline.parallel import all_ok, block
from pipeline.progress import progress
from pipeline.records import Part, list_parts, read_batches
from pipeline.tables import read_csv
from pipeline.writers import WRITERS, ShardWriter

NUMERIC_COLUMNS = {"bytes", "length", "sort_key"}


class Entry(NamedTuple):
    key: Any
    sample_id: str
    part: str
    record: int
    nbytes: int
    source: str
    # The framed part holding this record byte for byte as the shard will (pipeline.records), if any:
    # its .bin, the record's number in it and how many records it holds.
    home: str = ""
    home_record: int = -1
    home_records: int = 0


def sort_values(manifest_rows: Sequence[Mapping[str, str]], column: str) -> dict[str, Any]:
    """Accepted sample id -> its value in the manifest column used as the sort key."""
    convert_value = int if column in NUMERIC_COLUMNS else str
    return {r["sample_id"]: convert_value(r[column]) for r in manifest_rows if r["status"] == "accepted"}


class Homes:
    """Finds each converted record's home: the framed ingest part that holds it exactly as a shard of
    this format and size would (every field of the record, and no other, referenced there unchanged)."""

    def __init__(self, framing: str, shard_bytes: int, names: Sequence[str]) -> None:
        self.framing, self.shard_bytes, self.names = framing, shard_bytes, sorted(names)
        self._parts: dict[str, tuple[Path, Part, dict[tuple[int, ...], int]] | None] = {}
        self._paths: dict[tuple[Path, str], str] = {}  # (referring part, reference) -> normalised path

    def find(self, part: Part, i: int) -> tuple[str, int, int]:
        fields = part.records[i]["fields"]
        refs = {entry[3] if len(entry) > 3 else "" for entry in fields.values()}
        if len(refs) != 1 or "" in refs or sorted(fields) != self.names:
            return "", -1, 0
        ref = refs.pop()
        home_path = self._paths.get((part.bin_path, ref))
        if home_path is None:
            home_path = self._paths[part.bin_path, ref] = os.path.normpath(part.bin_path.parent / ref)
        home = self._home(home_path)
        if home is None:
            return "", -1, 0
        path, home_part, by_offsets = home
        j = by_offsets.get(tuple(fields[n][0] for n in self.names), -1)
        return (str(path), j, len(home_part)) if j >= 0 else ("", -1, 0)

    def part(self, path: Path) -> Part:
        """The framed part at `path` (its .bin), as loaded by find."""
        home = self._home(str(path))
        assert home is not None
        return home[1]

    def _home(self, bin_path: str) -> tuple[Path, Part, dict[tuple[int, ...], int]] | None:
        if bin_path not in self._parts:
            path = Path(bin_path)
            part = Part(path.with_suffix(""))
            framed = part.about.get("framing") == self.framing and part.about.get("shard_bytes") == self.shard_bytes
            by_offsets = {
                tuple(rec["fields"][n][0] for n in self.names): j
                for j, rec in enumerate(part.records)
                if sorted(rec["fields"]) == self.names
            }
            self._parts[bin_path] = (path, part, by_offsets) if framed else None
        return self._parts[bin_path]


def local_entries(parts: Sequence[Part], keys: Mapping[str, Any], homes: Homes | None) -> list[Entry]:
    entries = []
    for part in parts:
        name = part.bin_path.stem
        for i in range(len(part)):
            meta = part.meta(i)
            home = homes.find(part, i) if homes else ("", -1, 0)
            key = keys[meta["parent"]]
            entries.append(Entry(key, meta["sample_id"], name, i, part.nbytes(i), meta["source"], *home))
    return entries


def whole_parts(ordered: Sequence[Entry]) -> list[list[Entry]] | None:
    """The sorted records as runs, one per framed part, if every part appears once, whole and in its own
    order (the records were ingested in sorted order and nothing was dropped): then each part is a
    shard as it is. None otherwise."""
    runs: list[list[Entry]] = []
    for e in ordered:
        if not e.home:
            return None
        if runs and runs[-1][0].home == e.home:
            runs[-1].append(e)
        else:
            runs.append([e])
    if len({run[0].home for run in runs}) != len(runs):
        return None
    if any([e.home_record for e in run] != list(range(run[0].home_records)) for run in runs):
        return None
    return runs


def plan_shards(entries: Sequence[Entry], shard_bytes: float) -> tuple[list[list[Entry]], bool]:
    """Sort globally and cut into consecutive shards of about `shard_bytes` (never empty): at the
    framed parts' boundaries when they are whole shards already (returns True), otherwise by size."""
    ordered = sorted(entries, key=lambda e: (e.key, e.sample_id))
    runs = whole_parts(ordered)
    if runs is not None:
        return runs, True
    shards: list[list[Entry]] = [[]]
    filled = 0
    for e in ordered:
        if shards[-1] and filled + e.nbytes > shard_bytes:
            shards.append([])
            filled = 0
        shards[-1].append(e)
        filled += e.nbytes
    return (shards if shards[0] else []), False


def field_shapes(parts: Sequence[Part]) -> Iterator[tuple[str, str, Sequence[int | None]]]:
    """(field, dtype, shape) of every field of every record in the parts."""
    names: dict[str, str] = {}  # dtype string -> name, looked up once (numpy's is slow per record)
    for part in parts:
        for rec in part.records:
            for name, (_, dtype, shape, *_) in rec["fields"].items():
                yield name, names.get(dtype) or names.setdefault(dtype, np.dtype(dtype).name), shape


def feature_spec(
    observed: Iterable[tuple[str, str, Sequence[int | None]]], features: Sequence[str], labels: Sequence[str]
) -> dict[str, dict[str, Any]]:
    """Dtype and shape of every field over all observations; axes whose length varies become None.

    Observations are records' shapes, or (to combine ranks) other specs' shapes, which may hold None."""
    shapes: dict[str, list[int | None]] = {}
    dtypes: dict[str, str] = {}
    for name, dtype, shape in observed:
        dtypes.setdefault(name, dtype)
        known = shapes.setdefault(name, list(shape))
        if len(known) != len(shape):
            raise Sim2dlError(f"field '{name}' has records of different ranks ({known} and {list(shape)})")
        shapes[name] = [k if k == s else None for k, s in zip(known, shape, strict=True)]
    return {
        name: {"dtype": dtypes[name], "shape": shapes[name], "role": "feature" if name in features else "label"}
        for name in (*features, *labels)
        if name in shapes
    }


def shard_name(index: int, count: int, writer: type[ShardWriter]) -> str:
    return f"shard-{index:05d}-of-{count:05d}{writer.suffix}"


def write_shard(
    path: Path,
    entries: Sequence[Entry],
    records: Sequence[Mapping[str, np.ndarray]],
    spec: Mapping[str, Any],
    writer_class: type[ShardWriter],
    compression: str,
    stats: Mapping[str, Any],
) -> str:
    """Write one shard of `entries` (whose fields are `records`) and its index atomically: the index
    first, the shard's rename last. Returns the shard's checksum."""
    index_lines = []
    with atomic_path(path) as tmp:
        writer = writer_class(tmp, spec, compression)
        try:
            for e, arrays in zip(entries, records, strict=True):
                offset, length = writer.write(e.sample_id, normalise(arrays, stats))
                index_lines.append(f"{offset} {length}\n")
        except BaseException:
            writer.abort()
            raise
        writer.close()
        with atomic_path(index_path(path)) as idx_tmp:
            idx_tmp.write_text("".join(index_lines))
    return writer.checksum or file_checksum(path)


def link_shard(part: Part, path: Path) -> str:
    """Make a framed part (see Homes) the shard at `path` without copying it: a hard link, or a copy
    where the file system cannot link. The index first, the shard's rename last, as write_shard.
    Returns the shard's checksum (computed when the part was written)."""
    part_bin = part.bin_path
    with atomic_path(path) as tmp:
        tmp.unlink()
        try:
            os.link(part_bin, tmp)
        except OSError:  # another file system, or one without hard links: same bytes, copied
            shutil.copyfile(part_bin, tmp)
        with atomic_path(index_path(path)) as idx_tmp:
            idx_tmp.write_text("".join(f"{offset} {length}\n" for offset, length in (r["frame"] for r in part.records)))
    return part.about["checksum"]


def index_path(shard: Path) -> Path:
    return shard.with_name(shard.name + ".idx")


def plan_digest(shards: Sequence[Sequence[Entry]], settings: Mapping[str, Any], stats: Any, spec: Any) -> str:
    h = xxhash.xxh3_128()
    h.update(json.dumps([dict(settings), stats, spec], sort_keys=True).encode())
    for shard in shards:
        h.update(b"|")
        for e in shard:
            h.update(f"{e.sample_id}\0{e.part}\0{e.record}\n".encode())
    return h.hexdigest()


@bookkeeping_step()
def merge(config: Mapping[str, Any], manifest: Path, convert_dir: Path, out_dir: Path, comm: Any) -> dict[str, Any]:
    rank, size = comm.Get_rank(), comm.Get_size()
    settings = config["merge"]
    conv = config["convert"]
    writer_class = WRITERS[settings["format"]]
    parts_dir = convert_dir / "parts"
    stats_doc = json.loads((convert_dir / "stats.json").read_text())
    stats = stats_doc["statistics"]
    shards_dir = out_dir / "shards"

    # Global sort: each rank indexes its block of parts; everyone gets every key (one allgather).
    parts = list_parts(parts_dir)
    if not parts:
        raise Sim2dlError(f"no converted parts in {parts_dir}: run convert first")
    manifest_rows = read_csv(manifest)
    keys = sort_values(manifest_rows, settings["sort_by"])
    my_parts = [Part(stem) for stem in block(parts, rank, size)]
    shard_bytes = int(settings["shard_size_mb"] * MB)
    # Parts framed by ingest can become shards as they are unless merge has to change their records.
    unchanged = writer_class.framed_record and settings["compression"] == "none" and not stats
    homes = Homes(writer_class.format, shard_bytes, [*conv["features"], *conv["labels"]]) if unchanged else None
    local = local_entries(my_parts, keys, homes)
    entries = [e for rank_entries in comm.allgather(local) for e in rank_entries]
    if not entries:
        raise Sim2dlError(f"the converted parts in {parts_dir} hold no samples")
    shards, whole = plan_shards(entries, shard_bytes)
    local_spec = feature_spec(field_shapes(my_parts), conv["features"], conv["labels"])
    spec = feature_spec(
        ((name, f["dtype"], f["shape"]) for rank_spec in comm.allgather(local_spec) for name, f in rank_spec.items()),
        conv["features"],
        conv["labels"],
    )
    digest = plan_digest(shards, settings, stats, spec)
    names = [shard_name(i, len(shards), writer_class) for i in range(len(shards))]

    error = None
    if rank == 0:
        try:
            prepare_shard_dir(shards_dir, digest, set(names))
        except OSError as e:
            error = Sim2dlError(f"cannot prepare {shards_dir}: {e}")
    all_ok(comm, error if rank == 0 else None)

    mine = list(range(rank, len(shards), size))
    # Shards complete from an interrupted run with the same plan are kept.
    reused = [i for i in mine if (shards_dir / names[i]).exists() and index_path(shards_dir / names[i]).exists()]
    to_write = sorted(set(mine) - set(reused))
    open_parts = {part.bin_path.stem: part for part in my_parts}  # the parts indexed above, not read again

    def part_of(e: Entry) -> Part:
        return open_parts.get(e.part) or open_parts.setdefault(e.part, Part(parts_dir / e.part))

    checksums = {i: file_checksum(shards_dir / names[i]) for i in reused}
    if whole:  # every shard is a framed part already
        for i in progress(to_write, len(to_write), "merge", rank, size, unit="shard"):
            assert homes is not None
            checksums[i] = link_shard(homes.part(Path(shards[i][0].home)), shards_dir / names[i])
    else:
        batches = read_batches([[(part_of(e), e.record) for e in shards[i]] for i in to_write], list(spec))
        for i, records in progress(
            zip(to_write, batches, strict=True), len(to_write), "merge", rank, size, unit="shard"
        ):
            checksums[i] = write_shard(
                shards_dir / names[i], shards[i], records, spec, writer_class, settings["compression"], stats
            )
    results = [
        {
            "file": names[i],
            "index": index_path(shards_dir / names[i]).name,
            "records": len(shards[i]),
            "bytes": (shards_dir / names[i]).stat().st_size,
            "checksum": checksums[i],
            "first_key": shards[i][0].key,
            "last_key": shards[i][-1].key,
        }
        for i in mine
    ]
    gathered = comm.gather(results, root=0)
    reused_total = sum(comm.allgather(len(reused)))
    summary = {"records": len(entries), "shards": len(shards), "reused_shards": reused_total}
    if rank == 0:
        assert gathered is not None
        shard_info = sorted((r for rank_results in gathered for r in rank_results), key=lambda r: r["file"])
        write_json_atomic(
            out_dir / "metadata.json",
            metadata(settings, writer_class, spec, stats_doc, shard_info, shards, manifest_rows, convert_dir, digest),
        )
    comm.barrier()
    return summary


def prepare_shard_dir(shards_dir: Path, digest: str, names: set[str]) -> None:
    """Keep complete shards of the same plan (resume); remove everything else."""
    shards_dir.mkdir(parents=True, exist_ok=True)
    remove_stale_temporaries(shards_dir)
    plan_file = shards_dir / "plan.digest"
    same_plan = plan_file.exists() and plan_file.read_text().strip() == digest
    for p in shards_dir.iterdir():
        if p.name == "plan.digest":
            continue
        shard_name_of = p.name[: -len(".idx")] if p.name.endswith(".idx") else p.name
        if not same_plan or shard_name_of not in names:
            p.unlink()
    if not same_plan:
        with atomic_path(plan_file) as tmp:
            tmp.write_text(digest + "\n")


def metadata(
    settings: Mapping[str, Any],
    writer_class: type[ShardWriter],
    spec: Mapping[str, Any],
    stats_doc: Mapping[str, Any],
    shard_info: list[dict[str, Any]],
    shards: Sequence[Sequence[Entry]],
    manifest_rows: Sequence[Mapping[str, str]],
    convert_dir: Path,
    digest: str,
) -> dict[str, Any]:
    convert_rejects = read_csv(convert_dir / "rejects.csv")
    return {
        "sim2dl_version": __version__,
        "format": writer_class.format,
        "compression": settings["compression"],
        "encoding": writer_class.encoding(),
        "index": writer_class.index_meaning,
        "feature_spec": spec,
        "sort_by": settings["sort_by"],
        "plan_digest": digest,
        "counts": {
            "input_files": len(manifest_rows),
            "accepted_files": sum(r["status"] == "accepted" for r in manifest_rows),
            "rejected_files": sum(r["status"] == "rejected" for r in manifest_rows),
            "convert_rejected": len(convert_rejects),
            "records": sum(len(s) for s in shards),
            "shards": len(shards),
        },
        "normalisation": "x -> (x - mean) / std with the statistics below, applied to the listed fields",
        "statistics": stats_doc["statistics"],
        "shards": shard_info,
        "provenance": {
            "columns": ["shard", "record", "sample_id", "source"],
            "rows": [[i, j, e.sample_id, e.source] for i, shard in enumerate(shards) for j, e in enumerate(shard)],
        },
    }

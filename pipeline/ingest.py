"""ingest: scan many small simulation files, validate each, and pack the good ones into a few parts.

Each file is read exactly once in the whole workflow, whole, `ingest.prefetch` files ahead by
`ingest.read_threads` background threads (with O_DIRECT unless `ingest.direct_io` is off): its declared
fields are parsed from those bytes, checked (names, shapes, dtypes, finite values) and appended to a
part, so no later step touches the small files again. A part holds a run of consecutive files, about one
shard's worth, the same for any number of ranks as long as each rank gets several (ranks take
consecutive runs; see `part_files`); records are framed as the shard format writes them when it can, so
merge can make a part a shard as it is. The manifest lists every input file (accepted or rejected); the
rejects list gives one reason per rejected file. The run goes on past bad files and fails only when the
rejected fraction exceeds `ingest.max_reject_fraction`. Memory holds the file list and the manifest
rows, nothing per sample.
"""

from __future__ import annotations

import errno
import glob
import os
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import numpy as np

from pipeline import MB, CollectiveError, Sim2dlError, bookkeeping_step
from pipeline.directio import FileImages, ImageOrError
from pipeline.parallel import all_ok, block
from pipeline.progress import progress
from pipeline.readers import FieldSpec, SampleError, reader_for
from pipeline.records import PartWriter, clear_parts, part_stem
from pipeline.tables import MANIFEST_COLUMNS, REJECT_COLUMNS, write_csv
from pipeline.writers import WRITERS


def find_inputs(root: Path, pattern: str) -> list[str]:
    """The paths of the files matching `pattern` under `root`, sorted. Strings, not Path objects: with
    many files, pathlib's objects cost more than the listing (and the broadcast to every rank)."""
    if not root.is_dir():
        raise Sim2dlError(f"source directory {root} does not exist (config key 'source.path')")
    names = glob.glob(pattern, root_dir=root, recursive=True, include_hidden=True)
    # Dangling symlinks are kept: they are input files that cannot be read, and must be reported.
    files = sorted(p for p in (os.path.join(root, n) for n in names) if os.path.isfile(p) or os.path.islink(p))
    if not files:
        raise Sim2dlError(f"no files match '{pattern}' under {root} (config keys 'source.path', 'source.glob')")
    return files


def validate_sample(arrays: Mapping[str, np.ndarray], fields: Sequence[FieldSpec], check_finite: bool) -> None:
    for field in fields:
        array = arrays[field.name]
        if field.dtype is not None and array.dtype != np.dtype(field.dtype):
            raise SampleError(f"field '{field.name}': dtype {array.dtype}, expected {field.dtype}")
        if field.shape is not None and (
            len(array.shape) != len(field.shape)
            or any(want is not None and got != want for got, want in zip(array.shape, field.shape, strict=True))
        ):
            expected = tuple("any" if d is None else d for d in field.shape)
            raise SampleError(f"field '{field.name}': shape {array.shape}, expected {expected}")
        if check_finite and np.issubdtype(array.dtype, np.floating):
            bad = array.size - int(np.count_nonzero(np.isfinite(array)))
            if bad:
                raise SampleError(f"field '{field.name}': {bad} non-finite values (NaN/Inf)")


def record_length(arrays: Mapping[str, np.ndarray], primary: str) -> int:
    """The record's length: the primary (first) feature's extent along its first axis."""
    first = arrays[primary]
    return int(first.shape[0]) if first.ndim else 1


def shape_text(arrays: Mapping[str, np.ndarray]) -> str:
    return ";".join(f"{name}={'x'.join(map(str, a.shape)) or 'scalar'}" for name, a in arrays.items())


def unreadable(e: OSError) -> SampleError:
    return SampleError(f"unreadable: {'permission denied' if e.errno == errno.EACCES else e.strerror}")


def read_one(
    path: Path,
    image: ImageOrError,
    root: Path,
    source: Mapping[str, Any],
    fields: Sequence[FieldSpec],
    check_finite: bool,
) -> tuple[dict[str, np.ndarray], str, int]:
    """Validate one file, from its bytes (`image`, read ahead) or, for readers that open files
    themselves (image None), from its path. Raises SampleError with the reason it cannot be used."""
    if isinstance(image, OSError):
        raise unreadable(image)
    reader = reader_for(path, source["format"])
    if image is None:
        try:
            size = os.stat(path).st_size
        except OSError as e:
            raise unreadable(e) from None
        if size and not os.access(path, os.R_OK):
            raise SampleError("unreadable: permission denied")
    else:
        size = image.size
    if size == 0:
        raise SampleError("empty file (0 bytes)")
    id_attr = source["sample_id"]["attr"] if source["sample_id"] else None
    if image is None:
        arrays, sample_id = reader.read(path, fields, id_attr)
    else:
        arrays, sample_id = reader.read_image(image, path, fields, id_attr)
    validate_sample(arrays, fields, check_finite)
    if sample_id is None:
        sample_id = str(path.relative_to(root).with_suffix(""))
    return arrays, sample_id, size


PARTS_PER_RANK = 4  # at least this many parts per rank: ranks differ by at most one part of work


def part_files(files: Sequence[str | Path], shard_bytes: int, ranks: int, sample: int = 64) -> int:
    """Files per part: about one shard's worth at the median size of up to `sample` evenly spaced files.
    Parts are consecutive runs of the sorted file list, the same for any number of ranks, so parts (and
    the shards that can be parts as they are) do not depend on how many ranks ingested them, unless
    that would give fewer than PARTS_PER_RANK parts per rank: then parts are smaller, so that every rank
    has work and none has much more than another."""
    sizes = []
    for path in files[:: max(1, len(files) // sample)][:sample]:
        try:
            sizes.append(os.stat(path).st_size)
        except OSError:
            continue  # reported when its turn comes
    median = int(np.median(sizes)) if sizes else 0
    balanced = len(files) // (PARTS_PER_RANK * ranks)  # gives at least PARTS_PER_RANK parts per rank
    return max(1, min(shard_bytes // max(median, 1), balanced))


def reads_image(path: Path, format_name: str) -> bool:
    try:
        return reader_for(path, format_name).reads_images
    except SampleError:
        return False  # unknown suffix: rejected when its turn comes, without reading it


@bookkeeping_step()
def ingest(config: Mapping[str, Any], root: Path, out_dir: Path, comm: Any) -> dict[str, Any]:
    """Scan `root`, validate and pack files across ranks; rank 0 writes the manifest and rejects list."""
    rank, size = comm.Get_rank(), comm.Get_size()
    source, settings = config["source"], config["ingest"]
    fields = [FieldSpec.from_config(name, spec) for name, spec in source["fields"].items()]
    shard_bytes = int(config["merge"]["shard_size_mb"] * MB)
    parts_dir = out_dir / "parts"

    files: list[str] | None = None
    error: BaseException | None = None
    if rank == 0:
        try:
            files = find_inputs(root, source["glob"])
            clear_parts(parts_dir)
        except Sim2dlError as e:
            error = e
    all_ok(comm, error if rank == 0 else None)
    files = comm.bcast(files, root=0)
    assert files is not None

    rows: list[tuple[Any, ...]] = []
    chunk = part_files(files, shard_bytes, size) if rank == 0 else 0
    chunk = comm.bcast(chunk, root=0)
    chunks = -(-len(files) // chunk)
    my_chunks = block(range(chunks), rank, size)
    first = my_chunks[0] * chunk if my_chunks else 0
    mine = [Path(p) for p in files[first : my_chunks[-1] * chunk + chunk]] if my_chunks else []
    writer_class = WRITERS[config["merge"]["format"]]
    framing = writer_class.framed_record if config["merge"]["compression"] == "none" else None
    about = {"framing": writer_class.format, "shard_bytes": shard_bytes} if framing else {}
    part: PartWriter | None = None
    try:
        images = FileImages(
            mine,
            settings["prefetch"],
            settings["direct_io"],
            lambda p: reads_image(p, source["format"]),
            settings["read_threads"],
        )
        for number, (path, image) in enumerate(progress(images, len(mine), "ingest", rank, size), first):
            if part is None or number % chunk == 0:  # the next chunk of files: the next part
                if part is not None:
                    part.close()
                part = PartWriter(part_stem(parts_dir, number // chunk, chunks), framing, about)
            try:
                arrays, sample_id, nbytes = read_one(path, image, root, source, fields, settings["check_finite"])
            except SampleError as e:
                rows.append((str(path), _size_or_zero(path), "", "", "", "", "rejected", "", "", str(e)))
                continue
            length = record_length(arrays, config["convert"]["features"][0])
            record = part.append(arrays, {"sample_id": sample_id, "source": str(path)})
            rows.append(
                (str(path), nbytes, sample_id, shape_text(arrays), length, length, "accepted", part.bin_path.stem,
                 record, "")
            )  # fmt: skip
    except BaseException:
        if part is not None:
            part.abort()
        raise
    if part is not None:
        part.close()

    gathered = comm.gather(rows, root=0)
    summary: dict[str, Any] | None = None
    if rank == 0:
        assert gathered is not None
        summary = finish(out_dir, [row for rank_rows in gathered for row in rank_rows], settings["max_reject_fraction"])
    summary = comm.bcast(summary, root=0)
    if summary["error"]:  # every rank knows it: printed once, and no rank aborts the others
        raise CollectiveError(summary["error"], 0) if comm.Get_size() > 1 else Sim2dlError(summary["error"])
    return summary


def _size_or_zero(path: Path) -> int:
    try:
        return os.stat(path).st_size
    except OSError:
        return 0


def finish(out_dir: Path, rows: list[tuple[Any, ...]], max_reject_fraction: float) -> dict[str, Any]:
    """Reject duplicate sample ids (the first path in sorted order keeps the id), write both tables."""
    rows.sort(key=lambda r: r[0])
    first_seen: dict[str, str] = {}
    final_rows, rejects = [], []
    for row in rows:
        path, sample_id, status, reason = row[0], row[2], row[6], row[9]
        if status == "accepted":
            if sample_id in first_seen:
                status, reason = (
                    "rejected",
                    f"duplicate sample id '{sample_id}' (first seen in {first_seen[sample_id]})",
                )
            else:
                first_seen[sample_id] = path
        if status == "rejected":
            rejects.append((path, sample_id, reason))
        final_rows.append((*row[:6], status, row[7], row[8]))
    assert len(MANIFEST_COLUMNS) == len(final_rows[0])
    write_csv(out_dir / "rejects.csv", REJECT_COLUMNS, rejects)
    write_csv(out_dir / "manifest.csv", MANIFEST_COLUMNS, final_rows)
    fraction = len(rejects) / len(rows)
    error = None
    if fraction > max_reject_fraction:
        shown = "\n".join(f"  {p}: {r}" for p, _, r in rejects[:5])
        error = (
            f"{len(rejects)} of {len(rows)} input files rejected ({fraction:.1%}), more than "
            f"ingest.max_reject_fraction={max_reject_fraction:g}; see {out_dir / 'rejects.csv'}:\n{shown}"
        )
    return {"inputs": len(rows), "accepted": len(rows) - len(rejects), "rejected": len(rejects), "error": error}

"""ingest's listing of the inputs, held across ranks: a glob's matches found by walking pieces of the tree
in parallel and sorted across ranks (a sample sort), or a list file's lines read by every rank from its
block of the file's bytes; every rank writes its stretch of the listing file in place. The names are one
fixed-width numpy bytes array per rank, never a Python object per file. Memory per rank: its stretch of
the names (twice, while they are exchanged) and, on rank 0, the walk's pieces (the directories of the
levels expanded); time: linear in the names, a directory level listed by rank 0, one parallel sort."""

from __future__ import annotations

import contextlib
import fnmatch
import glob
import os
import shutil
import zlib
from collections.abc import Iterable, Iterator, Mapping, Sequence
from pathlib import Path
from typing import Any, overload

import numpy as np

from pipeline import Sim2dlError
from pipeline.config import input_list
from pipeline.formats.parts import clear_parts
from pipeline.formats.readers import is_input_directory
from pipeline.paths import IngestPaths
from pipeline.runtime.mpi import all_ok, exclusive_sum, owner_ranks, sample_sort
from pipeline.storage.fsutil import atomic_path

LISTING_CHUNK = 65_536  # names turned into one array at a time while listing
WALK_PIECES_PER_RANK = 8  # the walk is cut into at least this many pieces per rank where the tree allows


class Listing(Sequence[str]):
    """Input paths stored as one fixed-width byte array (no Python object per file); items are the paths
    joined to `root` (a listed absolute path stays as it is; root '': the names as they are)."""

    def __init__(self, root: Path | str, names: np.ndarray) -> None:
        self.root, self.names = str(root), names

    def __len__(self) -> int:
        return len(self.names)

    @overload
    def __getitem__(self, i: int) -> str: ...
    @overload
    def __getitem__(self, i: slice) -> list[str]: ...
    def __getitem__(self, i: int | slice) -> str | list[str]:
        if isinstance(i, slice):
            return [os.path.join(self.root, os.fsdecode(n)) for n in self.names[i]]
        return os.path.join(self.root, os.fsdecode(self.names[i]))

    def __iter__(self) -> Iterator[str]:
        for name in self.names:
            yield os.path.join(self.root, os.fsdecode(name))


def collect(names: Iterable[bytes]) -> np.ndarray:
    """Names as one fixed-width byte array, built LISTING_CHUNK names at a time (so that millions of
    names never exist as Python objects at once)."""
    chunks, pending = [], []
    for name in names:
        pending.append(name)
        if len(pending) == LISTING_CHUNK:
            chunks.append(np.array(pending))
            pending = []
    if pending:
        chunks.append(np.array(pending))
    width = max((c.dtype.itemsize for c in chunks), default=1)
    return np.concatenate([c.astype(f"S{width}") for c in chunks]) if chunks else np.array([], "S1")


def pattern_parts(pattern: str) -> tuple[str, ...]:
    return tuple(part for part in pattern.split("/") if part not in ("", "."))


def subdirectories(directory: str) -> list[str]:
    """The sorted names of a directory's subdirectories (symlinks to directories too, as glob's ** takes
    them); none if it cannot be read (glob, too, skips what it cannot read)."""
    try:
        with os.scandir(directory) as entries:
            return sorted(e.name for e in entries if e.is_dir())
    except OSError:
        return []


def expand_piece(root: Path, prefix: str, parts: tuple[str, ...]) -> list[tuple[str, tuple[str, ...]]] | None:
    """A piece of the walk one directory level further down: the pieces whose matches are its matches
    (each exactly once); None when its next part names the matches themselves (left to glob)."""
    if len(parts) < 2:
        return None
    head, rest = parts[0], parts[1:]
    here = os.path.join(root, prefix)
    if head == "**":  # zero directories, or one more directory and ** again
        return [(prefix, rest), *((os.path.join(prefix, d), parts) for d in subdirectories(here))]
    if not glob.has_magic(head):
        return [(os.path.join(prefix, head), rest)] if os.path.isdir(os.path.join(here, head)) else []
    return [(os.path.join(prefix, d), rest) for d in subdirectories(here) if fnmatch.fnmatchcase(d, head)]


def walk_pieces(root: Path, pattern: str, wanted: int) -> list[tuple[str, str]]:
    """The glob's walk cut into pieces (a directory below root, the rest of the pattern below it) whose
    matches together are the pattern's, each once: whole directory levels are expanded until there are
    `wanted` pieces or none can be expanded. Only directories are listed here (the last level, the files,
    is left to the ranks), so the pieces are few: the directories of the levels expanded."""
    pieces = [("", pattern_parts(pattern))]
    while len(pieces) < wanted:
        expanded = [expand_piece(root, prefix, parts) for prefix, parts in pieces]
        if all(e is None for e in expanded):
            break
        pieces = [
            q for piece, e in zip(pieces, expanded, strict=True) for q in (e if e is not None else [piece])
        ]
    return [(prefix, "/".join(parts)) for prefix, parts in pieces]


def piece_matches(root: Path, prefix: str, rest: str, share: int, shares: int) -> Iterator[bytes]:
    """The names (relative to root) of one piece's matches: a glob of `rest` in the piece's directory,
    those whose name hashes to `share` of `shares` (a piece walked by several ranks)."""
    for name in glob.iglob(rest, root_dir=os.path.join(root, prefix), recursive=True, include_hidden=True):
        relative = os.fsencode(os.path.join(prefix, name))
        if shares > 1 and zlib.crc32(relative) % shares != share:
            continue
        path = os.path.join(root, prefix, name)
        # Dangling symlinks are kept: they are input files that cannot be read, and must be reported.
        if os.path.isfile(path) or os.path.islink(path) or is_input_directory(path):
            yield relative


def find_my_inputs(comm: Any, root: Path, pattern: str) -> np.ndarray:
    """This rank's share of the names (relative to root, bytes, unsorted) of the files matching `pattern`:
    rank 0 cuts the walk into pieces (walk_pieces), every rank walks its own. Fewer pieces than ranks
    (a flat directory): each piece is walked by several ranks, each keeping the names that hash to it."""
    rank, size = comm.Get_rank(), comm.Get_size()
    pieces, error = None, None
    if rank == 0:
        if not root.is_dir():
            error = Sim2dlError(f"source directory {root} does not exist (config key 'source.path')")
        else:
            pieces = walk_pieces(root, pattern, WALK_PIECES_PER_RANK * size)
    all_ok(comm, error)
    pieces = comm.bcast(pieces, root=0)
    shares = -(-size // max(len(pieces), 1))  # 1 unless there are fewer pieces than ranks
    tasks = [(prefix, rest, share) for prefix, rest in pieces for share in range(shares)]
    mine = tasks[rank::size]
    return collect(
        m for prefix, rest, share in mine for m in piece_matches(root, prefix, rest, share, shares)
    )


def read_my_lines(comm: Any, path: Path) -> np.ndarray:
    """This rank's inputs of a list file, one per line (relative to source.path, or absolute; blank lines
    and lines starting with '#' skipped): the lines that begin in its block of the file's bytes."""
    rank, size = comm.Get_rank(), comm.Get_size()
    names, error = np.array([], "S1"), None
    try:
        f = open(path, "rb")  # noqa: SIM115 - closed below
    except OSError as e:
        error = Sim2dlError(f"cannot read the input list {path} (config key 'source.list'): {e.strerror}")
    all_ok(comm, error)
    with f:
        length = os.fstat(f.fileno()).st_size
        start, stop = rank * length // size, (rank + 1) * length // size

        def lines() -> Iterator[bytes]:
            position = start
            if start:  # a line that began in the block before belongs to the rank before
                f.seek(start - 1)
                position += len(f.readline()) - 1
            while position < stop:
                line = f.readline()
                if not line:
                    break
                position += len(line)
                yield line.strip()

        names = collect(n for n in lines() if n and not n.startswith(b"#"))
    return names


def list_my_inputs(comm: Any, root: Path, source: Mapping[str, Any]) -> tuple[np.ndarray, int, int]:
    """Every rank's stretch of the inputs' names (a glob's sorted across ranks, a list's in its order):
    the names, the number of the first, and the number of inputs in all. No rank holds them all."""
    listed = input_list(source, root)
    names = read_my_lines(comm, listed) if listed else find_my_inputs(comm, root, source["glob"])
    width = max(comm.allgather(names.dtype.itemsize))
    names = names.astype(f"S{width}")
    if not listed:
        names = sample_sort(comm, names)
    counts = comm.allgather(len(names))
    total, first = sum(counts), sum(counts[: comm.Get_rank()])
    error = None
    if not total and comm.Get_rank() == 0:
        error = Sim2dlError(
            f"the input list {listed} names no files (config key 'source.list')"
            if listed
            else f"no files match '{source['glob']}' under {root} (config keys 'source.path', 'source.glob')"
        )
    all_ok(comm, error)
    return names, first, total


def write_listing(comm: Any, path: Path, names: np.ndarray) -> None:
    """Every rank writes its names, one per line, at their place in one file (a temporary renamed over
    `path` by rank 0 once all have written)."""
    lines_bytes = int(np.char.str_len(names).sum()) + len(names) if len(names) else 0
    offset = exclusive_sum(comm, lines_bytes)
    with contextlib.ExitStack() as stack:
        temporary = stack.enter_context(atomic_path(path)) if comm.Get_rank() == 0 else None
        temporary = comm.bcast(temporary, root=0)
        error = None
        try:
            with open(temporary, "r+b") as f:
                f.seek(offset)
                for start in range(0, len(names), LISTING_CHUNK):
                    f.write(b"\n".join(names[start : start + LISTING_CHUNK].tolist()) + b"\n")
        except OSError as e:
            error = Sim2dlError(f"cannot write the listing {path}: {e.strerror}")
        all_ok(comm, error)


def paths_of(comm: Any, indices: np.ndarray, starts: np.ndarray, mine: Listing) -> list[str]:
    """The input paths of global file indices, asked of the ranks that hold them (for messages)."""
    rank, size = comm.Get_rank(), comm.Get_size()
    owners = owner_ranks(starts, indices)
    asked = comm.alltoall([indices[owners == r] for r in range(size)])
    answers = comm.alltoall([[mine[int(i - starts[rank])] for i in q] for q in asked])
    by_index: dict[int, str] = {}
    for r in range(size):
        by_index.update(zip(indices[owners == r].tolist(), answers[r], strict=True))
    return [by_index[i] for i in indices.tolist()]


def start_listing(
    comm: Any, root: Path, source: Mapping[str, Any], paths: IngestPaths, clear: bool = True
) -> tuple[np.ndarray, int, int]:
    """List the inputs into inputs.txt (every rank its stretch) once rank 0 has cleared what an earlier run
    left (with `clear`; else the caller keeps what it can: pipeline.steps.ingest.generations); returns this
    rank's stretch of the names, the number of its first, and the number of inputs."""
    if comm.Get_rank() == 0:
        paths.root.mkdir(parents=True, exist_ok=True)
        if clear:
            clear_parts(paths.parts)
            shutil.rmtree(paths.manifest, ignore_errors=True)
            paths.generations.unlink(missing_ok=True)
        paths.summary.unlink(missing_ok=True)
    names, first, total = list_my_inputs(comm, root, source)
    write_listing(comm, paths.inputs, names)
    return names, first, total


class SampleNames(Sequence[str]):
    """What a rank's samples are called in messages: 'PATH (sample I)', by their place in the rank."""

    def __init__(self, listing: Listing, file_starts: np.ndarray, first_file: int, first_number: int) -> None:
        self.listing, self.file_starts = listing, file_starts
        self.first_file, self.first_number = first_file, first_number

    def __len__(self) -> int:
        return int(self.file_starts[self.first_file + len(self.listing)] - self.first_number)

    def __getitem__(self, i: Any) -> Any:
        number = self.first_number + int(i)
        f = int(np.searchsorted(self.file_starts, number, "right")) - 1
        return f"{self.listing[f - self.first_file]} (sample {number - int(self.file_starts[f])})"

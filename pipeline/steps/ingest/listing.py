"""ingest's listing of the inputs: the sorted file names (found by source.glob under source.path, or read
from source.list) held as one numpy bytes array per chunk and written to the manifest's listing file, from
which every rank reads its block. Memory: the names of one chunk (or of a rank's block); time: linear in
the names, one sort."""

from __future__ import annotations

import glob
import os
import shutil
from collections.abc import Iterable, Iterator, Mapping, Sequence
from pathlib import Path
from typing import Any, overload

import numpy as np

from pipeline import Sim2dlError
from pipeline.config import input_list
from pipeline.formats.parts import clear_parts
from pipeline.formats.readers import is_input_directory
from pipeline.paths import IngestPaths
from pipeline.runtime.mpi import owner_ranks
from pipeline.storage.fsutil import atomic_path

LISTING_CHUNK = 65_536  # names turned into one array at a time while listing


class Listing(Sequence[str]):
    """Input paths stored as one fixed-width byte array (no Python object per file); items are the paths
    joined to `root` (a listed absolute path stays as it is)."""

    def __init__(self, root: Path, names: np.ndarray) -> None:
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


def find_inputs(root: Path, pattern: str) -> np.ndarray:
    """The names (relative to `root`, bytes) of the files matching `pattern`, sorted; streamed from the
    directory walk."""
    if not root.is_dir():
        raise Sim2dlError(f"source directory {root} does not exist (config key 'source.path')")

    def matches() -> Iterator[bytes]:
        for name in glob.iglob(pattern, root_dir=root, recursive=True, include_hidden=True):
            path = os.path.join(root, name)
            # Dangling symlinks are kept: they are input files that cannot be read, and must be reported.
            if os.path.isfile(path) or os.path.islink(path) or is_input_directory(path):
                yield os.fsencode(name)

    names = collect(matches())
    if not len(names):
        raise Sim2dlError(f"no files match '{pattern}' under {root} (config keys 'source.path', 'source.glob')")
    names.sort()
    return names


def read_input_list(path: Path) -> np.ndarray:
    """The inputs named in a list file, one per line (relative to source.path, or absolute), in the
    file's order; blank lines and lines starting with '#' are skipped."""
    try:
        f = open(path, "rb")  # noqa: SIM115 - closed below
    except OSError as e:
        raise Sim2dlError(f"cannot read the input list {path} (config key 'source.list'): {e.strerror}") from None
    with f:
        names = collect(n for n in (line.strip() for line in f) if n and not n.startswith(b"#"))
    if not len(names):
        raise Sim2dlError(f"the input list {path} names no files (config key 'source.list')")
    return names


def write_listing(path: Path, names: np.ndarray) -> np.ndarray:
    """Write the names one per line; returns the byte offset of every line start (and of the end)."""
    with atomic_path(path) as tmp, open(tmp, "wb") as f:
        for start in range(0, len(names), LISTING_CHUNK):
            f.write(b"\n".join(names[start : start + LISTING_CHUNK].tolist()) + b"\n")
    lengths = np.char.str_len(names).astype(np.int64) + 1
    return np.concatenate([[0], np.cumsum(lengths)])


def read_listing(path: Path, start: int, stop: int) -> np.ndarray:
    """The names on the lines between byte offsets start and stop of a listing."""

    def lines() -> Iterator[bytes]:
        with open(path, "rb") as f:
            f.seek(start)
            position = start
            while position < stop:
                line = f.readline()
                position += len(line)
                yield line.rstrip(b"\n")

    return collect(lines())


def list_inputs(root: Path, source: Mapping[str, Any]) -> np.ndarray:
    """Rank 0: the inputs' names (a glob's sorted, a list's in its order)."""
    listed = input_list(source, root)
    return read_input_list(listed) if listed else find_inputs(root, source["glob"])


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


def start_listing(root: Path, source: Mapping[str, Any], paths: IngestPaths) -> tuple[np.ndarray, np.ndarray]:
    """Rank 0: list the inputs into inputs.txt and clear what an earlier run left; returns the names and
    the byte offset of every line of the listing."""
    names = list_inputs(root, source)
    paths.root.mkdir(parents=True, exist_ok=True)
    clear_parts(paths.parts)
    shutil.rmtree(paths.manifest, ignore_errors=True)
    paths.summary.unlink(missing_ok=True)
    return names, write_listing(paths.inputs, names)


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

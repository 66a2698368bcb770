"""Direct I/O: page-aligned buffers, O_DIRECT reads at any offset, whole files read ahead by a thread,
and an append-only writer that bypasses the page cache.

sim2dl streams every byte once (input files, parts, shards): a page cache copy of it is never read
again, yet filling it costs a copy into freshly allocated kernel pages, which on many VMs (and under
memory cgroups on shared nodes) costs more than the I/O. With O_DIRECT the device moves the data
straight into reused user buffers. Where a file system has no O_DIRECT (ramfs, some FUSE mounts), every
function here falls back to buffered I/O with the same results.
"""

from __future__ import annotations

import mmap
import os
from collections import deque
from collections.abc import Callable, Iterator, Sequence
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

PAGE = mmap.PAGESIZE
FILE_BUFFER_BYTES = 1 << 20  # a whole-file buffer's size to start with (grown for larger files)


def aligned_buffer(nbytes: int) -> np.ndarray:
    """A page-aligned buffer (as O_DIRECT needs): anonymous memory is mapped on page boundaries."""
    return np.frombuffer(mmap.mmap(-1, max(nbytes, 1)), np.uint8)[:nbytes]


def address(view: np.ndarray) -> int:
    return view.__array_interface__["data"][0]


def round_up(n: int) -> int:
    return -(-n // PAGE) * PAGE


def open_for_reading(path: Path | str, direct: bool) -> tuple[int, bool]:
    """(fd, opened with O_DIRECT?); raises OSError when the file cannot be opened at all."""
    if direct:
        try:
            return os.open(path, os.O_RDONLY | os.O_DIRECT), True
        except OSError:
            pass  # no direct I/O here (or no file: the buffered open below says which)
    return os.open(path, os.O_RDONLY), False


class RangeReader:
    """Reads byte ranges at any offset into any buffer, with O_DIRECT when the fd has it: an aligned
    request goes straight into the buffer, any other through a reused aligned scratch buffer."""

    def __init__(self) -> None:
        self._scratch = aligned_buffer(0)

    def read(self, fd: int, direct: bool, offset: int, view: np.ndarray) -> int:
        if not direct:
            return os.preadv(fd, [view], offset)
        if offset % PAGE == 0 and view.size % PAGE == 0 and address(view) % PAGE == 0:
            return os.preadv(fd, [view], offset)
        start = offset // PAGE * PAGE
        covering = round_up(offset + view.size - start)
        if self._scratch.size < covering:
            self._scratch = aligned_buffer(covering)
        scratch = self._scratch[:covering]
        got = max(0, os.preadv(fd, [scratch], start) - (offset - start))
        n = min(got, view.size)
        view[:n] = scratch[offset - start : offset - start + n]
        return n


def read_whole(path: Path, direct: bool, buffer: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Read a whole file into `buffer` (replaced by a larger one if needed).

    Returns (the file's bytes as a view, the buffer to reuse). Raises OSError."""
    fd, is_direct = open_for_reading(path, direct)
    try:
        size = os.fstat(fd).st_size
        if buffer.size < round_up(size) + PAGE:
            buffer = aligned_buffer(round_up(size) + PAGE + FILE_BUFFER_BYTES)
        # One page past the size it had: a file that grew meanwhile is noticed (read to its new end).
        n = os.preadv(fd, [buffer[: round_up(size) + PAGE]], 0)
        if not is_direct:  # a buffered read may stop short anywhere: read on to the end
            n += _read_fully(fd, n, buffer[n:], direct=False)
        return buffer[:n], buffer
    finally:
        os.close(fd)


def advise_will_need(path: Path) -> None:
    """Ask the kernel to start reading the file in the background (asynchronous readahead)."""
    try:
        fd = os.open(path, os.O_RDONLY)
    except OSError:
        return  # reported when the file is opened for real
    try:
        os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_WILLNEED)
    finally:
        os.close(fd)


ContentsOrError = np.ndarray | OSError | None


class FileContents:
    """Whole files read ahead of use by one thread, delivered in order.

    Each file's contents are a view of a reused page-aligned buffer, valid until the next item is taken;
    at most `depth` files are in memory at once. For a file with `wanted(path)` False the item is None: it is
    only requested from storage ahead of time (POSIX_FADV_WILLNEED), for a reader that opens it by path. Reads
    run in `threads` threads because their system calls release the GIL, so storage works while this thread
    parses, and a few requests in flight keep storage busier than one. Two by default: more contend for the
    GIL (docs/benchmarks.md, design measurements); ranks give the further parallel requests that parallel file
    systems want."""

    def __init__(
        self,
        paths: Sequence[Path],
        depth: int,
        direct: bool,
        wanted: Callable[[Path], bool] = lambda p: True,
        threads: int = 2,
    ) -> None:
        self.paths, self.depth, self.direct, self.wanted, self.threads = paths, depth, direct, wanted, threads

    def _read(self, path: Path, buffer: np.ndarray) -> tuple[ContentsOrError, np.ndarray]:
        if not self.wanted(path):
            advise_will_need(path)
            return None, buffer
        try:
            return read_whole(path, self.direct, buffer)
        except OSError as e:
            return e, buffer

    def __iter__(self) -> Iterator[tuple[Path, ContentsOrError]]:
        if self.depth == 0:  # no read-ahead: each file read when its turn comes
            buffer = aligned_buffer(FILE_BUFFER_BYTES)
            for path in self.paths:
                contents, buffer = self._read(path, buffer)
                yield path, contents
            return
        free = [aligned_buffer(FILE_BUFFER_BYTES) for _ in range(self.depth)]
        pending: deque[tuple[Path, Future[tuple[ContentsOrError, np.ndarray]]]] = deque()
        upcoming = iter(self.paths)
        with ThreadPoolExecutor(max_workers=self.threads, thread_name_prefix="read-ahead") as pool:
            try:
                for path in upcoming:
                    pending.append((path, pool.submit(self._read, path, free.pop())))
                    if not free:
                        break
                while pending:
                    path, future = pending.popleft()
                    contents, buffer = future.result()
                    yield path, contents
                    free.append(buffer)  # the consumer is done with these contents
                    for path in upcoming:
                        pending.append((path, pool.submit(self._read, path, free.pop())))
                        break
            finally:
                for _, future in pending:
                    future.cancel()


class AppendWriter:
    """Writes a file front to back through reused page-aligned buffers, with O_DIRECT where available.

    A background thread writes one full buffer while the caller fills the other. The last, partial
    buffer is written padded to a page and the file truncated to its true size. `on_data`, if given,
    sees every byte in order (for a checksum computed without reading the file back)."""

    def __init__(
        self,
        path: Path | str,
        direct: bool = True,
        buffer_bytes: int = 8 << 20,
        on_data: Callable[[memoryview], Any] | None = None,
    ) -> None:
        flags = os.O_WRONLY | os.O_CREAT | os.O_TRUNC
        self.direct = direct
        if direct:
            try:
                self._fd = os.open(path, flags | os.O_DIRECT, 0o644)
            except OSError:
                self.direct = False
        if not self.direct:
            self._fd = os.open(path, flags, 0o644)
        self._buffers = [aligned_buffer(buffer_bytes), aligned_buffer(buffer_bytes)]
        self._fill = 0
        self._pending: Future[None] | None = None
        self._pool = ThreadPoolExecutor(max_workers=1, thread_name_prefix="write-behind")
        self._on_data = on_data
        self.size = 0

    def write(self, data: Any) -> None:
        view = memoryview(data)
        if not view.nbytes:  # an empty array (an event with no particles): memoryview cannot cast its shape
            return
        source = np.frombuffer(view.cast("B"), np.uint8)
        while source.size:
            buffer = self._buffers[0]
            n = min(source.size, buffer.size - self._fill)
            buffer[self._fill : self._fill + n] = source[:n]
            self._fill += n
            source = source[n:]
            if self._fill == buffer.size:
                self._flush()

    def _flush(self) -> None:
        buffer = self._buffers[0]
        filled = memoryview(buffer[: self._fill])
        if self._on_data is not None:
            self._on_data(filled)
        self._wait()
        length = round_up(self._fill) if self.direct else self._fill
        if length > self._fill:
            buffer[self._fill : length] = 0
        self._pending = self._pool.submit(self._write_all, buffer[:length])
        self.size += self._fill
        self._fill = 0
        self._buffers.reverse()

    def _write_all(self, view: np.ndarray) -> None:
        written = 0
        while written < view.size:
            written += os.write(self._fd, view[written:])

    def _wait(self) -> None:
        if self._pending is not None:
            self._pending.result()
            self._pending = None

    def close(self) -> None:
        try:
            if self._fill:
                self._flush()
            self._wait()
            os.ftruncate(self._fd, self.size)  # drop the last buffer's padding
        finally:
            self._pool.shutdown()
            os.close(self._fd)

    def abort(self) -> None:
        try:
            self._wait()
        except OSError:
            pass  # the caller is already handling an error
        finally:
            self._pool.shutdown()
            os.close(self._fd)


# Two ranges of a file are read as one when the bytes between them are few: at most SMALL_GAP (the
# framing between one record's fields), or at most the next range's own length and a page (so a read is at
# least half wanted bytes). Records sorted by length lie a few apart in every part: a larger gap rule
# made the read of one shard cover, and buffer, most of the dataset.
SMALL_GAP = 256
COALESCE_GAP = PAGE
DIRECT_RUN = 256 * 1024  # runs at least this long are read with O_DIRECT; shorter ones buffered, exactly


def read_extents(
    paths: Sequence[Path],
    files: np.ndarray,
    offsets: np.ndarray,
    lengths: np.ndarray,
    direct: bool,
    buffer: np.ndarray,
) -> tuple[np.ndarray, np.ndarray]:
    """Read many ranges (file number into `paths`, offset, length: arrays) with few large reads.

    Ranges are sorted by file and offset; ranges of a file a few bytes apart merge into runs (records'
    fields lie a few framing bytes apart: one read takes them all; the rule at SMALL_GAP bounds what a
    run reads to about twice the bytes asked for). Long runs are read as
    their page-aligned cover with O_DIRECT; short ones (records scattered over many parts, as when
    sorted by length) are read through the page cache into exactly their size, so the buffer stays the
    size of the bytes asked for. Returns where each range starts in `buffer` (replaced by a larger one if
    needed), in request order, and the buffer to reuse; planned in arrays, so a batch of a million ranges
    costs a few arrays, not a million objects. Raises OSError, also for a range past the end."""
    n = len(offsets)
    positions = np.zeros(n, np.int64)
    if not n:
        return positions, buffer
    files, offsets, lengths = (np.asarray(a, np.int64) for a in (files, offsets, lengths))
    order = np.lexsort((offsets, files))
    f, start, end = files[order], offsets[order], offsets[order] + lengths[order]
    # a run starts at a new file, or where the gap past the furthest end so far (in that file) is too wide
    reach = _furthest_per_file(f, end)
    allowed = np.maximum(SMALL_GAP, np.minimum(end[1:] - start[1:], COALESCE_GAP))
    new_run = np.concatenate([[True], (f[1:] != f[:-1]) | (start[1:] - reach[:-1] > allowed)])
    run = np.cumsum(new_run) - 1
    first = np.flatnonzero(new_run)
    run_file, run_start = f[first], start[first]
    run_end = np.maximum.reduceat(end, first)
    dense = (run_end - run_start >= DIRECT_RUN) & direct
    read_start = np.where(dense, run_start // PAGE * PAGE, run_start)
    read_end = np.where(dense, -(-run_end // PAGE) * PAGE, run_end)
    # direct runs first (their page multiples keep each at a page-aligned place), then the others
    size = read_end - read_start
    place = np.empty(len(first), np.int64)
    for chosen, base in ((dense, 0), (~dense, int(size[dense].sum()))):
        place[chosen] = base + np.cumsum(size[chosen]) - size[chosen]
    total = int(size.sum())
    if buffer.size < total:
        buffer = aligned_buffer(total + total // 4)
    _read_runs(paths, Runs(run_file, dense, read_start, run_start, run_end, place, size), buffer)
    positions[order] = place[run] + start - read_start[run]
    return positions, buffer


@dataclass(frozen=True)
class Runs:
    """Coalesced runs of requested bytes, one entry each: the file number, whether it is read with O_DIRECT
    (dense), where the read starts (page-aligned when dense), the requested bytes' start and end, and
    the read's place and size in the buffer."""

    file: np.ndarray
    dense: np.ndarray
    read_start: np.ndarray
    start: np.ndarray
    end: np.ndarray
    place: np.ndarray
    size: np.ndarray


def _read_runs(paths: Sequence[Path], runs: Runs, buffer: np.ndarray) -> None:
    """Read each run (dense ones with O_DIRECT) into its place in `buffer`, each file opened once per mode."""
    run_file, dense, read_start, run_start, run_end = (
        runs.file,
        runs.dense,
        runs.read_start,
        runs.start,
        runs.end,
    )
    place, size = runs.place, runs.size
    fds: dict[tuple[int, bool], tuple[int, bool]] = {}
    try:
        for k in range(len(run_file)):
            key = (int(run_file[k]), bool(dense[k]))
            if key not in fds:
                fds[key] = open_for_reading(paths[key[0]], key[1])
            fd, fd_direct = fds[key]
            target = buffer[place[k] : place[k] + size[k]]
            got = _read_fully(fd, int(read_start[k]), target, fd_direct)
            if got < run_end[k] - read_start[k]:
                raise OSError(
                    f"{paths[key[0]]}: bytes {run_start[k]}..{run_end[k]} requested, the file ends at "
                    f"{read_start[k] + got}"
                )
    finally:
        for fd, _ in fds.values():
            os.close(fd)


def _furthest_per_file(files: np.ndarray, ends: np.ndarray) -> np.ndarray:
    """The furthest end so far within each file's (sorted) ranges."""
    shift = np.int64(1) << 48  # offsets below 256 TiB: file number in the high bits keeps files apart
    return np.maximum.accumulate(files * shift + ends) - files * shift


def read_ranges(
    requests: Sequence[tuple[Path, int, int]], direct: bool, buffer: np.ndarray
) -> tuple[list[np.ndarray], np.ndarray]:
    """read_extents for (path, offset, length) requests; returns a view per request, in request order,
    and the buffer to reuse."""
    paths = list(dict.fromkeys(p for p, _, _ in requests))
    number = {p: k for k, p in enumerate(paths)}
    files = np.array([number[p] for p, _, _ in requests], np.int64)
    offsets = np.array([o for _, o, _ in requests], np.int64)
    lengths = np.array([n for _, _, n in requests], np.int64)
    positions, buffer = read_extents(paths, files, offsets, lengths, direct, buffer)
    return [buffer[a : a + n] for a, n in zip(positions.tolist(), lengths.tolist(), strict=True)], buffer


def _read_fully(fd: int, offset: int, view: np.ndarray, direct: bool = True) -> int:
    """Read into `view` until it is full or the file ends; returns the bytes read."""
    got = 0
    while got < view.size and (n := os.preadv(fd, [view[got:]], offset + got)):
        got += n
        if direct and got % PAGE:
            break  # the end of the file: a direct read stops short only there or on a page boundary
    return got


Extents = tuple[np.ndarray, np.ndarray, np.ndarray]  # file numbers, byte offsets, lengths


def read_batches(
    paths: Sequence[Path], count: int, batch: Callable[[int], Extents], direct: bool = True
) -> Iterator[tuple[np.ndarray, np.ndarray]]:
    """The bytes of batches 0..count-1 of ranges (`batch(k)` gives batch k's extents in `paths` when its
    turn comes), each read with few large reads (pipeline.storage.directio.read_extents; direct: long runs
    with O_DIRECT), the next one by a thread while the caller uses this one. Yields where each range starts in
    a buffer, and the buffer, valid until the next batch is taken (two buffers alternate and are
    reused: fresh memory costs a page fault per page on first touch, on VMs several times the read)."""
    buffers = [aligned_buffer(0), aligned_buffer(0)]

    def read(k: int, buffer: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        return read_extents(paths, *batch(k), direct, buffer)

    with ThreadPoolExecutor(max_workers=1, thread_name_prefix="read-ahead") as pool:
        pending = pool.submit(read, 0, buffers[0]) if count else None
        for k in range(count):
            assert pending is not None
            positions, buffers[k % 2] = pending.result()
            if k + 1 < count:
                pending = pool.submit(read, k + 1, buffers[(k + 1) % 2])
            yield positions, buffers[k % 2]

"""Copying: each rank reads its sources from the shared file system ahead of time in one thread, receives
other ranks' chunks in another, and writes and forwards every chunk along its transfer's chain of writers,
keeping a file only when its checksum matches. Memory: a few chunks per rank (`stage.chunk_mb`); time: the
bytes over the slowest of shared reads, the network and node-local writes.
"""

from __future__ import annotations

import os
import queue
import threading
from collections.abc import Callable, Iterator, Mapping, Sequence
from pathlib import Path
from typing import Any

import numpy as np

from pipeline import Sim2dlError
from pipeline.runtime.mpi import wait_quietly
from pipeline.runtime.placement import Topology
from pipeline.staging.plan import MAX_CHUNK_BYTES, StagedFile, Transfer, chunk_messages
from pipeline.storage.directio import PAGE, RangeReader, aligned_buffer, open_for_reading
from pipeline.storage.fsutil import Checksum, atomic_path

Message = list[tuple[Path, int, int]]  # (file, offset, length) pieces sent as one chunk

READ_AHEAD_BYTES = 32 << 20  # requested from storage ahead of the chunk being sent


class SourceFiles:
    """The shared files one rank reads, each opened once, with reads ahead of time or direct I/O."""

    def __init__(self, direct: bool, errors: list[str]) -> None:
        self.direct, self.errors = direct, errors
        self.bytes_read = 0
        self._open: dict[Path, Any] = {}  # path -> (fd, direct?) or None when it cannot be opened
        self._advised: dict[Path, int] = {}
        self._ranges = RangeReader()

    def read(self, path: Path, offset: int, view: np.ndarray) -> int:
        """Fill `view` from `path` at `offset`; returns the bytes read (fewer at an unexpected end or an
        I/O error, which is recorded; the writers' checksum check then names the shard)."""
        if path not in self._open:
            self._open[path] = self._open_file(path)
        opened = self._open[path]
        if opened is None:
            return 0
        fd, direct = opened
        try:
            if not direct:
                self._advise(path, fd, offset, view.size)
            n = self._ranges.read(fd, direct, offset, view)
        except OSError as e:
            self.errors.append(f"cannot read source shard {path} at byte {offset}: {e.strerror}")
            return 0
        self.bytes_read += n
        return n

    def _open_file(self, path: Path) -> tuple[int, bool] | None:
        try:
            return open_for_reading(path, self.direct)
        except OSError as e:
            self.errors.append(f"cannot read source shard {path}: {e.strerror}")
            return None

    def _advise(self, path: Path, fd: int, offset: int, length: int) -> None:
        """Keep the storage busy while this rank sends and writes: ask for the next window ahead."""
        ahead = self._advised.get(path, 0)
        if offset + length > ahead - READ_AHEAD_BYTES // 2:
            start = max(ahead, offset)
            os.posix_fadvise(fd, start, READ_AHEAD_BYTES, os.POSIX_FADV_WILLNEED)
            self._advised[path] = start + READ_AHEAD_BYTES

    def close(self) -> None:
        for opened in self._open.values():
            if opened is not None:
                os.close(opened[0])


class Copier:
    """One rank's share of the transfers: the shards it reads (and writes, and sends on) and the shards
    it receives (and writes, and sends on). Reading runs ahead in its own thread, receiving in another,
    so reading, sending and writing overlap across the job; memory is a few chunks per rank."""

    BUFFERS = 3  # chunks in flight per reading rank: one being read, one being sent and written, one spare

    def __init__(
        self,
        comm: Any,
        topo: Topology,
        transfers: Sequence[Transfer],
        dirs: Mapping[int, Path],
        chunk_bytes: int,
        verify_records: Callable[[Path], bool],
        direct_io: bool = False,
        progress: Any = None,
    ) -> None:
        self.comm, self.topo, self.transfers, self.dirs = comm, topo, transfers, dirs
        self.chunk = min(chunk_bytes, MAX_CHUNK_BYTES)
        if direct_io:  # whole pages, so every chunk of a shard starts on a page boundary
            self.chunk = max(PAGE, self.chunk // PAGE * PAGE)
        self.bytes_written = 0
        self.errors: list[str] = []
        self.sources = SourceFiles(direct_io, self.errors)
        self.progress = progress
        self.verify_records = verify_records  # sampled files: no checksum of their own, their records' checks

    @property
    def bytes_read(self) -> int:
        return self.sources.bytes_read

    def chunks(self, src: StagedFile) -> list[list[tuple[Path, int, int]]]:
        return chunk_messages(src, self.chunk)

    @staticmethod
    def message_bytes(message: Sequence[tuple[Path, int, int]]) -> int:
        return sum(length for _, _, length in message)

    def read_all(self) -> None:
        """The shards this rank reads, in transfer order, read ahead by a thread into a few buffers."""
        mine = [t for t in self.transfers if t.reader == self.topo.rank]
        ahead = ReadAhead(self.sources, [self.chunks(t.source) for t in mine], self.chunk, self.BUFFERS)
        try:
            for k, t in enumerate(mine):
                self.deliver(t, ahead.chunks(len(ahead.messages[k])))
        finally:
            ahead.stop()
            self.sources.close()

    def receive_all(self) -> None:
        """The shards this rank writes but another rank reads, received in transfer order."""
        from mpi4py import MPI

        # Two buffers: the next chunk is received while this one is written and forwarded, so the hops of
        # a chain overlap (a pipeline) instead of taking turns.
        buffers = (np.empty(self.chunk, np.uint8), np.empty(self.chunk, np.uint8))
        for t in self.transfers:
            chain = t.chain()
            if self.topo.rank not in chain[1:]:
                continue
            previous = chain[chain.index(self.topo.rank) - 1]

            def received(t: Transfer = t, previous: int = previous) -> Any:
                views = [buffers[k % 2][: self.message_bytes(m)] for k, m in enumerate(self.chunks(t.source))]

                def post(k: int) -> Any:
                    return self.comm.Irecv([views[k], MPI.BYTE], source=previous, tag=t.index)

                pending = post(0) if views else None
                for k, view in enumerate(views):
                    wait_quietly(pending)
                    # the other buffer's chunk was written and its forward completed before this resumed
                    pending = post(k + 1) if k + 1 < len(views) else None
                    yield view

            self.deliver(t, received())

    def deliver(self, t: Transfer, chunks: Any) -> None:
        """Send every chunk on to the next writer, write it here, and keep the file only if its checksum
        matches. After a failure every chunk is still passed on, so no rank waits forever."""
        from mpi4py import MPI

        chain = t.chain()
        position = chain.index(self.topo.rank)
        forward_to = chain[position + 1] if position + 1 < len(chain) else None
        node = self.topo.node
        where = f"node {node} ({self.topo.hostname})"
        final = self.dirs[node] / t.source.name
        checksum = Checksum()
        try:
            with atomic_path(final) as tmp:
                failure = None
                with open(tmp, "wb") as out:
                    for view in chunks:
                        send = None
                        if forward_to is not None:
                            send = self.comm.Isend([view, MPI.BYTE], dest=forward_to, tag=t.index)
                        if failure is None:
                            try:
                                out.write(memoryview(view))
                            except OSError as e:
                                failure = f"cannot write {final} on {where}: {e.strerror}"
                        checksum.update(memoryview(view))
                        self.bytes_written += view.size
                        if self.progress is not None:
                            self.progress.update(view.size)
                        if send is not None:
                            wait_quietly(send)  # the buffer is reused once delivered
                if failure is None:
                    expected = t.source.checksum
                    ok = checksum.text() == expected if expected is not None else self.verify_records(tmp)
                    if not ok:
                        failure = (
                            f"shard {t.source.name} on {where}: checksum mismatch (corrupt source "
                            f"{t.source.pieces[0][0]} or copy); the copy was not kept"
                        )
                if failure is not None:
                    raise Sim2dlError(failure)
        except Sim2dlError as e:
            self.errors.append(str(e))

    def run(self) -> None:
        receiver = threading.Thread(target=self._guard(self.receive_all), name="stage-receive")
        receiver.start()
        self._guard(self.read_all)()
        receiver.join()

    def _guard(self, fn: Any) -> Any:
        def run() -> None:
            try:
                fn()
            except Exception as e:  # reported collectively; a thread must not die silently
                self.errors.append(f"{type(e).__name__}: {e}")

        return run


class ReadAhead:
    """A thread reading the messages' byte ranges in order into a few reused buffers, `buffers` chunks ahead
    of the consumer, which takes each transfer's chunks in turn and gives each buffer back once used."""

    def __init__(
        self, sources: SourceFiles, messages: Sequence[Sequence[Message]], chunk: int, buffers: int
    ) -> None:
        self.sources, self.messages = sources, messages
        self.free: queue.Queue[np.ndarray] = queue.Queue()
        for _ in range(buffers):
            self.free.put(aligned_buffer(chunk))
        self.full: queue.Queue[tuple[np.ndarray, int] | BaseException | None] = queue.Queue()
        self.stopping = threading.Event()
        self.thread = threading.Thread(target=self._produce, name="stage-read", daemon=True)
        self.thread.start()

    def _produce(self) -> None:
        try:
            for transfer_messages in self.messages:
                for message in transfer_messages:
                    buf, filled = self.free.get(), 0
                    if self.stopping.is_set():
                        return
                    for path, offset, length in message:
                        view = buf[filled : filled + length]
                        n = self.sources.read(path, offset, view)
                        if n != length:
                            view[n:] = 0  # the writers' checksum check names the shard
                        filled += length
                    self.full.put((buf, filled))
        except BaseException as e:  # handed to the consumer, which reports it
            self.full.put(e)
        self.full.put(None)

    def chunks(self, count: int) -> Iterator[np.ndarray]:
        """The next transfer's `count` chunks, each valid until the next is taken."""
        for _ in range(count):
            item = self.full.get()
            if item is None or isinstance(item, BaseException):
                raise item or RuntimeError("reader stopped early")
            buf, n = item
            yield buf[:n]
            self.free.put(buf)

    def stop(self) -> None:
        self.stopping.set()
        self.free.put(np.empty(0, np.uint8))  # wakes the reader if it waits for a buffer
        self.thread.join()

"""MPI helpers. Every step runs the same code with 1..N ranks; without mpi4py it runs as one rank.

Data between ranks moves as numpy arrays (one all-to-all), never as a Python object per record."""

from __future__ import annotations

import os
import sys
import time
from collections.abc import Sequence
from typing import Any, TypeVar

import numpy as np

T = TypeVar("T")


class SerialComm:
    """The subset of mpi4py's communicator the steps use, for a single process without MPI."""

    rank = 0
    size = 1

    def Get_rank(self) -> int:
        return 0

    def Get_size(self) -> int:
        return 1

    def barrier(self) -> None:
        pass

    def bcast(self, obj: Any, root: int = 0) -> Any:
        return obj

    def gather(self, obj: Any, root: int = 0) -> list[Any]:
        return [obj]

    def allgather(self, obj: Any) -> list[Any]:
        return [obj]

    def allreduce(self, obj: Any, op: Any = None) -> Any:
        return obj

    def alltoall(self, objs: Sequence[Any]) -> list[Any]:
        return list(objs)

    def scatter(self, objs: Sequence[Any] | None, root: int = 0) -> Any:
        assert objs is not None
        return objs[0]

    def Abort(self, code: int = 1) -> None:
        sys.exit(code)


def _single_copy_shared_memory() -> None:
    """Let MPICH move large intra-node messages with one copy (CMA, process_vm_readv) instead of two
    through a shared buffer: staging moves whole shards between ranks of a node. Only where the kernel
    allows it between sibling processes (no Yama restriction); other MPIs ignore the variable."""
    try:
        with open("/proc/sys/kernel/yama/ptrace_scope") as f:
            allowed = f.read().strip() == "0"
    except OSError:
        allowed = True  # no Yama: same-user processes may read each other's memory
    if allowed:
        os.environ.setdefault("MPIR_CVAR_CH4_CMA_ENABLE", "1")


def world() -> Any:
    """MPI.COMM_WORLD if mpi4py is available (works launched by mpiexec/srun or as a singleton)."""
    _single_copy_shared_memory()
    try:
        from mpi4py import MPI
    except ImportError:
        return SerialComm()
    return MPI.COMM_WORLD


def mpi_library() -> str | None:
    """The MPI library this process uses (first line of MPI_Get_library_version): provenance, and the
    proof that a container rank runs the host's MPI."""
    try:
        from mpi4py import MPI
    except ImportError:
        return None
    from pipeline.runtime.host_mpi import version_line

    return version_line(MPI.Get_library_version())


def block(items: Sequence[T], rank: int, size: int) -> Sequence[T]:
    """The rank's contiguous block of `items` (sizes differ by at most one)."""
    n = len(items)
    start = rank * n // size
    stop = (rank + 1) * n // size
    return items[start:stop]


def exclusive_sum(comm: Any, value: int) -> int:
    """The sum of `value` over the ranks before this one (0 on rank 0)."""
    return sum(comm.allgather(value)[: comm.Get_rank()])


def owner_ranks(starts: np.ndarray, indices: np.ndarray) -> np.ndarray:
    """The rank holding each global index, where rank r holds [starts[r], starts[r + 1])."""
    return np.searchsorted(starts, indices, side="right") - 1


def exchange(comm: Any, items: np.ndarray, destinations: np.ndarray) -> np.ndarray:
    """Send each item (an element of a numpy array, structured or not) to the rank in `destinations`;
    returns what this rank received, in the senders' rank order and each sender's order. One
    MPI_Alltoallv of the arrays' bytes straight into the result (no pickled copies): the peak is the
    array sent plus the array received."""
    size = comm.Get_size()
    if size == 1:
        return items
    from mpi4py import MPI

    if len(destinations) > 1 and (np.diff(destinations) < 0).any():
        order = np.argsort(destinations, kind="stable")
        items, destinations = items[order], destinations[order]
    items = np.ascontiguousarray(items)
    counts = np.bincount(destinations, minlength=size).astype(np.int64)
    received_counts = np.empty(size, np.int64)
    comm.Alltoall(counts, received_counts)
    received = np.empty(int(received_counts.sum()), items.dtype)
    itemsize = items.dtype.itemsize

    def counts_and_displacements(n: np.ndarray) -> tuple[list[int], list[int]]:
        nbytes = n * itemsize
        return nbytes.tolist(), (np.cumsum(nbytes) - nbytes).tolist()

    comm.Alltoallv(
        [items.view(np.uint8), counts_and_displacements(counts), MPI.BYTE],
        [received.view(np.uint8), counts_and_displacements(received_counts), MPI.BYTE],
    )
    return received


def sample_sort(comm: Any, items: np.ndarray, key: str | None = None) -> np.ndarray:
    """Items (plain, or structured and sorted by field `key`) sorted across ranks: rank r ends with the r-th
    stretch of the global order (stretches differ in length). Sorts `items` in place first; the peak is
    the items sent plus those received."""
    items.sort(**({"order": key} if key else {}))
    size = comm.Get_size()
    if size == 1:
        return items
    keys = items[key] if key else items
    picks = np.linspace(0, len(items) - 1, min(len(items), 16 * size)).astype(np.int64) if len(items) else []
    samples = np.sort(np.concatenate(comm.allgather(keys[picks])))
    splitters = samples[(np.arange(1, size) * len(samples)) // size] if len(samples) else samples
    received = exchange(comm, items, np.searchsorted(splitters, keys, side="right"))
    received.sort(**({"order": key} if key else {}))
    return received


def gather_range(comm: Any, items: np.ndarray, first: int, wanted: range) -> np.ndarray:
    """The items numbered `wanted` (a range of global numbers) on every rank, where this rank holds the
    numbers from `first` on, in order, and the ranks' holdings follow each other; ranges may overlap."""
    ranges = comm.allgather((wanted.start, wanted.stop))
    held = len(items)
    picks = [np.arange(min(max(lo - first, 0), held), min(max(hi - first, 0), held)) for lo, hi in ranges]
    destinations = np.concatenate([np.full(len(p), r) for r, p in enumerate(picks)]).astype(np.int64)
    return exchange(comm, items[np.concatenate(picks).astype(np.int64)], destinations)


def wait_quietly(request: Any) -> None:
    """Wait for an MPI request without spinning on a core: polls with a growing sleep (10 to 100 us).

    MPI's blocking calls busy-poll, which is right with a core per rank; staging runs several ranks, each
    with a reading, a sending and a receiving thread, and a rank waiting for rank 0's serial work (an
    adaptive design's fit, a summary) would take a core from it. The cap is short because MPI moves data
    between nodes only inside MPI calls (UCX over TCP sends a large message in pieces, one per progress
    call): longer sleeps make staging across nodes several times slower (docs/benchmarks.md, design
    measurements)."""
    delay = 1e-5
    while not request.Test():
        time.sleep(delay)
        delay = min(delay * 2, 1e-4)


def all_ok(comm: Any, error: BaseException | None) -> None:
    """Collective error check: if any rank failed, every rank raises (so none hangs in a collective).

    The ranks first meet at a barrier they wait for quietly (`wait_quietly`): this is where ranks wait
    for each other's uneven work, often rank 0's alone, which a spinning rank would slow.

    With several ranks every rank raises the same CollectiveError (the first failing rank's message), so the
    CLI can print it once and all ranks exit normally instead of racing to print and abort."""
    if comm.Get_size() > 1:
        wait_quietly(comm.Ibarrier())
    messages = comm.allgather(None if error is None else str(error))
    failed = [(r, m) for r, m in enumerate(messages) if m is not None]
    if not failed:
        return
    if comm.Get_size() == 1 and error is not None:
        raise error
    from pipeline import CollectiveError

    rank, message = failed[0]
    raise CollectiveError(message, rank) from error

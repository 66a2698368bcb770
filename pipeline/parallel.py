"""MPI helpers. Every step runs the same code with 1..N ranks; without mpi4py it runs as one rank."""

from __future__ import annotations

import sys
from collections.abc import Sequence
from typing import Any, TypeVar

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

    def Abort(self, code: int = 1) -> None:
        sys.exit(code)


def world() -> Any:
    """MPI.COMM_WORLD if mpi4py is available (works launched by mpiexec/srun or as a singleton)."""
    try:
        from mpi4py import MPI
    except ImportError:
        return SerialComm()
    return MPI.COMM_WORLD


def block(items: Sequence[T], rank: int, size: int) -> Sequence[T]:
    """The rank's contiguous block of `items` (sizes differ by at most one)."""
    n = len(items)
    start = rank * n // size
    stop = (rank + 1) * n // size
    return items[start:stop]


def all_ok(comm: Any, error: BaseException | None) -> None:
    """Collective error check: if any rank failed, every rank raises (so none hangs in a collective)."""
    messages = comm.allgather(None if error is None else str(error))
    failed = [(r, m) for r, m in enumerate(messages) if m is not None]
    if error is not None:
        raise error
    if failed:
        from pipeline import Sim2dlError

        rank, message = failed[0]
        raise Sim2dlError(f"rank {rank} failed: {message}")

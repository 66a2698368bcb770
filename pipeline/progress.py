"""Progress bars for long steps: rank 0 shows its own share (ranks work in lockstep-sized blocks)."""

from __future__ import annotations

from collections.abc import Iterable, Iterator
from typing import TypeVar

from tqdm import tqdm

T = TypeVar("T")


def progress_bar(total: int, desc: str, rank: int, size: int, unit: str = "file") -> tqdm:
    """A bar to advance by hand (`update(n)`, then `close()`)."""
    label = f"{desc} (rank 0 of {size})" if size > 1 else desc
    return tqdm(total=total, desc=label, unit=unit, disable=rank != 0, mininterval=2.0, smoothing=0.1)


def progress(items: Iterable[T], total: int, desc: str, rank: int, size: int, unit: str = "file") -> Iterator[T]:
    with progress_bar(total, desc, rank, size, unit) as bar:
        for item in items:
            yield item
            bar.update(1)

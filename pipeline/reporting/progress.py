"""Progress bars for long steps, shown by rank 0: its own share where ranks work in blocks of equal size
(labelled 'rank 0 of N'), or every rank's work where rank 0 hears of it (`every_rank`: the ensemble's
dispatcher counts each chunk a rank finishes)."""

from __future__ import annotations

from collections.abc import Iterable, Iterator
from typing import TypeVar

from tqdm import tqdm

T = TypeVar("T")


def progress_bar(
    total: int, desc: str, rank: int, size: int, unit: str = "file", every_rank: bool = False
) -> tqdm:
    """A bar to advance by hand (`update(n)`, then `close()`); `total` is rank 0's share, or with
    `every_rank` the whole step's (rank 0 then counts every rank's work)."""
    label = f"{desc} (rank 0 of {size})" if size > 1 and not every_rank else desc
    return tqdm(total=total, desc=label, unit=unit, disable=rank != 0, mininterval=2.0, smoothing=0.1)


def progress(
    items: Iterable[T], total: int, desc: str, rank: int, size: int, unit: str = "file"
) -> Iterator[T]:
    with progress_bar(total, desc, rank, size, unit) as bar:
        for item in items:
            yield item
            bar.update(1)

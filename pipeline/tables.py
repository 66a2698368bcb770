"""The CSV tables steps hand each other: the manifest and the rejects lists."""

from __future__ import annotations

import csv
from collections.abc import Iterable, Sequence
from pathlib import Path

from pipeline.fsutil import atomic_path

MANIFEST_COLUMNS = ("path", "bytes", "sample_id", "shape", "length", "sort_key", "status", "part", "record")
REJECT_COLUMNS = ("path", "sample_id", "reason")


def write_csv(path: Path, columns: Sequence[str], rows: Iterable[Sequence[object]]) -> None:
    with atomic_path(path) as tmp, open(tmp, "w", newline="") as f:
        writer = csv.writer(f)
        writer.writerow(columns)
        writer.writerows(rows)


def read_csv(path: Path) -> list[dict[str, str]]:
    with open(path, newline="") as f:
        return list(csv.DictReader(f))

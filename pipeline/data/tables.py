"""The tables steps hand each other and people open.

- The manifest: one row per input file (accepted or rejected), a Parquet file per ingest part
  (`ingest/manifest/part-K-of-N.parquet`, written by the rank that ingested that part); together a
  Parquet dataset that pyarrow, pandas (`pd.read_parquet(dir)`) and polars read as one table.
- The provenance of the shards: one row per record (shard, record, sample id, source file), a Parquet
  file per merge rank (`merged/provenance/`).
- The rejects lists: small CSV files, one reason per rejected file or sample.

Memory: a table is built from one part's (or one rank's) rows at a time, never the whole dataset's.
"""

from __future__ import annotations

import csv
from collections.abc import Iterable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from pathlib import Path
from typing import Any, NamedTuple

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq

from pipeline.storage.fsutil import atomic_path

MANIFEST_SCHEMA = pa.schema(
    [
        ("path", pa.string()),
        ("bytes", pa.int64()),
        ("sample_id", pa.string()),
        ("shape", pa.string()),
        ("length", pa.int64()),
        ("sort_key", pa.int64()),
        ("status", pa.string()),  # accepted | rejected
        ("part", pa.string()),
        ("record", pa.int64()),
        ("reason", pa.string()),  # why it was rejected; empty when accepted
        ("index", pa.int64()),  # the sample's index along source.samples_along; null: the file is the sample
    ]
)
PROVENANCE_SCHEMA = pa.schema(
    [
        ("shard", pa.int64()),
        ("record", pa.int64()),
        ("sample_id", pa.string()),
        ("source", pa.string()),
        # the sample's index along source.samples_along in `source`; null: the whole file
        ("index", pa.int64()),
    ]
)
MANIFEST_COLUMNS = tuple(MANIFEST_SCHEMA.names)


class Reject(NamedTuple):
    """One line of a rejects list: the input file, its sample id (empty when it could not be read), why."""

    path: str
    sample_id: str
    reason: str


REJECT_COLUMNS = Reject._fields


def write_parquet(path: Path, columns: Mapping[str, Sequence[Any]], schema: pa.Schema) -> None:
    """One Parquet file from column lists or arrays, atomically (temporary file, then rename)."""
    table = pa.table(
        {name: pa.array(columns[name], schema.field(name).type) for name in schema.names}, schema=schema
    )
    with atomic_path(path) as tmp:
        pq.write_table(table, tmp, compression="zstd")


@contextmanager
def parquet_writer(path: Path, schema: pa.Schema) -> Iterator[pq.ParquetWriter]:
    """A Parquet file written a table (row group) at a time, renamed into place when complete."""
    with atomic_path(path) as tmp, pq.ParquetWriter(tmp, schema, compression="zstd") as writer:
        yield writer


def read_table(path: Path, columns: Sequence[str] | None = None) -> pa.Table:
    """A Parquet file, or a directory of them read as one table (in file-name order)."""
    if path.is_dir():
        files = sorted(path.glob("*.parquet"))
        if not files:
            raise FileNotFoundError(f"no Parquet files in {path}")
        return pa.concat_tables(pq.read_table(f, columns=columns) for f in files)
    return pq.read_table(path, columns=columns)


def read_rows(path: Path) -> list[dict[str, Any]]:
    """Every row of a (small) table as dicts: for tests and people, not for the steps."""
    return read_table(path).to_pylist()


def write_csv(path: Path, columns: Sequence[str], rows: Iterable[Sequence[object]]) -> None:
    with atomic_path(path) as tmp, open(tmp, "w", newline="") as f:
        writer = csv.writer(f)
        writer.writerow(columns)
        writer.writerows(rows)


def read_csv(path: Path) -> list[dict[str, str]]:
    with open(path, newline="") as f:
        return list(csv.DictReader(f))


def accepted_records(manifest_piece: Path, part_name: str) -> np.ndarray:
    """The record numbers, in an ingest part, of the part's accepted files (duplicates are not), from the
    manifest piece of its chunk (which may hold the records of several parts: one per split)."""
    table = pq.read_table(manifest_piece, columns=["record", "status", "part"])
    accepted = pc.and_(pc.equal(table["status"], "accepted"), pc.equal(table["part"], part_name))
    return table.filter(accepted)["record"].to_numpy().astype(np.int64)

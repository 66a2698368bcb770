"""Event-indexed tables: one sample per event, where an event is a range of rows of a table (detector
hits, particles, tracks), as KM3NeT, IceCube, Geant4 and PyTables/pandas HDF5 store them.

A table is a compound dataset (named columns; PyTables and pandas `format="table"` write these) or a group
holding one 1-D dataset per column (km3pipe's split tables); any format whose files have groups and 1-D
arrays works the same (HDF5, NetCDF, Zarr). A field names the table (`path`) and the columns it takes
(`columns`); each event's rows become a (rows, columns) array (one column: (rows,)), a variable-length field
as ROOT's jagged branches are. Events are given by

- `ragged_by: PATH`: an index table with a (start, count) row per event (km3pipe's `hits/_indices`, a
  compound (index, n_items), or an (events, 2) integer array); event k's id is k;
- `group_by: COLUMN`: a column of the table, sorted, equal within an event (`group_id`, `event_id`); the
  event's id is that value;
- `key: COLUMN` (with `reduce: first | sum | mean | count`): a per-event field from ANOTHER table whose
  rows carry the event's id in COLUMN (sorted; several rows per event, e.g. one per muon), reduced to one
  value per event. Its events are those of the file's ragged_by or group_by field.

Bad rows are rejects of their event only (an index row pointing past the end of the table, a negative
count, an id missing from a keyed table), named with the row and the reason.

Memory per open file: 16 bytes per event (starts, counts) and, for group_by/key, the ids of the events
(8 bytes each); never a whole column: sorted id columns are scanned `SCAN_ROWS` rows at a time, and a range
of events reads only the rows that hold it. Time: one pass over each id column per file opened, and one
hyperslab per column per range of events.

`sim2dl inspect` asks this module which of a file's tables hold events (`propose_tables`: a group of
columns beside its `_indices`, else the largest table with an event id column, and the other tables
with that column keyed by it) and how to name them in a starter config (`starter_tables`), so that the
knowledge of this layout is in one file; it sees the surveyed arrays' names, kinds, shapes and columns.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, Protocol

import numpy as np

from pipeline.formats.readers.base import FieldSpec, MissingArray, OpenFile, SampleError

SCAN_ROWS = 1 << 20  # rows of an id column read at a time (8 MB of int64)
REDUCTIONS = ("first", "sum", "mean", "count")


def table_rows(opened: OpenFile, table: str, column: str) -> int:
    """The number of rows of the table (the length of one of its columns)."""
    try:
        return opened.shape(table)[0]  # a compound dataset
    except MissingArray:
        return opened.shape(f"{table}/{column}")[0]  # a group of 1-D columns


def read_columns(opened: OpenFile, table: str, columns: Sequence[str], start: int, stop: int) -> np.ndarray:
    """Rows [start, stop) of the columns: (rows, columns), or (rows,) for one column; a column whose values
    are vectors (pandas' values_block_0) gives its values side by side. Memory: the block returned and one
    column read (a group of columns) or the rows read (a compound table)."""
    try:
        rows = opened.read(table, (slice(start, stop),))
    except MissingArray:  # a group of 1-D columns, read one at a time
        rows = None
    if rows is not None:
        if rows.dtype.names is None:
            raise SampleError(f"table '{table}' is an array, not a table: name its columns' table or group")
        missing = [c for c in columns if c not in rows.dtype.names]
        if missing:
            raise SampleError(f"table '{table}' has no column {missing} (it has {list(rows.dtype.names)})")

    def column(name: str) -> np.ndarray:
        part = rows[name] if rows is not None else opened.read(f"{table}/{name}", (slice(start, stop),))
        if part.dtype.kind not in "biuf":
            raise SampleError(f"table '{table}': column '{name}' is not numbers (dtype {part.dtype})")
        return part.reshape(part.shape[0], int(np.prod(part.shape[1:])))  # (rows, values per row)

    first = column(columns[0])
    if len(columns) == 1:
        return first[:, 0] if first.shape[1] == 1 else first
    # the block's dtype: what every column fits in, from the dtypes alone (no column read twice)
    dtypes = [first.dtype] + [
        (rows.dtype.fields[c][0].base if rows is not None else np.dtype(opened.stored_dtype(f"{table}/{c}")))
        for c in columns[1:]
    ]
    widths = [first.shape[1]] + [
        int(np.prod(rows.dtype.fields[c][0].shape if rows is not None else opened.shape(f"{table}/{c}")[1:]))
        for c in columns[1:]
    ]
    block = np.empty((first.shape[0], sum(widths)), np.result_type(*dtypes))
    block[:, : widths[0]] = first
    del first
    at = widths[0]
    for name, width in zip(columns[1:], widths[1:], strict=True):
        part = column(name)
        if part.shape != (block.shape[0], width):
            raise SampleError(
                f"table '{table}': column '{name}' has {part.shape[0]} rows here, not {block.shape[0]}"
            )
        block[:, at : at + width] = part
        at += width
    return block


def sorted_runs(opened: OpenFile, table: str, column: str) -> tuple[np.ndarray, np.ndarray]:
    """The runs of equal values of a sorted column: (the values, the row where each run starts, plus the
    row count at the end), read SCAN_ROWS rows at a time. SampleError when the column is not sorted."""
    rows = table_rows(opened, table, column)
    values: list[np.ndarray] = []
    starts: list[np.ndarray] = []
    last = None
    for first in range(0, rows, SCAN_ROWS):
        ids = read_columns(opened, table, [column], first, min(rows, first + SCAN_ROWS))
        if ids.ndim != 1 or ids.dtype.kind not in "iu":
            raise SampleError(
                f"column '{column}' of '{table}' is not one integer per row (dtype {ids.dtype})"
            )
        if ids.size and ((last is not None and ids[0] < last) or np.any(ids[1:] < ids[:-1])):
            raise SampleError(f"column '{column}' of '{table}' is not sorted (events must be contiguous)")
        new = (
            np.flatnonzero(np.concatenate([[last is None or ids[0] != last], ids[1:] != ids[:-1]]))
            if ids.size
            else []
        )
        values.append(ids[new].astype(np.int64))
        starts.append(np.asarray(new, np.int64) + first)
        last = ids[-1] if ids.size else last
    starts.append(np.array([rows], np.int64))
    return np.concatenate(values or [np.zeros(0, np.int64)]), np.concatenate(starts)


@dataclass(frozen=True)
class Events:
    """The events of one file: event k holds rows [starts[k], starts[k] + counts[k]) of its table; its id
    is ids[k]. Index rows that cannot be used stay in (so every event is counted) with a reason."""

    starts: np.ndarray  # int64
    counts: np.ndarray  # int64
    ids: np.ndarray  # int64
    bad: dict[int, str]  # event -> why its rows cannot be read

    def __len__(self) -> int:
        return len(self.starts)

    @classmethod
    def ragged(cls, opened: OpenFile, index: str, rows: int, table: str) -> Events:
        """From an index table of (start, count) rows (compound: its first two columns)."""
        raw = opened.read(index, ())
        if raw.dtype.names is not None and len(raw.dtype.names) >= 2:
            pairs = np.stack([raw[raw.dtype.names[0]], raw[raw.dtype.names[1]]], axis=1)
        else:
            pairs = raw.reshape(len(raw), -1) if raw.ndim else raw.reshape(0, 2)
        if pairs.ndim != 2 or pairs.shape[1] != 2 or pairs.dtype.kind not in "iu":
            raise SampleError(f"index table '{index}' is not (start, count) integer rows (dtype {raw.dtype})")
        starts, counts = pairs[:, 0].astype(np.int64), pairs[:, 1].astype(np.int64)
        bad = {}
        for k in np.flatnonzero((counts < 0) | (starts < 0) | (starts + counts > rows)):
            if counts[k] < 0:
                bad[int(k)] = f"index row {k} of '{index}': negative count {counts[k]}"
            else:
                bad[int(k)] = (
                    f"index row {k} of '{index}' points past the end of '{table}' (rows {starts[k]}.."
                    f"{starts[k] + counts[k]} of {rows})"
                )
        return cls(starts, counts, np.arange(len(starts), dtype=np.int64), bad)

    @classmethod
    def grouped(cls, opened: OpenFile, table: str, column: str) -> Events:
        ids, bounds = sorted_runs(opened, table, column)
        return cls(bounds[:-1], np.diff(bounds), ids, {})

    def rows(self, first: int, stop: int) -> tuple[int, int]:
        """The rows to read for events [first, stop): from the first good event's start to the last's end."""
        good = self.counts[first:stop] > 0
        for k in self.bad:
            if first <= k < stop:
                good[k - first] = False
        if not good.any():
            return 0, 0
        starts = self.starts[first:stop][good]
        return int(starts.min()), int((starts + self.counts[first:stop][good]).max())


class Keyed:
    """A table whose rows carry an event id in a sorted column: each id's rows, found by binary search."""

    def __init__(self, opened: OpenFile, table: str, column: str) -> None:
        self.ids, self.bounds = sorted_runs(opened, table, column)

    def rows_of(self, event_id: int) -> tuple[int, int] | None:
        k = int(np.searchsorted(self.ids, event_id))
        if k == len(self.ids) or self.ids[k] != event_id:
            return None
        return int(self.bounds[k]), int(self.bounds[k + 1])


def event_samples(
    opened: OpenFile, field: FieldSpec, events: Events, first: int, stop: int
) -> list[np.ndarray]:
    """Events [first, stop) of a field with ragged_by or group_by: one (rows, columns) array each. An event
    that cannot be read raises SampleError (the batch is then read one event at a time, by the caller)."""
    bad = [events.bad[k] for k in range(first, stop) if k in events.bad]
    if bad:
        raise SampleError(bad[0])
    columns = list(field.columns or ())
    low, high = events.rows(first, stop)
    block = read_columns(opened, field.path, columns, low, high)
    return [
        block[events.starts[k] - low : events.starts[k] - low + events.counts[k]] for k in range(first, stop)
    ]


def keyed_samples(
    opened: OpenFile, field: FieldSpec, keyed: Keyed, events: Events, first: int, stop: int
) -> list[np.ndarray]:
    """Events [first, stop) of a keyed field: its table's rows of each event's id, reduced to one value."""
    columns = list(field.columns or ())
    found = [keyed.rows_of(int(events.ids[k])) for k in range(first, stop)]
    if field.reduce != "count":
        missing = [int(events.ids[first + j]) for j, rows in enumerate(found) if rows is None]
        if missing:
            raise SampleError(
                f"field '{field.name}': event id {missing[0]} is not in '{field.path}' ({field.key})"
            )
    spans = [rows for rows in found if rows is not None]
    low = min((a for a, _ in spans), default=0)
    high = max((b for _, b in spans), default=0)
    block = read_columns(opened, field.path, columns, low, high) if high > low else None
    values = []
    for rows in found:
        if field.reduce == "count":
            values.append(np.asarray(0 if rows is None else rows[1] - rows[0], np.int64))
            continue
        assert rows is not None and block is not None
        part = block[rows[0] - low : rows[1] - low]
        if field.reduce == "first":
            values.append(part[0])
        elif field.reduce == "sum":
            values.append(part.sum(axis=0))
        else:
            values.append(part.mean(axis=0))
    return values


# ---------------------------------------------------------------- what `sim2dl inspect` proposes of tables


class SurveyedArray(Protocol):
    """An array as `sim2dl inspect` saw it across files (pipeline.steps.inspect.Field)."""

    path: str
    kind: str
    shape: tuple[int | None, ...] | None
    columns: tuple[tuple[str, str], ...] | None
    values: int

    @property
    def numeric(self) -> bool: ...


EVENT_ID_COLUMNS = ("group_id", "event_id", "eventid", "evt_id", "event", "event_number", "eventnumber")


@dataclass(frozen=True)
class TableField:
    """A field proposed from tables: columns with one sample per event (ragged_by, group_by) or a per-event
    value keyed by the event id (key)."""

    name: str
    spec: dict[str, Any]
    uses: tuple[str, ...]  # the arrays and tables it reads (not mapped on their own)
    rows: int
    why: str

    @property
    def events(self) -> bool:
        return "key" not in self.spec


def numeric_column(dtype: str) -> bool:
    try:
        return np.dtype(dtype).kind in "biuf"
    except TypeError:  # a subarray ('float64[3]') or nested column: not proposed
        return False


def table_spec(path: str, columns: Sequence[str], **how: Any) -> dict[str, Any]:
    shape = [None] if len(columns) == 1 else [None, len(columns)]
    spec: dict[str, Any] = {"path": path, "columns": list(columns), **how}
    return spec if "key" in how else {**spec, "shape": shape}


def propose_tables(fields: Sequence[SurveyedArray]) -> list[TableField]:
    """Event-indexed tables in the files: a group of 1-D columns beside an index table (GROUP/_indices:
    ragged_by); else the largest compound table with an event id column (group_by); and, beside either,
    the other tables with that id column, keyed by it (their first row per event)."""
    proposals: list[TableField] = []
    for index in fields:
        group, _, leaf = index.path.rpartition("/")
        if leaf != "_indices" or not group or index.kind != "table" or len(index.columns or ()) < 2:
            continue
        columns = [
            f
            for f in fields
            if f.path.rpartition("/")[0] == group
            and f is not index
            and f.numeric
            and f.shape is not None
            and len(f.shape) == 1
        ]
        if columns:
            names = [f.path.rpartition("/")[2] for f in columns]
            why = f"'{index.path}' indexes the rows of {group}'s columns: one sample per (start, count) row"
            spec = table_spec(group, names, ragged_by=index.path)
            proposals.append(
                TableField(group, spec, (index.path, *(f.path for f in columns)), columns[0].values, why)
            )
    with_ids = []
    for table in fields:
        if table.kind != "table" or table.path.endswith("/_indices") or not table.shape:
            continue
        columns = dict(table.columns or ())
        id_column = next(
            (c for c in columns if c.lower() in EVENT_ID_COLUMNS and numeric_column(columns[c])), None
        )
        values = [
            c for c, dtype in columns.items() if c not in (id_column, "index") and numeric_column(dtype)
        ]
        if id_column is not None and values:
            with_ids.append((table, id_column, values))
    if not proposals and with_ids:
        table, id_column, values = max(with_ids, key=lambda t: t[0].shape[0] if t[0].shape else 0)
        why = (
            f"column '{id_column}' of '{table.path}' names the event of each row (sorted): "
            "one sample per event"
        )
        spec = table_spec(table.path, values, group_by=id_column)
        proposals.append(TableField(table.path, spec, (table.path,), table.values, why))
    if proposals:
        used = {path for p in proposals for path in p.uses}
        for table, id_column, values in with_ids:
            if table.path not in used:
                why = f"'{table.path}' has rows per event ('{id_column}'): its first row of each event"
                spec = table_spec(table.path, values, key=id_column, reduce="first")
                proposals.append(TableField(table.path, spec, (table.path,), table.values, why))
    return proposals


def starter_tables(tables: Sequence[TableField]) -> tuple[dict[str, Any], str, list[str]]:
    """A starter config's fields for proposed tables, named after their tables (pandas' KEY/table after
    its key), the feature (the events' table with the most rows) and the labels (the keyed tables)."""
    fields: dict[str, Any] = {}
    for table in tables:
        name = re.sub(r"\W+", "_", table.name.rstrip("/").split("/")[-1]).strip("_") or "table"
        if name == "table" and "/" in table.name:  # pandas' KEY/table: the key names it
            name = re.sub(r"\W+", "_", table.name.split("/")[-2]) or "table"
        while name in fields:
            name += "_"
        fields[name] = table.spec
    events = [(name, t) for name, t in zip(fields, tables, strict=False) if t.events]
    feature = max(events, key=lambda pair: pair[1].rows)[0]
    labels = [name for name, t in zip(fields, tables, strict=False) if not t.events]
    return fields, feature, labels

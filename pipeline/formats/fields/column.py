"""{column: NAME}: a column of source.labels_table (CSV or Parquet, a row per run), from the row whose
key column (labels_table.key, default `run`) equals the file's match value: its id (default) or the
value of the field labels_table.match names (an attribute or a path group). A file with no row, or with
more than one, is rejected with the reason.

Memory: the table as Arrow columns and its keys as one sorted numpy array (a few bytes per run, no
Python object per row); a lookup is a binary search."""

from __future__ import annotations

import re
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.csv as pacsv
import pyarrow.parquet as pq

from pipeline import Sim2dlError
from pipeline.formats.fields.base import FileInfo, ValueSource
from pipeline.formats.readers.base import FieldSpec, SampleError

RUN_DIRECTORY = "run_directory"  # labels_table.match: the ensemble run's directory in the file's path
RUN_NAME = re.compile(r"run-[0-9]+")  # an ensemble run's directory (pipeline.ensemble.plan names them)
RUNS_TABLES = ("runs.parquet", "runs.csv")  # what an ensemble writes beside its runs (or a user, as a CSV)
# a runs table sim2dl wrote: its schema's metadata holds its design's digest
DESIGN_METADATA = b"sim2dl_design"


def run_directory(relative: str | Path) -> str | None:
    """The innermost directory of a file's relative path named like an ensemble's run, or None."""
    runs = [part for part in Path(relative).parts[:-1] if RUN_NAME.fullmatch(part)]
    return runs[-1] if runs else None


def table_settings(source: Mapping[str, Any]) -> dict[str, Any] | None:
    """source.labels_table as {path, key, match} (a bare path has the defaults), or None."""
    setting = source.get("labels_table")
    if setting is None:
        return None
    if isinstance(setting, str):
        return {"path": setting, "key": "run", "match": None}
    return {"key": "run", "match": None, **setting}


class LabelsTable:
    def __init__(self, path: Path, key: str) -> None:
        try:
            if path.suffix.lower() == ".parquet":
                self.table = pq.read_table(path)
            else:
                self.table = pacsv.read_csv(path)
        except (OSError, pa.ArrowInvalid) as e:
            raise Sim2dlError(f"cannot read source.labels_table {path}: {e}") from None
        self.path = path
        if key not in self.table.column_names:
            raise Sim2dlError(
                f"source.labels_table {path} has no key column '{key}' (config key "
                "'source.labels_table.key'; "
                f"its columns: {self.table.column_names})"
            )
        column = self.table[key].combine_chunks()
        self.integer_keys = pa.types.is_integer(column.type)
        keys = column.to_numpy(zero_copy_only=False)
        keys = keys.astype(np.int64) if self.integer_keys else keys.astype(str)
        self.order = np.argsort(keys, kind="stable")
        self.keys = keys[self.order]
        self.key = key

    def row(self, value: str) -> int:
        """The table row whose key is `value`; SampleError when there is none or more than one."""
        try:
            wanted: Any = int(value) if self.integer_keys else value
        except ValueError:
            raise SampleError(f"no row of {self.path.name} has {self.key} = '{value}'") from None
        first = int(np.searchsorted(self.keys, wanted, "left"))
        last = int(np.searchsorted(self.keys, wanted, "right"))
        if first == last:
            raise SampleError(f"no row of {self.path.name} has {self.key} = '{value}'")
        if last - first > 1:
            raise SampleError(f"{last - first} rows of {self.path.name} have {self.key} = '{value}'")
        return int(self.order[first])

    def value(self, column: str, row: int) -> Any:
        return self.table[column][row].as_py()


class ColumnSource(ValueSource):
    kind = "column"

    def __init__(self, field: FieldSpec, source: Mapping[str, Any], table: LabelsTable | None) -> None:
        super().__init__(field, source, table)
        if table is None:
            raise Sim2dlError(
                f"config key 'source.fields.{field.name}': a column field needs source.labels_table"
            )
        if field.path not in table.table.column_names:
            raise Sim2dlError(
                f"config key 'source.fields.{field.name}': source.labels_table {table.path} has no column "
                f"'{field.path}' (its columns: {table.table.column_names})"
            )
        self.table = table

    def raw(self, info: FileInfo) -> Any:
        assert info.table_key is not None
        value = self.table.value(self.field.path, self.table.row(info.table_key))
        if value is None:
            raise SampleError(
                f"field '{self.field.name}': column '{self.field.path}' is empty for {info.table_key}"
            )
        return value

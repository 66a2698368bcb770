"""Where a field's values come from when they are not an array in the file: one small file per kind,
each a `ValueSource` (base.py) giving one value per file, which every sample of the file shares.

    attribute.py   {attr: NAME}        a global attribute of the file
    column.py      {column: NAME}      a column of source.labels_table, from the file's row
    path_group.py  {path_group: NAME}  a named group of source.path_pattern in the file's path
    categories.py  categorical: true   values -> class ids 0..K-1 (for any kind, arrays included)

Adding a kind: a module with a ValueSource subclass, registered in SOURCES, and its key in the schema.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from pipeline.formats.fields.attribute import AttributeSource
from pipeline.formats.fields.base import FileInfo, ValueSource, numeric_value
from pipeline.formats.fields.categories import Categories
from pipeline.formats.fields.column import ColumnSource, LabelsTable
from pipeline.formats.fields.path_group import PathGroupSource
from pipeline.formats.readers.base import FieldSpec

SOURCES: dict[str, type[ValueSource]] = {s.kind: s for s in (AttributeSource, ColumnSource, PathGroupSource)}

__all__ = [
    "SOURCES",
    "Categories",
    "FileInfo",
    "LabelsTable",
    "ValueSource",
    "numeric_value",
    "value_sources",
]


def value_sources(
    fields: list[FieldSpec], source: Mapping[str, Any], table: LabelsTable | None
) -> dict[str, ValueSource]:
    """A ValueSource for every field that is not an array in the file, by field name."""
    return {f.name: SOURCES[f.kind](f, source, table) for f in fields if not f.in_file}

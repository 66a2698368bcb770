"""{path_group: NAME}: a named group of source.path_pattern, searched in the file's path relative to
source.path (simulators put parameters in file and directory names). Memory and time: one regex search
per file."""

from __future__ import annotations

import re
from collections.abc import Mapping
from typing import Any

from pipeline import Sim2dlError
from pipeline.formats.fields.base import FileInfo, ValueSource
from pipeline.formats.readers.base import FieldSpec, SampleError


class PathGroupSource(ValueSource):
    kind = "path_group"

    def __init__(self, field: FieldSpec, source: Mapping[str, Any], table: Any) -> None:
        super().__init__(field, source, table)
        if not source.get("path_pattern"):
            raise Sim2dlError(
                f"config key 'source.fields.{field.name}': path_group needs source.path_pattern"
            )
        try:
            self.pattern = re.compile(source["path_pattern"])
        except re.error as e:
            raise Sim2dlError(f"config key 'source.path_pattern': not a regular expression: {e}") from None
        if field.path not in self.pattern.groupindex:
            raise Sim2dlError(
                f"config key 'source.fields.{field.name}': source.path_pattern has no group '{field.path}' "
                f"(its groups: {sorted(self.pattern.groupindex)})"
            )

    def raw(self, info: FileInfo) -> Any:
        found = self.pattern.search(info.relative)
        if found is None or found.group(self.field.path) is None:
            raise SampleError(f"field '{self.field.name}': source.path_pattern does not match the path")
        return found.group(self.field.path)

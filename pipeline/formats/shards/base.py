"""The interface every shard format implements: append records, then close the file."""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any, ClassVar

import numpy as np

# A feature spec: field name -> {"dtype": str, "shape": [int | None, ...], "role": "feature" | "label"}.
FeatureSpec = Mapping[str, Mapping[str, Any]]
# (sample id, arrays) -> (one record's bytes as the shard holds it, as pieces; each array's offset in it)
Framing = Callable[[str, Mapping[str, np.ndarray]], tuple[list[Any], dict[str, int]]]


class ShardWriter(ABC):
    format: str
    suffix: str
    compressions: tuple[str, ...]
    index_meaning: str  # what the (offset, length) pairs of the shard index count
    # Formats whose uncompressed shard is its records' bytes back to back: ingest can write parts that
    # are shards as they are (pipeline.formats.parts, merge). None for the others.
    framed_record: ClassVar[Framing | None] = None

    def __init__(self, path: Path, spec: FeatureSpec, compression: str) -> None:
        self.path, self.spec, self.compression = path, spec, compression
        # Set by close() in writers that see every byte written (pipeline.storage.fsutil.Checksum text);
        # None: the caller reads the finished file to checksum it.
        self.checksum: str | None = None

    @abstractmethod
    def write(self, sample_id: str, arrays: Mapping[str, np.ndarray]) -> tuple[int, int]:
        """Append one record; return its (offset, length) for the shard index."""

    @abstractmethod
    def close(self) -> None:
        """Finish the file at `self.path`."""

    def abort(self) -> None:  # noqa: B027 - optional: only writers holding an open file need it
        """Release the file after an error (the caller removes it)."""

    @staticmethod
    def encoding() -> str:
        return ""

"""What every shard format implements: a `ShardWriter` (append records, then close the file) and a
`ShardFormat` object, the format's one home for both directions: its writer, compressions and encodings,
the index of a shard, loading a range of records and iterating over them (no TensorFlow), verifying a file
of its records, and the tf.data records for training. Adding a format: one module (or small package) with
both, registered in pipeline/formats/shards/__init__.py's FORMATS."""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Callable, Iterator, Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any, ClassVar

import numpy as np

from pipeline import Sim2dlError

SHARD_INDEX_SUFFIX = ".idx"  # beside each shard: (offset, length) per record (DALI's TFRecord index format)
Record = dict[str, Any]  # "sample_id": str, and one numpy array per field
Loaded = tuple[Any, Any]  # a range of records as read (bytes or arrays), and what locates each record in it
Extent = tuple[int, int, int]  # (shard number, first record, stop record)

# A feature spec: field name -> {"dtype": str, "shape": [int | None, ...], "role": "feature" | "label"}.
FeatureSpec = Mapping[str, Mapping[str, Any]]
# (sample id, arrays) -> (one record's bytes as the shard holds it, as pieces; each array's offset in it)
Framing = Callable[[str, Mapping[str, np.ndarray]], tuple[list[Any], dict[str, int]]]


def index_path(shard: Path) -> Path:
    """The shard's index file, beside it: SHARD.idx."""
    return shard.with_name(shard.name + SHARD_INDEX_SUFFIX)


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


class ShardFormat(ABC):
    """One shard format, both directions. Subclasses set the class attributes and implement load/records."""

    writer: type[ShardWriter]
    encodings: tuple[str, ...] = ("bytes",)  # merge.encoding values the format can hold
    trainable = False  # train's tf.data pipeline reads it

    @property
    def name(self) -> str:
        return self.writer.format

    @property
    def suffix(self) -> str:
        return self.writer.suffix

    @property
    def compressions(self) -> tuple[str, ...]:
        return self.writer.compressions

    def samplable(self, compression: str) -> bool:
        """Records can be staged one by one (stage.mode sample): framed records of uncompressed shards."""
        return self.writer.framed_record is not None and compression == "none"

    def index(self, shard: Path) -> np.ndarray:
        """(offset, length) per record, as an (n, 2) int64 array (formats whose records are byte ranges)."""
        raise NotImplementedError(f"{self.name} shards have no byte-range index")

    @abstractmethod
    def load(self, shard: Path, first: int, stop: int, spec: FeatureSpec, compression: str) -> Loaded:
        """Records first..stop-1 of a shard, read."""

    @abstractmethod
    def records(
        self, shard: Path, loaded: Loaded, spec: FeatureSpec, verify: bool, copy: bool
    ) -> Iterator[Record]:
        """The loaded records, decoded (copy: into arrays of their own, when the buffer will be reused)."""

    def read_ahead(
        self, paths: Sequence[Path], extents: Sequence[Extent], spec: FeatureSpec, compression: str
    ) -> Iterator[Loaded]:
        """Each extent loaded, the next one read by a thread while this one is decoded (reads release the
        GIL), so storage and decoding overlap. Records are copied out only where a format reuses buffers."""
        with ThreadPoolExecutor(max_workers=1, thread_name_prefix="read-ahead") as pool:

            def submit(k: int) -> Any:
                shard, first, stop = extents[k]
                return pool.submit(self.load, paths[shard], first, stop, spec, compression)

            pending = submit(0) if extents else None
            for k in range(len(extents)):
                assert pending is not None
                loaded = pending.result()
                if k + 1 < len(extents):
                    pending = submit(k + 1)
                yield loaded

    def reuses_buffers(self, compression: str) -> bool:
        return False

    def verify(self, path: Path) -> bool:
        """A file of the format's records (a sampled file of staging) is intact by the records' own checks."""
        raise NotImplementedError(f"{self.name} records carry no checks of their own")

    def tf_records(self, files: Sequence[Path], compression: str, parallel_reads: int) -> Any:
        """A tf.data.Dataset of the files' serialized records (formats with trainable = True)."""
        raise Sim2dlError(f"train reads TFRecord shards, not {self.name}: set merge.format to tfrecord")

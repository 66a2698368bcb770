"""metadata.json, what merge writes beside the shards, read without TensorFlow (stage, train, the reader,
doctor): the feature spec, the shards, class names. Memory and time: the file, which grows with the shards.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from pipeline import Sim2dlError
from pipeline.paths import MergedPaths


def load_metadata(merged_dir: Path) -> dict[str, Any]:
    path = MergedPaths(merged_dir).metadata
    try:
        return json.loads(path.read_text())
    except OSError as e:
        raise Sim2dlError(f"cannot read dataset metadata {path}: {e.strerror} (run merge first)") from e


def class_names(metadata: Mapping[str, Any]) -> dict[str, list[str]]:
    """The classes of each categorical field, in id order (a record holds the id, int64)."""
    return {name: list(names) for name, names in metadata.get("classes", {}).items()}


def shard_paths(merged_dir: Path, metadata: Mapping[str, Any]) -> list[Path]:
    return [MergedPaths(merged_dir).shard(s["file"]) for s in metadata["shards"]]


def encoding(field: Mapping[str, Any]) -> str:
    return field.get("encoding", "bytes")  # metadata.json of sim2dl before per-field encodings: bytes


def fixed(field: Mapping[str, Any]) -> bool:
    return all(d is not None for d in field["shape"])

"""stage: copy the merged shards from the shared file system to node-local storage, each byte read once
from the shared file system and sent over MPI to the nodes that need it (replica, partition or sample
placement; pipeline/staging/ is the engine, shared with train and search, which stage again
when a node's copy is gone). Memory: a few chunks per rank; time: the bytes over the slowest of shared
reads, the network and node-local writes.
"""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import Any

from pipeline.staging import stage_dataset


def stage(config: Mapping[str, Any], merged_dir: Path, summary_path: Path, comm: Any) -> dict[str, Any]:
    """Stage the dataset in `merged_dir` as config's stage section says; the summary goes to summary_path."""
    return stage_dataset(config, merged_dir, summary_path, comm)

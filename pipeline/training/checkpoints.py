"""Checkpoints that belong to a run: a checkpoint directory carries the key of what wrote it (data,
settings, model code: `settings.json`), and one written for another key is removed, so that training
starts afresh instead of resuming weights of another model or data. Offline and online training alike.
Memory and time: one small file.
"""

from __future__ import annotations

import logging
import shutil
from pathlib import Path

from pipeline.storage.fsutil import write_text_atomic

log = logging.getLogger(__name__)


def discard_foreign_checkpoints(ckpt_dir: Path, key: str) -> bool:
    """Remove checkpoints written for other data or settings (`key`), so training starts afresh; call on
    one rank. Returns whether no checkpoint of this key was there (state kept beside the checkpoints
    belongs to other settings too)."""
    key_file = ckpt_dir / "settings.json"
    fresh = not key_file.exists() or key_file.read_text() != key
    if ckpt_dir.exists() and fresh:
        log.info("sim2dl: settings or data changed since %s was written: starting afresh", ckpt_dir)
        shutil.rmtree(ckpt_dir)
    if not key_file.exists():
        write_text_atomic(key_file, key)
    return fresh

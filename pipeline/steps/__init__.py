"""The workflow's steps (one module or small package each). Here, what every step's config must pass
beyond the schema and config's own rules (pipeline.config.validate): the checks of the tiers the steps
use (the readers' fields, the shard formats, the spatial split), gathered so that the CLI and the
Snakefile reject a config before any step runs. Memory and time: the config.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from pipeline import config as cfg
from pipeline.formats.readers.base import check_source_fields
from pipeline.formats.shards import check_settings as check_shard_settings
from pipeline.training.session import check_spatial_model


def check_plugins(config: dict[str, Any]) -> dict[str, Any]:
    """The checks of the tiers below the steps on a validated config (returned)."""
    check_spatial_model(config["train"], config["search"], config["merge"])
    check_source_fields(config["source"], config["convert"])
    check_shard_settings(config["merge"], config["convert"])
    return config


def validated(config: dict[str, Any]) -> dict[str, Any]:
    """pipeline.config.validate (in place, defaults filled), then every tier's checks."""
    return check_plugins(cfg.validate(config))


def load(
    path: Path | str, overrides: Mapping[str, Any] | None = None, override_files: Sequence[Path] = ()
) -> dict[str, Any]:
    """pipeline.config.load, then every tier's checks."""
    return check_plugins(cfg.load(path, overrides, override_files))

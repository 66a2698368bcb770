"""sweep: one workflow run per point of a parameter sweep, and a table and plot comparing the points.

A sweep is config (`--configfile config/sweeps/NAME.yaml`): `sweep.grid` (dotted key -> values, the cross
product) and/or `sweep.points` (name -> config sections). Every point is the base config with its values
merged in, validated like any config, and written below `sweep.workdir/POINT/`.
"""

from __future__ import annotations

import csv
import io
import itertools
import json
import re
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from pipeline import Sim2dlError
from pipeline import config as cfg
from pipeline.reporting.status import headline_scores
from pipeline.steps import validated
from pipeline.storage.fsutil import write_text_atomic


def sweep_workdir(config: Mapping[str, Any]) -> Path:
    """The directory of a sweep's points and summary: sweep.workdir or results/sweeps/NAME."""
    sweep = config["sweep"]
    return Path(sweep.get("workdir") or f"results/sweeps/{sweep['name']}")


def nested(dotted: str, value: Any) -> dict[str, Any]:
    """'train.learning_rate', 0.01 -> {'train': {'learning_rate': 0.01}}"""
    out: Any = value
    for part in reversed(dotted.split(".")):
        out = {part: out}
    return out


def point_overrides(sweep: Mapping[str, Any]) -> dict[str, dict[str, Any]]:
    """name -> the config sections of that point (grid points named after their values)."""
    points: dict[str, dict[str, Any]] = {}
    grid = sweep.get("grid") or {}
    if grid:
        keys = list(grid)
        for values in itertools.product(*(grid[k] for k in keys)):
            name = "_".join(f"{k.rsplit('.', 1)[-1]}={v}" for k, v in zip(keys, values, strict=True))
            overrides: dict[str, Any] = {}
            for k, v in zip(keys, values, strict=True):
                cfg.deep_merge(overrides, nested(k, v))
            points[re.sub(r"[^A-Za-z0-9_.=+-]", "-", name)] = overrides
    for name, overrides in (sweep.get("points") or {}).items():
        if name in points:
            raise Sim2dlError(f"config key 'sweep.points.{name}': a grid point has the same name")
        points[name] = dict(overrides)
    if not points:
        raise Sim2dlError(
            "config key 'sweep': give 'grid' (dotted key -> values) or 'points' (name -> sections)"
        )
    return points


def point_configs(config: Mapping[str, Any]) -> dict[str, dict[str, Any]]:
    """name -> the validated config of every point, each with its own workdir."""
    base = {k: v for k, v in json.loads(json.dumps(config)).items() if k != "sweep"}
    root = sweep_workdir(config)
    out = {}
    for name, overrides in point_overrides(config["sweep"]).items():
        point = cfg.deep_merge(json.loads(json.dumps(base)), overrides)
        point["workdir"] = str(root / name)
        try:
            point = validated(point)
        except Sim2dlError as e:
            raise Sim2dlError(f"sweep point '{name}': {e}") from None
        out[name] = point
    return out


def _read_json(path: Path) -> dict[str, Any]:
    try:
        return json.loads(path.read_text())
    except (OSError, ValueError) as e:
        raise Sim2dlError(f"cannot read {path}: {e}") from None


def score_columns(scores: Mapping[str, Any]) -> dict[str, Any]:
    """A summary's headline scores as table columns: a score per label becomes one column per label
    (r2_sigma_8), numbers rounded to 4 places; anything else (a list, text) is left out."""
    columns: dict[str, Any] = {}
    for name, value in scores.items():
        for key, v in value.items() if isinstance(value, Mapping) else [("", value)]:
            if isinstance(v, int | float) and not isinstance(v, bool):
                columns[f"{name}_{key}" if key else name] = round(v, 4)
    return columns


def summarise(config: Mapping[str, Any]) -> dict[str, Any]:
    """summary.csv and summary.png in the sweep's workdir: one row per point."""
    points = point_configs(config)
    swept = list(config["sweep"].get("grid") or {})
    rows = []
    for name, point in points.items():
        lay = cfg.layout(point)
        trained = _read_json(lay.train_summary)
        meta = _read_json(lay.metadata)
        row: dict[str, Any] = {"point": name}
        for key in swept:  # a dotted key at any depth (train.population.enabled)
            row[key] = cfg.get_dotted(point, key)
        row.update(
            val_loss=round(trained["val_loss"], 6),
            **score_columns(headline_scores(trained)),
            train_seconds=trained.get("seconds"),
            shards=meta["counts"]["shards"],
            records=meta["counts"]["records"],
        )
        history = _read_json(lay.metrics)
        row["samples_per_s"] = round(history[-1]["samples_per_s"], 1) if history else None  # all ranks
        rows.append(row)
    out = sweep_workdir(config)
    columns = list(dict.fromkeys(k for r in rows for k in r))
    text = io.StringIO()
    writer = csv.DictWriter(text, fieldnames=columns)
    writer.writeheader()
    writer.writerows(rows)
    write_text_atomic(out / "summary.csv", text.getvalue())
    from pipeline.reporting.plots import sweep_comparison

    sweep_comparison(rows, out / "summary.png")
    best = min(rows, key=lambda r: r["val_loss"])
    return {"points": len(rows), "best_point": best["point"], "best_val_loss": best["val_loss"]}

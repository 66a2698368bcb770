"""What every way of training (offline, population, online) ends with beside its own record: the
classical baseline set beside the network's scores (and a warning where the network is below it), and
how many validation records the scores count. Memory and time: a few numbers per label.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping
from typing import Any

import numpy as np

from pipeline.training.tasks import Evaluation, Task

log = logging.getLogger(__name__)


def below_baseline(task: Task, summary: Mapping[str, Any], baseline: Mapping[str, Any]) -> list[str]:
    """The labels (regression) or the score (classification: accuracy, segmentation: mean IoU) on which
    the network scores below the baseline."""
    if baseline.get("method") is None:
        return []
    if task.name == "regression":
        return [n for n, v in summary["r2"].items() if v is not None and baseline["r2"].get(n) is not None
                and v < baseline["r2"][n]]  # fmt: skip
    key = "accuracy" if task.name == "classification" else "mean_iou"
    return [key] if summary[key] < baseline[key] else []


def add_baseline(summary: dict[str, Any], task: Task, baseline: Mapping[str, Any], warn: bool) -> None:
    """summary's `baseline` and `below_baseline`; warn: log the labels where the network is below it."""
    summary["baseline"] = dict(baseline)
    summary["below_baseline"] = below_baseline(task, summary, baseline)
    if summary["below_baseline"] and warn:
        log.warning("sim2dl train: warning: the network scores below the classical baseline (%s) on %s: %s",
                    baseline["method"], ", ".join(summary["below_baseline"]),
                    _score_pairs(task, summary, baseline))  # fmt: skip


def _score_pairs(task: Task, summary: Mapping[str, Any], baseline: Mapping[str, Any]) -> str:
    if task.name == "regression":
        return ", ".join(f"{n} R² {summary['r2'][n]:.3f} < {baseline['r2'][n]:.3f}" for n in summary["below_baseline"])
    key = summary["below_baseline"][0]
    return f"{key} {summary[key]:.3f} < {baseline[key]:.3f}"


def validation_records(task: Task, evaluation: Evaluation) -> int:
    """How many validation records an evaluation counts."""
    sums = evaluation.sums
    if "n" in sums:
        return int(sums["n"][0])
    pixels = int(np.prod(task.output_shape(task.data.feature_shape)[:-1])) if task.per_pixel else 1
    return int(sums["confusion"].sum()) // pixels

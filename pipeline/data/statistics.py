"""Streaming statistics of a field (count, mean, variance, min, max; overall or per last-axis channel),
merged with Chan et al.'s pairwise formula, which stays accurate over billions of values: convert's
normalisation statistics, and online training's from the first arrivals. Memory: a few numbers per
channel. Time: one pass over the values.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

import numpy as np


@dataclass
class RunningStats:
    """Streaming count/mean/variance/min/max of a field, overall or per last-axis channel."""

    per_channel: bool
    count: int = 0
    mean: np.ndarray = field(default_factory=lambda: np.zeros(()))
    m2: np.ndarray = field(default_factory=lambda: np.zeros(()))
    minimum: np.ndarray = field(default_factory=lambda: np.array(np.inf))
    maximum: np.ndarray = field(default_factory=lambda: np.array(-np.inf))

    def update(self, x: np.ndarray, missing: np.ndarray | None = None) -> None:
        """Add the values of x, leaving out those `missing` marks (per channel: a position with any
        channel missing). A scalar per channel is one channel: its statistics are the overall ones."""
        by_channel = self.per_channel and np.ndim(x) > 0
        x = x.reshape(-1, x.shape[-1]) if by_channel else np.reshape(x, -1)
        if missing is not None:
            missing = missing.astype(bool, copy=False)
            missing = (
                missing.reshape(-1, missing.shape[-1]).any(axis=1) if by_channel else missing.reshape(-1)
            )
            x = x[~missing]
        x = x.astype(np.float64, copy=False)
        n = x.shape[0]
        if n == 0:
            return
        mean = x.mean(axis=0)
        m2 = ((x - mean) ** 2).sum(axis=0)
        self.merge(RunningStats(self.per_channel, n, mean, m2, x.min(axis=0), x.max(axis=0)))

    def merge(self, other: RunningStats) -> None:
        if other.count == 0:
            return
        if self.count == 0:
            self.count, self.mean, self.m2 = other.count, other.mean, other.m2
            self.minimum, self.maximum = other.minimum, other.maximum
            return
        total = self.count + other.count
        delta = other.mean - self.mean
        self.mean = self.mean + delta * (other.count / total)
        self.m2 = self.m2 + other.m2 + delta**2 * (self.count * other.count / total)
        self.minimum = np.minimum(self.minimum, other.minimum)
        self.maximum = np.maximum(self.maximum, other.maximum)
        self.count = total

    def state(self) -> dict[str, Any]:
        """Everything merge needs, exactly (JSON keeps a float's every bit): what a kept part stores."""
        arrays = {"mean": self.mean, "m2": self.m2, "min": self.minimum, "max": self.maximum}
        return {
            "per_channel": self.per_channel,
            "count": self.count,
            **{k: np.asarray(v, np.float64).tolist() for k, v in arrays.items()},
        }

    @classmethod
    def from_state(cls, state: Mapping[str, Any]) -> RunningStats:
        arrays = [np.asarray(state[k], np.float64) for k in ("mean", "m2", "min", "max")]
        return cls(state["per_channel"], state["count"], *arrays)

    def as_dict(self) -> dict[str, Any]:
        std = np.sqrt(self.m2 / self.count) if self.count else np.zeros_like(self.mean)
        return {
            "count": self.count,
            "mean": np.asarray(self.mean).tolist(),
            "std": np.asarray(std).tolist(),
            "min": np.asarray(self.minimum).tolist(),
            "max": np.asarray(self.maximum).tolist(),
            "per_channel": self.per_channel,
        }

"""A design's parameters and the unit cube the choosing works in: each parameter of simulate.space maps to
[0, 1) as the space-filling designs draw it (uniform linearly, log-uniform in its logarithm, an int or a
choice by its slot), so distances, spacings and the emulator's length scales mean the same for every
parameter. Candidates are scrambled Sobol points, drawn from (seed, round) alone.

Memory and time: a candidate pool is pool x dims floats; mapping is linear in the points.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import numpy as np

from pipeline.ensemble.sampling import scale, unit_design


def to_unit(values: np.ndarray, spec: Mapping[str, Any]) -> np.ndarray:
    """A parameter's values -> [0, 1] (the inverse of pipeline.ensemble.sampling.scale; an int or a choice
    at its slot's middle)."""
    kind = spec["type"]
    if kind == "choice":
        slots = {v: i for i, v in enumerate(spec["values"])}
        return (np.array([slots[v] for v in values.tolist()]) + 0.5) / len(slots)
    low, high = float(spec["low"]), float(spec["high"])
    values = np.asarray(values, np.float64)
    if kind == "log-uniform":
        return (np.log(values) - np.log(low)) / (np.log(high) - np.log(low))
    if kind == "int":
        return (values - low + 0.5) / (high - low + 1)
    return (values - low) / (high - low)


def unit_points(columns: Mapping[str, np.ndarray], space: Mapping[str, Mapping[str, Any]]) -> np.ndarray:
    """The runs' parameter columns -> points in the unit cube (runs x dims, in simulate.space's order)."""
    if not space:
        return np.zeros((0, 0))
    return np.column_stack([to_unit(np.asarray(columns[name]), spec) for name, spec in space.items()])


def parameter_columns(unit: np.ndarray, space: Mapping[str, Mapping[str, Any]]) -> dict[str, np.ndarray]:
    """Points in the unit cube -> each parameter's values (pipeline.ensemble.sampling.scale)."""
    return {name: scale(unit[:, i], spec) for i, (name, spec) in enumerate(space.items())}


def candidate_pool(size: int, dims: int, seed: int, round_index: int) -> np.ndarray:
    """`size` scrambled Sobol points, a different scramble per round, the same for the same (seed, round)."""
    return unit_design(
        "sobol", size, dims, int(np.random.SeedSequence([seed, round_index]).generate_state(1)[0])
    )


def distances(points: np.ndarray, others: np.ndarray) -> np.ndarray:
    """Euclidean distances (points x others) in the unit cube."""
    if not len(others):
        return np.full((len(points), 0), np.inf)
    return np.sqrt(((points[:, None, :] - others[None, :, :]) ** 2).sum(axis=-1))


def default_spacing(budget: int, dims: int) -> float:
    """A quarter of the spacing of `budget` points spread evenly over the unit cube: close enough that a
    batch can gather where the acquisition points, far enough that it never chooses one point twice."""
    return 0.25 * budget ** (-1.0 / max(dims, 1))


def min_spacing(adaptive: Mapping[str, Any], budget: int, dims: int) -> float:
    """simulate.adaptive.min_spacing, or where it is null the default for `budget` runs."""
    return adaptive["min_spacing"] if adaptive["min_spacing"] is not None else default_spacing(budget, dims)

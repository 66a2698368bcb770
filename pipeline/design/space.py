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


def unit_design(
    kind: str, runs: int, dims: int, seed: int, start: int = 0, stop: int | None = None
) -> np.ndarray:
    """Points [start, stop) of a design of `runs` points in [0, 1)^dims, the same as those rows of the whole
    design: random and Sobol designs jump to `start` (PCG64's advance, Sobol's fast_forward), so a block
    costs its own points only; a Latin hypercube is one permutation per dimension of all `runs` points,
    drawn whole."""
    from scipy.stats import qmc

    stop = runs if stop is None else stop
    if kind == "random":
        generator = np.random.default_rng(seed)
        generator.bit_generator.advance(start * dims)  # one 64-bit draw per double
        return generator.random((stop - start, dims))
    if kind == "sobol":
        import warnings

        with warnings.catch_warnings():  # a run count that is not a power of 2 loses some balance: fine
            warnings.simplefilter("ignore", UserWarning)
            sobol = qmc.Sobol(dims, scramble=True, seed=seed)
            if start:  # scipy's fast_forward(0) fails
                sobol.fast_forward(start)
            return sobol.random(stop - start)
    return qmc.LatinHypercube(dims, seed=seed).random(runs)[start:stop]


def scale(unit: np.ndarray, spec: Mapping[str, Any]) -> np.ndarray:
    """Points in [0, 1) -> values of the distribution (the search.space format)."""
    kind = spec["type"]
    if kind == "choice":
        values = list(spec["values"])
        picked = np.minimum((unit * len(values)).astype(np.int64), len(values) - 1)
        return np.array(values, dtype=object if any(isinstance(v, str) for v in values) else None)[picked]
    low, high = float(spec["low"]), float(spec["high"])
    if kind == "uniform":
        return low + unit * (high - low)
    if kind == "log-uniform":
        return np.exp(np.log(low) + unit * (np.log(high) - np.log(low)))
    return np.minimum(np.floor(low + unit * (high - low + 1)), high).astype(np.int64)  # int


def to_unit(values: np.ndarray, spec: Mapping[str, Any]) -> np.ndarray:
    """A parameter's values -> [0, 1] (the inverse of ensemble.scale; an int or a choice at its slot's
    middle)."""
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
    """Points in the unit cube -> each parameter's values (ensemble.scale)."""
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

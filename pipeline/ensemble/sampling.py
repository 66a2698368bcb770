"""The space-filling designs an ensemble is drawn from, in the unit cube (random, Sobol and Latin hypercube,
scipy.stats.qmc's), and a point's coordinate scaled to its parameter's distribution (simulate.space and
search.space's format: uniform, log-uniform, int, choice). The design's choosing (pipeline/design/) works
in the same cube.

Memory and time: linear in the points asked for (a Latin hypercube: in the whole design's).
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

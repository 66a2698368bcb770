"""Particles onto grids (convert.deposit): a particle field (positions, `(n, d)`) and optionally its
weights become a mesh field of a given shape over a box, by the mass-assignment schemes of particle-mesh
codes: NGP (nearest grid point), CIC (cloud in cell, linear) and TSC (triangular shaped cloud,
quadratic). Cell i along an axis covers [lo + i h, lo + (i + 1) h), h = box / cells, its centre at
lo + (i + 1/2) h (as CosmoFlow's and nbodykit's painters).

Periodic boxes wrap positions and the kernel's reach into the box, so the total weight is kept exactly
(to float rounding). Without periodicity a particle outside the box rejects the sample (the count and the
first such position say why), and the share of a kernel that reaches past the grid's edge is added to
the edge cell, so the total weight is still kept.

Pure functions on arrays. Memory: the grid plus about (scheme support) x n x d indices and weights;
time: linear in n (one np.bincount per kernel offset, support^d of them: 1, 8 or 27 in 3-d).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from itertools import product
from typing import Any

import numpy as np

from pipeline.formats.readers.base import SampleError

SCHEMES = {"ngp": 1, "cic": 2, "tsc": 3}  # scheme -> cells each particle touches per axis


def axis_weights(u: np.ndarray, scheme: str) -> tuple[np.ndarray, np.ndarray]:
    """For positions u in cell units (cell i covers [i, i + 1)): (first cell index, weights of the support
    cells) per particle, shapes (n,) and (n, support)."""
    if scheme == "ngp":
        return np.floor(u).astype(np.int64), np.ones((len(u), 1))
    centred = u - 0.5  # distance from cell centres
    if scheme == "cic":
        first = np.floor(centred)
        frac = centred - first
        return first.astype(np.int64), np.stack([1 - frac, frac], axis=1)
    if scheme == "tsc":
        nearest = np.floor(centred + 0.5)
        d = centred - nearest
        weights = np.stack([0.5 * (0.5 - d) ** 2, 0.75 - d**2, 0.5 * (0.5 + d) ** 2], axis=1)
        return nearest.astype(np.int64) - 1, weights
    raise ValueError(f"unknown deposit scheme '{scheme}' (one of {', '.join(SCHEMES)})")


def deposit(
    positions: np.ndarray,
    shape: Sequence[int],
    box: Sequence[float] | float,
    origin: Sequence[float] | float = 0.0,
    scheme: str = "cic",
    periodic: bool = True,
    weights: np.ndarray | None = None,
    dtype: Any = np.float64,
) -> np.ndarray:
    """The grid of `shape` holding the particles' weights (1 each without `weights`). positions: (n, d)
    with d = len(shape); box and origin: per axis or one number for all. ValueError for a non-periodic
    particle outside the box or inconsistent shapes."""
    positions = np.asarray(positions, dtype=np.float64)
    d = len(shape)
    if positions.ndim != 2 or positions.shape[1] != d:
        raise ValueError(f"positions of shape {positions.shape} for a {d}-d grid (need (n, {d}))")
    n = len(positions)
    w = np.ones(n) if weights is None else np.asarray(weights, dtype=np.float64).reshape(-1)
    if len(w) != n:
        raise ValueError(f"{len(w)} weights for {n} particles")
    cells = np.asarray(shape, dtype=np.int64)
    lengths = np.broadcast_to(np.asarray(box, dtype=np.float64), (d,))
    lo = np.broadcast_to(np.asarray(origin, dtype=np.float64), (d,))
    if np.any(lengths <= 0):
        raise ValueError(f"box lengths must be positive, got {lengths.tolist()}")
    u = (positions - lo) / lengths * cells  # cell units
    if periodic:
        u = np.mod(u, cells)
    else:
        outside = np.any((u < 0) | (u >= cells), axis=1)
        if outside.any():
            first = positions[np.argmax(outside)].tolist()
            raise ValueError(
                f"{int(outside.sum())} of {n} particles outside the box [{lo.tolist()}, "
                f"{(lo + lengths).tolist()}) "
                f"(first at {first}); set periodic or a larger box"
            )
    per_axis = [axis_weights(u[:, k], scheme) for k in range(d)]
    support = SCHEMES[scheme]
    grid = np.zeros(int(np.prod(cells)), dtype=np.float64)
    strides = np.cumprod([1, *cells[::-1][:-1]])[::-1]
    for offsets in product(range(support), repeat=d):
        flat = np.zeros(n, dtype=np.int64)
        share = w.copy()
        for k, o in enumerate(offsets):
            first, kw = per_axis[k]
            index = first + o
            index = np.mod(index, cells[k]) if periodic else np.clip(index, 0, cells[k] - 1)
            flat += index * strides[k]
            share *= kw[:, o]
        grid += np.bincount(flat, weights=share, minlength=len(grid))
    return grid.reshape(tuple(int(c) for c in cells)).astype(dtype, copy=False)


def deposited(
    arrays: Mapping[str, np.ndarray], settings: Mapping[str, Mapping[str, Any]]
) -> Mapping[str, np.ndarray]:
    """The record's fields with each convert.deposit grid added (name -> its settings: positions, weights,
    shape, box, origin, scheme, periodic). `box` and `origin` are numbers, one per axis, or the name of a
    field holding them (e.g. a snapshot's BoxSize attribute). SampleError: this sample's particles cannot
    be deposited (outside a non-periodic box, mismatched weights)."""
    if not settings:
        return arrays
    out = dict(arrays)
    for name, spec in settings.items():
        box = value_of(arrays, spec["box"])
        origin = value_of(arrays, spec.get("origin", 0.0))
        weights = arrays[spec["weights"]] if spec.get("weights") else None
        try:
            out[name] = deposit(
                arrays[spec["positions"]],
                spec["shape"],
                box,
                origin,
                spec.get("scheme", "cic"),
                spec.get("periodic", True),
                weights,
            )
        except ValueError as e:
            raise SampleError(f"deposit '{name}' of '{spec['positions']}': {e}") from None
    return out


def value_of(arrays: Mapping[str, np.ndarray], value: Any) -> Any:
    """A number or list from the config, or the named field's values."""
    return np.asarray(arrays[value], dtype=np.float64).reshape(-1) if isinstance(value, str) else value

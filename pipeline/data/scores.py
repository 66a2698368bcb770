"""Scores several tiers share: the trained surrogates, the autoencoder, the emulator an adaptive design
chooses with, and the benchmarks all judge by the same rule.

The headline is NRMSE per field over the evaluated set: the root mean squared error over every sample and
entry of the field, divided by the field's standard deviation over the same set. A state that is constant
on its own (a dead run, a uniform living state) adds its error to the numerator and its place in the set's
spread to the denominator, so it cannot inflate the figure beyond its error; predicting the set's mean
scores 1, a perfect model 0.

The Well's VRMSE per sample (a sample's RMSE divided by its own standard deviation, + 1e-7 in the
variance) stays as a named figure, averaged over the samples with spread of their own. A sample whose own
variance is at most FLAT_FRACTION of the field's is too flat for it (its VRMSE would read its error over
1e-7): it is counted (`flat`), not scored.

Streamed: each batch gives a row of additive sums per field (`batch_sums`, SUMS entries), so ranks and
batches add them as every evaluation's sums are added. Memory: SUMS numbers per field; time: linear in the
arrays scored.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np

VARIANCE_FLOOR = 1e-7  # The Well's epsilon in VRMSE's denominator
FLAT_FRACTION = 1e-6  # a sample whose own variance is at most this share of the field's has no spread
# the additive sums of one field: entries, squared error, and the truth's first two moments about a shift
# (a constant near its mean, so that the variance of a field far from 0 loses no digits); VRMSE summed
# over the samples with spread, how many had spread, how many were flat
SUMS = ("entries", "squared_error", "shifted", "shifted_squared", "vrmse", "with_spread", "flat")


def batch_sums(
    predicted: np.ndarray,
    true: np.ndarray,
    over: tuple[int, ...] | None = None,
    shift: float = 0.0,
    reference_variance: float | None = None,
) -> np.ndarray:
    """One field's sums (SUMS) over a batch whose first axis is the samples. `over`: the axes of one
    sample's field for VRMSE (default all but the first; the axes left beside the first index several
    units per sample, a next state's steps). `reference_variance`: the field's variance that a sample's
    own is compared with to call it flat (the training split's, from convert's statistics; None: this
    batch's)."""
    p, t = np.asarray(predicted, np.float64), np.asarray(true, np.float64)
    squared = (p - t) ** 2
    moved = t - shift
    axes = tuple(range(1, t.ndim)) if over is None else over
    own_error = squared.mean(axis=axes) if axes else squared
    own_variance = t.var(axis=axes) if axes else np.zeros_like(t)
    reference = float(np.var(t)) if reference_variance is None else float(reference_variance)
    flat = own_variance <= FLAT_FRACTION * reference
    spread = ~flat
    per_sample = np.sqrt(own_error[spread] / (own_variance[spread] + VARIANCE_FLOOR))
    return np.array(
        [t.size, squared.sum(), moved.sum(), (moved**2).sum(), per_sample.sum(), spread.sum(), flat.sum()],
        np.float64,
    )


def nrmse_of_sums(sums: np.ndarray) -> float:
    """NRMSE from a field's sums: NaN where the field does not vary over the set (nothing to divide by)."""
    entries, squared_error, shifted, shifted_squared = (float(v) for v in sums[:4])
    if not entries:
        return float("nan")
    variance = shifted_squared / entries - (shifted / entries) ** 2
    if variance <= 0:
        return float("nan")
    return float(np.sqrt(squared_error / entries / variance))


def vrmse_of_sums(sums: np.ndarray) -> float:
    """The mean VRMSE over the samples with spread (NaN where every one was flat)."""
    with_spread = float(sums[SUMS.index("with_spread")])
    return float(sums[SUMS.index("vrmse")] / with_spread) if with_spread else float("nan")


def field_scores(names: Sequence[str], sums: np.ndarray, prefix: str = "") -> dict[str, Any]:
    """summary.json's scores of fields from their sums (one row per name): `nrmse` per field and its mean
    over the fields (the headline), `vrmse` per field over the samples with spread and its mean, and
    `vrmse_flat`, how many samples were too flat for VRMSE. A figure that cannot be computed is None.
    `prefix`: another predictor's scores (persistence_)."""
    nrmse = [nrmse_of_sums(row) for row in sums]
    vrmse = [vrmse_of_sums(row) for row in sums]
    flat = [int(row[SUMS.index("flat")]) for row in sums]
    return {
        f"{prefix}nrmse": dict(zip(names, map(finite_or_none, nrmse), strict=True)),
        f"{prefix}nrmse_mean": mean_or_none(nrmse),
        f"{prefix}vrmse": dict(zip(names, map(finite_or_none, vrmse), strict=True)),
        f"{prefix}vrmse_mean": mean_or_none(vrmse),
        f"{prefix}vrmse_flat": dict(zip(names, flat, strict=True)),
    }


def finite_or_none(value: float) -> float | None:
    return float(value) if np.isfinite(value) else None


def mean_or_none(values: Sequence[float]) -> float | None:
    finite = [v for v in values if np.isfinite(v)]
    return float(np.mean(finite)) if finite else None


def normalised_squared_errors(predicted: np.ndarray, true: np.ndarray) -> np.ndarray:
    """Each sample's mean squared error (over its entries) divided by the field's variance over the whole
    set (first axis the samples): the sample's share of NRMSE², whose mean's square root is the NRMSE."""
    p, t = np.asarray(predicted, np.float64), np.asarray(true, np.float64)
    axes = tuple(range(1, t.ndim))
    error = ((p - t) ** 2).mean(axis=axes) if axes else (p - t) ** 2
    variance = float(t.var())
    return error / variance if variance > 0 else np.where(error > 0, np.inf, 0.0)


def nrmse(predicted: np.ndarray, true: np.ndarray) -> float:
    """NRMSE of a field over a set held in memory (first axis the samples)."""
    return float(np.sqrt(normalised_squared_errors(predicted, true).mean()))


def vrmse(predicted: np.ndarray, true: np.ndarray, over: tuple[int, ...] | None = None) -> np.ndarray:
    """The Well's VRMSE per sample: sqrt(mean((predicted - true)^2) / (var(true) + 1e-7)) over its entries
    (or the axes `over`). Inflated without bound by a sample with no spread: judge by NRMSE."""
    axes = tuple(range(1, true.ndim)) if over is None else over
    error = np.mean((predicted - true) ** 2, axis=axes) if axes else (predicted - true) ** 2
    spread = np.var(true, axis=axes) if axes else np.zeros(len(true))
    return np.sqrt(error / (spread + VARIANCE_FLOOR))

"""Integrated variance reduction weighted by where the emulator has been wrong (Kyprioti, Zhang &
Taflanidis 2020 weight the variance by cross-validation errors the same way): as integrated_variance, the
candidate whose run would take the most off the emulator's posterior variance summed over the pool's first
REFERENCES points, but each reference weighs FLOOR plus the leave-one-out error (squared, standardised
outputs, relative to the runs' mean) of the run nearest to it. The variance alone does not depend on the
outputs: a Gaussian process is as unsure between two runs that agree as between two across a jump; the
leave-one-out error says where the runs disagree with what the others predict, and the runs go there.
FLOOR keeps some weight everywhere, so a region no run has shown to be hard is not left unsampled.

Error the runs cannot reduce is told apart from error they can (simulate.adaptive.irreducible: nugget,
the default): a run's leave-one-out error is that of the function between the runs plus the noise its
outputs carry at any spacing (chaos, a pattern's phase, a solver's noise). The second is the nugget of a
variogram (Matheron): the semivariance, half the mean squared difference of two runs' standardised
outputs, extrapolated to distance 0. Each run's neighbourhood (itself and its NEIGHBOURS nearest runs of
its regime) gives both: the nugget (every pair's semivariance against its distance, a least-squares
line's intercept, between 0 and their mean semivariance) and the error (its runs' mean leave-one-out
error: one run's is one noisy draw); the run's reducible error is the first taken off the second. A region
where more runs stop lowering the error stops attracting them; a smooth or sharp but learnable one keeps
its weight.

Batched by kriging believer with the minimum spacing (pipeline/design/batch.py). Value: the weighted
reduction. Memory and time: integrated_variance's, plus one leave-one-out pass (runs² per component), the
nuggets (runs x (NEIGHBOURS + 1)² pairs of output rows) and the references' nearest runs (references x
runs).
"""

from __future__ import annotations

import numpy as np

from pipeline.design.acquisitions.base import Context
from pipeline.design.acquisitions.integrated_variance import IntegratedVariance
from pipeline.design.space import distances

FLOOR = 0.01  # a reference's weight beside its nearest run's relative error (mean 1)
NEIGHBOURS = 8  # the runs beside each run its nugget is fitted on


def reference_weights(context: Context, references: np.ndarray) -> np.ndarray:
    """FLOOR + the leave-one-out squared error (standardised outputs; with irreducible: nugget, less the
    run's nugget) of the run nearest each reference, divided by the runs' mean."""
    emulator = context.emulator
    errors = (((emulator.loo() - emulator.y) / emulator.scale) ** 2).mean(axis=1)
    if context.settings.get("irreducible", "none") == "nugget":
        z = (emulator.y - emulator.mean) / emulator.scale
        regimes = getattr(emulator, "labels", np.zeros(len(z), np.int64))
        errors = reducible_errors(emulator.x, z, errors, regimes)
    nearest = distances(context.pool[references], emulator.x).argmin(axis=1)
    mean = errors.mean()
    relative = errors[nearest] / mean if mean > 0 else np.ones(len(references))
    return FLOOR + relative


def reducible_errors(x: np.ndarray, z: np.ndarray, errors: np.ndarray, regimes: np.ndarray) -> np.ndarray:
    """Per run, its neighbourhood's mean leave-one-out error less its nugget (at least 0); `errors` each
    run's, in z's units."""
    nuggets, neighbourhoods = local_nuggets(x, z, regimes)
    mean = np.array([errors[around].mean() for around in neighbourhoods])
    return np.maximum(mean - nuggets, 0.0)


def local_nuggets(
    x: np.ndarray, z: np.ndarray, regimes: np.ndarray, neighbours: int = NEIGHBOURS
) -> tuple[np.ndarray, list[np.ndarray]]:
    """Per run, the nugget of its neighbourhood's variogram, and the neighbourhood (run indices, itself
    first): the runs x (points, unit cube), z their standardised outputs (runs x entries), `regimes` each
    run's regime (pairs never cross regimes: a jump between two is what a regime emulator learns, not
    noise). A regime of fewer than 3 runs: nugget 0, the run alone."""
    nuggets = np.zeros(len(x))
    neighbourhoods: list[np.ndarray] = [np.array([i]) for i in range(len(x))]
    for regime in np.unique(regimes):
        members = np.flatnonzero(regimes == regime)
        if len(members) < 3:
            continue
        gaps = distances(x[members], x[members])
        nearest = np.argsort(gaps, axis=1, kind="stable")[:, : neighbours + 1]  # itself first
        first, second = np.triu_indices(nearest.shape[1], k=1)
        for row, around in enumerate(nearest):
            a, b = members[around[first]], members[around[second]]
            semivariance = 0.5 * ((z[a] - z[b]) ** 2).mean(axis=1)
            spacing = gaps[around[first], around[second]]
            nuggets[members[row]] = variogram_intercept(spacing, semivariance)
            neighbourhoods[members[row]] = members[around]
    return nuggets, neighbourhoods


def variogram_intercept(spacing: np.ndarray, semivariance: np.ndarray) -> float:
    """The semivariance at distance 0 of a least-squares line through the pairs, between 0 and their mean."""
    mean = float(semivariance.mean())
    if len(spacing) < 2 or np.ptp(spacing) <= 0:
        return mean
    _, intercept = np.polyfit(spacing, semivariance, 1)
    return float(np.clip(intercept, 0.0, mean))


class ErrorWeightedVariance(IntegratedVariance):
    name = "error_weighted_variance"

    def reference_weights(self, context: Context, references: np.ndarray) -> np.ndarray:
        return reference_weights(context, references)

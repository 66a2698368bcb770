"""Integrated variance reduction weighted by where the emulator has been wrong (Kyprioti, Zhang &
Taflanidis 2020 weight the variance by cross-validation errors the same way): as integrated_variance, the
candidate whose run would take the most off the emulator's posterior variance summed over the pool's first
REFERENCES points, but each reference weighs FLOOR plus the leave-one-out error (squared, standardised
outputs, relative to the runs' mean) of the run nearest to it. The variance alone does not depend on the
outputs: a Gaussian process is as unsure between two runs that agree as between two across a jump; the
leave-one-out error says where the runs disagree with what the others predict, and the runs go there.
FLOOR keeps some weight everywhere, so a region no run has shown to be hard is not left unsampled.
Batched by kriging believer with the minimum spacing (pipeline/design/batch.py). Value: the weighted
reduction. Memory and time: integrated_variance's, plus one leave-one-out pass (runs² per component) and
the references' nearest runs (references x runs).
"""

from __future__ import annotations

import numpy as np

from pipeline.design.acquisitions.base import Acquisition, Choice, Context
from pipeline.design.acquisitions.integrated_variance import REFERENCES
from pipeline.design.batch import believer_best
from pipeline.design.space import distances

FLOOR = 0.01  # a reference's weight beside its nearest run's relative error (mean 1)


def reference_weights(context: Context, references: np.ndarray) -> np.ndarray:
    """FLOOR + the leave-one-out squared error (standardised outputs) of the run nearest each reference,
    divided by the runs' mean."""
    emulator = context.emulator
    errors = (((emulator.loo() - emulator.y) / emulator.scale) ** 2).mean(axis=1)
    nearest = distances(context.pool[references], emulator.x).argmin(axis=1)
    mean = errors.mean()
    relative = errors[nearest] / mean if mean > 0 else np.ones(len(references))
    return FLOOR + relative


class ErrorWeightedVariance(Acquisition):
    name = "error_weighted_variance"

    def choose(self, context: Context, batch: int) -> Choice:
        posterior = context.emulator.posterior(context.pool)
        references = np.arange(min(REFERENCES, len(context.pool)))
        weights = reference_weights(context, references)
        chosen, values = believer_best(posterior, context.pool, batch, context.spacing, context.avoid, references,
                                       weights)  # fmt: skip
        return Choice(context.pool[chosen], np.array(values))

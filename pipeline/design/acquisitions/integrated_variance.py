"""Integrated variance reduction (ALC: Cohn 1996; Gramacy & Lee 2009 ran it on a supercomputer's
simulations): the candidate whose run would take the most off the emulator's posterior variance summed
over the pool's first REFERENCES points (a Sobol sample of the whole space), batched by kriging believer
with the minimum spacing (pipeline/design/batch.py). Unlike the largest variance, which sits on the cube's
faces and corners, it places runs where they inform the most of the space. Value: the reduction (summed
standardised variance). Memory: REFERENCES x pool per component; time: components x REFERENCES x pool x
runs.
"""

from __future__ import annotations

import numpy as np

from pipeline.design.acquisitions.base import Acquisition, Choice, Context
from pipeline.design.batch import believer_best

REFERENCES = 128


class IntegratedVariance(Acquisition):
    """The weighted acquisitions (error_weighted_variance, boundary_variance) are this one with their own
    `reference_weights`."""

    name = "integrated_variance"

    def reference_weights(self, context: Context, references: np.ndarray) -> np.ndarray | None:
        """Each reference's weight in the summed reduction (None: 1 each)."""
        return None

    def choose(self, context: Context, batch: int) -> Choice:
        posterior = context.emulator.posterior(context.pool)
        references = np.arange(min(REFERENCES, len(context.pool)))
        weights = self.reference_weights(context, references)
        chosen, values = believer_best(
            posterior, context.pool, batch, context.spacing, context.avoid, references, weights
        )
        return Choice(context.pool[chosen], np.array(values))

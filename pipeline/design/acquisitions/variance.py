"""The emulator's posterior variance: where its Gaussian processes know least (the summed variance of the
principal components), batched by kriging believer with the minimum spacing (pipeline.design.batch).
Memory: pool x (runs + batch) per component; time: components x pool x runs².
"""

from __future__ import annotations

import numpy as np

from pipeline.design.acquisitions.base import Acquisition, Choice, Context
from pipeline.design.batch import believer_best


class PosteriorVariance(Acquisition):
    name = "variance"

    def choose(self, context: Context, batch: int) -> Choice:
        posterior = context.emulator.posterior(context.pool)
        chosen, values = believer_best(posterior, context.pool, batch, context.spacing, context.avoid)
        return Choice(context.pool[chosen], np.array(values))

"""The control: the initial design's own continuation (Sobol and random jump ahead to the next points of
the same sequence), chosen blind as the whole ensemble is today. Its value: each point's distance to the
nearest earlier point. Time: the batch's points.
"""

from __future__ import annotations

import numpy as np

from pipeline.design.acquisitions.base import Acquisition, Choice, Context
from pipeline.design.space import distances
from pipeline.ensemble.sampling import unit_design


class SpaceFilling(Acquisition):
    name = "space_filling"
    online = True

    def choose(self, context: Context, batch: int) -> Choice:
        start = context.runs_so_far
        dims = context.done.shape[1]
        points = unit_design(context.design, start + batch, dims, context.seed, start, start + batch)
        return Choice(points, distances(points, context.avoid).min(axis=1, initial=np.inf))

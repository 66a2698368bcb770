"""Query by committee: a committee of emulators, each the fitted one's Gaussian processes (their kernels
fixed) refitted on a random 80 % of the runs (subsamples, not bootstrap resamples: a GP given the same
run twice, with its tiny noise term, is ill-conditioned); a candidate's value is the committee's disagreement,
the variance of the members' standardised predictions summed over the outputs' components. Large where
the data pull the fit different ways (a jump between runs), not only where there are no runs. Batched
by the minimum spacing. Memory: members x pool x components; time: members x components x runs³.
"""

from __future__ import annotations

import numpy as np

from pipeline.design.acquisitions.base import Acquisition, Choice, Context
from pipeline.design.batch import spaced_best

SHARE = 0.8  # of the runs each member is fitted on


def disagreement(context: Context, members: int) -> np.ndarray:
    from sklearn.base import clone

    emulator = context.emulator
    rng = context.rng
    coefficients = ((emulator.y - emulator.mean) / emulator.scale) @ emulator.components.T
    predictions = np.zeros((members, len(context.pool), len(emulator.processes)))
    for m in range(members):
        sample = rng.choice(len(emulator.x), max(2, int(SHARE * len(emulator.x))), replace=False)
        for c, process in enumerate(emulator.processes):
            member = clone(process).set_params(kernel=process.kernel_, optimizer=None)
            predictions[m, :, c] = member.fit(emulator.x[sample], coefficients[sample, c]).predict(
                context.pool
            )
    return predictions.var(axis=0).sum(axis=1)


class Committee(Acquisition):
    name = "committee"
    emulators = ("gp",)  # it refits the Gaussian processes of one emulator

    def choose(self, context: Context, batch: int) -> Choice:
        values = disagreement(context, context.settings["committee"])
        chosen = spaced_best(values, context.pool, batch, context.spacing, context.avoid)
        return Choice(context.pool[chosen], values[chosen])

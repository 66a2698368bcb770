"""A space-filling share of every round (simulate.adaptive.space_filling_share): a user who knows nothing
about their code is never left with a region no run reaches.

Of each round's batch, round(share x batch) runs are the control's own next points: the initial design
continued (Sobol jumps ahead to them), at indices initial + (round - 1) x that count, so that after any
round the design holds a prefix of the space-filling design a plain ensemble would have run. The
acquisition chooses the rest, kept at its minimum spacing from those points too. Its choices can only add
to that prefix: where they teach nothing, the design is a smaller Sobol design plus runs that cost their
share, never a space left unsampled (an acquisition that chases error which falls slowly starved half of
a real code's space of runs, and the surrogate trained on them lost up to 1.37 x to plain Sobol).

Memory and time: the share's points, plus the acquisition's own.
"""

from __future__ import annotations

from dataclasses import replace

import numpy as np

from pipeline.design.acquisitions.base import Acquisition, Choice, Context
from pipeline.design.space import distances
from pipeline.ensemble.sampling import unit_design

SPACE_FILLING = "space_filling"  # the runs table's `acquisition` of the share's runs (the control's name)


def space_filling_count(batch: int, share: float) -> int:
    """How many of a full batch are the space-filling share's (the same every round: its indices follow)."""
    return round(share * batch)


def shared_choice(acquisition: Acquisition, context: Context, batch: int, share: float) -> Choice:
    """The round's batch: the share's continuation of the initial design, then the acquisition's points
    for the rest (none within its spacing of the share's); the whole batch the continuation where the
    acquisition has nothing to choose by (Acquisition.defers). The continuation follows the runs it gave
    in earlier rounds (context.space_filled). `context.settings` holds simulate.adaptive (its `initial`
    and full `batch`)."""
    deferred = acquisition.defers(context)  # the space-filling design itself never defers
    if acquisition.name == SPACE_FILLING or (share <= 0 and not deferred):
        choice = acquisition.choose(context, batch)
        return Choice(choice.points, choice.values, [acquisition.name] * len(choice.points), choice.figures)
    every_round = space_filling_count(int(context.settings["batch"]), share)
    count = batch if deferred else min(every_round, batch)
    start = int(context.settings["initial"]) + context.space_filled
    dims = context.done.shape[1]
    filled = unit_design(context.design, start + count, dims, context.seed, start, start + count)
    spread = distances(filled, context.avoid).min(axis=1, initial=np.inf)
    if count == batch:
        # rounds.json says which rounds had nothing to choose by
        return Choice(filled, spread, [SPACE_FILLING] * count, {"deferred": True} if deferred else None)
    rest = acquisition.choose(replace(context, avoid=np.vstack([context.avoid, filled])), batch - count)
    return Choice(
        np.vstack([filled, rest.points]),
        np.concatenate([spread, rest.values]),
        [SPACE_FILLING] * count + [acquisition.name] * len(rest.points),
        rest.figures,
    )

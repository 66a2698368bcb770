"""Loss-based resampling, as Melissa's Breed does it (Dymchenko, Purandare, Raffin, arXiv 2410.05860): a
parent is drawn from the completed runs in proportion to its loss, here the emulator's leave-one-out
error at the run, normalised as NRMSE is (its error where it was not told the answer, at no refit); its
child is a Gaussian mutation of it (simulate.adaptive.sigma of each parameter's unit range), drawn again
while outside the space or within the minimum spacing of a run or of the batch (8 tries, then the child is
given up for a space-filling point). The share of bred runs rises linearly from 0.15 to 0.75 over the
planned rounds (Breed's schedule); the rest are the pool's candidates farthest from every run (maximin).
A child's value: its parent's loss; a space-filling point's: 0. Time: one leave-one-out pass, batch x
tries draws.
"""

from __future__ import annotations

import numpy as np

from pipeline.design.acquisitions.base import Acquisition, Choice, Context
from pipeline.design.batch import open_candidates, spaced_best
from pipeline.design.space import distances

FIRST_SHARE, LAST_SHARE = 0.15, 0.75
TRIES = 8


def bred_share(round_index: int, rounds: int) -> float:
    """Breed's schedule: 0.15 in the first adaptive round, rising linearly to 0.75 in the last planned."""
    if rounds <= 1:
        return LAST_SHARE
    return FIRST_SHARE + (LAST_SHARE - FIRST_SHARE) * min(1.0, (round_index - 1) / (rounds - 1))


def bred_children(
    parents: np.ndarray,
    losses: np.ndarray,
    taken: np.ndarray,
    spacing: float,
    sigma: float,
    wanted: int,
    rng: np.random.Generator,
) -> tuple[list[np.ndarray], list[float], np.ndarray]:
    """Up to `wanted` children of `parents` (points x dims, unit cube), each parent drawn in proportion to its
    loss, none outside the cube nor within `spacing` of `taken` or of each other. Returns the children, their
    values (the parent's loss) and `taken` with the children added."""
    weights = losses / losses.sum() if losses.sum() > 0 else np.full(len(losses), 1 / len(losses))
    points, values = [], []
    for _ in range(wanted):
        for _ in range(TRIES):
            parent = int(rng.choice(len(weights), p=weights))
            child = parents[parent] + rng.normal(0.0, sigma, parents.shape[1])
            if np.all((child >= 0) & (child < 1)) and open_candidates(child[None], taken, spacing)[0]:
                points.append(child)
                values.append(float(losses[parent]))
                taken = np.vstack([taken, child[None]])
                break
    return points, values, taken


class Breed(Acquisition):
    name = "breed"
    online = True

    def choose(self, context: Context, batch: int) -> Choice:
        losses = np.sqrt(np.mean(list(context.emulator.loo_errors().values()), axis=0))
        wanted = round(bred_share(context.round_index, context.rounds) * batch)
        points, values, taken = bred_children(
            context.done,
            losses,
            context.avoid,
            context.spacing,
            context.settings["sigma"],
            wanted,
            context.rng,
        )
        spread = distances(context.pool, taken).min(axis=1, initial=np.inf)  # maximin: the farthest first
        rest = spaced_best(spread, context.pool, batch - len(points), context.spacing, taken)
        points += list(context.pool[rest])
        values += [0.0] * len(rest)
        dims = context.done.shape[1]
        return Choice(np.array(points).reshape(-1, dims), np.array(values))

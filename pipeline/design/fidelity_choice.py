"""A round of a design over levels of one simulator (simulate.fidelities with simulate.adaptive): which
points to run, and by which level, for the round's spend.

- The value of a (point, level) pair is the reduction its run would make in the costliest level's
  posterior variance summed over REFERENCES points spread over the space (integrated variance, ALC), under
  the multi-fidelity emulator (pipeline/design/multifidelity.py), divided by the level's cost per run. A
  cheap run counts as far as the cheap level is correlated with the costly one where it runs (rho and the
  discrepancy's share of the variance): a cheap level that misleads in part of the space buys little there.
- A batch by kriging believer (pipeline/design/batch.py) over the pairs of both kinds, until its costs add
  up to the round's spend; no two pairs of one level closer than the spacing (the level is one more
  coordinate of the joint space, a whole unit apart: a point may be run by two levels).
- The space-filling share (simulate.adaptive.space_filling_share, pipeline/design/share.py's reasons)
  spends its part of the round on the costliest level: its prefix of the nested design continued, in
  order, so the runs of the code a surrogate is wanted of keep growing as its plain design would, whatever
  the emulator believes. Why not the cheapest level: fitted on a few costly runs, the emulator's
  discrepancy is overconfident (emukit's maintainers report the same of its linear model), and its value
  per unit cost then bought cheap runs only, round after round, even from a cheap level unrelated to the
  costly one in half the space (measured: 0.77 test NRMSE against Sobol's 0.057 at equal cost).
- Do no harm: where the cheaper levels do not help (the multi-fidelity emulator's leave-point-out error on
  the costliest level's runs is above that of an emulator of those runs alone: a cheap level that
  misleads), the round spends on the costliest level only (rounds.py decides, each round, from the runs
  so far).

Memory: pool x levels x (references + batch) per component; time: as integrated_variance's, with levels
times the candidates.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, replace

import numpy as np

from pipeline.design.acquisitions.integrated_variance import REFERENCES
from pipeline.design.batch import Prices, believer_best
from pipeline.design.multifidelity import MultiFidelityEmulator, joined
from pipeline.design.space import distances
from pipeline.ensemble.sampling import unit_design


@dataclass
class LevelChoice:
    points: np.ndarray  # unit cube
    levels: np.ndarray  # each point's level index
    values: np.ndarray  # the value (reduction per unit cost) when chosen; the share's: its spacing
    space_filling: np.ndarray  # which are the share's

    @property
    def size(self) -> int:
        return len(self.points)


@dataclass
class LevelRound:
    """A round's choosing over levels: the multi-fidelity emulator, the candidate points, each level's cost
    per run (infinite: never chosen), what the round may spend, the spacing, and the joined points already
    run or chosen (`avoid`)."""

    emulator: MultiFidelityEmulator
    pool: np.ndarray
    costs: Sequence[float]
    spend: float
    spacing: float
    avoid: np.ndarray
    limits: Sequence[float] | None = None  # the most runs of each level a round buys (None: no limit)

    def cost_weighted(self) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """(points, levels, values) for the spend: each pair by the costliest level's integrated variance it
        would take off per unit cost, believed before the next."""
        levels, size = len(self.costs), len(self.pool)
        candidates = np.vstack([joined(self.pool, level) for level in range(levels)])
        chosen, values = believer_best(
            self.emulator.posterior(candidates),
            candidates,
            len(candidates),
            self.spacing,
            self.avoid,
            (levels - 1) * size + np.arange(min(REFERENCES, size)),
            prices=Prices(
                np.repeat(np.asarray(self.costs, np.float64), size),
                self.spend,
                np.repeat(np.arange(levels), size),
                None if self.limits is None else np.asarray(self.limits, np.float64),
            ),
        )
        picked = candidates[chosen]
        return picked[:, :-1], picked[:, -1].astype(int), np.array(values)

    def with_share(self, share: float, shared: np.ndarray) -> LevelChoice:
        """The round: the share's points (`shared`: joined points of one level, as many as share x spend
        buys), then the cost-weighted pairs for the rest of the spend."""
        # no share (less than one run): the costliest level's finite cost, not a cheaper level's inf x 0 = nan
        level = int(shared[0, -1]) if len(shared) else len(self.costs) - 1
        shared = shared[: int(share * self.spend // self.costs[level])]
        rest = replace(
            self, spend=self.spend - self.costs[level] * len(shared), avoid=np.vstack([self.avoid, shared])
        )
        points, levels, values = rest.cost_weighted()
        same = self.avoid[self.avoid[:, -1] == level][:, :-1]
        spread = distances(shared[:, :-1], same).min(axis=1, initial=np.inf)
        return LevelChoice(
            np.vstack([shared[:, :-1], points]),
            np.concatenate([shared[:, -1].astype(int), levels]),
            np.concatenate([spread, values]),
            np.concatenate([np.ones(len(shared), bool), np.zeros(len(points), bool)]),
        )


def share_points(design: str, seed: int, dims: int, start: int, count: int, level: int) -> np.ndarray:
    """The share's candidates at `level`: the nested design's points start..start+count (the level's own
    prefix of the design continued), joined with the level."""
    unit = (
        np.zeros((0, dims))
        if count <= 0
        else unit_design(design, start + count, dims, seed, start, start + count)
    )
    return joined(unit, level)

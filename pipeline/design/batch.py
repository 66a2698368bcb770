"""A batch that does not cluster. Two rules, both from the literature the issue cites:

- `spaced_best`: the candidates in order of their score, each taken only when it lies at least `spacing`
  (unit cube) from every point already run, being run or chosen for this batch (libEnsemble's exclusion
  radius; the minimum distance Ren et al. found the reliable methods keep);
- `believer_best`: the emulator's posterior variance, the batch taken one point at a time, each chosen
  point believed (kriging believer, Ginsbourger et al. 2010): its fantasised observation conditions every
  component's posterior covariance over the pool (a rank-one update; a GP's variance does not depend on
  the values believed), so the next point is chosen by what the batch will already have taught; with the
  same minimum spacing. By the largest variance (`reduce=False`), or by the largest reduction of the
  variance summed over reference points (`reduce=True`: integrated variance reduction, ALC in Gramacy &
  Lee's terms): a point's value is sum_r cov(r, x)² / var(x), what observing x would take off the
  variance at the references; the largest variance alone sits at the cube's faces and corners, where
  the emulator is least sure and the test points are fewest.

Memory: batch x pool per component (believer), references x pool with them; time: batch x components x
pool x (runs + references).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np

from pipeline.design.space import distances


def open_candidates(pool: np.ndarray, taken: np.ndarray, spacing: float) -> np.ndarray:
    """Which candidates lie at least `spacing` from every taken point."""
    if not len(taken):
        return np.ones(len(pool), bool)
    return distances(pool, taken).min(axis=1) >= spacing


def spaced_best(
    scores: np.ndarray, pool: np.ndarray, batch: int, spacing: float, taken: np.ndarray
) -> list[int]:
    """Up to `batch` candidates by falling score (ties by position), each at least `spacing` from the taken
    points and the others chosen."""
    allowed = open_candidates(pool, taken, spacing)
    chosen: list[int] = []
    for i in np.argsort(-scores, kind="stable"):
        if len(chosen) == batch:
            break
        if allowed[i]:
            chosen.append(int(i))
            allowed &= distances(pool, pool[i : i + 1])[:, 0] >= spacing
    return chosen


@dataclass(frozen=True)
class Prices:
    """What each candidate's run costs, and what a batch may spend in all; with `groups` (each candidate's
    group, an integer) and `limits` (per group), at most that many candidates of a group."""

    costs: np.ndarray
    spend: float
    groups: np.ndarray | None = None
    limits: np.ndarray | None = None

    def affordable(self, chosen: list[int]) -> np.ndarray:
        """The candidates a batch holding `chosen` may still take: within what is left of the spend, and of a
        group below its limit."""
        open_ = self.costs <= self.spend - sum(self.costs[chosen])  # summed in order, as before
        if self.groups is not None and self.limits is not None:
            taken = np.bincount(self.groups[chosen], minlength=len(self.limits))
            open_ &= taken[self.groups] < self.limits[self.groups]
        return open_


def believer_best(
    posterior: Any,
    pool: np.ndarray,
    batch: int,
    spacing: float,
    taken: np.ndarray,
    references: np.ndarray | None = None,
    weights: np.ndarray | None = None,
    prices: Prices | None = None,
) -> tuple[list[int], list[float]]:
    """Up to `batch` candidates, each believed before the next is chosen: by the largest posterior variance
    (summed over the components), or with `references` (indices into the pool) by the largest reduction of
    the variance summed over those points (each times its `weights`, 1 if None); with `prices` by that
    value per unit cost, the candidates taken while their costs add up to at most the prices' spend.
    Returns them and the value each had when chosen. `posterior`: emulator.Posterior over the pool. The
    believed points condition each component's covariance as a pivoted Cholesky factorisation does: column
    m, less its projections on the earlier chosen columns."""
    variances = [v.copy() for v in posterior.variances()]
    # cov(references, pool) once; after each believed point it is shared - f_R f^T, never formed: only its
    # squares summed over the references (`reach`) and what the next point's factor needs (`projected`),
    # updated by one pass over `shared` (a matrix-vector product) instead of rewriting it every point
    shared = None if references is None else posterior.among(references)
    weight = None if references is None else (np.ones(len(references)) if weights is None else weights)
    reach = None if shared is None else [(weight[:, None] * s**2).sum(axis=0) for s in shared]
    factors: list[list[np.ndarray]] = [[] for _ in variances]  # per component, the chosen columns, scaled
    allowed = open_candidates(pool, taken, spacing)
    chosen: list[int] = []
    values: list[float] = []
    for _ in range(batch):
        if prices is not None:
            allowed &= prices.affordable(chosen)
        if not allowed.any():
            break
        if reach is None:
            value = np.sum(variances, axis=0)
        else:
            value = np.sum([r / np.maximum(v, 1e-300) for r, v in zip(reach, variances, strict=True)], axis=0)
        if prices is not None:
            value = value / prices.costs
        i = int(np.argmax(np.where(allowed, value, -np.inf)))
        chosen.append(i)
        values.append(float(value[i]))
        for c, column in enumerate(posterior.columns(i)):
            for earlier in factors[c]:
                column = column - earlier * earlier[i]
            factor = column / np.sqrt(max(column[i], 1e-300))
            variances[c] = np.maximum(variances[c] - factor**2, 0.0)
            if shared is not None:
                # f_R^T (shared - sum_j f_R^j f^j^T) over the pool, then the sums of squares less this
                # factor's
                at = factor[references]
                weighted = weight * at
                projected = weighted @ shared[c]
                for earlier in factors[c]:
                    projected -= (weighted @ earlier[references]) * earlier
                reach[c] = np.maximum(reach[c] - 2 * factor * projected + factor**2 * (weighted @ at), 0.0)
            factors[c].append(factor)
        allowed &= distances(pool, pool[i : i + 1])[:, 0] >= spacing
    return chosen, values

"""The emulator of levels of one simulator (simulate.fidelities with simulate.adaptive): autoregressive
co-kriging (Kennedy & O'Hagan 2000), each level the one below it times a factor plus a discrepancy,

    f_0 = d_0,   f_l = rho_l f_(l-1) + d_l,   d_l independent Gaussian processes,

per principal component of the runs' outputs (standardised over the runs of every level, as
pipeline/design/emulator.py does for one level), fitted level by level as Le Gratiet (2013) fits it on
nested designs and smt's MFK does: d_0 on the cheapest level's runs; rho_l by least squares of level l's
values on level l-1's prediction at its points, and d_l on what rho_l f_(l-1) leaves. Each d_l is
emulator.py's process (Matérn 5/2, a constant scale and white noise, hyperparameters by marginal
likelihood), so one level alone is exactly that emulator.

With the hyperparameters so fitted, every run of every level conditions one joint Gaussian process over
(point, level) pairs: cov(f_l(x), f_m(x')) = sum over j <= min(l, m) of P(j, l) P(j, m) k_j(x, x'), with
P(j, l) the product of rho_(j+1)..rho_l. Why not smt's MFK itself: it predicts a level's mean and variance
but gives no posterior covariance between points, and choosing a batch by the reduction of the costliest
level's integrated variance (pipeline/design/fidelity_choice.py) needs exactly that, for (point, level)
pairs of any level. `JointProcess` offers what scikit-learn's fitted regressor offers
(kernel_, X_train_, L_, alpha_, predict), so emulator.Posterior and the kriging believer work on it
unchanged. A point of the joint space is the unit-cube point with its level index as one more column.

Its validation (`loo`) leaves out, with each costliest run, every run at the same point: the cheaper runs
a nested design ran there would otherwise predict it from the cheaper level's value at that very point.

Memory: runs x output entries, and runs² per component (runs of every level); time: the fits (O(runs_l³)
per level per hyperparameter step) and one Cholesky factorisation of all runs per component.
"""

from __future__ import annotations

import warnings
from typing import Any

import numpy as np
from scipy.linalg import cho_solve, cholesky

from pipeline.design.emulator import Outputs, Posterior, fitted_process, principal_components

JITTER = 1e-10  # added to the joint covariance's diagonal, as scikit-learn's alpha


def joined(x: np.ndarray, level: int | np.ndarray) -> np.ndarray:
    """Points of the unit cube with their level index as the last column (the joint space's points)."""
    levels = np.broadcast_to(np.asarray(level, np.float64), (len(x),))
    return np.column_stack([np.asarray(x, np.float64), levels])


class LevelKernel:
    """The joint covariance of (point, level) pairs, from each level's discrepancy kernel (smooth part and
    white noise, in the component's units) and the factors rho."""

    def __init__(self, smooth: list[Any], noise: list[float], rho: list[float]) -> None:
        self.smooth, self.noise, self.rho = smooth, np.asarray(noise), np.asarray(rho)

    def reach(self, levels: np.ndarray) -> np.ndarray:
        """P(j, level) for every discrepancy j (rows) and point (columns); 0 where j is above the level."""
        out = np.zeros((len(self.smooth), len(levels)))
        for j in range(len(self.smooth)):
            factor = np.ones(len(levels))
            for i in range(j + 1, len(self.smooth)):  # the factors rho_(j+1)..rho_level
                factor = np.where(levels >= i, factor * self.rho[i], factor)
            out[j] = np.where(levels >= j, factor, 0.0)
        return out

    def __call__(self, a: np.ndarray, b: np.ndarray | None = None) -> np.ndarray:
        same = b is None
        b = a if same else b
        la, lb = a[:, -1].astype(int), b[:, -1].astype(int)
        ra, rb = self.reach(la), self.reach(lb)
        out = np.zeros((len(a), len(b)))
        for j, kernel in enumerate(self.smooth):
            out += np.outer(ra[j], rb[j]) * kernel(a[:, :-1], b[:, :-1])
        if same:  # a run's own noise: its level's
            out[np.diag_indices_from(out)] += self.noise[la]
        return out

    def diag(self, a: np.ndarray) -> np.ndarray:
        levels = a[:, -1].astype(int)
        reach = self.reach(levels)
        smooth = np.array([kernel.diag(a[:, :-1]) for kernel in self.smooth])
        return (reach**2 * smooth).sum(axis=0) + self.noise[levels]


class JointProcess:
    """One component's Gaussian process over (point, level) pairs, conditioned on every run: the
    attributes of a fitted scikit-learn regressor that emulator.Posterior and Emulator.loo read."""

    def __init__(self, kernel: LevelKernel, prior_mean: np.ndarray, points: np.ndarray, values: np.ndarray):
        self.kernel_, self.prior_mean, self.X_train_ = kernel, prior_mean, points
        self._y_train_std, self._y_train_mean = 1.0, 0.0  # the values are kept in the component's units
        levels = points[:, -1].astype(int)
        self.y_train_ = values - prior_mean[levels]
        covariance = kernel(points)
        covariance[np.diag_indices_from(covariance)] += JITTER
        self.L_ = cholesky(covariance, lower=True)
        self.alpha_ = cho_solve((self.L_, True), self.y_train_)

    def predict(self, a: np.ndarray, return_std: bool = False) -> Any:
        cross = self.kernel_(a, self.X_train_)
        mean = self.prior_mean[a[:, -1].astype(int)] + cross @ self.alpha_
        if not return_std:
            return mean
        solved = cho_solve((self.L_, True), cross.T)
        variance = self.kernel_.diag(a) - np.einsum("ij,ji->i", cross, solved)
        return mean, np.sqrt(np.maximum(variance, 0.0))


def level_parts(process: Any) -> tuple[Any, float, float, float]:
    """A fitted scikit-learn process's smooth kernel and white noise in the units of its values, and the
    mean and spread its values were normalised by: (smooth, noise, mean, spread)."""
    spread = float(process._y_train_std)
    kernel = process.kernel_
    smooth = kernel.k1.clone_with_theta(kernel.k1.theta)
    smooth.k1.constant_value = smooth.k1.constant_value * spread**2  # the scale, in the values' units
    return smooth, float(kernel.k2.noise_level) * spread**2, float(process._y_train_mean), spread


class MultiFidelityEmulator:
    """Emulator's interface (predict, variance, posterior, loo) for the costliest level, fitted on the
    runs of every level."""

    def __init__(self, outputs: Outputs, seed: int, levels: int, max_components: int = 12) -> None:
        self.outputs, self.seed, self.levels, self.max_components = outputs, seed, levels, max_components

    def fit(self, x: np.ndarray, y: np.ndarray, level: np.ndarray) -> MultiFidelityEmulator:
        from sklearn.exceptions import ConvergenceWarning

        level = np.asarray(level, int)
        counts = np.bincount(level, minlength=self.levels)
        if (counts < 3).any():
            raise ValueError(
                f"a multi-fidelity emulator needs at least 3 runs with outputs of every level (have "
                f"{counts.tolist()})"
            )
        self.x, self.level = np.asarray(x, np.float64), level
        y = np.asarray(y, np.float64)
        self.mean, self.scale = self.outputs.standardisation(y)
        z = (y - self.mean) / self.scale
        self.components = principal_components(z, self.max_components)
        coefficients = z @ self.components.T
        self.top = self.level == self.levels - 1
        self.y = y[self.top]  # the costliest level's runs: what the validation error is over
        points = joined(self.x, self.level)
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", ConvergenceWarning)
            self.processes = [
                self._joint(points, coefficients[:, c], self.seed + c) for c in range(len(self.components))
            ]
        return self

    def _joint(self, points: np.ndarray, values: np.ndarray, seed: int) -> JointProcess:
        """One component's joint process, its levels fitted one after another."""
        smooth, noise, rho, prior = [], [], [0.0], np.zeros(self.levels)
        below: JointProcess | None = None
        for level in range(self.levels):
            at = self.level == level
            target = values[at]
            if below is not None:  # what level-1's emulator predicts at this level's points
                under = below.predict(joined(self.x[at], level - 1))
                centred = under - under.mean()
                factor = float(centred @ (target - target.mean()) / max(centred @ centred, 1e-12))
                rho.append(factor)
                target = target - factor * under
            fitted = fitted_process(self.x[at], target, seed + 1000 * level)
            part, white, mean, _ = level_parts(fitted)
            smooth.append(part)
            noise.append(white)
            prior[level] = mean + (rho[level] * prior[level - 1] if level else 0.0)
            kernel = LevelKernel(smooth, noise, rho)
            known = self.level <= level
            below = JointProcess(kernel, prior[: level + 1], points[known], values[known])
        assert below is not None
        return below

    def coefficients(self, x: np.ndarray, level: int | None = None) -> np.ndarray:
        at = joined(x, self.levels - 1 if level is None else level)
        return np.column_stack([p.predict(at) for p in self.processes])

    def predict(self, x: np.ndarray, level: int | None = None) -> np.ndarray:
        """The outputs at `x` of `level` (the costliest by default), in their units."""
        return (self.coefficients(x, level) @ self.components) * self.scale + self.mean

    def variance(self, x: np.ndarray, level: int | None = None) -> np.ndarray:
        at = joined(x, self.levels - 1 if level is None else level)
        return np.sum([p.predict(at, return_std=True)[1] ** 2 for p in self.processes], axis=0)

    def posterior(self, points: np.ndarray) -> Posterior:
        """Each component's posterior over (point, level) pairs (`joined` points), for fantasies."""
        return Posterior(self.processes, points)

    def loo(self) -> np.ndarray:
        """The costliest level's runs as the runs at every other point predict them: exact leave-one-point-
        out of the joint process, its hyperparameters as fitted, in their units. Each costly run is left
        out with every run at its point (a nested design runs the cheaper levels where it runs the costly
        one): a cheap run beside it would predict it from the cheap level's value there, where a point to
        be predicted has none, and a cheap level that the cheaper runs' own emulator cannot follow (a jump)
        would look as good as the costly runs could judge it. Leave-block-out: y_B - mean_B = (K^-1)_BB^-1
        (K^-1 y)_B, the block B the runs at one point."""
        _, point = np.unique(self.x, axis=0, return_inverse=True)
        point = point.ravel()
        costly = np.flatnonzero(self.top)
        columns = []
        for p in self.processes:
            inverse = cho_solve((p.L_, True), np.eye(len(p.X_train_)))
            left_out = np.empty(len(costly))
            for k, i in enumerate(costly):
                block = np.flatnonzero(point == point[i])
                residual = np.linalg.solve(inverse[np.ix_(block, block)], p.alpha_[block])
                left_out[k] = p.y_train_[i] - residual[block == i][0]
            columns.append(left_out + p.prior_mean[self.level[self.top]])
        return (np.column_stack(columns) @ self.components) * self.scale + self.mean

    def loo_errors(self) -> dict[str, np.ndarray]:
        return self.outputs.errors(self.loo(), self.y)

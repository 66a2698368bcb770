"""The surrogate the rounds of an adaptive design choose with: the runs' outputs (each run's arrays,
flattened side by side) standardised per output, reduced to principal components, and a Gaussian process
per component from the design's parameters (in the unit cube): scikit-learn's GaussianProcessRegressor
with an anisotropic Matérn 5/2 kernel, a constant scale and a white-noise term, hyperparameters by
marginal likelihood. The same emulator the issue names: its posterior variance says where it knows least.

What it answers, at points of the unit cube:
- `predict`: the outputs in their units;
- `variance`: the posterior variance summed over the components (standardised units: the variance of the
  reconstructed outputs, as the components are orthonormal), with `posterior` for a batch's fantasies;
- `loo`: each run's prediction by the other runs (exact leave-one-out for the fitted hyperparameters:
  y_i - [K^-1 y]_i / [K^-1]_ii per component): the validation error (NRMSE) and each run's loss, at no
  refit.

Memory: runs x output entries (the runs' outputs), runs² per component; time: components x a few
Cholesky factorisations of runs x runs per hyperparameter step (O(runs³)): hundreds to a few thousand
runs, which is what adaptive design is for.
"""

from __future__ import annotations

import warnings
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
from scipy.linalg import cho_solve

from pipeline.data.scores import normalised_squared_errors

SPREAD_FLOOR = 1e-12  # the least spread an output is divided by: one that never changes is not divided by 0


@dataclass(frozen=True)
class Outputs:
    """The outputs learned, as slices of a run's flattened row: name -> (start, stop, shape)."""

    layout: dict[str, tuple[int, int, tuple[int, ...]]]

    @staticmethod
    def of(shapes: Mapping[str, Sequence[int]]) -> Outputs:
        layout, start = {}, 0
        for name, shape in shapes.items():
            stop = start + int(np.prod(shape, dtype=np.int64))
            layout[name] = (start, stop, tuple(int(s) for s in shape))
            start = stop
        return Outputs(layout)

    @property
    def width(self) -> int:
        return max((stop for _, stop, _ in self.layout.values()), default=0)

    def row(self, arrays: Mapping[str, np.ndarray]) -> np.ndarray:
        return np.concatenate([np.asarray(arrays[name], np.float64).ravel() for name in self.layout])

    def standardisation(self, y: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """The runs' mean (per entry) and each output's spread (one per output, so each weighs the same
        whatever its size; at least SPREAD_FLOOR), of rows of this layout."""
        mean = y.mean(axis=0)
        scale = np.empty(self.width)
        for a, b, _ in self.layout.values():
            scale[a:b] = max(float((y[:, a:b] - mean[a:b]).std()), SPREAD_FLOOR)
        return mean, scale

    def errors(self, predicted: np.ndarray, true: np.ndarray) -> dict[str, np.ndarray]:
        """Per output, each run's mean squared error over the output's entries divided by the output's
        variance over the runs (pipeline.data.scores: its share of NRMSE², as the trained surrogates are
        scored; a run whose output is constant cannot inflate it)."""
        return {
            name: normalised_squared_errors(predicted[:, a:b], true[:, a:b])
            for name, (a, b, _) in self.layout.items()
        }

    def nrmse(self, predicted: np.ndarray, true: np.ndarray) -> dict[str, float]:
        """Per output, NRMSE over the runs."""
        return {name: float(np.sqrt(e.mean())) for name, e in self.errors(predicted, true).items()}


def principal_components(z: np.ndarray, most: int = 12, explained: float = 0.999) -> np.ndarray:
    """The principal directions of standardised rows `z` that explain `explained` of their variance (at
    most `most`, and fewer than the rows): components x width, orthonormal."""
    from sklearn.decomposition import PCA

    most = max(1, min(most, len(z) - 1, z.shape[1]))
    with warnings.catch_warnings():
        # outputs that never change (a regime of equal runs: pipeline/design/regimes.py) have no variance
        # to divide: their one component is kept, and its GP learns the constant
        warnings.simplefilter("ignore", RuntimeWarning)
        pca = PCA(n_components=most, svd_solver="full").fit(z)
    kept = int(np.searchsorted(np.cumsum(pca.explained_variance_ratio_), explained) + 1)
    return pca.components_[: min(kept, most)]


def fitted_process(x: np.ndarray, values: np.ndarray, seed: int, restarts: int = 0) -> Any:
    """A Gaussian process from points of the unit cube to `values`: an anisotropic Matérn 5/2 kernel times
    a constant, plus white noise, hyperparameters by marginal likelihood (scikit-learn)."""
    from sklearn.gaussian_process import GaussianProcessRegressor
    from sklearn.gaussian_process.kernels import ConstantKernel, Matern, WhiteKernel

    smooth = ConstantKernel(1.0, (1e-3, 1e3)) * Matern(np.full(x.shape[1], 0.3), (1e-2, 1e1), nu=2.5)
    process = GaussianProcessRegressor(
        smooth + WhiteKernel(1e-6, (1e-10, 1e-1)),
        normalize_y=True,
        n_restarts_optimizer=restarts,
        random_state=seed,
    )
    return process.fit(x, values)


class Emulator:
    def __init__(
        self,
        outputs: Outputs,
        seed: int,
        max_components: int = 12,
        explained: float = 0.999,
        restarts: int = 0,
    ) -> None:
        self.outputs, self.seed = outputs, seed
        self.max_components, self.explained, self.restarts = max_components, explained, restarts

    def fit(self, x: np.ndarray, y: np.ndarray) -> Emulator:
        from sklearn.exceptions import ConvergenceWarning

        if len(x) < 3:
            raise ValueError(f"an emulator needs at least 3 runs with outputs (have {len(x)})")
        self.x, self.y = np.asarray(x, np.float64), np.asarray(y, np.float64)
        self.mean, self.scale = self.outputs.standardisation(self.y)
        z = (self.y - self.mean) / self.scale
        self.components = principal_components(z, self.max_components, self.explained)
        coefficients = z @ self.components.T
        with warnings.catch_warnings():
            # A length scale at its bound is what a jump between runs looks like to a smooth kernel: expected
            warnings.simplefilter("ignore", ConvergenceWarning)
            self.processes = [
                fitted_process(x, coefficients[:, c], self.seed + c, self.restarts)
                for c in range(len(self.components))
            ]
        return self

    def coefficients(self, x: np.ndarray) -> np.ndarray:
        return np.column_stack([p.predict(x) for p in self.processes])

    def predict(self, x: np.ndarray) -> np.ndarray:
        """The outputs at `x`, in their units (points x width)."""
        return (self.coefficients(x) @ self.components) * self.scale + self.mean

    def variance(self, x: np.ndarray) -> np.ndarray:
        """The posterior variance at each point, summed over the components (standardised outputs)."""
        return np.sum([p.predict(x, return_std=True)[1] ** 2 for p in self.processes], axis=0)

    def posterior(self, x: np.ndarray) -> Posterior:
        """Each component's posterior over the points, for fantasies (kriging believer)."""
        return Posterior(self.processes, x)

    def loo(self) -> np.ndarray:
        """Each run's outputs as the other runs predict them (exact leave-one-out per component, the
        hyperparameters as fitted on all runs), in their units."""
        columns = []
        for p in self.processes:
            inverse = cho_solve((p.L_, True), np.eye(len(self.x)))
            alpha = p.alpha_.ravel()
            normalised = (p.y_train_.ravel() - alpha / np.diag(inverse)) * p._y_train_std + p._y_train_mean
            columns.append(normalised)
        return (np.column_stack(columns) @ self.components) * self.scale + self.mean

    def loo_errors(self) -> dict[str, np.ndarray]:
        """Each run's leave-one-out error per output (Outputs.errors): the validation error that costs no
        runs; NRMSE is the square root of their mean."""
        return self.outputs.errors(self.loo(), self.y)


class Posterior:
    """The components' posterior over a pool of points: each point's variance, and the covariance of the
    pool with any one of its points (a column, O(pool x runs) per component) computed when asked, not the
    pool x pool matrix: k(x, x') - k(x, X) K^-1 k(X, x'), scaled as the component's y."""

    def __init__(self, processes: Sequence[Any], x: np.ndarray) -> None:
        self.x = x
        self.parts = []
        for p in processes:
            cross = p.kernel_(x, p.X_train_)  # pool x runs
            solved = cho_solve((p.L_, True), cross.T)  # K^-1 k(X, pool): runs x pool
            scale = float(p._y_train_std) ** 2
            variance = (p.kernel_.diag(x) - np.einsum("ij,ji->i", cross, solved)) * scale
            self.parts.append((p, cross, solved, scale, np.maximum(variance, 0.0)))

    def variances(self) -> list[np.ndarray]:
        return [part[4] for part in self.parts]

    def among(self, rows: np.ndarray) -> list[np.ndarray]:
        """Each component's posterior covariance between the points `rows` (indices) and every point
        (len(rows) x points)."""
        return [
            (p.kernel_(self.x[rows], self.x) - cross[rows] @ solved) * scale
            for p, cross, solved, scale, _ in self.parts
        ]

    def columns(self, i: int) -> list[np.ndarray]:
        """Each component's posterior covariance between every point and point i."""
        return [
            (p.kernel_(self.x, self.x[i : i + 1])[:, 0] - cross @ solved[:, i]) * scale
            for p, cross, solved, scale, _ in self.parts
        ]

"""The classical baseline beside every result: what the first thing a domain scientist would try learns from
the same train/validation split, so that a network's score is read against it.

- regression: ridge regression on per-sample summary statistics (per channel the mean, log variance,
  skewness and excess kurtosis; for 2-D and 3-D fields also the log isotropic power spectrum in BINS
  log-spaced bins of |k|; for 1-D traces the moments over the trace's real steps, a batch's zero padding
  left out as the sequence model leaves it, and the log of their number: a multiplicity), features
  standardised, intercept unpenalised, the penalty chosen per label by FOLDS-fold cross-validation on the
  training split;
- classification: a linear discriminant (LDA) on the same statistics;
- segmentation: a per-pixel linear discriminant on the channels.

Linear discriminants instead of logistic regression: the same family of linear decision boundaries, but
fitted in closed form from per-class sums, so every model here is fitted from sufficient statistics that
each rank accumulates over its share of the records in one streamed pass and one allreduce adds up: no
rank holds the dataset or a row per record, and there is no iteration over the data. The covariance is
shrunk towards its diagonal (SHRINKAGE of the standardised covariance), which keeps it invertible when
statistics are collinear.

Scores come from the task's own evaluation (the same R², accuracy or IoU code as the network's), from a
second streamed pass over the validation records.

Memory: (F + 1)² x (FOLDS + 1) sums (F statistics per sample; a few hundred for multi-channel fields), per
class F sums. Time: one pass over the training and validation records with an FFT per sample and channel
(n log n in its cells), and a (F + 1)-square solve per penalty and fold.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Protocol

import numpy as np

BINS = 12
FOLDS = 5
PENALTIES = np.logspace(-5, 3, 17)  # per record: the penalty is PENALTY x records on standardised features
SHRINKAGE = 0.1
TINY = 1e-12


# ---------------------------------------------------------------- statistics of samples


def spectrum_bins(shape: Sequence[int], bins: int) -> tuple[np.ndarray, np.ndarray]:
    """For an rfftn of a field of `shape`: the order that sorts its modes by |k| bin, and where each bin
    starts in that order (k = 0 left out). |k| in units of the box's fundamental, bins log-spaced from 1 to
    the largest |k|."""
    axes = [np.fft.fftfreq(n, 1.0 / n) for n in shape[:-1]] + [np.fft.rfftfreq(shape[-1], 1.0 / shape[-1])]
    k = np.sqrt(sum(g**2 for g in np.meshgrid(*axes, indexing="ij"))).ravel()
    edges = np.logspace(0, np.log10(max(k.max(), 1.0) * (1 + 1e-9)), bins + 1)
    index = np.digitize(k, edges) - 1  # k < 1 (the mean) gets -1
    index[k < 1] = -1
    order = np.argsort(index, kind="stable")
    sorted_index = index[order]
    keep = sorted_index >= 0
    starts = np.searchsorted(sorted_index[keep], np.arange(bins))
    return order[keep], starts


def summary_statistics(x: np.ndarray, spatial_dims: int, bins: int = BINS) -> np.ndarray:
    """(B, F) statistics of a batch x of shape (B, *spatial, C) (a missing channel axis is added when x has
    exactly spatial_dims + 1 axes)."""
    x = np.asarray(x, np.float64)
    if x.ndim == spatial_dims + 1:
        x = x[..., np.newaxis]
    b, c = x.shape[0], x.shape[-1]
    flat = x.reshape(b, -1, c)
    if spatial_dims == 1:  # a trace's real steps: a step whose channels are all zero is a batch's padding
        real = np.any(flat != 0, axis=2, keepdims=True).astype(np.float64)
        steps = np.maximum(real.sum(axis=1), 1.0)  # (b, 1)
    else:
        real, steps = np.ones((1, 1, 1)), np.full((b, 1), float(flat.shape[1]))
    mean = (flat * real).sum(axis=1) / steps
    centred = (flat - mean[:, np.newaxis]) * real
    var = (centred**2).sum(axis=1) / steps
    scale = np.where(var > 0, np.sqrt(var), 1.0)
    skew = (centred**3).sum(axis=1) / steps / scale**3
    kurtosis = (centred**4).sum(axis=1) / steps / scale**4 - 3.0
    parts = [mean, np.log(var + TINY), skew, kurtosis]
    if spatial_dims == 1:
        parts.append(np.log(steps))
    if spatial_dims in (2, 3):
        shape = x.shape[1 : 1 + spatial_dims]
        order, starts = spectrum_bins(shape, bins)
        axes = tuple(range(1, 1 + spatial_dims))
        power = np.abs(np.fft.rfftn(x, axes=axes)) ** 2 / np.prod(shape)
        modes = power.reshape(b, -1, c)[:, order]
        counts = np.diff(np.append(starts, len(order)))
        sums = np.add.reduceat(modes, starts, axis=1) if len(order) else np.zeros((b, bins, c))
        sums[:, counts == 0] = 0.0  # reduceat gives the next bin's first mode for an empty bin
        spectrum = sums / np.maximum(counts, 1)[np.newaxis, :, np.newaxis]
        parts.append(np.log(spectrum + TINY).reshape(b, -1))
    return np.concatenate(parts, axis=1)


# ---------------------------------------------------------------- what a task's baseline fits


@dataclass
class Fitted:
    """A fitted linear baseline: scores = features @ weights + bias; the features' count, sums and sums of
    squares over the training records (their moments); what the fit chose."""

    linear: tuple[np.ndarray, np.ndarray]
    feature_sums: tuple[Any, np.ndarray, np.ndarray]
    settings: dict[str, Any]


class BaselineSums(Protocol):
    """The sufficient statistics a task's baseline accumulates (ClassicalBaseline.sums): added to a batch at
    a time, their arrays added across ranks, then fitted."""

    def add(self, f: np.ndarray, y: np.ndarray) -> None: ...

    def arrays(self) -> list[np.ndarray]: ...

    def fitted(self, reduced: Sequence[np.ndarray]) -> Fitted: ...


# ---------------------------------------------------------------- ridge regression from sufficient statistics


@dataclass
class RidgeSums:
    """Per fold: sum of a a' and a y' for a = (1, features), and of y²."""

    features: int
    labels: int
    names: Sequence[str] = ()  # the labels' names, for the penalty chosen per label
    folds: int = FOLDS
    aa: np.ndarray = field(init=False)
    ay: np.ndarray = field(init=False)
    yy: np.ndarray = field(init=False)
    seen: int = 0

    def __post_init__(self) -> None:
        n = self.features + 1
        self.aa = np.zeros((self.folds, n, n))
        self.ay = np.zeros((self.folds, n, self.labels))
        self.yy = np.zeros((self.folds, self.labels))

    def add(self, f: np.ndarray, y: np.ndarray) -> None:
        """Records go to the folds in turn (each rank's pass is in a fixed order)."""
        a = np.concatenate([np.ones((len(f), 1)), f], axis=1)
        fold = (self.seen + np.arange(len(f))) % self.folds
        for k in range(self.folds):
            rows = fold == k
            self.aa[k] += a[rows].T @ a[rows]
            self.ay[k] += a[rows].T @ y[rows]
            self.yy[k] += (y[rows] ** 2).sum(axis=0)
        self.seen += len(f)

    def arrays(self) -> list[np.ndarray]:
        return [self.aa, self.ay, self.yy]

    def fitted(self, reduced: Sequence[np.ndarray]) -> Fitted:
        """Ridge with the penalty chosen per label by cross-validation, from every rank's sums."""
        penalties, theta = ridge_cross_validated(reduced)
        total = reduced[0].sum(axis=0)
        names = self.names or [str(i) for i in range(self.labels)]
        return Fitted(
            (theta[1:], theta[0]),
            (total[0, 0], total[0, 1:], np.diag(total)[1:]),
            {"penalty": dict(zip(names, penalties.tolist(), strict=True))},
        )


def ridge_fit(aa: np.ndarray, ay: np.ndarray, penalty: float) -> np.ndarray:
    """Coefficients ((F + 1) x L, intercept first) minimising |y - a θ|² + penalty n |w / σ|² over the records
    summed in aa, ay: ridge on standardised features with an unpenalised intercept."""
    n = aa[0, 0]
    mean = aa[0, 1:] / n
    cov = aa[1:, 1:] / n - np.outer(mean, mean)
    scale = np.sqrt(np.maximum(np.diag(cov), 0))
    scale = np.where(scale > 1e-12 * max(scale.max(initial=0), 1e-300), scale, np.inf)  # constant: no weight
    y_mean = ay[0] / n
    cross = ay[1:] / n - np.outer(mean, y_mean)  # cov(f, y)
    z_cov = cov / np.outer(scale, scale)
    z_cov[~np.isfinite(z_cov)] = 0.0
    z_cross = cross / scale[:, np.newaxis]
    w_z = np.linalg.solve(z_cov + penalty * np.eye(len(z_cov)), z_cross)
    w = w_z / scale[:, np.newaxis]
    return np.concatenate([(y_mean - mean @ w)[np.newaxis], w], axis=0)


def squared_error(theta: np.ndarray, aa: np.ndarray, ay: np.ndarray, yy: np.ndarray) -> np.ndarray:
    """Σ (y - a θ)² per label over the records summed in aa, ay, yy."""
    return yy - 2 * np.einsum("fl,fl->l", theta, ay) + np.einsum("fl,fl->l", theta, aa @ theta)


def ridge_cross_validated(sums: Sequence[np.ndarray]) -> tuple[np.ndarray, np.ndarray]:
    """The penalty per label with the lowest cross-validated squared error, and the coefficients fitted
    with it on every fold."""
    aa, ay, yy = sums
    total_aa, total_ay = aa.sum(axis=0), ay.sum(axis=0)
    errors = np.zeros((len(PENALTIES), ay.shape[-1]))
    for i, penalty in enumerate(PENALTIES):
        for k in range(len(aa)):
            if aa[k, 0, 0] == 0 or total_aa[0, 0] - aa[k, 0, 0] < 2:
                continue
            theta = ridge_fit(total_aa - aa[k], total_ay - ay[k], penalty)
            errors[i] += squared_error(theta, aa[k], ay[k], yy[k])
    best = errors.argmin(axis=0)
    theta = np.empty_like(total_ay)
    for b in np.unique(best):  # one fit per penalty chosen (a surrogate's outputs are thousands of labels)
        theta[:, best == b] = ridge_fit(total_aa, total_ay[:, best == b], PENALTIES[b])
    return PENALTIES[best], theta


# ---------------------------------------------------------------- the emulator: PCA and kernel ridge


RFF_SCALES = (0.5, 1.0, 2.0)  # RBF length scales in units of the (normalised) parameters
RFF_PER_SCALE = 64
RFF_SEED = 20261127
PCA_MAX_OUTPUTS = 4096  # outputs beyond this: no PCA truncation (its covariance would be outputs² x 8 bytes)
PCA_VARIANCE = 1 - 1e-4  # components kept: this share of the outputs' variance


def principal_components(covariance: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """The covariance's eigenvalues (largest first, rounding's negatives clipped to 0) and eigenvectors
    (columns, in that order)."""
    values, vectors = np.linalg.eigh(covariance)
    return values[::-1].clip(0), vectors[:, ::-1]


def random_fourier_features(x: np.ndarray) -> np.ndarray:
    """(B, len(RFF_SCALES) x RFF_PER_SCALE): sqrt(2 / m) cos(x W / l + b) with W ~ N(0, 1), b ~ U(0, 2 pi)
    fixed by RFF_SEED: a linear model on them approximates kernel ridge with an RBF kernel of length l
    (Rahimi & Recht 2007), fitted from sufficient statistics like every other baseline here."""
    rng = np.random.default_rng([RFF_SEED, x.shape[1]])
    parts = []
    for scale in RFF_SCALES:
        w = rng.standard_normal((x.shape[1], RFF_PER_SCALE))
        b = rng.uniform(0, 2 * np.pi, RFF_PER_SCALE)
        parts.append(np.sqrt(2.0 / RFF_PER_SCALE) * np.cos(x @ w / scale + b))
    return np.concatenate(parts, axis=1)


@dataclass
class EmulatorSums(RidgeSums):
    """The classical emulator of a surrogate: ridge from the parameters' features to every output (the
    penalty per output by cross-validation, RidgeSums' folds), and the outputs' sum and sum of outer
    products for their principal components. The prediction is projected onto the components that hold
    PCA_VARIANCE of the outputs' variance: PCA of the outputs with a kernel ridge per retained component
    (the same predictions, as ridge is linear in its targets), folded into one linear map."""

    total: np.ndarray = field(init=False)
    outer: np.ndarray = field(init=False)

    def __post_init__(self) -> None:
        super().__post_init__()
        pca = self.labels <= PCA_MAX_OUTPUTS
        self.total = np.zeros(self.labels)
        self.outer = np.zeros((self.labels, self.labels) if pca else (0, 0))

    def add(self, f: np.ndarray, y: np.ndarray) -> None:
        super().add(f, y)
        self.total += y.sum(axis=0)
        if self.outer.size:
            self.outer += y.T @ y

    def arrays(self) -> list[np.ndarray]:
        return [*super().arrays(), self.total, self.outer]

    def fitted(self, reduced: Sequence[np.ndarray]) -> Fitted:
        aa, ay, yy, total, outer = reduced
        penalties, theta = ridge_cross_validated([aa, ay, yy])
        n = aa.sum(axis=0)[0, 0]
        weights, bias = theta[1:], theta[0]
        components = None
        if outer.size and n > 1:
            mean = total / n
            values, vectors = principal_components(outer / n - np.outer(mean, mean))
            share = np.cumsum(values) / max(values.sum(), TINY)
            components = int(min(np.searchsorted(share, PCA_VARIANCE) + 1, n - 1, len(values)))
            keep = vectors[:, :components]
            projection = keep @ keep.T
            weights, bias = weights @ projection, bias @ projection + mean - mean @ projection
        sums = aa.sum(axis=0)
        settings = {
            "components": components,
            "outputs": self.labels,
            "features": self.features,
            "penalty": {
                "median": float(np.median(penalties)),
                "min": float(penalties.min()),
                "max": float(penalties.max()),
            },
        }
        return Fitted((weights, bias), (sums[0, 0], sums[0, 1:], np.diag(sums)[1:]), settings)


# ---------------------------------------------------------------- principal components: an autoencoder's
# baseline


# a sketch's columns beyond twice the components (Tropp et al. 2017 take 2k + 1 at least)
SKETCH_OVERSAMPLING = 16
SKETCH_SEED = 20261128


class Projection:
    """The weights of a PCA reconstruction, x -> x V V', kept as V (D x k) rather than the D x D matrix:
    `x @ projection` is (x V) V' (numpy defers the product to it)."""

    __array_ufunc__ = None  # `ndarray @ Projection` calls __rmatmul__

    def __init__(self, components: np.ndarray) -> None:
        self.components = components

    def __rmatmul__(self, x: np.ndarray) -> np.ndarray:
        return (x @ self.components) @ self.components.T


@dataclass
class PcaSums:
    """Principal components of the samples (an autoencoder's classical baseline: `components` of them, the
    same number as its latent): the samples' sum and, for up to PCA_MAX_OUTPUTS entries, the sum of their
    outer products (exact: the covariance's eigenvectors); beyond, a single-pass Nyström sketch of the
    covariance, the sum of y (y' Ω) for a fixed Gaussian Ω of 2 components + SKETCH_OVERSAMPLING columns
    (Tropp, Yurtsever, Udell & Cevher 2017, "Fixed-rank approximation of a positive-semidefinite matrix
    from streaming data"): sums, so ranks add them. The features are the samples themselves (flat); the
    fit reconstructs them, x -> mean + (x - mean) V V'. After `fitted`, `mean` and `components` (D x k)
    hold the fit (an autoencoder's task compares its latents with the coefficients).
    Memory: D² (exact) or D x (2k + 16) doubles; time per batch: B D² or B D (2k + 16)."""

    features: int
    components: int
    total: np.ndarray = field(init=False)
    outer: np.ndarray = field(init=False)
    omega: np.ndarray | None = field(init=False)
    count: int = 0
    mean: np.ndarray | None = None
    basis: np.ndarray | None = None  # D x components, once fitted

    def __post_init__(self) -> None:
        self.total = np.zeros(self.features)
        if self.exact:
            self.omega, self.outer = None, np.zeros((self.features, self.features))
        else:
            columns = min(self.features, 2 * self.components + SKETCH_OVERSAMPLING)
            rng = np.random.default_rng([SKETCH_SEED, self.features])
            self.omega = rng.standard_normal((self.features, columns))
            self.outer = np.zeros((self.features, columns))

    @property
    def exact(self) -> bool:
        return self.features <= PCA_MAX_OUTPUTS

    def add(self, f: np.ndarray, y: np.ndarray) -> None:
        """f: the samples flat (B, D); y (the same samples, the task's targets) is not needed again."""
        f = np.asarray(f, np.float64)
        self.total += f.sum(axis=0)
        self.outer += f.T @ f if self.omega is None else f.T @ (f @ self.omega)
        self.count += len(f)

    def arrays(self) -> list[np.ndarray]:
        return [np.array([float(self.count)]), self.total, self.outer]

    def fitted(self, reduced: Sequence[np.ndarray]) -> Fitted:
        count, total, outer = reduced
        n = max(float(count[0]), 1.0)
        mean = total / n
        k = int(min(self.components, self.features, max(n - 1, 1)))
        if self.omega is None:
            values, vectors = principal_components(outer / n - np.outer(mean, mean))
            basis = vectors[:, :k]
        else:
            basis, values = nystrom(outer / n - np.outer(mean, mean @ self.omega), self.omega, k)
        self.mean, self.basis = mean, basis
        explained = float(values[:k].sum() / max(values.sum(), TINY)) if self.omega is None else None
        settings = {
            "components": k,
            "pca": "exact covariance"
            if self.omega is None
            else f"Nyström sketch of {self.omega.shape[1]} columns",
        }
        if explained is not None:
            settings["explained_variance"] = round(explained, 6)
        squares = np.diag(outer) if self.omega is None else np.zeros(self.features)
        return Fitted((Projection(basis), mean - (mean @ basis) @ basis.T), (n, total, squares), settings)

    def coefficients(self, f: np.ndarray) -> np.ndarray:
        """The fitted components' coefficients of samples (B, D): (B, k)."""
        assert self.mean is not None and self.basis is not None
        return (np.asarray(f, np.float64) - self.mean) @ self.basis


def nystrom(sketch: np.ndarray, omega: np.ndarray, k: int) -> tuple[np.ndarray, np.ndarray]:
    """The top-k eigenvectors (D x k) and the eigenvalues (largest first) of a positive-semidefinite matrix A
    from its sketch A Ω alone (Tropp et al. 2017, Algorithm 3: shifted for stability)."""
    shift = np.sqrt(sketch.shape[0]) * np.finfo(np.float64).eps * max(np.linalg.norm(sketch), TINY)
    shifted = sketch + shift * omega
    core = omega.T @ shifted
    lower = np.linalg.cholesky((core + core.T) / 2)
    factor = np.linalg.solve(lower, shifted.T).T  # shifted L^-T: the factor F with A ≈ F F'
    vectors, singular, _ = np.linalg.svd(factor, full_matrices=False)
    return vectors[:, :k], np.maximum(singular**2 - shift, 0)


# ---------------------------------------------------------------- linear discriminants


@dataclass
class DiscriminantSums:
    """Per class the count and the sum of features; over all records the sum of f f'."""

    features: int
    classes: int
    count: np.ndarray = field(init=False)
    total: np.ndarray = field(init=False)
    outer: np.ndarray = field(init=False)

    def __post_init__(self) -> None:
        self.count = np.zeros(self.classes)
        self.total = np.zeros((self.classes, self.features))
        self.outer = np.zeros((self.features, self.features))

    def add(self, f: np.ndarray, labels: np.ndarray) -> None:
        labels = labels.astype(np.int64).ravel()
        inside = (labels >= 0) & (labels < self.classes)
        f, labels = f[inside], labels[inside]
        self.count += np.bincount(labels, minlength=self.classes)
        np.add.at(self.total, labels, f)
        self.outer += f.T @ f

    def arrays(self) -> list[np.ndarray]:
        return [self.count, self.total, self.outer]

    def fitted(self, reduced: Sequence[np.ndarray]) -> Fitted:
        """The discriminant from every rank's sums (nothing chosen: no settings)."""
        count, class_sums, outer = reduced
        return Fitted(discriminant_fit(reduced), (count.sum(), class_sums.sum(axis=0), np.diag(outer)), {})


def discriminant_fit(sums: Sequence[np.ndarray]) -> tuple[np.ndarray, np.ndarray]:
    """(weights F x K, biases K): class scores f W + b of LDA with a shared covariance shrunk towards its
    diagonal (standardised), priors from the class counts; a class never seen scores -inf."""
    count, total, outer = sums
    n = count.sum()
    means = total / np.maximum(count, 1)[:, np.newaxis]
    overall = total.sum(axis=0) / n
    within = outer / n - (means.T * (count / n)) @ means  # pooled within-class covariance
    scale = np.sqrt(np.maximum(np.diag(within), 0))
    scale = np.where(scale > 0, scale, 1.0)
    z = within / np.outer(scale, scale)
    z = (1 - SHRINKAGE) * z + SHRINKAGE * np.eye(len(z))
    z_means = (means - overall) / scale
    weights_z = np.linalg.solve(z, z_means.T)  # F x K
    weights = weights_z / scale[:, np.newaxis]
    with np.errstate(divide="ignore"):
        prior = np.log(count / n)
    bias = -0.5 * np.einsum("kf,fk->k", z_means, weights_z) + prior - overall @ weights
    return weights, bias


# ---------------------------------------------------------------- the baseline of a task


def method_name(task: Any, spatial_dims: int) -> str:
    """The task's baseline in words, with the statistics it is fitted on."""
    spectrum = f" and the log power spectrum ({BINS} log-spaced |k| bins)"
    extra = {2: spectrum, 3: spectrum, 1: " over the real steps, and the log number of steps"}.get(
        spatial_dims, ""
    )
    return task.classical_baseline().method(f"per-channel mean, log variance, skewness, kurtosis{extra}")


def channels_per_pixel(x: np.ndarray, spatial_dims: int) -> np.ndarray:
    """(B x pixels, C): every pixel's channels (a missing channel axis added)."""
    channels = x if x.ndim == spatial_dims + 2 else x[..., np.newaxis]
    return channels.reshape(-1, channels.shape[-1]).astype(np.float64)


class StreamingFit:
    """The baseline's sums, added to a batch at a time as records come (a pass over staged records, or
    online training's arrivals), then fitted and scored: `add` on every rank, `fit` on every rank alike."""

    def __init__(self, task: Any, sample_shape: Sequence[int], spatial_dims: int) -> None:
        self.task, self.spatial_dims = task, spatial_dims
        # the task's baseline: its inputs (per-sample statistics, per pixel the channels, a surrogate's
        # parameters and their Fourier features), sums and outputs
        self.baseline = task.classical_baseline()
        features = self.baseline.features(np.zeros((1, *sample_shape)), spatial_dims).shape[1]
        self.sums: BaselineSums = self.baseline.sums(features)
        self.linear: tuple[np.ndarray, np.ndarray] | None = None
        self.moments: tuple[np.ndarray, np.ndarray] | None = None

    def add(self, x: np.ndarray, y: np.ndarray) -> None:
        self.sums.add(self.baseline.features(x, self.spatial_dims), np.asarray(y, np.float64))

    def fit(self, allreduce: Any) -> tuple[Any, dict[str, Any]]:
        """(predict(x) -> outputs, the fitted settings) from the sums of every rank (`allreduce(list of
        arrays)` adds them up). After it, `linear` is the fitted map from statistics to outputs (weights
        F x outputs, biases) and `moments` the statistics' mean and standard deviation over the records
        (per-sample tasks; a network that starts from the baseline takes both, models/hybrid.py)."""
        baseline, spatial_dims = self.baseline, self.spatial_dims
        fitted = self.sums.fitted(allreduce(self.sums.arrays()))
        self.linear, settings = fitted.linear, fitted.settings
        n, sums, squares = fitted.feature_sums
        mean = sums / max(n, 1)
        self.moments = (mean, np.sqrt(np.maximum(squares / max(n, 1) - mean**2, 0)))
        weights, bias = self.linear

        def predict(x: np.ndarray) -> np.ndarray:
            scores = baseline.features(x, spatial_dims) @ weights + bias
            return baseline.outputs(scores, x, spatial_dims)

        return predict, settings

    def record(
        self,
        predict: Any,
        settings: Mapping[str, Any],
        splits: Mapping[str, Iterable[tuple[np.ndarray, np.ndarray]]],
        combine: Any,
        seconds: float,
    ) -> dict[str, Any]:
        """summary.json's `baseline`, every mode's (the train step's and online training's): the method, the
        task's metrics on the first of `splits` (the test split where there is one) with each other split's
        beside under its name, the fitted settings (a ridge penalty), the seconds. `combine(evaluation)`
        joins every rank's evaluation."""
        names = list(splits)
        scores = self.metrics(predict, splits[names[0]], combine)
        for name in names[1:]:
            scores[name] = self.metrics(predict, splits[name], combine)
        return {
            "method": method_name(self.task, self.spatial_dims),
            **scores,
            **settings,
            "seconds": round(seconds, 3),
        }

    def metrics(
        self, predict: Any, batches: Iterable[tuple[np.ndarray, np.ndarray]], combine: Any
    ) -> dict[str, Any]:
        """The task's metrics of the fitted `predict` over the batches (every rank's, joined by `combine`)."""
        evaluation = self.task.evaluation()
        for x, y in batches:
            self.task.update(evaluation, predict(x), y, x)
        return self.task.metrics(combine(evaluation))

"""The emulator for codes whose output jumps between regimes (simulate.adaptive.emulator: regimes): the runs
grouped by their outputs, a classifier for which regime a point of the parameter space falls in, and an
emulator per regime (pipeline/design/emulator.py's: a Gaussian process per principal component of that
regime's runs). A treed Gaussian process (Gramacy & Lee 2008, who ran adaptive design with it on NASA's
rocket booster simulations) with its regimes found from the outputs rather than by axis-aligned splits.

Why: one stationary Gaussian process over the whole space has one length scale per parameter. Fitted to a
jump, it is short everywhere, and between runs away from the jump its prediction falls back to the mean of
all runs; the more runs an acquisition gathers at the jump, the shorter the length scale and the worse the
fit elsewhere (docs/ensembles.md, "When it pays"). Per regime, a flat regime keeps a long length scale and
the jump's regime gets its own.

- Regimes: k-means (`regimes` clusters, seeded) on the runs' first principal components of the
  standardised outputs; the clusters of fewer than MIN_RUNS runs pooled into one regime (the states
  between regimes), or where even pooled too few, each run to the nearest large cluster.
- Classifier: a point's regime is its nearest run's (scikit-learn's 1-nearest-neighbour classifier on the
  unit cube): no parameter to fit, and every run lies in its own regime (an SVC's smoother boundary put
  runs outside theirs: test VRMSE 0.046 against 0.035 at 32 runs, the mean of three designs of the preset).
- Variance: the regime's emulator's posterior variance, in the units of the whole design's standardised
  outputs (a regime whose outputs barely change has little to learn); regimes are independent, so the
  posterior over a pool is block-diagonal and kriging believer and integrated variance work unchanged.
- Leave-one-out: each run as the other runs of its regime predict it.

Memory: runs x output entries, and per regime runs² per component; time: the clustering (O(runs x
regimes) per k-means step), a point's regime (O(runs)), and per regime its emulator's fit (O(runs³) per
hyperparameter step).
"""

from __future__ import annotations

from typing import Any

import numpy as np

from pipeline.design.emulator import Emulator, Outputs

MIN_RUNS = 4  # a regime's emulator needs 3 runs; one more so its leave-one-out is not from 2
FEATURES = 3  # principal components the runs are clustered on


class RegimeEmulator:
    def __init__(self, outputs: Outputs, seed: int, regimes: int = 4) -> None:
        self.outputs, self.seed, self.regimes = outputs, seed, regimes

    def fit(self, x: np.ndarray, y: np.ndarray) -> RegimeEmulator:
        from sklearn.neighbors import KNeighborsClassifier

        self.x, self.y = np.asarray(x, np.float64), np.asarray(y, np.float64)
        self.mean, self.scale = self.outputs.standardisation(self.y)
        self.labels = regime_labels((self.y - self.mean) / self.scale, self.regimes, self.seed)
        self.members = [
            Emulator(self.outputs, self.seed).fit(self.x[self.labels == k], self.y[self.labels == k])
            for k in range(self.labels.max() + 1)
        ]
        self.classifier = None
        if len(self.members) > 1:
            self.classifier = KNeighborsClassifier(n_neighbors=1).fit(self.x, self.labels)
        # each component's posterior variance in the whole design's standardised units, summed over entries
        self.weights = [((m.components * (m.scale / self.scale)) ** 2).sum(axis=1) for m in self.members]
        return self

    def regime(self, x: np.ndarray) -> np.ndarray:
        if self.classifier is None:
            return np.zeros(len(x), np.int64)
        return self.classifier.predict(x).astype(np.int64)

    def predict(self, x: np.ndarray) -> np.ndarray:
        """The outputs at `x`, in their units (points x width)."""
        regime = self.regime(x)
        out = np.empty((len(x), self.outputs.width))
        for k, member in enumerate(self.members):
            if (regime == k).any():
                out[regime == k] = member.predict(x[regime == k])
        return out

    def variance(self, x: np.ndarray) -> np.ndarray:
        """The posterior variance at each point, summed over its regime's components (the whole design's
        standardised outputs)."""
        return np.sum(self.posterior(x).variances(), axis=0) if len(x) else np.zeros(0)

    def posterior(self, x: np.ndarray) -> RegimePosterior:
        return RegimePosterior(self, x)

    def loo(self) -> np.ndarray:
        """Each run's outputs as the other runs of its regime predict them, in their units."""
        out = np.empty_like(self.y)
        for k, member in enumerate(self.members):
            out[self.labels == k] = member.loo()
        return out

    def loo_errors(self) -> dict[str, np.ndarray]:
        return self.outputs.errors(self.loo(), self.y)


def regime_labels(z: np.ndarray, regimes: int, seed: int) -> np.ndarray:
    """Each run's regime (0..R-1, every regime of at least MIN_RUNS runs, numbered by their first run):
    k-means (`regimes` clusters) on the first principal components of the standardised outputs `z`. The
    clusters of fewer than MIN_RUNS runs are pooled into one regime: they are the states between regimes
    (at a jump k-means cuts the few, varied runs into small clusters), and joined to the nearest large
    cluster they shortened its length scales (scored 0.10 to 0.12 against 0.03 to 0.06 at 32 runs of the
    preset). Pooled runs fewer than MIN_RUNS join the nearest large cluster each."""
    from sklearn.cluster import KMeans

    count = min(regimes, len(z) // MIN_RUNS)
    if count < 2:
        return np.zeros(len(z), np.int64)
    scores = output_scores(z)
    fitted = KMeans(count, n_init=10, random_state=seed).fit(scores)
    labels = fitted.labels_.copy()
    small = np.bincount(labels, minlength=count) < MIN_RUNS
    pooled = small[labels]
    if pooled.sum() >= MIN_RUNS:
        labels[pooled] = count
    elif pooled.any():
        large = np.flatnonzero(~small)
        gaps = ((scores[pooled][:, None, :] - fitted.cluster_centers_[large][None]) ** 2).sum(axis=-1)
        labels[pooled] = large[gaps.argmin(axis=1)]
    _, first = np.unique(labels, return_index=True)
    numbered = np.empty(labels.max() + 1, np.int64)  # regimes numbered by their first run
    numbered[labels[np.sort(first)]] = np.arange(len(first))
    return numbered[labels]


def output_scores(z: np.ndarray) -> np.ndarray:
    """The runs' first FEATURES principal components of their standardised outputs `z`: what regimes are
    clustered on."""
    from sklearn.decomposition import PCA

    return PCA(n_components=min(FEATURES, *z.shape), svd_solver="full").fit_transform(z)


class RegimePosterior:
    """The regimes' posteriors over a pool, as emulator.Posterior answers them: each regime's components
    count only at the points in that regime, and points in different regimes do not covary. Each regime's
    posterior is computed over its own points alone (its components x its points, not the whole pool)."""

    def __init__(self, emulator: RegimeEmulator, x: np.ndarray) -> None:
        self.x = x
        regime = emulator.regime(x)
        # per regime: its points' indices, their posterior, its components' weights, each point's place in it
        self.regimes: list[tuple[np.ndarray, Any, np.ndarray, np.ndarray]] = []
        for k, member in enumerate(emulator.members):
            inside = np.flatnonzero(regime == k)
            place = np.full(len(x), -1)
            place[inside] = np.arange(len(inside))
            posterior = member.posterior(x[inside]) if len(inside) else None
            self.regimes.append((inside, posterior, emulator.weights[k], place))

    def variances(self) -> list[np.ndarray]:
        out = []
        for inside, posterior, weights, _ in self.regimes:
            for c, weight in enumerate(weights):
                full = np.zeros(len(self.x))
                if posterior is not None:
                    full[inside] = posterior.variances()[c] * weight
                out.append(full)
        return out

    def among(self, rows: np.ndarray) -> list[np.ndarray]:
        out = []
        for inside, posterior, weights, place in self.regimes:
            hit = np.flatnonzero(place[rows] >= 0)
            parts = posterior.among(place[rows][hit]) if len(hit) else None
            for c, weight in enumerate(weights):
                full = np.zeros((len(rows), len(self.x)))
                if parts is not None:
                    full[np.ix_(hit, inside)] = parts[c] * weight
                out.append(full)
        return out

    def columns(self, i: int) -> list[np.ndarray]:
        out = []
        for inside, posterior, weights, place in self.regimes:
            parts = posterior.columns(int(place[i])) if place[i] >= 0 else None
            for c, weight in enumerate(weights):
                full = np.zeros(len(self.x))
                if parts is not None:
                    full[inside] = parts[c] * weight
                out.append(full)
        return out


def make_emulator(
    outputs: Outputs, seed: int, emulator: str = "gp", regimes: int = 4
) -> Emulator | RegimeEmulator:
    """simulate.adaptive.emulator's emulator (with its `regimes`), unfitted."""
    if emulator == "regimes":
        return RegimeEmulator(outputs, seed, regimes)
    return Emulator(outputs, seed)

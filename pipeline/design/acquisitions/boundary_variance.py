"""Integrated variance reduction weighted by where regimes meet (simulate.adaptive.acquisition:
boundary_variance): as integrated_variance, the candidate whose run would take the most off the emulator's
posterior variance summed over the pool's first REFERENCES points, but each reference weighs FLOOR plus
(1 - FLOOR) times the entropy of a probabilistic classifier of the regimes there (scaled to 0..1 by the
entropy of as many equally likely regimes). So the value of a run is the emulator's uncertainty it removes
times the boundary's entropy, summed over the space.

Why: a run near a boundary serves every learner (each must learn where the jump is), while a run deep in a
regime whose error falls slowly serves none (error_weighted_variance chased such error on a real PDE's
regime diagram and starved half its space). The entropy is of the regimes' labels, not of the outputs, so
a noisy or chaotic regime does not attract runs unless its edge is unsure.

- Regimes: k-means on the runs' first principal components of their standardised outputs (as the
  regimes emulator clusters them), with the number of clusters, 2 to `regimes`, that has the largest
  mean silhouette (Rousseeuw 1987), and one regime where none exceeds MIN_SILHOUETTE, Kaufman &
  Rousseeuw's line for "a reasonable structure". Measured on 24 to 64 runs: a jump 0.75 to 0.94, a
  smooth function 0.39, noise beside a wave 0.27. A fixed count would cut a smooth regime into clusters
  and call their seams boundaries; noise cut into clusters interleaves them, and every point in it would
  look like a boundary.
- Classifier: scikit-learn's k-nearest-neighbours (NEIGHBOURS runs, weighted by inverse distance), whose
  class probabilities are the weighted shares of the regimes among a point's nearest runs: no
  hyperparameter to fit, and the uncertain band narrows as runs gather at a boundary.
- One regime (a smooth code, or noise): nothing to choose by. The whole round continues the space-filling
  design (share.py; `defers`), so on a code without regimes the design is the control's, run for run.
  Until 2026-12-07 it chose as integrated_variance there: never better than the control by any learner
  on the two such codes measured, and 1.12 x worse by the network the workflow trains (the reaction
  code at 64 runs, 5 seeds), 1.07 x by the regimes emulator.

Batched by kriging believer with the minimum spacing (pipeline/design/batch.py). Value: the weighted
reduction. Memory and time: integrated_variance's, plus the clustering (k-means for each count, and the
silhouettes: runs² distances) and the references' nearest runs (references x runs).
"""

from __future__ import annotations

import numpy as np

from pipeline.design.acquisitions.base import Context
from pipeline.design.acquisitions.integrated_variance import IntegratedVariance
from pipeline.design.regimes import MIN_RUNS, output_scores

FLOOR = 0.2  # a reference deep in one regime, against one on a boundary (1): the volume keeps some weight
NEIGHBOURS = 6  # the runs whose regimes give a point's class probabilities
MIN_SILHOUETTE = 0.5  # at or below it, the runs' outputs are taken as one regime
# k-means starts per number of clusters: half the time of scikit-learn's 10 (a round's clustering was half
# its choosing, and choosing 9 to 14 % of a round of the bistable code's runs of a tenth of a second), and
# the same regimes in every round of the benchmark's designs but two rounds of Swift-Hohenberg's
# (docs/benchmarks.md, 2026-12-07)
KMEANS_STARTS = 5


def separated_regimes(z: np.ndarray, most: int, seed: int) -> np.ndarray:
    """Each run's regime from its standardised outputs `z`: the k-means clustering (2 to `most` clusters, as
    many as hold MIN_RUNS runs each on average) of the largest mean silhouette, or all 0 where none is
    above MIN_SILHOUETTE."""
    from sklearn.cluster import KMeans
    from sklearn.metrics import silhouette_score

    labels, best = np.zeros(len(z), np.int64), MIN_SILHOUETTE
    if len(z) < 2 * MIN_RUNS:
        return labels
    scores = output_scores(z)
    for count in range(2, min(most, len(z) // MIN_RUNS) + 1):
        clusters = KMeans(count, n_init=KMEANS_STARTS, random_state=seed).fit(scores).labels_
        if len(np.unique(clusters)) < 2:
            continue
        silhouette = float(silhouette_score(scores, clusters))
        if silhouette > best:
            labels, best = clusters.astype(np.int64), silhouette
    return labels


def boundary_entropy(x: np.ndarray, labels: np.ndarray, points: np.ndarray) -> np.ndarray:
    """At each of `points`, the entropy of the regimes' probabilities from the runs at `x` (unit cube) with
    regimes `labels`, divided by log(number of regimes): 0 inside a regime, 1 where all are equally likely."""
    classes = np.unique(labels)
    if len(classes) < 2:
        return np.zeros(len(points))
    from sklearn.neighbors import KNeighborsClassifier

    classifier = KNeighborsClassifier(n_neighbors=min(NEIGHBOURS, len(x)), weights="distance").fit(x, labels)
    probabilities = classifier.predict_proba(points)
    logs = np.log(probabilities, out=np.zeros_like(probabilities), where=probabilities > 0)
    return -(probabilities * logs).sum(axis=1) / np.log(len(classes))


def round_regimes(context: Context) -> np.ndarray:
    """Each run's regime (separated_regimes of the emulator's runs), worked out once a round."""
    if "regimes" not in context.memo:
        emulator = context.emulator
        z = (emulator.y - emulator.mean) / emulator.scale
        most = int(context.settings.get("regimes", 4))
        context.memo["regimes"] = separated_regimes(z, most, context.seed)
    return context.memo["regimes"]


def boundary_weights(context: Context, references: np.ndarray) -> np.ndarray:
    """FLOOR + (1 - FLOOR) x the boundary entropy at each reference (the pool's indices)."""
    labels = round_regimes(context)
    return FLOOR + (1.0 - FLOOR) * boundary_entropy(context.emulator.x, labels, context.pool[references])


class BoundaryVariance(IntegratedVariance):
    name = "boundary_variance"

    def defers(self, context: Context) -> bool:
        """No separated regimes: the whole round continues the space-filling design. Where the outputs
        show none, the integrated variance this would choose by gained nothing for any learner and cost
        the network the workflow trains 1.12 x (the reaction code, 64 runs, 5 seeds; docs/benchmarks.md)."""
        return len(np.unique(round_regimes(context))) < 2

    def reference_weights(self, context: Context, references: np.ndarray) -> np.ndarray:
        return boundary_weights(context, references)

"""The surrogate chooses: the disagreement of an ensemble of the network a user trains (pipeline/design/
network.py: the workflow's decoder, 2 members by default, trained on from round to round), integrated
over the space, with a batch kept diverse in the network's own features (AL4PDE's recipe: an ensemble's
disagreement as the uncertainty, batches spread as its LCMD or core-set are).

A candidate's value is the disagreement its run would take off the references (the pool's first
REFERENCES points, a Sobol sample of the space): sum_r s(x, r)² d(r), with d the members' variance
(standardised outputs, each output weighing the same) and s a Gaussian kernel in the members' trunk
features, as wide as one run's share of the references would be. Not the largest disagreement: a spike
at one candidate weighs what its neighbourhood does, and each chosen run takes its share off before the
next is chosen, so a batch spreads over what the network tells apart. With the minimum spacing in the
parameters. Needs TensorFlow (the training environment's).

Memory: REFERENCES x pool, and the network's (network.py); time: the members' training, a forward pass
over the pool, and batch x REFERENCES x pool.
"""

from __future__ import annotations

import time

import numpy as np

from pipeline.design.acquisitions.base import Acquisition, Choice, Context
from pipeline.design.batch import open_candidates
from pipeline.design.network import SurrogateEnsemble, disagreement, feature_similarity, integrated_batch
from pipeline.design.space import distances

REFERENCES = 256


class SurrogateDisagreement(Acquisition):
    name = "surrogate_disagreement"

    def choose(self, context: Context, batch: int) -> Choice:
        emulator = context.emulator
        z = (emulator.y - emulator.mean) / emulator.scale
        network = SurrogateEnsemble(emulator.outputs, context.settings["network"], context.seed)
        started = time.perf_counter()
        network.fit(context.done, z, context.state, context.round_index)
        figures = {
            "network_warm": network.warm,
            "network_seconds_training": round(time.perf_counter() - started, 4),
        }
        predictions, features = network.predict(context.pool)
        references = np.arange(min(REFERENCES, len(context.pool)))
        spread = disagreement(predictions, emulator.outputs)
        similarity = feature_similarity(
            features, features[references], len(references) // max(len(context.done), 1)
        )
        pool, spacing = context.pool, context.spacing
        chosen, values = integrated_batch(
            spread[references],
            similarity,
            open_candidates(pool, context.avoid, spacing),
            batch,
            lambda i: distances(pool, pool[i : i + 1])[:, 0] >= spacing,
        )
        figures["network_disagreement_mean"] = float(spread[references].mean())
        return Choice(pool[chosen], np.array(values), figures=figures)

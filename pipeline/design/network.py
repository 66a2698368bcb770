"""The network a design can choose with (acquisition surrogate_disagreement): a small ensemble of the forward
surrogate a user trains, the workflow's `decoder` (pipeline/training/models/decoder.py: parameters to the
outputs' arrays), fitted on the runs so far and trained on from round to round.

- **Members.** `members` networks (2 by default: AL4PDE found 2 enough), each from its own initial weights
  (seeded by simulate.seed and the member), fitted on every run that succeeded: the unit-cube parameters to
  the outputs standardised as the emulator standardises them (each output weighs the same).
- **Round to round.** A member's weights are kept after each round (`{raw}/adaptive/network/`); the next
  round trains on from them for `warm_epochs` instead of `epochs` from scratch, as train.warm_start does
  for a continued design. The rounds before the last two are removed.
- **What it answers** over candidates: each member's prediction (standardised outputs) and its features,
  the trunk's last layer (what the heads see): the space as the network sees it.
- **The same weights on a rerun**: TensorFlow's seeds and op determinism, as train.deterministic sets them;
  a rerun that chooses a round again trains from the same kept weights on the same runs.

Memory: the members' weights (the decoder's: a dense layer onto each field's coarse grid dominates) and
members x candidates x (output entries + features) for the predictions; time: members x (epochs x runs /
batch_size) steps, plus a forward pass over the candidates.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from pipeline.design.emulator import Outputs
from pipeline.storage.fsutil import atomic_path

KEPT_ROUNDS = 2  # the rounds whose weights stay: the last (to train on from) and the one before it


@dataclass(frozen=True)
class OutputFields:
    """What the decoder asks of its task: the shape of each output, in the order of the flat row."""

    outputs: Outputs

    def output_fields(self) -> list[tuple[int, ...]]:
        return [shape for _, _, shape in self.outputs.layout.values()]


def weights_path(state: Path, round_index: int, member: int) -> Path:
    return state / f"round-{round_index:03d}.member-{member}.npz"


def built(dims: int, outputs: Outputs, settings: Mapping[str, Any], seed: int) -> Any:
    """One member: the decoder for `dims` parameters and these outputs, compiled (Adam, squared error)."""
    import tensorflow as tf

    from pipeline.training.models import decoder

    tf.keras.utils.set_random_seed(seed)
    args = {k: settings[k] for k in ("depth", "width", "dense", "dropout")}
    model = decoder.build((dims,), outputs.width, OutputFields(outputs), args)
    model.compile(optimizer=tf.keras.optimizers.Adam(settings["learning_rate"]), loss="mse")
    return model


def save_weights(model: Any, path: Path) -> None:
    with atomic_path(path) as tmp, open(tmp, "wb") as f:
        np.savez(f, *model.get_weights())


def load_weights(model: Any, path: Path) -> None:
    with np.load(path) as saved:
        model.set_weights([saved[f"arr_{i}"] for i in range(len(saved.files))])


class SurrogateEnsemble:
    """The members, trained on the runs of a round (`fit`), and what they say of candidates (`predict`)."""

    def __init__(self, outputs: Outputs, settings: Mapping[str, Any], seed: int) -> None:
        self.outputs = outputs
        self.settings = settings  # simulate.adaptive.network
        self.seed = seed
        self.members: list[Any] = []
        self.warm = False  # trained on from the last round's weights

    def fit(self, x: np.ndarray, z: np.ndarray, state: Path | None, round_index: int) -> SurrogateEnsemble:
        """Train every member on (x: unit-cube points, z: standardised output rows); with `state`, from the
        weights its previous round kept there, and keep this round's."""
        import tensorflow as tf

        tf.config.experimental.enable_op_determinism()
        settings = self.settings
        self.members = []
        for m in range(settings["members"]):
            member_seed = (self.seed * 1_000 + round_index * 10 + m) % 2**31
            model = built(x.shape[1], self.outputs, settings, (self.seed * 10 + m) % 2**31)
            before = None if state is None else weights_path(state, round_index - 1, m)
            self.warm = before is not None and before.exists()
            if self.warm:
                load_weights(model, before)
            tf.keras.utils.set_random_seed(member_seed)  # the round's shuffles and dropout
            model.fit(
                x.astype(np.float32),
                z.astype(np.float32),
                epochs=settings["warm_epochs"] if self.warm else settings["epochs"],
                batch_size=min(settings["batch_size"], len(x)),
                shuffle=True,
                verbose=0,
            )
            if state is not None:
                save_weights(model, weights_path(state, round_index, m))
            self.members.append(model)
        if state is not None:
            for old in state.glob("round-*.npz"):
                if int(old.name.split(".")[0].split("-")[1]) <= round_index - KEPT_ROUNDS:
                    old.unlink()
        return self

    def predict(self, points: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """(members x points x output entries: each member's standardised prediction, points x features:
        every member's trunk output, each scaled to unit mean square and side by side)."""
        import tensorflow as tf

        predictions, features = [], []
        x = points.astype(np.float32)
        for model in self.members:
            trunk = [layer for layer in model.layers if isinstance(layer, tf.keras.layers.Dropout)][-1]
            both = tf.keras.Model(model.inputs, [model.outputs[0], trunk.output])
            predicted, feature = both.predict(x, batch_size=256, verbose=0)
            predictions.append(np.asarray(predicted, np.float64))
            feature = np.asarray(feature, np.float64)
            features.append(feature / max(float(np.sqrt(np.mean(feature**2))), 1e-12))
        return np.stack(predictions), np.concatenate(features, axis=1)


def disagreement(predictions: np.ndarray, outputs: Outputs) -> np.ndarray:
    """Per candidate, the members' variance, averaged over each output's entries and summed over the
    outputs (standardised units: each output weighs the same, whatever its size)."""
    spread = predictions.var(axis=0)
    return np.sum([spread[:, start:stop].mean(axis=1) for start, stop, _ in outputs.layout.values()], axis=0)


def feature_similarity(features: np.ndarray, others: np.ndarray, neighbours: int) -> np.ndarray:
    """A Gaussian kernel (features x others) in the network's feature space, its width the median distance
    from a candidate to its `neighbours`-th nearest other: the reach a run would have were the runs spread
    evenly over the candidates."""
    squared = (features**2).sum(axis=1)[:, None] + (others**2).sum(axis=1)[None, :] - 2 * features @ others.T
    squared = np.maximum(squared, 0.0)
    k = int(np.clip(neighbours, 1, squared.shape[1] - 1))
    width = float(np.median(np.sqrt(np.partition(squared, k, axis=1)[:, k])))
    return np.exp(-squared / (2 * max(width, 1e-12) ** 2))


def integrated_batch(
    disagreement_at: np.ndarray, similarity: np.ndarray, allowed: np.ndarray, batch: int, spaced: Any
) -> tuple[list[int], list[float]]:
    """Up to `batch` candidates, one at a time, each by the disagreement it would take off the references
    (similarity: candidates x references; a run at x is believed to remove the share s(x, r)² of the
    disagreement at r), that share then taken off before the next is chosen: the batch spreads over what
    the network finds different, not its largest disagreement's neighbourhood. `spaced(i)`: the candidates
    still allowed once i is chosen (the minimum spacing in the parameters)."""
    remaining = disagreement_at.astype(np.float64).copy()
    reach = similarity**2
    chosen: list[int] = []
    values: list[float] = []
    for _ in range(batch):
        if not allowed.any():
            break
        value = reach @ remaining
        i = int(np.argmax(np.where(allowed, value, -np.inf)))
        chosen.append(i)
        values.append(float(value[i]))
        remaining *= 1.0 - reach[i]
        allowed = allowed & spaced(i)
    return chosen, values

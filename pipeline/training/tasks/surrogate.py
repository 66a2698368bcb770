"""surrogate: a model that stands in for the simulator. Its inputs are the features (a forward surrogate's
design parameters, e.g. a runs table's columns), its outputs the label fields (fields and vectors, several
at once): parameters to outputs. The loss is each output's mean squared error (normalised units) weighted
by train.surrogate.weights (default 1 each, so a 1,024-pixel field and a 10-entry vector count alike).

Scores are NRMSE per output over the evaluated set, in physical units (convert's normalisation and log1p
undone): the RMSE over every sample and entry divided by the output's standard deviation over the set
(pipeline.data.scores: a run whose output is constant cannot inflate it); predicting the set's mean scores
1. Lower is better. The Well's VRMSE per sample is reported beside it over the samples with spread of their
own, with the count of those too flat for it (`vrmse_flat`). The classical emulator beside it
(pipeline.training.baseline, `EmulatorSums`): PCA of the outputs and kernel ridge regression from the
parameters per retained component. The saved model answers in physical units: it takes the parameters as
the simulator does and gives each output by name, in its units and shape (`exported`).

Evaluation: per output a row of additive sums (pipeline.data.scores.SUMS), and the first EXAMPLES samples for
the figure (truth, prediction and their difference side by side). Memory: a few sums per output, EXAMPLES
samples; time: linear in the outputs' entries."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import numpy as np

from pipeline import Sim2dlError
from pipeline.data.scores import SUMS, batch_sums, field_scores
from pipeline.training.baseline import FOLDS, BaselineSums, EmulatorSums, random_fourier_features
from pipeline.training.tasks.base import ClassicalBaseline, Evaluation, LabelField
from pipeline.training.tasks.regression import Regression, RidgeBaseline

EXAMPLES = 4
RELATIVE_MARGIN = 0.1  # a network NRMSE this much above the emulator's is below the baseline
LINEAR_INPUTS = 1024  # a field in: the linear baseline's inputs, at most (its sums grow as their square)


class Surrogate(Regression):
    name = "surrogate"
    proposed_for = ("design",)  # an ensemble sim2dl ran: its outputs from its design's parameters
    loss_name = "weighted mean squared error of the outputs (normalised units)"
    max_examples = EXAMPLES
    scores = ("nrmse",)

    # ---- before training
    def check(self) -> None:
        fractional = [f.name for f in self.data.labels if f.integer]
        if fractional:
            raise Sim2dlError(
                f"config key 'convert.labels': a surrogate's outputs are values, '{fractional[0]}' "
                "holds integers (class ids are classification's or segmentation's)"
            )
        if any(None in f.shape for f in self.data.labels):
            shaped = next(f for f in self.data.labels if None in f.shape)
            raise Sim2dlError(
                f"config key 'convert.labels': a surrogate's output '{shaped.name}' has a variable "
                f"shape {list(shaped.shape)}: give it a fixed one (crop)"
            )
        unknown = sorted(set(self.weights_setting()) - {f.name for f in self.data.labels})
        if unknown:
            raise Sim2dlError(
                f"config key 'train.surrogate.weights': {unknown} are not outputs (convert.labels: "
                f"{[f.name for f in self.data.labels]})"
            )

    def output_fields(self) -> list[tuple[int, ...]]:
        return [tuple(int(d) for d in f.shape) for f in self.data.labels]

    def weights_setting(self) -> Mapping[str, float]:
        return (self.settings.get("surrogate") or {}).get("weights") or {}

    def blocks(self) -> list[tuple[LabelField, slice]]:
        """Each output and its entries in the model's flat output."""
        out, start = [], 0
        for f in self.data.labels:
            out.append((f, slice(start, start + f.size)))
            start += f.size
        return out

    # ---- the loss
    def loss(self) -> Any:
        import tensorflow as tf

        weights = self.weights_setting()
        labels = self.data.labels
        per_entry = np.concatenate(
            [np.full(f.size, float(weights.get(f.name, 1.0)) / f.size) for f in labels]
        )
        scale = tf.constant(per_entry / per_entry.sum(), tf.float32)  # sum_f w_f mse_f / sum_f w_f

        def weighted_mse(labels: Any, outputs: Any) -> Any:
            return tf.reduce_mean(
                tf.reduce_sum(scale * tf.square(tf.cast(outputs, tf.float32) - labels), axis=-1)
            )

        return weighted_mse

    # ---- evaluation (numpy)
    def physical(self, values: np.ndarray) -> dict[str, np.ndarray]:
        """The model's flat outputs (normalised units) as each output in its own units and shape: convert's
        normalisation (per channel along the last axis where it was per channel) and log1p undone."""
        out = {}
        for f, entries in self.blocks():
            block = values[:, entries].astype(np.float64).reshape(len(values), *f.shape)
            out[f.name] = in_own_units(block, f.statistics, f.name in self.data.log1p)
        return out

    def persisted(self) -> list[LabelField]:
        """The outputs a state-to-state surrogate could answer by persistence: those of the input's shape."""
        shape = tuple(self.data.feature_shape)
        return [
            f for f in self.data.labels if not self.from_parameters and tuple(f.shape) in (shape, shape[:-1])
        ]

    def evaluation(self) -> Evaluation:
        k, outputs = len(self.data.labels), self.outputs()
        sums = {"n": np.zeros(1), "scores": np.zeros((k, len(SUMS))), "persistence": np.zeros((k, len(SUMS)))}
        return Evaluation(sums, {"predicted": np.zeros((0, outputs)), "true": np.zeros((0, outputs))})

    def input_field(self, features: np.ndarray) -> np.ndarray:
        """The input field in its own units (convert's normalisation undone), the model's channel axis
        dropped."""
        x = np.asarray(features, np.float64).reshape(len(features), *self.data.feature_shape)
        feature = self.data.feature
        return in_own_units(x, self.data.feature_statistics.get(feature), feature in self.data.log1p)

    def field_sums(
        self, predicted: np.ndarray, true: np.ndarray, output: LabelField, **over: Any
    ) -> np.ndarray:
        """One output's score sums (pipeline.data.scores.batch_sums) in physical units, about its training
        mean and with flatness judged against its training variance (convert's statistics, where it kept
        them)."""
        shift, variance = physical_moments(output.statistics, output.name in self.data.log1p)
        return batch_sums(predicted, true, shift=shift, reference_variance=variance, **over)

    def update(
        self, evaluation: Evaluation, outputs: np.ndarray, labels: np.ndarray, features: np.ndarray
    ) -> None:
        predicted, true = self.physical(outputs), self.physical(labels)
        for i, f in enumerate(self.data.labels):
            evaluation.sums["scores"][i] += self.field_sums(predicted[f.name], true[f.name], f)
        persisted = self.persisted()
        if persisted:  # the classical floor of a next state: the state as it was
            state = self.input_field(features)
            for f in persisted:
                i = self.data.labels.index(f)
                held = state.reshape(true[f.name].shape)
                evaluation.sums["persistence"][i] += self.field_sums(held, true[f.name], f)
        evaluation.sums["n"] += len(labels)
        self.keep_examples(evaluation, outputs, labels)

    def keep_examples(self, evaluation: Evaluation, outputs: np.ndarray, labels: np.ndarray) -> None:
        """The first max_examples samples for the figure (normalised units)."""
        room = self.max_examples - len(evaluation.examples["true"])
        if room > 0:
            for name, value in (("predicted", outputs), ("true", labels)):
                evaluation.examples[name] = np.concatenate([evaluation.examples[name], value[:room]])

    def metrics(self, evaluation: Evaluation) -> dict[str, Any]:
        """NRMSE per output and its mean (the headline), VRMSE over the samples with spread, and the same
        of persistence for the outputs it can answer."""
        if not evaluation.sums["n"][0]:
            return {"nrmse": {}}
        names = [f.name for f in self.data.labels]
        out = field_scores(names, evaluation.sums["scores"])
        persisted = self.persisted()
        if persisted:
            rows = np.stack([evaluation.sums["persistence"][self.data.labels.index(f)] for f in persisted])
            out.update(field_scores([f.name for f in persisted], rows, prefix="persistence_"))
        return out

    def evaluated_records(self, evaluation: Evaluation) -> int:
        return int(evaluation.sums["n"][0])

    def disagreement_by_output(
        self, members: np.ndarray, kept: np.ndarray, labels: np.ndarray
    ) -> dict[str, Any]:
        """Per output, per record: the members' standard deviation and the kept model's root mean squared
        error, in the output's own units (convert's normalisation and log1p undone), averaged over its
        entries."""
        each = [self.physical(m) for m in members]
        mine, truth = self.physical(kept), self.physical(labels)
        out = {}
        for f in self.data.labels:
            # none for a scalar output: the mean leaves it as it is
            axes = tuple(range(1, truth[f.name].ndim))
            spread = np.stack([e[f.name] for e in each]).std(axis=0).mean(axis=axes)
            error = ((mine[f.name] - truth[f.name]) ** 2).mean(axis=axes)
            out[f.name] = np.column_stack([spread, np.sqrt(error)])
        return out

    # ---- against the classical emulator
    def classical_baseline(self) -> ClassicalBaseline:
        return EmulatorBaseline(self)

    @property
    def from_parameters(self) -> bool:
        """A forward surrogate (a vector of parameters in), not a field in (a state to a later one)."""
        return len(self.data.feature_shape) == 1

    # ---- the saved model and the figure
    def exported(self, model: Any) -> Any:
        """The model as a user calls it: the features in their own units in (convert's normalisation applied
        inside), each output by name in its units and shape out (normalisation and log1p undone)."""
        import tensorflow as tf

        layers = tf.keras.layers
        inputs, x = self.exported_input(model)
        flat = model(x)
        outputs = {}
        for f, entries in self.blocks():
            y = self.own_units_layers(layers.Reshape(f.shape)(flat[:, entries]), f)
            outputs[f.name] = layers.Activation("linear", dtype="float32", name=f.name)(y)
        return tf.keras.Model(inputs, outputs, name=f"{model.name}_physical")

    def own_units_layers(self, y: Any, output: LabelField) -> Any:
        """A Keras tensor of `output` in the model's units, in its own: convert's normalisation and log1p
        undone by layers a saved model keeps (in_own_units' inverse steps)."""
        import tensorflow as tf

        if output.statistics is not None:
            mean, std = (np.asarray(output.statistics[k], np.float32) for k in ("mean", "std"))
            y = tf.keras.layers.Rescaling(np.where(std > 0, std, 1.0), offset=mean)(y)
        return expm1_layer()(y) if output.name in self.data.log1p else y

    def exported_input(self, model: Any, shape: tuple[int | None, ...] | None = None) -> tuple[Any, Any]:
        """The saved model's input (the feature in its own units, of `shape`: the model's by default) and
        what the network gets of it (normalised as convert did, with a channel axis where the model adds
        one)."""
        import tensorflow as tf

        layers = tf.keras.layers
        shape = self.model_feature_shape if shape is None else shape
        clash = self.data.feature in {f.name for f in self.data.labels}  # a next state's input and output
        inputs = layers.Input(
            shape=tuple(shape), name=f"{self.data.feature}_now" if clash else self.data.feature
        )
        x = normalised(inputs, self.input_statistics())
        if len(model.input_shape) == len(shape) + 2:  # the model adds a channel axis
            x = layers.Reshape((*shape, 1))(x)
        return inputs, x

    def input_statistics(self) -> Mapping[str, Any] | None:
        """convert's statistics of the model's input as the saved model takes it."""
        return self.data.feature_statistics.get(self.data.feature)

    def figure(self, evaluation: Evaluation, path: Path, baseline: Mapping[str, Any] | None = None) -> None:
        from pipeline.reporting.plots import surrogate_examples

        scores = self.metrics(evaluation)["nrmse"]
        theirs = (baseline or {}).get("nrmse") or {}
        surrogate_examples(
            self.physical(evaluation.examples["true"]),
            self.physical(evaluation.examples["predicted"]),
            scores,
            theirs,
            path,
        )


def expm1_layer() -> Any:
    """A layer undoing convert's log1p, exp(t) - 1, of Keras' own layers: a Lambda of tf.math.expm1 cannot be
    written to a SavedModel's JSON config (the op's signature is not serialisable), nor a closure over the
    tensorflow module copied. Below t ~ 1e-3 it loses a few of float32's digits against expm1."""
    import tensorflow as tf

    layers = tf.keras.layers
    return tf.keras.Sequential([layers.Activation("exponential"), layers.Rescaling(1.0, offset=-1.0)])


def normalised(x: Any, statistics: Mapping[str, Any] | None) -> Any:
    """A Keras tensor normalised as convert normalised its field (unchanged without statistics)."""
    if statistics is None:
        return x
    import tensorflow as tf

    mean, std = (np.asarray(statistics[k], np.float32) for k in ("mean", "std"))
    std = np.where(std > 0, std, 1.0).astype(np.float32)
    return tf.keras.layers.Rescaling(1.0 / std, offset=-mean / std)(x)


def in_own_units(x: np.ndarray, statistics: Mapping[str, Any] | None, log1p: bool) -> np.ndarray:
    """Values in convert's units back in their own: the normalisation undone (per channel along the last
    axis where it was per channel; a zero std left as 1), then log1p."""
    if statistics is not None:
        mean, std = (np.asarray(statistics[k], np.float64) for k in ("mean", "std"))
        x = x * np.where(std > 0, std, 1.0) + mean
    return np.expm1(x) if log1p else x


def physical_moments(statistics: Mapping[str, Any] | None, log1p: bool) -> tuple[float, float | None]:
    """A field's mean and variance over the training split in its own units, from convert's statistics
    (per channel: the channels' means; after log1p, to first order: exp(mean) std): the shift its score
    sums are taken about and the variance its samples' flatness is judged by. (0, None) without them."""
    if statistics is None:
        return 0.0, None
    mean = np.asarray(statistics["mean"], np.float64)
    std = np.asarray(statistics["std"], np.float64)
    if log1p:
        return float(np.mean(np.expm1(mean))), float(np.mean((np.exp(mean) * std) ** 2))
    return float(np.mean(mean)), float(np.mean(std**2))


def block_averaged(x: np.ndarray, most: int) -> np.ndarray:
    """x (B, H, W[, C]) averaged over 2 x 2 blocks of its first two spatial axes until it holds at most
    `most` values per sample (an odd edge row or column dropped)."""
    while int(np.prod(x.shape[1:])) > most and min(x.shape[1:3]) >= 2:
        h, w = x.shape[1] // 2 * 2, x.shape[2] // 2 * 2
        x = x[:, :h, :w]
        x = x.reshape(x.shape[0], h // 2, 2, w // 2, 2, *x.shape[3:]).mean(axis=(2, 4))
    return x


class EmulatorBaseline(RidgeBaseline):
    """A forward surrogate's: kernel ridge regression per principal component of the outputs (a state's
    next: a linear map from the input field); the network is judged by each output's NRMSE."""

    task: Surrogate

    def method(self, statistics: str) -> str:
        if self.task.from_parameters:
            return (
                "PCA of the outputs and kernel ridge regression per component (an RBF kernel by random "
                f"Fourier features at three length scales, and linear terms; penalty by {FOLDS}-fold "
                "cross-validation)"
            )
        return (
            f"a linear map from the input field (block-averaged to at most {LINEAR_INPUTS} values) onto the "
            f"outputs' principal components (ridge, penalty by {FOLDS}-fold cross-validation)"
        )

    def features(self, x: np.ndarray, spatial_dims: int) -> np.ndarray:
        """The emulator's inputs: the parameters (normalised by convert where listed) and random Fourier
        features of them; or a field in, its values block-averaged to at most LINEAR_INPUTS."""
        if self.task.from_parameters:
            flat = np.asarray(x, np.float64).reshape(len(x), -1)
            return np.concatenate([flat, random_fourier_features(flat)], axis=1)
        return block_averaged(np.asarray(x, np.float64), LINEAR_INPUTS).reshape(len(x), -1)

    def sums(self, features: int) -> BaselineSums:
        return EmulatorSums(features, self.task.outputs())

    def below(self, summary: Mapping[str, Any], baseline: Mapping[str, Any], margin: float) -> list[str]:
        """The outputs whose NRMSE is above the baseline's by more than RELATIVE_MARGIN of it (NRMSE is a
        relative error already, so the margin is too)."""
        theirs = baseline.get("nrmse") or {}
        return [
            n
            for n, v in (summary.get("nrmse") or {}).items()
            if v is not None and theirs.get(n) is not None and v > theirs[n] * (1 + RELATIVE_MARGIN)
        ]

    def compared(self, below: Sequence[str], summary: Mapping[str, Any], baseline: Mapping[str, Any]) -> str:
        return ", ".join(f"{n} NRMSE {summary['nrmse'][n]:.3f} > {baseline['nrmse'][n]:.3f}" for n in below)

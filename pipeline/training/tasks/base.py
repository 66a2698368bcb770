"""What every task has: the data it trains on as training sees it (`DataSpec`, from metadata.json), the
checks that labels fit the task, the labels as tensors, the loss, and an evaluation that accumulates small
sums per rank (combined across ranks by adding them) and turns them into metrics and a figure.

Memory: an evaluation holds sums whose size depends on the labels (a K x K confusion matrix, a few sums
per regression label) plus a bounded number of examples for its figure, never a value per record.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from pipeline import Sim2dlError
from pipeline.training.baseline import (
    SHRINKAGE,
    BaselineSums,
    DiscriminantSums,
    summary_statistics,
)

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class LabelField:
    name: str
    shape: tuple[int | None, ...]
    dtype: str
    statistics: Mapping[str, Any] | None = None  # convert's mean/std when the field was normalised
    class_names: Sequence[str] | None = None  # categorical fields: names in id order
    # integer fields: convert's {min, max, counts: {split: [...]}}
    class_counts: Mapping[str, Any] | None = None

    @property
    def integer(self) -> bool:
        return np.dtype(self.dtype).kind in "iu"

    @property
    def size(self) -> int:
        return int(np.prod([d or 1 for d in self.shape]))


@dataclass(frozen=True)
class DataSpec:
    """The feature fields (the first is the one a built-in model takes) and the label fields of a merged
    dataset, as training needs them."""

    feature: str
    feature_shape: tuple[int | None, ...]
    labels: tuple[LabelField, ...]
    label_names: tuple[str, ...]  # one per regression output (PARAMS[0], ...)
    splits_with_records: Mapping[str, int] = field(default_factory=dict)
    # every feature by name, in the config's order: your own model gets them as a dict of inputs
    feature_shapes: Mapping[str, tuple[int | None, ...]] = field(default_factory=dict)
    feature_statistics: Mapping[str, Any] = field(default_factory=dict)  # convert's, of normalised features
    log1p: tuple[str, ...] = ()  # fields convert stored as log(1 + x)
    # the names of the entries along a field's last axis (a stack's members, a vector record's components)
    component_names: Mapping[str, Sequence[str]] = field(default_factory=dict)

    @property
    def several(self) -> bool:
        return len(self.feature_shapes) > 1


def data_spec(meta: Mapping[str, Any], label_names: Sequence[str] | None = None) -> DataSpec:
    spec = meta["feature_spec"]
    features = [n for n, f in spec.items() if f["role"] == "feature"]
    labels = [n for n, f in spec.items() if f["role"] == "label"]
    if not features:
        raise Sim2dlError(f"train needs a feature field (convert.features; the fields are {sorted(spec)})")
    stats, classes, counts = meta.get("statistics", {}), meta.get("classes", {}), meta.get("class_counts", {})
    fields = tuple(
        LabelField(n, tuple(spec[n]["shape"]), spec[n]["dtype"], stats.get(n), classes.get(n), counts.get(n))
        for n in labels
    )
    if label_names is None:
        label_names = [
            name
            for f in fields
            for name in ([f.name] if f.size == 1 else [f"{f.name}[{i}]" for i in range(f.size)])
        ]
    shapes = {name: tuple(spec[name]["shape"]) for name in features}
    return DataSpec(
        features[0],
        shapes[features[0]],
        fields,
        tuple(label_names),
        feature_shapes=shapes,
        feature_statistics={n: stats[n] for n in features if n in stats},
        log1p=tuple(meta.get("log1p", ())),
        component_names=dict(meta.get("component_names", {})),
    )


@dataclass
class Evaluation:
    """One rank's validation sums (added across ranks) and a few examples for the figure (concatenated)."""

    sums: dict[str, np.ndarray]
    examples: dict[str, np.ndarray]

    @staticmethod
    def combine(parts: Sequence[Evaluation], max_examples: int) -> Evaluation:
        sums = {k: np.sum([p.sums[k] for p in parts], axis=0) for k in parts[0].sums}
        examples = {
            k: np.concatenate([p.examples[k] for p in parts])[:max_examples] for k in parts[0].examples
        }
        return Evaluation(sums, examples)


@dataclass
class TrainedModel:
    """The kept model as a task's after_training gets it. `model`: the Keras model (inputs normalised as it
    trains, raw outputs); `records()`: this rank's whole records of `split` (the test split, else the
    validation's) as (inputs, labels, sample ids) batches, the task's own samples not cut from them, read
    only if the task asks; `out`: the directory the task may write its own files to (None: nowhere)."""

    model: Any
    records: Callable[[], Iterable[tuple[np.ndarray, np.ndarray, np.ndarray]]]
    comm: Any
    split: str
    out: Path | None = None

    def predict(self, x: np.ndarray) -> np.ndarray:
        """The model on a batch of inputs (normalised, as it trains)."""
        return np.asarray(self.model(x, training=False))


class Task:
    """A task: subclasses say how many outputs, check the labels, shape them, and evaluate."""

    name = ""
    loss_name = "cross-entropy"
    max_examples = 0  # examples kept for the figure (all ranks together)
    # summary.json's headline scores (accuracy, R²: higher is better; a surrogate's NRMSE: lower): what
    # `sim2dl status`, a search's trials, a sweep's table and TensorBoard's baseline lines show, by the names
    # in summary.json's `score_names`
    scores: tuple[str, ...] = ()
    needs_labels = True  # False: the targets come from the feature itself (a next state)
    # the kinds of data `sim2dl inspect` proposes this task for (readers' Conventions.kind, and inspect's
    # own finds): `values` (labels with values), `classes` (a categorical label and no other), `design` (an
    # ensemble's runs with the runs table sim2dl wrote: parameters in, outputs out), `trajectory`
    # (a record is a run's states over time); a kind is one task's (tasks.task_for)
    proposed_for: tuple[str, ...] = ()
    # the built-in models this task can train, beside those whose TASKS name it (a task of your own, which
    # no built-in's TASKS can name; its own model: train.model 'path/to/file.py:function')
    built_in_models: tuple[str, ...] = ()

    def __init__(self, settings: Mapping[str, Any], data: DataSpec) -> None:
        self.settings, self.data = settings, data

    # ---- before training
    def check(self) -> None:
        """Raise Sim2dlError when the labels do not fit the task (config errors, before any training)."""

    def outputs(self) -> int:
        raise NotImplementedError

    def output_shape(self, input_shape: Sequence[int | None]) -> tuple[int | None, ...]:
        """The model's output shape without the batch axis."""
        return (self.outputs(),)

    def output_fields(self) -> list[tuple[int, ...]]:
        """The shapes of the outputs a model gives a head each, flattened and joined in order (a surrogate's
        label fields); [] for one output vector (or per-pixel logits)."""
        return []

    @property
    def model_feature_shape(self) -> tuple[int | None, ...]:
        """The shape of one sample as the model takes it (before a built-in's channel axis): the feature's."""
        return tuple(self.data.feature_shape)

    def samples_per_record(self) -> int:
        """Training samples one record gives (a trajectory's windows); the steps per epoch count them."""
        return 1

    # ---- the input pipeline and the loss (TensorFlow)
    def record_labels(self) -> list[str]:
        """The label fields parsed from each record."""
        return [f.name for f in self.data.labels]

    def samples(self, x: Any, y: Any, starts: Any = None) -> tuple[Any, Any]:
        """A batch of parsed records (tensors) as the batch of samples the model trains on: a record is one
        sample, as it is, unless the task cuts several from it (a next state: a trajectory's windows,
        samples_per_record() of them); `starts`: one per record, only the sample at that start."""
        return x, y

    def label_tensor(self, values: Sequence[Any], batched: bool) -> Any:
        raise NotImplementedError

    def loss(self) -> Any:
        """A function (labels, model outputs) -> the batch's mean loss."""
        raise NotImplementedError

    # ---- evaluation (numpy)
    def evaluation(self) -> Evaluation:
        raise NotImplementedError

    def update(
        self, evaluation: Evaluation, outputs: np.ndarray, labels: np.ndarray, features: np.ndarray
    ) -> None:
        raise NotImplementedError

    def metrics(self, evaluation: Evaluation) -> dict[str, Any]:
        raise NotImplementedError

    def figure(self, evaluation: Evaluation, path: Path, baseline: Mapping[str, Any] | None = None) -> None:
        """The validation figure; `baseline`: the classical baseline's scores (pipeline.training.baseline),
        shown beside the network's."""
        raise NotImplementedError

    # ---- after training
    def after_training(self, trained: TrainedModel) -> dict[str, Any]:
        """What the task does with the kept model once training has ended (a next state's rollout, an
        autoencoder's latents), before its figure is drawn; every rank calls it alike. Returns entries
        for summary.json ({}: nothing)."""
        return {}

    def vector_channels(self) -> int:
        """How many of a sample's last channels are a vector constant over the grid (a run's parameters),
        which a built-in model reads as one vector to modulate its features by (models/base.film), not as
        channels; 0: none."""
        return 0

    def bottleneck(self) -> int | None:
        """The width of the vector a built-in model passes every sample through (an autoencoder's latent);
        None: the model's own."""
        return None

    # ---- what the scores count, and the classical baseline beside the network
    def evaluated_records(self, evaluation: Evaluation) -> int:
        """How many records (of the validation or the test split) an evaluation counts."""
        return int(evaluation.sums["confusion"].sum())

    def classical_baseline(self) -> ClassicalBaseline:
        """The classical baseline trained beside the network (pipeline.training.baseline fits it): a linear
        discriminant on per-sample statistics unless the task says otherwise."""
        return ClassicalBaseline(self)

    # ---- what the pipeline asks of the task's outputs elsewhere
    def augmented(self, x: Any, y: Any, transforms: Sequence[Any], seed: Any) -> tuple[Any, Any]:
        """A training batch under train.augment's symmetries (pipeline.training.augment), each sample's
        drawn from a stream seeded by `seed`: the field moves, a label per sample does not."""
        from pipeline.training.augment import augment_batch

        return augment_batch(x, y, transforms, seed, moves_labels=False)

    def test_time_augmentation_refused(self) -> str | None:
        """Why train.augment_eval cannot average this task's outputs over symmetries (None: it can)."""
        return "a model of several inputs" if self.data.several else None

    def outputs_in_words(self) -> str:
        """What the model's outputs are, for an error about their shape."""
        return "raw outputs"

    def disagreement_by_output(
        self, members: np.ndarray, kept: np.ndarray, labels: np.ndarray
    ) -> dict[str, Any]:
        """A population's disagreement per output in the outputs' own units: per output name, per record
        (the members' standard deviation, the kept model's root mean squared error), each averaged over the
        output's entries. members (T, N, outputs), kept and labels (N, outputs), in the model's units.
        {} where the outputs have no units of their own (class logits)."""
        return {}

    def exported(self, model: Any) -> Any:
        """The model as it is saved (a task may wrap it to take and give values in their own units)."""
        return model


class ClassicalBaseline:
    """A task's classical baseline, one capability behind one hook (Task.classical_baseline): what it is
    fitted on and how (`method`, `sums`: its sufficient statistics), its inputs for a batch (`features`),
    its scores as the model's outputs (`outputs`), and how the network is judged against it (`below`,
    `compared`). This default: a linear discriminant on per-sample statistics, the task's `scores` higher is
    better. A task's own baseline subclasses it, taking the task."""

    def __init__(self, task: Task) -> None:
        self.task = task

    def method(self, statistics: str) -> str:
        """The baseline's method in words (`statistics`: what it is fitted on)."""
        return f"linear discriminant (LDA, shrinkage {SHRINKAGE}) on {statistics}"

    def sums(self, features: int) -> BaselineSums:
        """The sufficient statistics for `features` inputs per record (or pixel)."""
        return DiscriminantSums(features, self.task.outputs())

    def features(self, x: np.ndarray, spatial_dims: int) -> np.ndarray:
        """The inputs for a batch: per-sample statistics (a row per sample)."""
        return summary_statistics(x, spatial_dims)

    def outputs(self, scores: np.ndarray, x: np.ndarray, spatial_dims: int) -> np.ndarray:
        """The scores (a row per `features` row) shaped as the model's outputs for `x`."""
        return scores

    def hybrid_refused(self) -> str | None:
        """Why train.hybrid cannot start the task's network from this baseline (None: it can)."""
        return None

    def below(self, summary: Mapping[str, Any], baseline: Mapping[str, Any], margin: float) -> list[str]:
        """The scores on which the network is below the baseline by more than `margin`."""
        return [
            k
            for k in self.task.scores
            if summary.get(k) is not None
            and baseline.get(k) is not None
            and summary[k] < baseline[k] - margin
        ]

    def compared(self, below: Sequence[str], summary: Mapping[str, Any], baseline: Mapping[str, Any]) -> str:
        """The scores in `below`, the network's beside the baseline's, for a warning."""
        return ", ".join(f"{k} {summary[k]:.3f} < {baseline[k]:.3f}" for k in below)


def confusion(true: np.ndarray, predicted: np.ndarray, k: int) -> np.ndarray:
    """K x K counts: row = true class, column = predicted class."""
    return np.bincount(true.ravel().astype(np.int64) * k + predicted.ravel(), minlength=k * k).reshape(k, k)

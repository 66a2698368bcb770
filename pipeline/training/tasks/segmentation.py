"""segmentation: a class id per pixel (or voxel) of the feature: a label field with the feature's spatial
shape. Per-pixel softmax cross-entropy on logits, optionally class-weighted (climate masks are mostly
background: train.class_weights 'balanced' or a list); IoU per class, mean IoU, pixel accuracy, and the
mean IoU of predicting background everywhere (the baseline a model must beat).

Evaluation: the K x K confusion matrix over pixels, plus the first few validation samples for the figure.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import numpy as np

from pipeline import Sim2dlError
from pipeline.training.baseline import SHRINKAGE, channels_per_pixel
from pipeline.training.tasks.base import ClassicalBaseline, Evaluation, confusion
from pipeline.training.tasks.class_ids import ClassIds

EXAMPLES = 4


def iou_scores(matrix: np.ndarray) -> np.ndarray:
    """Intersection over union of each class (nan where the class is neither present nor predicted)."""
    tp = np.diag(matrix).astype(np.float64)
    union = matrix.sum(axis=0) + matrix.sum(axis=1) - tp
    return np.where(union > 0, tp / np.maximum(union, 1), np.nan)


class Segmentation(ClassIds):
    name = "segmentation"
    scores = ("mean_iou",)
    loss_name = "per-pixel cross-entropy"
    max_examples = EXAMPLES

    def spatial_shape(self) -> tuple[int | None, ...]:
        label = self.single_integer_label()
        shape = self.data.feature_shape
        return shape if len(shape) == len(label.shape) else shape[:-1]  # a trailing channel axis

    def check(self) -> None:
        label = self.single_integer_label()
        shape = self.data.feature_shape
        if tuple(label.shape) not in (tuple(shape), tuple(shape[:-1])) or None in shape:
            raise Sim2dlError(
                "config key 'train.task': segmentation needs a class id per pixel, label field "
                f"'{label.name}' "
                f"has shape {list(label.shape)} but feature '{self.data.feature}' has shape {list(shape)} "
                f"(the label must have its spatial shape {list(shape[:-1])}, channels last, or the same "
                "shape)"
            )
        self.check_classes()

    def outputs(self) -> int:
        return self.class_count()

    def output_shape(self, input_shape: Sequence[int | None]) -> tuple[int | None, ...]:
        return (*self.spatial_shape(), self.outputs())

    # ---- an output per pixel: what moves with the field, and the baseline per pixel
    def outputs_in_words(self) -> str:
        return "class logits per pixel"

    def augmented(self, x: Any, y: Any, transforms: Sequence[Any], seed: Any) -> tuple[Any, Any]:
        from pipeline.training.augment import augment_batch

        return augment_batch(x, y, transforms, seed, moves_labels=True)  # the mask moves with the field

    def test_time_augmentation_refused(self) -> str | None:
        return "a segmentation's outputs move with the field"

    def evaluated_records(self, evaluation: Evaluation) -> int:
        pixels = int(np.prod(self.output_shape(self.data.feature_shape)[:-1]))
        return int(evaluation.sums["confusion"].sum()) // pixels

    def classical_baseline(self) -> ClassicalBaseline:
        return PixelDiscriminant(self)

    def label_tensor(self, values: Sequence[Any], batched: bool) -> Any:
        import tensorflow as tf

        shape = list(self.spatial_shape())
        return tf.cast(tf.reshape(values[0], [-1, *shape] if batched else shape), tf.int32)

    def loss(self) -> Any:
        return self.weighted_cross_entropy()

    def evaluation(self) -> Evaluation:
        k, shape = self.class_count(), self.spatial_shape()
        examples = {
            "feature": np.zeros((0, *shape)),
            "true": np.zeros((0, *shape), np.int64),
            "predicted": np.zeros((0, *shape), np.int64),
        }
        return Evaluation({"confusion": np.zeros((k, k), np.int64)}, examples)

    def update(
        self, evaluation: Evaluation, outputs: np.ndarray, labels: np.ndarray, features: np.ndarray
    ) -> None:
        predicted = outputs.argmax(axis=-1)
        evaluation.sums["confusion"] += confusion(labels, predicted, self.class_count())
        room = self.max_examples - len(evaluation.examples["true"])
        if room > 0:
            first_channel = features[..., 0] if features.ndim == labels.ndim + 1 else features
            for name, value in (("feature", first_channel), ("true", labels), ("predicted", predicted)):
                evaluation.examples[name] = np.concatenate([evaluation.examples[name], value[:room]])

    def metrics(self, evaluation: Evaluation) -> dict[str, Any]:
        matrix = evaluation.sums["confusion"]
        iou = iou_scores(matrix)
        total = int(matrix.sum())
        k = len(matrix)
        # Background (class 0) predicted everywhere: IoU of class 0 is its pixel share, every other class 0.
        baseline = float(matrix[0].sum() / total / k) if total else float("nan")
        return {
            "mean_iou": float(np.nanmean(iou)) if np.isfinite(iou).any() else float("nan"),
            "iou": dict(
                zip(self.class_names(), [None if np.isnan(v) else float(v) for v in iou], strict=True)
            ),
            "pixel_accuracy": float(np.trace(matrix) / total) if total else float("nan"),
            "baseline_mean_iou": baseline,
            "confusion_matrix": matrix.tolist(),
            "classes": self.class_names(),
        }

    def figure(self, evaluation: Evaluation, path: Path, baseline: Mapping[str, Any] | None = None) -> None:
        from pipeline.reporting.plots import segmentation_examples

        m = self.metrics(evaluation)
        title = f"mean IoU {m['mean_iou']:.3f} (all background: {m['baseline_mean_iou']:.3f}"
        if baseline and baseline.get("mean_iou") is not None:
            title += f"; per-pixel classical baseline: {baseline['mean_iou']:.3f}"
        title += ")"
        segmentation_examples(evaluation.examples, self.class_names(), title, path)


class PixelDiscriminant(ClassicalBaseline):
    """A segmentation's: a linear discriminant of each pixel's channels."""

    def method(self, statistics: str) -> str:
        return f"per-pixel linear discriminant (LDA, shrinkage {SHRINKAGE}) on the channels"

    def features(self, x: np.ndarray, spatial_dims: int) -> np.ndarray:
        return channels_per_pixel(x, spatial_dims)  # a row per pixel

    def outputs(self, scores: np.ndarray, x: np.ndarray, spatial_dims: int) -> np.ndarray:
        return scores.reshape(*x.shape[: 1 + spatial_dims], -1)

    def hybrid_refused(self) -> str | None:
        return f"task {self.task.name}: an output per pixel, and the baseline's statistics are per sample"

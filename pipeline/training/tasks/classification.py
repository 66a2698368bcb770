"""classification: one integer label per sample (a categorical field's class ids, or an integer field),
softmax cross-entropy on logits (optionally class-weighted), accuracy, macro-F1 and a confusion matrix.

Evaluation: the K x K confusion matrix (summed across ranks); memory K², independent of the records.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import numpy as np

from pipeline import Sim2dlError
from pipeline.training.tasks.base import Evaluation, confusion
from pipeline.training.tasks.class_ids import ClassIds


def f1_scores(matrix: np.ndarray) -> np.ndarray:
    """F1 of each class from a confusion matrix (0 where a class is neither present nor predicted)."""
    tp = np.diag(matrix).astype(np.float64)
    denominator = matrix.sum(axis=0) + matrix.sum(axis=1)
    return np.where(denominator > 0, 2 * tp / np.maximum(denominator, 1), 0.0)


class Classification(ClassIds):
    name = "classification"
    proposed_for = ("classes",)
    scores = ("accuracy", "macro_f1")

    def check(self) -> None:
        label = self.single_integer_label()
        if label.size != 1 or None in label.shape:
            raise Sim2dlError(
                f"config key 'train.task': classification needs one class id per sample, label field "
                f"'{label.name}' has shape {list(label.shape)} (segmentation takes a class per pixel)"
            )
        self.check_classes()

    def outputs(self) -> int:
        return self.class_count()

    def label_tensor(self, values: Sequence[Any], batched: bool) -> Any:
        import tensorflow as tf

        return tf.cast(tf.reshape(values[0], [-1] if batched else []), tf.int32)

    def loss(self) -> Any:
        return self.weighted_cross_entropy()

    def evaluation(self) -> Evaluation:
        k = self.class_count()
        return Evaluation({"confusion": np.zeros((k, k), np.int64)}, {})

    def update(
        self, evaluation: Evaluation, outputs: np.ndarray, labels: np.ndarray, features: np.ndarray
    ) -> None:
        evaluation.sums["confusion"] += confusion(labels, outputs.argmax(axis=-1), self.class_count())

    def metrics(self, evaluation: Evaluation) -> dict[str, Any]:
        matrix = evaluation.sums["confusion"]
        total = int(matrix.sum())
        present = (matrix.sum(axis=0) + matrix.sum(axis=1)) > 0
        f1 = f1_scores(matrix)
        return {
            "accuracy": float(np.trace(matrix) / total) if total else float("nan"),
            "macro_f1": float(f1[present].mean()) if present.any() else float("nan"),
            "f1": dict(zip(self.class_names(), f1.tolist(), strict=True)),
            "confusion_matrix": matrix.tolist(),
            "classes": self.class_names(),
        }

    def figure(self, evaluation: Evaluation, path: Path, baseline: Mapping[str, Any] | None = None) -> None:
        from pipeline.reporting.plots import confusion_matrix

        m = self.metrics(evaluation)
        title = f"accuracy {m['accuracy']:.3f}, macro-F1 {m['macro_f1']:.3f}"
        if baseline and baseline.get("accuracy") is not None:
            title += f" (classical baseline: accuracy {baseline['accuracy']:.3f})"
        confusion_matrix(evaluation.sums["confusion"], self.class_names(), title, path)

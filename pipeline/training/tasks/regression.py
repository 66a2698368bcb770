"""regression: the labels' values (concatenated into one vector), mean squared error, R² per label.

Evaluation: per label the count, sum of y, of y² and of (prediction - y)² (R² from them), and up to 2,000
(prediction, truth) pairs for the figure, drawn in the labels' own units (convert's normalisation undone).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import numpy as np

from pipeline.training.baseline import FOLDS, BaselineSums, RidgeSums
from pipeline.training.tasks.base import ClassicalBaseline, Evaluation, Task


class Regression(Task):
    name = "regression"
    proposed_for = ("values",)
    loss_name = "mean squared error (normalised labels)"
    max_examples = 2000
    scores = ("r2",)

    def evaluated_records(self, evaluation: Evaluation) -> int:
        return int(evaluation.sums["n"][0])

    def classical_baseline(self) -> ClassicalBaseline:
        return RidgeBaseline(self)

    def outputs(self) -> int:
        return sum(f.size for f in self.data.labels)

    def label_tensor(self, values: Sequence[Any], batched: bool) -> Any:
        import tensorflow as tf

        sizes = [f.size for f in self.data.labels]
        flat = [tf.reshape(v, [-1, k] if batched else [k]) for v, k in zip(values, sizes, strict=True)]
        return tf.cast(tf.concat(flat, -1), tf.float32)

    def loss(self) -> Any:
        import tensorflow as tf

        return tf.keras.losses.MeanSquaredError()

    def evaluation(self) -> Evaluation:
        k = self.outputs()
        sums = {name: np.zeros(k) for name in ("n", "y", "yy", "residual")}
        return Evaluation(sums, {"predicted": np.zeros((0, k)), "true": np.zeros((0, k))})

    def update(
        self, evaluation: Evaluation, outputs: np.ndarray, labels: np.ndarray, features: np.ndarray
    ) -> None:
        p, y = outputs.astype(np.float64), labels.astype(np.float64)
        s = evaluation.sums
        s["n"] += len(y)
        s["y"] += y.sum(axis=0)
        s["yy"] += (y**2).sum(axis=0)
        s["residual"] += ((p - y) ** 2).sum(axis=0)
        room = self.max_examples - len(evaluation.examples["true"])
        if room > 0:
            for name, value in (("predicted", p), ("true", y)):
                evaluation.examples[name] = np.concatenate([evaluation.examples[name], value[:room]])

    def metrics(self, evaluation: Evaluation) -> dict[str, Any]:
        s = evaluation.sums
        total = s["yy"] - s["y"] ** 2 / np.maximum(s["n"], 1)
        r2 = [float(1 - r / t) if t > 0 else float("nan") for r, t in zip(s["residual"], total, strict=True)]
        return {"r2": dict(zip(self.data.label_names, r2, strict=True)) if s["n"][0] else {}}

    def in_label_units(self, values: np.ndarray) -> np.ndarray:
        """Undo convert's (x - mean) / std of each normalised label field."""
        columns, start = [], 0
        for f in self.data.labels:
            block = values[:, start : start + f.size]
            start += f.size
            if f.statistics is not None:
                mean = np.broadcast_to(np.asarray(f.statistics["mean"], np.float64), (f.size,))
                std = np.broadcast_to(np.asarray(f.statistics["std"], np.float64), (f.size,))
                block = block * np.where(std > 0, std, 1.0) + mean
            columns.append(block)
        return np.concatenate(columns, axis=1) if columns else values

    def figure(self, evaluation: Evaluation, path: Path, baseline: Mapping[str, Any] | None = None) -> None:
        from pipeline.reporting.plots import predicted_vs_true

        predicted = self.in_label_units(evaluation.examples["predicted"])
        true = self.in_label_units(evaluation.examples["true"])
        r2 = self.metrics(evaluation)["r2"]
        classical = (baseline or {}).get("r2") or {}
        predicted_vs_true(
            predicted,
            true,
            self.data.label_names,
            [r2.get(n, np.nan) for n in self.data.label_names],
            int(evaluation.sums["n"][0]),
            path,
            [classical.get(n) for n in self.data.label_names],
        )


class RidgeBaseline(ClassicalBaseline):
    """Ridge regression on per-sample statistics; the network is judged by each label's R²."""

    def method(self, statistics: str) -> str:
        return f"ridge regression on {statistics}; penalty by {FOLDS}-fold cross-validation per label"

    def sums(self, features: int) -> BaselineSums:
        return RidgeSums(features, self.task.outputs(), self.task.data.label_names)

    def below(self, summary: Mapping[str, Any], baseline: Mapping[str, Any], margin: float) -> list[str]:
        """The labels whose R² is below the baseline's by more than `margin`."""
        theirs = baseline.get("r2") or {}
        return [
            n
            for n, v in summary["r2"].items()
            if v is not None and theirs.get(n) is not None and v < theirs[n] - margin
        ]

    def compared(self, below: Sequence[str], summary: Mapping[str, Any], baseline: Mapping[str, Any]) -> str:
        return ", ".join(f"{n} R² {summary['r2'][n]:.3f} < {baseline['r2'][n]:.3f}" for n in below)

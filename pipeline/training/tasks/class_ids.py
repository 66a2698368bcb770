"""What the tasks on class ids share (classification: one per sample; segmentation: one per pixel): the one
integer label field, how many classes and their names, the class weights of the loss, and the checks of
all of them against the data, before training. Memory and time: O(classes).
"""

from __future__ import annotations

import logging
from typing import Any

import numpy as np

from pipeline import Sim2dlError
from pipeline.training.tasks.base import LabelField, Task

log = logging.getLogger(__name__)


class ClassIds(Task):
    """A task whose labels are class ids: what classification and segmentation share."""

    def single_integer_label(self) -> LabelField:
        if len(self.data.labels) != 1:
            names = [f.name for f in self.data.labels]
            raise Sim2dlError(
                f"config key 'convert.labels': task '{self.name}' needs one label field (have {names})"
            )
        label = self.data.labels[0]
        if not label.integer:
            raise Sim2dlError(
                f"config key 'train.task': task '{self.name}' needs integer class ids, label field "
                f"'{label.name}' "
                f"holds {label.dtype} (make it categorical: true in source.fields, or give it an integer "
                "dtype)"
            )
        if label.statistics is not None:
            raise Sim2dlError(
                f"config key 'convert.normalise': class ids of '{label.name}' cannot be normalised"
            )
        return label

    def class_count(self) -> int:
        """How many classes: train.classes, else the field's categories, else its largest id + 1."""
        label = self.single_integer_label()
        found = label.class_counts or {}
        if found.get("min", 0) < 0:
            raise Sim2dlError(f"label field '{label.name}': class ids must be >= 0, found {found['min']}")
        configured = self.settings.get("classes")
        if configured:
            if found and found["max"] >= configured:
                raise Sim2dlError(
                    f"config key 'train.classes': label field '{label.name}' holds class id {found['max']}, "
                    f"which needs at least {found['max'] + 1} classes (have {configured})"
                )
            return int(configured)
        if label.class_names:
            return len(label.class_names)
        if not found:
            raise Sim2dlError(
                f"config key 'train.classes': the number of classes of '{label.name}' is not known from the "
                "data (rerun convert, or set it)"
            )
        return int(found["max"]) + 1

    def check_classes(self) -> None:
        """The class settings against the data: at least 2 classes, weights and names that fit, and a
        warning for a class the validation split lacks (errors now, not after the first epoch)."""
        if self.class_count() < 2:
            raise Sim2dlError(
                f"label field '{self.data.labels[0].name}': {self.name} needs at least 2 classes"
            )
        self.class_weights()
        self.class_names()
        self.warn_missing_classes()

    def class_names(self) -> list[str]:
        """train.class_names, else a categorical field's classes, else the ids."""
        names = self.settings.get("class_names") or self.data.labels[0].class_names
        k = self.class_count()
        if names and len(names) != k:
            raise Sim2dlError(f"config key 'train.class_names': {len(names)} names for {k} classes")
        return [str(n) for n in names] if names else [str(i) for i in range(k)]

    def warn_missing_classes(self) -> None:
        """A class with no record in the validation split cannot be scored: say so (a warning)."""
        counts = (self.data.labels[0].class_counts or {}).get("counts") or {}
        validation = counts.get("validation")
        if validation is None:
            return
        validation = list(validation) + [0] * (self.class_count() - len(validation))
        missing = [name for name, n in zip(self.class_names(), validation, strict=False) if n == 0]
        if missing:
            log.warning("sim2dl train: the validation split has no records of the classes %s", missing)

    def class_weights(self) -> np.ndarray | None:
        """train.class_weights: a list, 'balanced' (inverse frequency in the training split), or None."""
        setting = self.settings.get("class_weights")
        k = self.class_count()
        if setting is None:
            return None
        if setting == "balanced":
            counts = ((self.data.labels[0].class_counts or {}).get("counts") or {}).get("train")
            if counts is None:
                raise Sim2dlError(
                    "config key 'train.class_weights': 'balanced' needs the training split's class "
                    "counts (rerun convert)"
                )
            counts = np.asarray(list(counts) + [0] * (k - len(counts)), np.float64)[:k]
            weights = np.where(counts > 0, counts.sum() / (k * np.maximum(counts, 1)), 0.0)
            return weights.astype(np.float32)
        if len(setting) != k:
            raise Sim2dlError(f"config key 'train.class_weights': {len(setting)} weights for {k} classes")
        return np.asarray(setting, np.float32)

    def weighted_cross_entropy(self) -> Any:
        import tensorflow as tf

        weights = self.class_weights()
        ce = tf.keras.losses.SparseCategoricalCrossentropy(from_logits=True)
        if weights is None:
            return ce
        table = tf.constant(weights)

        def loss(labels: Any, logits: Any) -> Any:
            return ce(labels, logits, sample_weight=tf.gather(table, labels))

        return loss

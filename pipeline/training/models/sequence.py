"""sequence: 1D convolutions and global average pooling, for (length, channels) traces of any length.
Regression or classification."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from pipeline.training.models.base import ModelError, pooled_head

NAME = "sequence"
SPATIAL_DIMS = 1
TASKS = ("regression", "classification")


def build(input_shape: Sequence[int | None], outputs: int, task: Any, args: Mapping[str, Any]) -> Any:
    import tensorflow as tf

    layers = tf.keras.layers
    if len(input_shape) != 2 or input_shape[1] is None:
        raise ModelError(f"model 'sequence' needs (length, channels) records, the feature has {list(input_shape)}")
    inputs = layers.Input(shape=(None, input_shape[1]))
    x = inputs
    for level in range(args["depth"]):
        x = layers.Conv1D(args["width"] * 2**level, 5, padding="same")(x)
        x = layers.LeakyReLU(0.3)(x)
    return tf.keras.Model(inputs, pooled_head(x, outputs, args), name=NAME)

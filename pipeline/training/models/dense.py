"""dense: a multilayer perceptron on the flattened input, for small fixed-size samples: `depth` hidden
layers of `dense` units (leaky ReLU, dropout), then the raw outputs. Regression or classification."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from pipeline.training.models.base import ModelError

NAME = "dense"
SPATIAL_DIMS = None  # any shape: flattened
TASKS = ("regression", "classification")


def proposed_depth(shape: tuple[int | None, ...] | None, plane: bool) -> int | None:
    """sim2dl inspect's starter choice (models.propose) where no other model's is: anything, flattened."""
    return 2


def build(input_shape: Sequence[int | None], outputs: int, task: Any, args: Mapping[str, Any]) -> Any:
    import tensorflow as tf

    layers = tf.keras.layers
    if None in input_shape:
        raise ModelError(f"model 'dense' needs fixed-size samples, the feature has shape {list(input_shape)}")
    inputs = layers.Input(shape=tuple(input_shape))
    x = layers.Flatten()(inputs)
    for _ in range(args["depth"]):
        x = layers.Dense(args["dense"])(x)
        x = layers.LeakyReLU(0.3)(x)
        x = layers.Dropout(args["dropout"])(x)
    return tf.keras.Model(inputs, layers.Dense(outputs, dtype="float32")(x), name=NAME)

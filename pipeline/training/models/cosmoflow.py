"""cosmoflow: 3D convolutions, leaky ReLU and pooling, widening with depth (the MLPerf HPC CosmoFlow
reference's shape), for (D, H, W) cubes or (D, H, W, C). Regression or classification: the head sees the
last level flattened and every level averaged (base.pooled_head)."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from pipeline.training.models.base import ModelError, check_pooling, pooled_head

NAME = "cosmoflow"
SPATIAL_DIMS = 3
TASKS = ("regression", "classification")


def build(input_shape: Sequence[int | None], outputs: int, task: Any, args: Mapping[str, Any]) -> Any:
    import tensorflow as tf

    layers = tf.keras.layers
    if len(input_shape) != 4 or None in input_shape:
        raise ModelError(f"model 'cosmoflow' needs fixed-size 3D cubes, the feature has shape {list(input_shape)}")
    check_pooling(NAME, input_shape[:3], args["depth"])
    inputs = layers.Input(shape=tuple(input_shape))
    x, levels = inputs, []
    for level in range(args["depth"]):
        x = layers.Conv3D(args["width"] * 2**level, 3, padding="same")(x)
        x = layers.LeakyReLU(0.3)(x)
        levels.append(x)
        x = layers.MaxPool3D(2)(x)
    return tf.keras.Model(inputs, pooled_head([*levels, x], outputs, args, flatten_last=True), name=NAME)

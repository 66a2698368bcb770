"""models: the Keras models train builds, chosen by train.model.

    cosmoflow   3D convolutions, leaky ReLU and pooling, widening with depth (the MLPerf HPC CosmoFlow
                reference's shape), for cubes with channels
    sequence    1D convolutions and global average pooling, for traces (variable-length sequences)

Each ends in a dense layer, dropout and a float32 output (also under mixed precision). Memory and time
are TensorFlow's: the parameters grow with width * 2^depth.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any


def build_model(settings: Mapping[str, Any], input_shape: Sequence[int | None], outputs: int) -> Any:
    import tensorflow as tf

    layers = tf.keras.layers
    inputs = layers.Input(shape=tuple(input_shape))
    x = inputs
    if settings["model"] == "cosmoflow":
        for level in range(settings["depth"]):  # CosmoFlow: conv + leaky ReLU + pooling, widening
            x = layers.Conv3D(settings["width"] * 2**level, 3, padding="same")(x)
            x = layers.LeakyReLU(0.3)(x)
            x = layers.MaxPool3D(2)(x)
        x = layers.Flatten()(x)
    else:
        for level in range(settings["depth"]):
            x = layers.Conv1D(settings["width"] * 2**level, 5, padding="same")(x)
            x = layers.LeakyReLU(0.3)(x)
        x = layers.GlobalAveragePooling1D()(x)
    x = layers.Dense(settings["dense"])(x)
    x = layers.LeakyReLU(0.3)(x)
    x = layers.Dropout(settings["dropout"])(x)
    out = layers.Dense(outputs, dtype="float32")(x)  # float32 output, also under mixed precision
    return tf.keras.Model(inputs, out, name=settings["model"])

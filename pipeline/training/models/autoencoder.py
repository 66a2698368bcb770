"""autoencoder: a convolutional encoder-decoder through a latent vector, for 2-D fields (H, W[, C]) and 3-D
fields (D, H, W[, C]) alike (the task's output field says which: task.output_fields()). The encoder has
`depth` levels of a 3x3 (3x3x3) convolution and a strided one that halves the grid, widening by 2 per level
from `width`; then a dense layer of `dense` units and the latent, a dense layer named `latent` of
task.bottleneck() units (the task reads each record's latent from it). The decoder mirrors it: dense
layers back onto the coarsest grid, `depth` levels of upsampling by 2 and two convolutions, and a last
convolution to the fields' channels. Leaky ReLU throughout; the outputs are the reconstruction flat
(float32, also under mixed precision). Each spatial size must be divisible by 2^depth. Memory and time: the
convolutions (the field's cells x width x 2^level per level) and the dense layer from the coarsest grid.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np

from pipeline.training.models.base import ModelError, check_pooling

NAME = "autoencoder"
SPATIAL_DIMS = None  # the fields' grid and channels come from the task (a field with or without channels)
TASKS = ("autoencoder",)


def build(input_shape: Sequence[int | None], outputs: int, task: Any, args: Mapping[str, Any]) -> Any:
    import tensorflow as tf

    layers = tf.keras.layers
    fields, latent = task.output_fields(), task.bottleneck()
    if len(fields) != 1 or latent is None:
        raise ModelError(
            "model 'autoencoder' reconstructs one field through a latent (train.task: autoencoder)"
        )
    shape = tuple(int(d) for d in fields[0])
    grid, channels = shape[:-1], shape[-1]
    if len(grid) not in (2, 3):
        raise ModelError(f"model 'autoencoder' takes 2-D or 3-D fields, the sample's grid is {list(grid)}")
    depth = args["depth"]
    check_pooling(NAME, grid, depth, must_divide=True)
    conv = {2: layers.Conv2D, 3: layers.Conv3D}[len(grid)]
    upsampling = {2: layers.UpSampling2D, 3: layers.UpSampling3D}[len(grid)]

    def convolved(x: Any, filters: int, strides: int = 1) -> Any:
        return layers.LeakyReLU(0.3)(conv(filters, 3, strides=strides, padding="same")(x))

    inputs = layers.Input(shape=tuple(input_shape))
    x = layers.Reshape(shape)(inputs)
    for level in range(depth):
        x = convolved(convolved(x, args["width"] << level), args["width"] << level, strides=2)
    coarse = tuple(int(d) for d in x.shape[1:])
    x = layers.LeakyReLU(0.3)(layers.Dense(args["dense"])(layers.Flatten()(x)))
    code = layers.Dense(latent, name="latent")(layers.Dropout(args["dropout"])(x))
    y = layers.LeakyReLU(0.3)(layers.Dense(args["dense"])(code))
    y = layers.LeakyReLU(0.3)(layers.Dense(int(np.prod(coarse)))(y))
    y = layers.Reshape(coarse)(y)
    for level in reversed(range(depth)):
        y = convolved(convolved(upsampling(2)(y), args["width"] << level), args["width"] << level)
    y = layers.Flatten()(conv(channels, 3, padding="same")(y))
    if y.shape[-1] != outputs:
        raise ModelError(
            f"model 'autoencoder': the reconstruction has {y.shape[-1]} entries, the task {outputs}"
        )
    return tf.keras.Model(inputs, layers.Activation("linear", dtype="float32")(y), name=NAME)

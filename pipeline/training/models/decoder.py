"""decoder: from a vector of parameters to a simulator's outputs (a forward surrogate). A shared trunk of
`depth` dense layers, then one head per output field: a field (2 or more axes: the first two spatial, the
rest channels) is a dense layer onto a coarse grid, `levels` times upsampled by 2 with a 3x3 convolution
(leaky ReLU), a 3x3 convolution to its channels and, where halvings do not divide its size, a resize;
a vector is a dense layer. The heads' outputs are flattened and joined in the order of the label fields:
the task's flat outputs.

Over levels of one simulator (simulate.fidelities) the run's level is one entry of the parameters' vector,
and by default the network learns it as one more input (conditioned). With `model_args: {level_entry: I}`
(the level's place in the stack) the level is not an input of the trunk: two networks of the parameters,
`base` and `correction`, each the trunk and heads above, give every level's outputs as base + g * correction,
g a learnt affine function of the level. With two levels that is a network of the cheap level's outputs and
a correction of it learnt from the costly runs' residuals (g's two values absorb each other's scale), trained
jointly on both levels' runs as Meng and Karniadakis (2020) train their composite network.

Memory and time: the dense layer onto the coarse grid, and the convolutions (twice with level_entry).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np

from pipeline.training.models.base import ModelError

NAME = "decoder"
SPATIAL_DIMS = None  # a vector of parameters (any shape: flattened)
TASKS = ("surrogate", "regression")
COARSEST = 4  # pixels per side of the coarse grid a field head starts from, at least
OPTIONS = {"level_entry": None}  # model_args: the run's level's place in the input vector (a correction)


def levels_for(spatial: Sequence[int], depth: int) -> int:
    """Upsamplings of a field head: at most `depth`, leaving a coarse grid of at least COARSEST per side."""
    return max(0, min(depth, int(np.log2(max(min(spatial) // COARSEST, 1)))))


def build(input_shape: Sequence[int | None], outputs: int, task: Any, args: Mapping[str, Any]) -> Any:
    import tensorflow as tf

    layers = tf.keras.layers
    if None in input_shape:
        raise ModelError(
            f"model 'decoder' needs fixed-size inputs, the feature has shape {list(input_shape)}"
        )
    fields = task.output_fields()  # a surrogate's outputs; [] for one vector (regression)
    inputs = layers.Input(shape=tuple(input_shape))
    x = layers.Flatten()(inputs)
    entry = args.get("level_entry")  # bare args (a benchmark, the design's ensemble): no levels
    if entry is None:
        joined = trunk_and_heads(x, fields, outputs, args)
    else:
        width = int(np.prod(input_shape))
        if not isinstance(entry, int) or not 0 <= entry < width or width < 2:
            raise ModelError(
                f"model_args level_entry {entry!r} is not the place of the level among the input's {width} "
                "entries (the parameters and the level)"
            )
        level = x[:, entry : entry + 1]
        parameters = layers.Concatenate()([x[:, :entry], x[:, entry + 1 :]])
        base = trunk_and_heads(parameters, fields, outputs, args)
        correction = trunk_and_heads(parameters, fields, outputs, args)
        joined = base + layers.Dense(1)(level) * correction
    return tf.keras.Model(inputs, layers.Activation("linear", dtype="float32")(joined), name=NAME)


def trunk_and_heads(x: Any, fields: Sequence[tuple[int, ...]], outputs: int, args: Mapping[str, Any]) -> Any:
    """The trunk (`depth` dense layers) and one head per output field, joined: the flat outputs."""
    import tensorflow as tf

    layers = tf.keras.layers
    for _ in range(max(args["depth"], 1)):
        x = layers.LeakyReLU(0.3)(layers.Dense(args["dense"])(x))
        x = layers.Dropout(args["dropout"])(x)
    heads = [field_head(x, shape, args) for shape in fields] or [layers.Dense(outputs)(x)]
    return layers.Concatenate()(heads) if len(heads) > 1 else heads[0]


def field_head(x: Any, shape: Sequence[int], args: Mapping[str, Any]) -> Any:
    """The flat entries of one output of `shape` from the trunk's vector."""
    import tensorflow as tf

    layers = tf.keras.layers
    if len(shape) < 2:
        return layers.Dense(int(np.prod(shape or (1,))))(x)
    height, width = shape[0], shape[1]
    channels = int(np.prod(shape[2:])) if len(shape) > 2 else 1
    levels = levels_for((height, width), args["depth"])
    coarse = (max(height >> levels, 1), max(width >> levels, 1))
    filters = args["width"] * (1 << levels)
    y = layers.Dense(coarse[0] * coarse[1] * filters)(x)
    y = layers.Reshape((*coarse, filters))(layers.LeakyReLU(0.3)(y))
    for level in range(levels):
        y = layers.UpSampling2D(2, interpolation="bilinear")(y)
        y = layers.Conv2D(max(args["width"] * (1 << (levels - level - 1)), 1), 3, padding="same")(y)
        y = layers.LeakyReLU(0.3)(y)
    y = layers.Conv2D(channels, 3, padding="same")(y)
    if (coarse[0] << levels, coarse[1] << levels) != (height, width):
        y = layers.Resizing(height, width, interpolation="bilinear")(y)
    return layers.Flatten()(y)

"""What the built-in models share: their hyperparameters, the task's head on a trunk, and the check that
an input is large enough for the model's pooling."""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np

ARGS = ("depth", "width", "dense", "dropout")  # train.* settings every built-in takes (model_args override)


class ModelError(ValueError):
    """A model cannot be built for this input (reported as a config error naming model and shape)."""


def check_pooling(name: str, spatial: Sequence[int | None], depth: int, must_divide: bool = False) -> None:
    """`depth` halvings of each spatial axis must leave at least one pixel (and, for an encoder-decoder
    whose skips join equal shapes, divide it exactly)."""
    for size in spatial:
        if size is None:
            continue
        if size >> depth < 1 or (must_divide and size % (1 << depth)):
            need = "divisible by" if must_divide else "at least"
            raise ModelError(
                f"model '{name}' with depth {depth} halves the input {list(spatial)} {depth} times: each "
                f"spatial size must be {need} {1 << depth} (lower train.depth, or crop/resize the feature)"
            )


def pooled_head(
    levels: Sequence[Any], outputs: int, args: Mapping[str, Any], flatten_last: bool = False
) -> Any:
    """One vector per sample, a dense layer, dropout, and the raw outputs (float32, also under mixed
    precision): regression values or class logits. The vector joins every level's feature map averaged
    over its positions (the finest level keeps the input's means and amplitudes, which max pooling on the
    way down turns into extremes: a class that is the channel with the largest mean was learned to 0.73-0.89
    from the last level alone against 0.96-0.98 for a one-layer reference, tests/test_models.py), and the
    last level flattened where position matters (cosmoflow, as MLPerf's reference)."""
    return joined_head(pooled_vectors(levels, flatten_last), outputs, args)


def pooled_vectors(levels: Sequence[Any], flatten_last: bool = False) -> list[Any]:
    """Every level's feature map averaged over its positions (and the last flattened): a trunk's vectors."""
    import tensorflow as tf

    layers = tf.keras.layers
    pooled = [layers.GlobalAveragePooling1D()(layers.Reshape((-1, x.shape[-1]))(x)) for x in levels]
    if flatten_last:
        pooled.append(layers.Flatten()(levels[-1]))
    return pooled


def joined_head(
    pooled: Sequence[Any], outputs: int, args: Mapping[str, Any], zero_output: bool = False
) -> Any:
    """The vectors joined, then dense_head (pooled_head's second half, also for a split model's means)."""
    import tensorflow as tf

    x = tf.keras.layers.Concatenate()(list(pooled)) if len(pooled) > 1 else pooled[0]
    return dense_head(x, outputs, args, zero_output)


def dense_head(x: Any, outputs: int, args: Mapping[str, Any], zero_output: bool = False) -> Any:
    """A dense layer (leaky ReLU), dropout, and the raw outputs in float32; zero_output: the outputs'
    weights start at zero (a residual on an offset: the untrained model is the offset)."""
    import tensorflow as tf

    layers = tf.keras.layers
    x = layers.Dense(args["dense"])(x)
    x = layers.LeakyReLU(0.3)(x)
    x = layers.Dropout(args["dropout"])(x)
    return layers.Dense(
        outputs, dtype="float32", kernel_initializer="zeros" if zero_output else "glorot_uniform"
    )(x)


def field_heads(x: Any, shapes: Sequence[Sequence[int]], args: Mapping[str, Any], dims: int = 2) -> Any:
    """A surrogate's flat outputs from a (B, *grid, F) feature map of `dims` grid axes: per output field on
    the same grid a 1x1 convolution to its channels, flattened; per other output (a vector, another grid) a
    pooled dense head. Joined in the outputs' order (the task's flat layout: each output's entries in
    turn)."""
    import tensorflow as tf

    layers = tf.keras.layers
    grid = tuple(x.shape[1 : 1 + dims])
    pointwise = {1: layers.Conv1D, 2: layers.Conv2D, 3: layers.Conv3D}[dims]
    pooled = {
        1: layers.GlobalAveragePooling1D,
        2: layers.GlobalAveragePooling2D,
        3: layers.GlobalAveragePooling3D,
    }[dims]
    heads = []
    for shape in shapes:
        if len(shape) >= dims and tuple(shape[:dims]) == grid:
            channels = int(np.prod(shape[dims:])) if len(shape) > dims else 1
            heads.append(layers.Flatten()(pointwise(channels, 1)(x)))
        else:
            heads.append(dense_head(pooled()(x), int(np.prod(shape or (1,))), args))
    joined = layers.Concatenate()(heads) if len(heads) > 1 else heads[0]
    return layers.Activation("linear", dtype="float32")(joined)


def conditioned(inputs: Any, width: int, args: Mapping[str, Any]) -> tuple[Any, Any]:
    """A (B, *grid, C + P) input whose last `width` channels are a vector constant over the grid (a run's
    parameters: task.vector_channels()) as the fields (B, *grid, C) and the vector's embedding (B, dense): one
    dense layer (GELU) on the P values read at one pixel. Without them: (inputs, None)."""
    if not width:
        return inputs, None
    import tensorflow as tf

    layers = tf.keras.layers
    fields = inputs[..., :-width]  # sliced by Keras' own op layers, which a saved model keeps
    vector = inputs[(slice(None), *[0] * (len(inputs.shape) - 2), slice(-width, None))]
    return fields, layers.Dense(args["dense"], activation="gelu")(vector)


def film(x: Any, embedding: Any) -> Any:
    """Feature-wise linear modulation (FiLM, Perez et al., AAAI 2018): each channel of a (B, *grid, F) map
    scaled and shifted by amounts learnt from the conditioning vector's embedding. The scale starts at 1
    and the shift at 0 (zero kernels), so an untrained block is unmodulated. Unchanged without one."""
    if embedding is None:
        return x
    import tensorflow as tf

    layers = tf.keras.layers
    channels = int(x.shape[-1])
    point = (*[1] * (len(x.shape) - 2), channels)  # broadcast over the grid
    scale = layers.Dense(channels, kernel_initializer="zeros", bias_initializer="ones")(embedding)
    shift = layers.Dense(channels, kernel_initializer="zeros")(embedding)
    scaled = layers.Multiply()([x, layers.Reshape(point)(scale)])
    return layers.Add()([scaled, layers.Reshape(point)(shift)])


def periodic_pad(x: Any, width: int) -> Any:
    """Pad a (B, H, W, C) map by `width` on each side with the opposite edge's values (a periodic domain:
    a 3x3 convolution with width 1 and padding 'valid' then sees across the boundary)."""
    import tensorflow as tf

    x = tf.concat([x[:, -width:], x, x[:, :width]], axis=1)
    return tf.concat([x[:, :, -width:], x, x[:, :, :width]], axis=2)


def pooling_depth(sides: Sequence[int]) -> int:
    """A depth (1 to 3) that halving the smallest of `sides` allows: sim2dl inspect's starter choice."""
    return max(1, min(3, int(math.log2(min(sides)))))

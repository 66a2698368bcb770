"""What the built-in models share: their hyperparameters, the task's head on a trunk, and the check that
an input is large enough for the model's pooling."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

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
                f"model '{name}' with depth {depth} halves the input {list(spatial)} {depth} times: each spatial "
                f"size must be {need} {1 << depth} (lower train.depth, or crop/resize the feature)"
            )


def pooled_head(x: Any, outputs: int, args: Mapping[str, Any], flatten: bool = False) -> Any:
    """One vector per sample (flattened or globally averaged), a dense layer, dropout, and the raw outputs
    (float32, also under mixed precision): regression values or class logits."""
    import tensorflow as tf

    layers = tf.keras.layers
    if flatten:
        x = layers.Flatten()(x)
    elif len(x.shape) > 2:
        x = layers.GlobalAveragePooling1D()(layers.Reshape((-1, x.shape[-1]))(x))
    x = layers.Dense(args["dense"])(x)
    x = layers.LeakyReLU(0.3)(x)
    x = layers.Dropout(args["dropout"])(x)
    return layers.Dense(outputs, dtype="float32")(x)

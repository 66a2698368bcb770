"""sequence: 1D convolutions for (length, channels) traces of any length (batches are padded with zeros to
their longest trace), then pooling over the trace's real steps only: their mean (what a trace is like) and
their sum in units of SUM_UNIT steps (how much of it there is: a multiplicity, a total energy, which a mean
alone cannot tell apart across lengths). Regression or classification.

Padding is told from data by the input: a step whose channels are all exactly zero counts as padding (a
trace that really holds all-zero steps loses them from the mean and the sum, where they add nothing
anyway)."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from pipeline.training.models.base import ModelError, joined_head

NAME = "sequence"
SPATIAL_DIMS = 1
TASKS = ("regression", "classification")


def proposed_depth(shape: tuple[int | None, ...] | None, plane: bool) -> int | None:
    """sim2dl inspect's starter choice (models.propose): traces of any length (None: the rank differs
    between files), or (length, channels) with a varying axis or under 8 along one."""
    if shape is None:
        return 3
    fixed = [d for d in shape if d is not None]
    return 3 if len(shape) == 2 and not plane and (None in shape or min(fixed) < 8) else None


# steps: keeps the summed features O(1) at the start of training for traces of hundreds of steps
SUM_UNIT = 100.0


def build(input_shape: Sequence[int | None], outputs: int, task: Any, args: Mapping[str, Any]) -> Any:
    import tensorflow as tf

    check_input(input_shape)
    inputs = tf.keras.layers.Input(shape=(None, input_shape[1]))
    return tf.keras.Model(inputs, joined_head(trunk(inputs, args), outputs, args), name=NAME)


def check_input(input_shape: Sequence[int | None]) -> None:
    if len(input_shape) != 2 or input_shape[1] is None:
        raise ModelError(
            f"model 'sequence' needs (length, channels) records, the feature has {list(input_shape)}"
        )


def trunk(inputs: Any, args: Mapping[str, Any]) -> list[Any]:
    """The convolutions pooled over the real steps: their mean and their sum / SUM_UNIT (a head's vectors)."""
    import tensorflow as tf

    layers = tf.keras.layers
    check_input(inputs.shape[1:])
    # (batch, steps, 1)
    real = tf.cast(tf.reduce_any(tf.not_equal(inputs, 0), axis=-1, keepdims=True), "float32")
    x = inputs
    for level in range(args["depth"]):
        x = layers.Conv1D(args["width"] * 2**level, 5, padding="same")(x)
        x = layers.LeakyReLU(0.3)(x)
        # padded steps back to zero, so the next convolution sees past a trace's end what it sees past an
        # unpadded one's (its own zero padding): a trace's outputs do not depend on its batch
        x = x * tf.cast(real, x.dtype)
    total = tf.reduce_sum(tf.cast(x, "float32"), axis=1)
    mean = total / tf.maximum(tf.reduce_sum(real, axis=1), 1.0)
    return [mean, total / SUM_UNIT]

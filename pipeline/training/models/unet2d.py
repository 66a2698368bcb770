"""unet2d: a small 2-D encoder-decoder for (H, W, C) fields, DeepCAM-like in spirit: `depth` levels of
two 3x3 convolutions (leaky ReLU) and pooling, widening by 2 per level, then transposed convolutions back
up with skip connections. Segmentation: a 1x1 convolution to per-pixel class logits; a surrogate's
outputs: a head per output field on the last map (base.field_heads); classification or regression: the
pooled head on every encoder level (base.pooled_head). model_args `periodic: true` pads every convolution
periodically (fields on a periodic domain: no artificial boundary). H and W must be divisible by
2^depth (the skips join equal shapes). Given a conditioning vector (task.vector_channels(): a run's
parameters), every block is modulated by it (base.film) and the parameters are not convolved as channels.

No batch normalisation (measured in tests/test_models.py): with a rank's batch of 16 it makes every feature
relative to the batch it came in, so a class given by a field's absolute mean was learned to accuracy 0.73
(inference) against 0.93 without it and 0.98 for a one-layer reference, and after a short run its moving
statistics still lag (segmentation mean IoU 0.78 in inference vs 0.89 with batch statistics at Keras'
momentum 0.99). Without it segmentation scores the same (0.89 vs 0.90) and training equals inference."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from pipeline.training.models.base import (
    ModelError,
    check_pooling,
    conditioned,
    field_heads,
    film,
    periodic_pad,
    pooled_head,
    pooled_vectors,
    pooling_depth,
)

NAME = "unet2d"
SPATIAL_DIMS = 2
TASKS = ("segmentation", "classification", "regression", "surrogate", "next_state")


def proposed_depth(shape: tuple[int | None, ...] | None, plane: bool) -> int | None:
    """sim2dl inspect's starter choice (models.propose): 2-D fields (H, W), (H, W, C) with up to 16
    channels, or any channels where the reader says the array is a plane (a thetaMode mesh's modes)."""
    if shape is None or None in shape:
        return None
    if len(shape) == 2 or (len(shape) == 3 and (plane or shape[2] <= 16)):
        return pooling_depth(shape[:2])
    return None


OPTIONS = {"periodic": False}  # model_args: periodic padding for fields on a periodic domain


def build(input_shape: Sequence[int | None], outputs: int, task: Any, args: Mapping[str, Any]) -> Any:
    import tensorflow as tf

    layers = tf.keras.layers
    fields = task.output_fields()  # a surrogate's outputs: a head per field on the decoder's last map
    per_pixel = len(task.output_shape(input_shape)) > 1  # logits on the grid (segmentation)
    check_input(input_shape, args, per_pixel or bool(fields))
    inputs = layers.Input(shape=tuple(input_shape))
    # a run's parameters: FiLM per block
    fields_in, embedding = conditioned(inputs, task.vector_channels(), args)
    x, skips = encoder(fields_in, args, embedding)
    if not per_pixel and not fields:
        return tf.keras.Model(inputs, pooled_head([*skips, x], outputs, args), name=NAME)
    for level in reversed(range(args["depth"])):
        x = layers.Conv2DTranspose(args["width"] * 2**level, 2, strides=2)(x)
        x = _block(
            layers.Concatenate()([x, skips[level]]), args["width"] * 2**level, args.get("periodic", False)
        )
        x = film(x, embedding)
    x = layers.Dropout(args["dropout"])(x)
    if fields:
        return tf.keras.Model(inputs, field_heads(x, fields, args), name=NAME)
    return tf.keras.Model(inputs, layers.Conv2D(outputs, 1, dtype="float32")(x), name=NAME)


def trunk(inputs: Any, args: Mapping[str, Any]) -> list[Any]:
    """The encoder's vectors for a head (classification, regression): every level averaged."""
    check_input(inputs.shape[1:], args, False)
    x, skips = encoder(inputs, args)
    return pooled_vectors([*skips, x])


def check_input(input_shape: Sequence[int | None], args: Mapping[str, Any], per_pixel: bool) -> None:
    if len(input_shape) != 3 or None in input_shape:
        raise ModelError(
            f"model 'unet2d' needs fixed-size (H, W, C) fields, the feature has {list(input_shape)}"
        )
    check_pooling(NAME, input_shape[:2], args["depth"], must_divide=per_pixel)


def encoder(inputs: Any, args: Mapping[str, Any], embedding: Any = None) -> tuple[Any, list[Any]]:
    """`depth` levels of two convolutions and pooling, then the bottom block: (its output, each level's);
    each block modulated by the conditioning vector's `embedding` where there is one (base.film)."""
    import tensorflow as tf

    x, skips, periodic = inputs, [], args.get("periodic", False)
    for level in range(args["depth"]):
        x = film(_block(x, args["width"] * 2**level, periodic), embedding)
        skips.append(x)
        x = tf.keras.layers.MaxPool2D(2)(x)
    return film(_block(x, args["width"] * 2 ** args["depth"], periodic), embedding), skips


def _block(x: Any, filters: int, periodic: bool = False) -> Any:
    """Two 3x3 convolutions (leaky ReLU), zero-padded, or periodically padded on a periodic domain."""
    import tensorflow as tf

    for _ in range(2):
        if periodic:
            x = tf.keras.layers.Conv2D(filters, 3, padding="valid")(
                tf.keras.layers.Lambda(periodic_pad, arguments={"width": 1})(x)
            )
        else:
            x = tf.keras.layers.Conv2D(filters, 3, padding="same")(x)
        x = tf.keras.layers.LeakyReLU(0.3)(x)
    return x

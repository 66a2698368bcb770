"""cosmoflow: 3D convolutions, leaky ReLU and pooling, widening with depth (the MLPerf HPC CosmoFlow
reference's shape), for (D, H, W) cubes or (D, H, W, C). Regression or classification: the head sees the
last level flattened and every level averaged (base.pooled_head).

build_split: the same model on depth slabs of a sample split over a spatial set
(train.spatial.ranks_per_sample):
its levels stay split while their slabs allow (spatial.layout.split_levels), then the slabs are gathered
and the rest runs replicated; same weights, same outputs as build's model on the whole sample."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from pipeline.training.models.base import (
    ModelError,
    check_pooling,
    joined_head,
    pooled_vectors,
    pooling_depth,
)

NAME = "cosmoflow"
SPATIAL_DIMS = 3
TASKS = ("regression", "classification")


def proposed_depth(shape: tuple[int | None, ...] | None, plane: bool) -> int | None:
    """sim2dl inspect's starter choice (models.propose): 3-D volumes, with or without channels."""
    if shape is None or None in shape or len(shape) not in (3, 4):
        return None
    return pooling_depth(shape[:3])


def build(input_shape: Sequence[int | None], outputs: int, task: Any, args: Mapping[str, Any]) -> Any:
    import tensorflow as tf

    inputs = tf.keras.layers.Input(shape=tuple(input_shape))
    return tf.keras.Model(inputs, joined_head(trunk(inputs, args), outputs, args), name=NAME)


def trunk(inputs: Any, args: Mapping[str, Any]) -> list[Any]:
    """The convolutions' vectors for a head: every level averaged over its positions, the last flattened."""
    import tensorflow as tf

    layers = tf.keras.layers
    check_input(inputs.shape[1:], args)
    x, levels = inputs, []
    for level in range(args["depth"]):
        x = layers.Conv3D(args["width"] * 2**level, 3, padding="same")(x)
        x = layers.LeakyReLU(0.3)(x)
        levels.append(x)
        x = layers.MaxPool3D(2)(x)
    return pooled_vectors([*levels, x], flatten_last=True)


def check_input(input_shape: Sequence[int | None], args: Mapping[str, Any]) -> None:
    if len(input_shape) != 4 or None in input_shape:
        raise ModelError(
            f"model 'cosmoflow' needs fixed-size 3D cubes, the feature has shape {list(input_shape)}"
        )
    check_pooling(NAME, input_shape[:3], args["depth"])


def build_split(
    input_shape: Sequence[int | None],
    outputs: int,
    task: Any,
    args: Mapping[str, Any],
    layout: Any,
    process_set: Any,
) -> Any:
    """The model on this rank's slab of `input_shape` (the whole sample's shape, channel axis included)."""
    import tensorflow as tf

    from pipeline.training.spatial.layers import GatherDepth, SampleMean, SplitConv3D
    from pipeline.training.spatial.layout import split_levels

    layers = tf.keras.layers
    check_input(input_shape, args)
    depth = int(input_shape[0])
    split_for = split_levels(depth, layout.split, args["depth"])
    inputs = layers.Input(shape=(depth // layout.split, *input_shape[1:]))
    x, pooled, split = inputs, [], split_for > 0

    def mean(t: Any) -> Any:
        return (
            SampleMean(layout, process_set)(t)
            if split
            else layers.GlobalAveragePooling1D()(layers.Reshape((-1, t.shape[-1]))(t))
        )

    for level in range(args["depth"]):
        if split and level == split_for:
            x, split = GatherDepth(layout, process_set)(x), False
        filters = args["width"] * 2**level
        x = (
            SplitConv3D(filters, layout, process_set)(x)
            if split
            else layers.Conv3D(filters, 3, padding="same")(x)
        )
        x = layers.LeakyReLU(0.3)(x)
        pooled.append(mean(x))
        x = layers.MaxPool3D(2)(x)
    if split:
        x, split = GatherDepth(layout, process_set)(x), False
    pooled += [mean(x), layers.Flatten()(x)]
    return tf.keras.Model(inputs, joined_head(pooled, outputs, args), name=NAME)

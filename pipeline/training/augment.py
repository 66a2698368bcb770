"""Symmetry augmentation (`train.augment`): each training sample seen under a random rotation or reflection of
its spatial axes, drawn per sample from a seeded stream, in the input pipeline.

A periodic, statistically isotropic box (an N-body density field) has no preferred orientation: each of
its 48 axis permutations and reflections is an equally valid universe with the same labels, so training on
them multiplies what a few hundred expensive simulations teach. The group is built from what the config
allows (`symmetries`: permutations among axes of equal length, and flips of each axis: 48 for a cube, 8
for a square, flips only for unequal axes; or explicit `permute` and `flips`), as a list of (axis order,
flipped axes) the pipeline picks from.

Labels are taken as invariant (scalars of the whole sample); a segmentation mask moves with its field.
Labels that are directions or vectors would have to rotate with it, which sim2dl does not do: declaring
one (`vector_labels`) is a config error. Under train.spatial.ranks_per_sample the split axis (depth, 0) stays
where it is and unflipped, since moving it would need the other ranks' planes: the group is that of the
other axes (8 of 48 for a cube).

Pure planning (`plan`) and a numpy reference (`apply_numpy`) beside the TensorFlow transform
(`augment_batch`). Memory: one sample's copy per transform applied; time: a transpose and reverses per
sample, small beside a training step.
"""

from __future__ import annotations

import itertools
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from pipeline import Sim2dlError

KEY = "train.augment"


@dataclass(frozen=True)
class Transform:
    """One symmetry: the spatial axes in their new order (numpy's transpose), then the axes reversed."""

    order: tuple[int, ...]
    flips: tuple[int, ...]


def plan(augment: Mapping[str, Any], spatial_shape: Sequence[int | None], split: int = 1) -> list[Transform]:
    """The transforms to draw from (the identity first); [] when augmentation is off. spatial_shape: the
    sample's spatial axes as the model sees them (channels excluded)."""
    permute = list(augment.get("permute") or [])
    flips = list(augment.get("flips") or [])
    symmetries = bool(augment.get("symmetries"))
    if not (symmetries or permute or flips):
        return []
    if augment.get("vector_labels"):
        raise Sim2dlError(
            f"config key '{KEY}.vector_labels': labels {list(augment['vector_labels'])} are directions or "
            "vectors, which rotate with the field; sim2dl augments only invariant labels: turn augmentation "
            "off for this dataset, or train on invariant labels (magnitudes)"
        )
    k = len(spatial_shape)
    if k == 0:
        raise Sim2dlError(f"config key '{KEY}': the model's input has no spatial axes to transform")
    if None in spatial_shape:
        raise Sim2dlError(
            f"config key '{KEY}': variable-length samples ({list(spatial_shape)}) cannot be augmented"
        )
    for name, axes in (("permute", permute), ("flips", flips)):
        bad = [a for a in axes if not isinstance(a, int) or not 0 <= a < k]
        if bad:
            raise Sim2dlError(
                f"config key '{KEY}.{name}': axes {bad} are not spatial axes of the sample (0..{k - 1})"
            )
    fixed = {0} if split > 1 else set()  # the split axis: its planes live on other ranks
    if symmetries:
        free = [a for a in range(k) if a not in fixed]
        groups = [
            [a for a in free if spatial_shape[a] == n] for n in dict.fromkeys(spatial_shape[a] for a in free)
        ]
        flips = free
    else:
        moved = sorted(fixed & set(permute + flips))
        if moved:
            raise Sim2dlError(
                f"config key '{KEY}': with train.spatial.ranks_per_sample {split} the split axis 0 is "
                "neither permuted nor flipped (its planes are on other ranks)"
            )
        if len({spatial_shape[a] for a in permute}) > 1:
            lengths = [spatial_shape[a] for a in permute]
            raise Sim2dlError(
                f"config key '{KEY}.permute': axes {permute} have lengths {lengths}; only axes of "
                "equal length can trade places"
            )
        groups = [sorted(set(permute))] if permute else []
    orders = [tuple(range(k))]
    for group in groups:  # every permutation within each group of equal-length axes
        orders = [_permuted(o, group, p) for o in orders for p in itertools.permutations(group)]
    flip_sets = [
        tuple(a for a, bit in zip(sorted(set(flips)), bits, strict=True) if bit)
        for bits in itertools.product((0, 1), repeat=len(set(flips)))
    ]
    return [Transform(o, f) for o in orders for f in flip_sets]


def _permuted(order: tuple[int, ...], group: Sequence[int], perm: Sequence[int]) -> tuple[int, ...]:
    new = list(order)
    for slot, axis in zip(group, perm, strict=True):
        new[slot] = order[axis]
    return tuple(new)


def apply_numpy(sample: np.ndarray, t: Transform) -> np.ndarray:
    """The reference: a sample's spatial axes (its first len(order)) transposed, then reversed."""
    k = len(t.order)
    out = np.transpose(sample, (*t.order, *range(k, sample.ndim)))
    return np.flip(out, axis=t.flips) if t.flips else out


def _apply_tf(sample: Any, t: Transform) -> Any:
    import tensorflow as tf

    k = len(t.order)
    rank = sample.shape.rank
    out = tf.transpose(sample, [*t.order, *range(k, rank)]) if t.order != tuple(range(k)) else sample
    return tf.reverse(out, list(t.flips)) if t.flips else out


def transform_batch(x: Any, t: Transform) -> Any:
    """A whole batch under one transform (its spatial axes follow the batch axis)."""
    import tensorflow as tf

    k = len(t.order)
    order = [0, *(a + 1 for a in t.order), *range(k + 1, x.shape.rank)]
    out = tf.transpose(x, order) if t.order != tuple(range(k)) else x
    return tf.reverse(out, [a + 1 for a in t.flips]) if t.flips else out


def augment_batch(
    x: Any, y: Any, transforms: Sequence[Transform], seed: Any, moves_labels: bool
) -> tuple[Any, Any]:
    """Each sample of a batch under one of `transforms`, drawn from a stateless stream seeded by `seed`
    (two int64s: the run's epoch seed and the batch's number), so a rerun draws the same. With
    moves_labels (segmentation) the label of each sample gets its feature's transform."""
    import tensorflow as tf

    picks = tf.random.stateless_uniform([tf.shape(x)[0]], seed=seed, maxval=len(transforms), dtype=tf.int32)

    def one(args: Any) -> Any:
        xi, yi, i = args
        branches = [
            (lambda t=t: (_apply_tf(xi, t), _apply_tf(yi, t) if moves_labels else yi)) for t in transforms
        ]
        return tf.switch_case(i, branches)

    xs, ys = tf.map_fn(one, (x, y, picks), fn_output_signature=(x.dtype, y.dtype))
    xs.set_shape(x.shape)  # the group keeps the shape: each permutation trades equal-length axes
    ys.set_shape(y.shape)
    return xs, ys

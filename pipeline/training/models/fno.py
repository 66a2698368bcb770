"""fno2d: a Fourier neural operator (Li et al., ICLR 2021) for 2-D fields to fields on the same grid: a
1x1 convolution lifts the input's channels to `width`, then `depth` blocks of a spectral convolution (the
lowest `modes` Fourier modes along each axis of each channel mixed by learnt complex weights, the rest
dropped) plus a 1x1 convolution, GELU between blocks; then a head per output field (base.field_heads). A
spectral convolution is global and periodic: the operator sees the whole domain in one layer. Given a
conditioning vector (task.vector_channels(): a run's parameters), every block's output is modulated by it
(base.film) and the parameters are not convolved as channels. fno3d.py is the same operator on cubes
(`build_operator` and the layer take the number of spatial axes).

No maintained TensorFlow/Keras FNO exists (neuraloperator and PhysicsNeMo are PyTorch); this one is
checked against a numpy FFT reference in 2-D and 3-D (tests/test_surrogate.py). tf.signal's FFTs transform
the last axes, so the channels-last map is transposed to channels-first around them. Memory: 2^(d-1) x
modes^d x width² complex weights per block in d dimensions; time: two FFTs of the grid per channel per block.
"""

from __future__ import annotations

import itertools
from collections.abc import Mapping, Sequence
from typing import Any

from pipeline.training.models.base import ModelError, conditioned, field_heads, film

NAME = "fno2d"
SPATIAL_DIMS = 2
TASKS = ("surrogate", "next_state")
OPTIONS = {"modes": 12}  # model_args: Fourier modes kept per axis (at most half of each axis)
AXES = "xyz"  # einsum's letters for the spatial axes


def corners(dims: int) -> list[tuple[int, ...]]:
    """The blocks of kept modes: along every axis but the last (a real FFT's half axis) the low and the
    high (negative) frequencies, so 2^(dims-1) blocks; 1 marks the high end of an axis."""
    return list(itertools.product((0, 1), repeat=dims - 1))


def block_starts(sizes: Sequence[int], corner: Sequence[int], modes: int) -> list[int]:
    """Where a corner's block of modes begins along each axis of the real FFT (the last axis from 0)."""
    return [size - modes if high else 0 for size, high in zip(sizes[:-1], corner, strict=True)] + [0]


def spectral_conv_layer(dims: int = 2) -> type:
    """The SpectralConv Keras layer class for `dims` spatial axes (made on first use: TensorFlow is
    imported lazily)."""
    import tensorflow as tf

    forward = {1: tf.signal.rfft, 2: tf.signal.rfft2d, 3: rfft3d}[dims]
    inverse = {1: tf.signal.irfft, 2: tf.signal.irfft2d, 3: irfft3d}[dims]
    letters = AXES[:dims]

    class SpectralConv(tf.keras.layers.Layer):
        """Channels last in and out: the real FFT of every channel, each corner's `modes`^dims modes mixed
        across channels by its own complex weights (in x out), the other modes zero, the inverse FFT."""

        def __init__(self, filters: int, modes: int, **kwargs: Any) -> None:
            super().__init__(**kwargs)
            self.filters, self.modes = filters, modes

        def build(self, input_shape: Any) -> None:
            channels = int(input_shape[-1])
            scale = 1.0 / (channels * self.filters)
            shape = (2 ** (dims - 1), channels, self.filters, *[self.modes] * dims)
            self.real = self.add_weight(
                name="real", shape=shape, initializer=tf.keras.initializers.RandomUniform(0, scale)
            )
            self.imag = self.add_weight(
                name="imag", shape=shape, initializer=tf.keras.initializers.RandomUniform(0, scale)
            )

        def call(self, x: Any) -> Any:
            sizes, m = [int(n) for n in x.shape[1 : 1 + dims]], self.modes
            first = [0, dims + 1, *range(1, dims + 1)]  # channels first for tf.signal
            spectrum = forward(tf.transpose(tf.cast(x, tf.float32), first))  # (B, C, ..., last // 2 + 1)
            full = [*sizes[:-1], sizes[-1] // 2 + 1]
            weights = tf.complex(self.real, self.imag)
            kept = None
            for k, corner in enumerate(corners(dims)):
                starts = block_starts(sizes, corner, m)
                block = spectrum[(slice(None), slice(None), *[slice(s, s + m) for s in starts])]
                mixed = tf.einsum(f"bi{letters},io{letters}->bo{letters}", block, weights[k])
                placed = tf.pad(
                    mixed, [[0, 0], [0, 0], *[[s, n - s - m] for s, n in zip(starts, full, strict=True)]]
                )
                kept = placed if kept is None else kept + placed
            last = [0, *range(2, dims + 2), 1]
            return tf.transpose(inverse(kept, fft_length=sizes), last)

        def get_config(self) -> dict[str, Any]:
            return {**super().get_config(), "filters": self.filters, "modes": self.modes}

    return SpectralConv


def rfft3d(x: Any) -> Any:
    """tf.signal.rfft3d by transforms TensorFlow can differentiate (it has no gradient for RFFT3D): the real
    FFT along the last axis, then the complex 2-D FFT of the two before it."""
    import tensorflow as tf

    half = tf.signal.rfft(x)  # (B, C, D, H, W // 2 + 1)
    return tf.transpose(tf.signal.fft2d(tf.transpose(half, [0, 1, 4, 2, 3])), [0, 1, 3, 4, 2])


def irfft3d(spectrum: Any, fft_length: Sequence[int]) -> Any:
    """rfft3d's inverse, likewise: the inverse 2-D FFT of the first two axes, then the inverse real FFT."""
    import tensorflow as tf

    half = tf.transpose(tf.signal.ifft2d(tf.transpose(spectrum, [0, 1, 4, 2, 3])), [0, 1, 3, 4, 2])
    return tf.signal.irfft(half, fft_length=[fft_length[-1]])


def build(input_shape: Sequence[int | None], outputs: int, task: Any, args: Mapping[str, Any]) -> Any:
    return build_operator(input_shape, task, args, SPATIAL_DIMS, NAME)


def build_operator(
    input_shape: Sequence[int | None], task: Any, args: Mapping[str, Any], dims: int, name: str
) -> Any:
    """The operator on fields of `dims` spatial axes and channels last."""
    import tensorflow as tf

    layers = tf.keras.layers
    axes = {1: "(X, C)", 2: "(H, W, C)", 3: "(D, H, W, C)"}[dims]
    if len(input_shape) != dims + 1 or None in input_shape:
        raise ModelError(
            f"model '{name}' needs fixed-size {axes} fields, the feature has {list(input_shape)}"
        )
    sizes = [int(n) for n in input_shape[:dims]]
    modes, most = int(args["modes"]), min([n // 2 for n in sizes[:-1]] + [sizes[-1] // 2 + 1])
    if not 1 <= modes <= most:
        raise ModelError(
            f"model '{name}': modes {modes} must be in 1..{most} for a {' x '.join(map(str, sizes))} "
            f"grid (train.model_args.modes)"
        )
    fields = task.output_fields()
    if not fields:
        raise ModelError(
            f"model '{name}' maps fields to fields: the task has no output fields (train.task: surrogate)"
        )
    spectral, pointwise = (
        spectral_conv_layer(dims),
        {1: layers.Conv1D, 2: layers.Conv2D, 3: layers.Conv3D}[dims],
    )
    inputs = layers.Input(shape=tuple(input_shape))
    # a run's parameters: FiLM per block
    states, embedding = conditioned(inputs, task.vector_channels(), args)
    x = pointwise(args["width"], 1)(states)
    for block in range(max(args["depth"], 1)):
        x = layers.Add()([spectral(args["width"], modes)(x), pointwise(args["width"], 1)(x)])
        x = film(x, embedding)
        if block < args["depth"] - 1:
            x = layers.Activation("gelu")(x)
    x = layers.Activation("gelu")(pointwise(args["dense"], 1)(x))
    return tf.keras.Model(inputs, field_heads(x, fields, args, dims), name=name)


def proposed_for_states(grid: Sequence[int]) -> dict[str, Any]:
    """train's model settings `sim2dl inspect` proposes for states on a 1-D, 2-D or 3-D grid (a next state):
    the Fourier operator of that many axes, with as many modes as the grid allows up to the default."""
    most = min([n // 2 for n in grid[:-1]] + [grid[-1] // 2 + 1])
    name = {1: "fno1d", 2: NAME, 3: "fno3d"}[len(grid)]
    return {"model": name, "model_args": {"modes": max(1, min(OPTIONS["modes"], most))}}

"""fno2d: a Fourier neural operator (Li et al., ICLR 2021) for 2-D fields to fields on the same grid: a
1x1 convolution lifts the input's channels to `width`, then `depth` blocks of a spectral convolution (the
lowest `modes` x `modes` Fourier modes of each channel mixed by learnt complex weights, the rest
dropped) plus a 1x1 convolution, GELU between blocks; then a head per output field (base.field_heads). A
spectral convolution is global and periodic: the operator sees the whole domain in one layer. Given a
conditioning vector (task.vector_width: a run's parameters), every block's output is modulated by it
(base.film) and the parameters are not convolved as channels.

No maintained TensorFlow/Keras FNO exists (neuraloperator and PhysicsNeMo are PyTorch); this one is
checked against a numpy FFT reference (tests/test_surrogate.py). tf.signal's 2-D FFTs transform the last two
axes, so the NHWC map is transposed to NCHW around them. Memory: 2 x modes² x width² complex weights
per block; time: two FFTs of H x W per channel per block.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np

from pipeline.training.models.base import ModelError, conditioned, field_heads, film

NAME = "fno2d"
SPATIAL_DIMS = 2
TASKS = ("surrogate", "next_state")
OPTIONS = {"modes": 12}  # model_args: Fourier modes kept per axis (at most H/2 and W/2 + 1)


def spectral_conv_layer() -> type:
    """The SpectralConv2D Keras layer class (made on first use: TensorFlow is imported lazily)."""
    import tensorflow as tf

    class SpectralConv2D(tf.keras.layers.Layer):
        """NHWC in and out: rfft2 of every channel, the modes [0, m) and [H - m, H) along H and [0, m) along
        W each mixed across channels by its own complex weights (in x out), the other modes zero, irfft2."""

        def __init__(self, filters: int, modes: int, **kwargs: Any) -> None:
            super().__init__(**kwargs)
            self.filters, self.modes = filters, modes

        def build(self, input_shape: Any) -> None:
            channels = int(input_shape[-1])
            scale = 1.0 / (channels * self.filters)
            shape = (2, channels, self.filters, self.modes, self.modes)  # the low and the high H modes
            self.real = self.add_weight(
                name="real", shape=shape, initializer=tf.keras.initializers.RandomUniform(0, scale)
            )
            self.imag = self.add_weight(
                name="imag", shape=shape, initializer=tf.keras.initializers.RandomUniform(0, scale)
            )

        def call(self, x: Any) -> Any:
            height, width, m = x.shape[1], x.shape[2], self.modes
            spectrum = tf.signal.rfft2d(tf.transpose(tf.cast(x, tf.float32), [0, 3, 1, 2]))  # (B, C, H, W/2+1)
            weights = tf.complex(self.real, self.imag)
            low = tf.einsum("bixy,ioxy->boxy", spectrum[:, :, :m, :m], weights[0])
            high = tf.einsum("bixy,ioxy->boxy", spectrum[:, :, height - m :, :m], weights[1])
            zeros = tf.zeros_like(low[:, :, :1, :])
            middle = tf.repeat(zeros, height - 2 * m, axis=2)
            kept = tf.concat([low, middle, high], axis=2)  # (B, O, H, m)
            padded = tf.pad(kept, [[0, 0], [0, 0], [0, 0], [0, width // 2 + 1 - m]])
            return tf.transpose(tf.signal.irfft2d(padded, fft_length=[height, width]), [0, 2, 3, 1])

        def get_config(self) -> dict[str, Any]:
            return {**super().get_config(), "filters": self.filters, "modes": self.modes}

    return SpectralConv2D


def spectral_conv_reference(x: np.ndarray, weights: np.ndarray, modes: int) -> np.ndarray:
    """What SpectralConv2D computes, in numpy: x (B, H, W, C), weights (2, C, O, m, m) complex."""
    height, width = x.shape[1:3]
    spectrum = np.fft.rfft2(np.moveaxis(x, -1, 1))
    out = np.zeros((x.shape[0], weights.shape[2], height, width // 2 + 1), complex)
    out[:, :, :modes, :modes] = np.einsum("bixy,ioxy->boxy", spectrum[:, :, :modes, :modes], weights[0])
    out[:, :, height - modes :, :modes] = np.einsum("bixy,ioxy->boxy", spectrum[:, :, height - modes :, :modes],
                                                    weights[1])  # fmt: skip
    return np.moveaxis(np.fft.irfft2(out, s=(height, width)), 1, -1)


def build(input_shape: Sequence[int | None], outputs: int, task: Any, args: Mapping[str, Any]) -> Any:
    import tensorflow as tf

    layers = tf.keras.layers
    if len(input_shape) != 3 or None in input_shape:
        raise ModelError(f"model 'fno2d' needs fixed-size (H, W, C) fields, the feature has {list(input_shape)}")
    height, width = input_shape[:2]
    modes = int(args["modes"])
    if not 1 <= modes <= min(height // 2, width // 2 + 1):
        raise ModelError(f"model 'fno2d': modes {modes} must be in 1..{min(height // 2, width // 2 + 1)} for a "
                         f"{height} x {width} grid (train.model_args.modes)")  # fmt: skip
    fields = task.output_fields()
    if not fields:
        raise ModelError("model 'fno2d' maps fields to fields: the task has no output fields (train.task: surrogate)")
    spectral = spectral_conv_layer()
    inputs = layers.Input(shape=tuple(input_shape))
    states, embedding = conditioned(inputs, task.vector_width, args)  # a run's parameters: FiLM per block
    x = layers.Conv2D(args["width"], 1)(states)
    for block in range(max(args["depth"], 1)):
        x = layers.Add()([spectral(args["width"], modes)(x), layers.Conv2D(args["width"], 1)(x)])
        x = film(x, embedding)
        if block < args["depth"] - 1:
            x = layers.Activation("gelu")(x)
    x = layers.Activation("gelu")(layers.Conv2D(args["dense"], 1)(x))
    return tf.keras.Model(inputs, field_heads(x, fields, args), name=NAME)

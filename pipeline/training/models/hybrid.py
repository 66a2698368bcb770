"""A network that starts where the classical baseline ends (train.hybrid): the baseline's per-sample
statistics computed inside the model (`SummaryStatistics`, TensorFlow ops equal to
pipeline.training.baseline.summary_statistics: per channel the mean, log variance, skewness, kurtosis
and, for 2-D and 3-D fields, the log power spectrum in log-spaced |k| bins), standardised by the training
split's moments and joined into the head beside the trunk's pooled levels; with `residual`, the
baseline's fitted prediction (ridge values, or the linear discriminant's class scores as logits) is a
fixed offset and the head's last layer starts at zero, so that the untrained model *is* the baseline and
training learns what the statistics miss.

    residual     offset + head(trunk levels, statistics), the head's output zero at the start
    offset       offset + head(trunk levels): the baseline's prediction, the trunk alone learns what it misses
    statistics   head(trunk levels, statistics): the statistics as inputs, no offset
    none         the built-in as it is (the trunk's levels alone)

A built-in takes part through its `trunk(inputs, args) -> pooled vectors` (cosmoflow, unet2d, sequence); the
user's own model, a spatially split model and segmentation are left as they are. The saved model stands alone
(the statistics, the standardisation and the offset are layers with constant weights), and a user's own model
can reuse `SummaryStatistics`. Memory: the statistics add an FFT of the input per sample (n log n in its
cells) and F values per sample; the offset F x outputs weights."""

from __future__ import annotations

import functools
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from pipeline.training.baseline import BINS, TINY, spectrum_bins
from pipeline.training.models.base import joined_head


@dataclass(frozen=True)
class FittedBaseline:
    """What the model needs of the fitted baseline: the statistics' moments over the training split (to
    standardise them) and the linear map from statistics to outputs (ridge coefficients, or the
    discriminant's weights and biases)."""

    spatial_dims: int
    mean: np.ndarray  # (F,)
    scale: np.ndarray  # (F,), 1 where a statistic is constant
    weights: np.ndarray  # (F, outputs)
    bias: np.ndarray  # (outputs,)


def summary_statistics_layer(spatial_dims: int, bins: int = BINS) -> Any:
    """A Keras layer: (B, *spatial, C) -> (B, F), the baseline's statistics in float32."""
    return _statistics_class()(spatial_dims, bins)


@functools.cache
def _statistics_class() -> type:
    """The layer's class, defined once TensorFlow is imported (this module is imported without it)."""
    import tensorflow as tf

    @tf.keras.utils.register_keras_serializable(package="sim2dl")
    class SummaryStatistics(tf.keras.layers.Layer):
        """Per channel mean, log variance, skewness, excess kurtosis and (2-D, 3-D) the log isotropic
        power spectrum in log-spaced |k| bins, as pipeline.training.baseline.summary_statistics."""

        def __init__(self, spatial_dims: int, bins: int = BINS, **kwargs: Any) -> None:
            super().__init__(dtype="float32", **{k: v for k, v in kwargs.items() if k != "dtype"})
            self.spatial_dims, self.bins = spatial_dims, bins

        def build(self, input_shape: Any) -> None:
            if self.spatial_dims in (2, 3):
                spatial = [int(n) for n in input_shape[1 : 1 + self.spatial_dims]]
                self.cells = float(np.prod(spatial))
                self.average = tf.constant(_bin_averages(spatial, self.bins))
            super().build(input_shape)

        def call(self, x: Any) -> Any:
            x = tf.cast(x, tf.float32)
            if len(x.shape) == self.spatial_dims + 1:
                x = x[..., tf.newaxis]
            flat = tf.reshape(x, (tf.shape(x)[0], -1, x.shape[-1]))
            parts = _moments(flat, traces=self.spatial_dims == 1)
            if self.spatial_dims in (2, 3):
                parts.append(_log_spectrum(x, self.spatial_dims, self.average, self.cells))
            return tf.concat(parts, axis=1)

        def get_config(self) -> dict[str, Any]:
            return {**super().get_config(), "spatial_dims": self.spatial_dims, "bins": self.bins}

    return SummaryStatistics


def _bin_averages(spatial: Sequence[int], bins: int) -> np.ndarray:
    """Each |k| bin's mean as one product: a (modes of an rfftn, bins) matrix of 1/count where a mode is in
    the bin."""
    order, starts = spectrum_bins(spatial, bins)
    counts = np.diff(np.append(starts, len(order)))
    modes = int(np.prod(spatial[:-1])) * (spatial[-1] // 2 + 1)
    average = np.zeros((modes, bins), np.float32)
    for b in range(bins):
        average[order[starts[b] : starts[b] + counts[b]], b] = 1.0 / max(counts[b], 1)
    return average


def _moments(flat: Any, traces: bool) -> list[Any]:
    """(B, cells, C) -> per channel mean, log variance, skewness, kurtosis; traces: over each trace's real
    steps only (all-zero steps are a batch's padding), and the log number of them."""
    import tensorflow as tf

    if traces:
        real = tf.cast(tf.reduce_any(tf.not_equal(flat, 0), axis=2, keepdims=True), tf.float32)
        steps = tf.maximum(tf.reduce_sum(real, axis=1), 1.0)

        def average(v: Any) -> Any:
            return tf.reduce_sum(v, axis=1) / steps

        mean = average(flat * real)
        centred = (flat - mean[:, tf.newaxis]) * real
    else:
        average = functools.partial(tf.reduce_mean, axis=1)
        mean = average(flat)
        centred = flat - mean[:, tf.newaxis]
    squared = centred * centred  # products, not powers: tf.pow is ten times slower on the CPU
    var = average(squared)
    scale = tf.where(var > 0, tf.sqrt(var), tf.ones_like(var))
    scale2 = scale * scale
    skew = average(squared * centred) / (scale2 * scale)
    kurtosis = average(squared * squared) / (scale2 * scale2) - 3.0
    parts = [mean, tf.math.log(var + TINY), skew, kurtosis]
    return [*parts, tf.math.log(steps)] if traces else parts


def _log_spectrum(x: Any, spatial_dims: int, average: Any, cells: float) -> Any:
    """(B, *spatial, C) -> (B, bins x C): the log power spectrum in the |k| bins of `average`."""
    import tensorflow as tf

    channels, bins = x.shape[-1], average.shape[1]
    last = spatial_dims + 1  # channels first: the FFT transforms the innermost axes
    moved = tf.transpose(x, [0, last, *range(1, last)])
    transformed = (tf.signal.rfft3d if spatial_dims == 3 else tf.signal.rfft2d)(moved)
    power = (tf.math.real(transformed) ** 2 + tf.math.imag(transformed) ** 2) / cells
    spectrum = tf.reshape(power, (-1, average.shape[0])) @ average  # (B * C, bins)
    spectrum = tf.transpose(tf.reshape(spectrum, (-1, channels, bins)), [0, 2, 1])  # (B, bins, C)
    return tf.reshape(tf.math.log(spectrum + TINY), (tf.shape(x)[0], bins * channels))


def hybrid_mode(mode: str, module: Any, task: Any, split: int) -> tuple[str, str | None]:
    """(the mode that applies, why it is none where train.hybrid asked for more)."""
    if mode == "none":
        return "none", None
    if module is None or not hasattr(module, "trunk"):
        return (
            "none",
            "the model is not a built-in with a trunk (cosmoflow, unet2d, sequence): it is used as it is",
        )
    refused = task.classical_baseline().hybrid_refused()
    if refused:
        return "none", refused
    if split > 1:
        return (
            "none",
            "train.spatial.ranks_per_sample: no rank holds a whole sample to take its statistics of",
        )
    return mode, None


def build_hybrid(
    module: Any,
    input_shape: Sequence[int | None],
    outputs: int,
    args: Mapping[str, Any],
    mode: str,
    fitted: FittedBaseline,
) -> Any:
    """The built-in `module`'s trunk with the baseline's statistics joined into its head, and with
    mode 'residual' the baseline's prediction as the offset the head starts at zero from."""
    import tensorflow as tf

    layers = tf.keras.layers
    inputs = layers.Input(shape=tuple(input_shape))
    statistics = summary_statistics_layer(fitted.spatial_dims)(inputs)
    standard = layers.Normalization(mean=fitted.mean, variance=fitted.scale**2, dtype="float32")(statistics)
    pooled = module.trunk(inputs, args)
    joined = pooled if mode == "offset" else [*pooled, standard]
    head = joined_head(joined, outputs, args, zero_output=mode in ("residual", "offset"))
    if mode == "statistics":
        return tf.keras.Model(inputs, head, name=f"{module.NAME}_statistics")
    offset = layers.Dense(outputs, dtype="float32", trainable=False, name="baseline_offset")
    prediction = offset(statistics)
    offset.set_weights([fitted.weights.astype(np.float32), fitted.bias.astype(np.float32)])
    return tf.keras.Model(
        inputs, layers.Add(dtype="float32")([prediction, head]), name=f"{module.NAME}_residual"
    )

"""The classical baseline (pipeline/training/baseline.py): ridge from streamed sums equals the closed form on
the explicit design matrix, cross-validation picks a sensible penalty, the power spectrum finds a known
mode, the discriminant separates separable classes, and the sums of ranks' shares add up to the whole."""

import numpy as np
import pytest

from pipeline.training.baseline import (
    PENALTIES,
    DiscriminantSums,
    RidgeSums,
    discriminant_fit,
    ridge_cross_validated,
    ridge_fit,
    summary_statistics,
)


def test_ridge_from_streamed_sums_equals_the_closed_form_on_the_standardised_design():
    rng = np.random.default_rng(1)
    f = rng.normal(size=(300, 5)) * [1, 10, 0.1, 3, 1] + [0, 5, -2, 0, 1]
    y = f @ [[1.0, 0.0], [0.2, 1.0], [-3.0, 0.5], [0.0, 0.0], [0.5, -1.0]] + rng.normal(
        scale=0.1, size=(300, 2)
    )
    sums = RidgeSums(5, 2)
    for start in range(0, 300, 37):  # in batches, as the pipeline streams them
        sums.add(f[start : start + 37], y[start : start + 37])
    aa, ay = sums.aa.sum(axis=0), sums.ay.sum(axis=0)
    penalty = 0.3
    theta = ridge_fit(aa, ay, penalty)
    # the reference: standardise, centre, solve (Z'Z/n + penalty I) w = Z'(y - ȳ)/n, map back
    mean, std = f.mean(axis=0), f.std(axis=0)
    z = (f - mean) / std
    w_z = np.linalg.solve(z.T @ z / len(z) + penalty * np.eye(5), z.T @ (y - y.mean(axis=0)) / len(z))
    w = w_z / std[:, None]
    np.testing.assert_allclose(theta[1:], w, rtol=1e-9, atol=1e-12)
    np.testing.assert_allclose(theta[0], y.mean(axis=0) - mean @ w, rtol=1e-9)
    # unpenalised it is least squares; cross-validation on a nearly noiseless linear task picks a small
    # penalty
    least_squares = np.linalg.lstsq(np.c_[np.ones(300), f], y, rcond=None)[0]
    np.testing.assert_allclose(ridge_fit(aa, ay, 0.0)[1:], least_squares[1:], rtol=1e-7)
    penalties, best = ridge_cross_validated(sums.arrays())
    assert (penalties <= PENALTIES[4]).all()
    residual = y - (best[0] + f @ best[1:])
    assert (1 - residual.var(axis=0) / y.var(axis=0) > 0.99).all()
    # two ranks' sums added are the one rank's
    half, rest = RidgeSums(5, 2), RidgeSums(5, 2)
    half.add(f[:150], y[:150])
    rest.add(f[150:], y[150:])
    np.testing.assert_allclose(half.aa.sum(axis=0) + rest.aa.sum(axis=0), aa)


def test_the_power_spectrum_puts_a_single_mode_in_its_bin_and_moments_are_numpy_s():
    n = 16
    grid = np.indices((n, n, n))[0]
    wave = np.cos(2 * np.pi * 4 * grid / n)  # all power at |k| = 4
    stats = summary_statistics(np.stack([wave, np.ones_like(wave)]), spatial_dims=3)
    assert stats.shape == (2, 4 + 12)
    mean, log_var = stats[0, 0], stats[0, 1]
    np.testing.assert_allclose([mean, np.exp(log_var)], [wave.mean(), wave.var()], atol=1e-9)
    spectrum = stats[0, 4:]
    edges = np.logspace(0, np.log10(np.sqrt(3) * n / 2 * (1 + 1e-9)), 13)
    assert spectrum.argmax() == np.digitize(4.0, edges) - 1
    assert (np.delete(spectrum, spectrum.argmax()) < -20).all()  # log of nothing: no other bin has power
    two_d = summary_statistics(np.zeros((3, 8, 8, 2)), spatial_dims=2)  # channels: statistics of each
    assert two_d.shape == (3, 2 * (4 + 12))


def test_the_discriminant_separates_separable_classes():
    rng = np.random.default_rng(2)
    centres = np.array([[0, 0, 0], [4, 0, 0], [0, 4, 1]])
    labels = rng.integers(0, 3, size=600)
    f = centres[labels] + rng.normal(size=(600, 3))
    sums = DiscriminantSums(3, 3)
    sums.add(f[:300], labels[:300])
    sums.add(f[300:], labels[300:])
    weights, bias = discriminant_fit(sums.arrays())
    assert ((f @ weights + bias).argmax(axis=1) == labels).mean() > 0.9


def test_the_ridge_baseline_is_the_same_on_normalised_fields_and_labels():
    """Online training fits its baseline on the arrivals as they come, before the normalisation statistics
    are frozen: the fit's predictions (and so its R²) must not change under convert's per-channel
    (x - mean) / std of the field and of the labels."""
    rng = np.random.default_rng(3)
    amplitude = rng.uniform(0.5, 2.0, size=(120, 1))
    x = amplitude[:, :, None, None] * rng.lognormal(size=(120, 8, 8, 8)) + 0.3 * rng.normal(
        size=(120, 1, 1, 1)
    )
    y = np.c_[amplitude, amplitude**2 + 0.1 * rng.normal(size=(120, 1))]

    def predictions(x, y):
        sums = RidgeSums(summary_statistics(x[:1], 3).shape[1], 2)
        sums.add(summary_statistics(x[:100], 3), y[:100])
        _, theta = ridge_cross_validated(sums.arrays())
        return theta[0] + summary_statistics(x[100:], 3) @ theta[1:]

    raw = predictions(x, y)
    mean, std = y.mean(axis=0), y.std(axis=0)
    normalised = predictions((x - x.mean()) / x.std(), (y - mean) / std)
    np.testing.assert_allclose(normalised * std + mean, raw, rtol=1e-6, atol=1e-8)


def _regression_task(labels=2):
    from pipeline.training.tasks.base import DataSpec, LabelField
    from pipeline.training.tasks.regression import Regression

    names = tuple(f"y{i}" for i in range(labels))
    return Regression({}, DataSpec("x", (None,), (LabelField("y", (labels,), "float32"),), names))


def test_the_statistics_computed_in_the_model_are_the_baselines_numpy_statistics():
    """train.hybrid's SummaryStatistics layer (TensorFlow ops, in float32) gives what the baseline's numpy
    computes in float64, for 3-D fields with a channel axis, 2-D fields without one, and 1-D traces."""
    from pipeline.training.models.hybrid import summary_statistics_layer

    rng = np.random.default_rng(3)
    for shape, dims in (((3, 16, 12, 10, 2), 3), ((4, 24, 20), 2), ((2, 50, 3), 1)):
        x = np.exp(rng.normal(size=shape)).astype(np.float32)  # skewed, as densities are
        expected = summary_statistics(x, dims)
        layer = summary_statistics_layer(dims)
        got = layer(x if x.ndim > dims + 1 else x[..., np.newaxis]).numpy()
        assert got.shape == expected.shape, shape
        np.testing.assert_allclose(got, expected, rtol=2e-4, atol=2e-4)
    # traces padded with zero steps to their batch's longest: the statistics of the real steps only, the
    # same for a trace alone as in a batch (its length, log 20, the last statistic)
    traces = np.exp(rng.normal(size=(3, 40, 4))).astype(np.float32)
    traces[0, 20:] = traces[1, 33:] = 0.0
    padded = summary_statistics(traces, 1)
    alone = summary_statistics(traces[:1, :20], 1)
    np.testing.assert_allclose(padded[0], alone[0], rtol=1e-12)
    assert padded[0, -1] == pytest.approx(np.log(20.0)) and padded[1, -1] == pytest.approx(np.log(33.0))
    np.testing.assert_allclose(summary_statistics_layer(1)(traces).numpy(), padded, rtol=2e-4, atol=2e-4)


def test_the_residual_model_starts_as_the_baseline_and_its_statistics_model_has_the_same_inputs():
    """train.hybrid residual: before any step the model's predictions are the fitted ridge's on the same
    samples (the head's output starts at zero); `statistics` builds a model of the same input."""
    from pipeline.training.baseline import StreamingFit
    from pipeline.training.classical import Classical
    from pipeline.training.models import cosmoflow
    from pipeline.training.models.hybrid import build_hybrid

    rng = np.random.default_rng(4)
    x = rng.normal(size=(40, 8, 8, 8, 1)).astype(np.float32) * rng.uniform(0.5, 2, size=(40, 1, 1, 1, 1))
    y = np.c_[x.std(axis=(1, 2, 3, 4)), x.mean(axis=(1, 2, 3, 4))]
    fitting = StreamingFit(_regression_task(), [8, 8, 8, 1], 3)
    fitting.add(x, y)
    predict, _ = fitting.fit(lambda arrays: arrays)
    fitted = Classical(fitting, predict, {}, 0.0).for_model()
    args = {"depth": 2, "width": 4, "dense": 8, "dropout": 0.0}
    residual = build_hybrid(cosmoflow, (8, 8, 8, 1), 2, args, "residual", fitted)
    np.testing.assert_allclose(residual(x, training=False).numpy(), predict(x), rtol=1e-3, atol=1e-3)
    statistics = build_hybrid(cosmoflow, (8, 8, 8, 1), 2, args, "statistics", fitted)
    assert statistics(x).shape == (40, 2) and statistics.input_shape == residual.input_shape


def test_each_task_brings_its_own_baseline_and_the_hybrid_mode_asks_it():
    """Task.classical_baseline, one hook for one capability: a regression's ridge judged by R² per label, a
    segmentation's per-pixel discriminant shaped as the masks (no hybrid: its statistics are per sample), and
    a surrogate's emulator on the parameters and their Fourier features, judged by NRMSE."""
    from pipeline.training.models import cosmoflow, unet2d
    from pipeline.training.models.hybrid import hybrid_mode
    from pipeline.training.tasks.base import DataSpec, LabelField
    from pipeline.training.tasks.segmentation import Segmentation
    from pipeline.training.tasks.surrogate import Surrogate

    regression = _regression_task().classical_baseline()
    assert isinstance(regression.sums(6), RidgeSums) and regression.method("moments").startswith("ridge")
    summary, theirs = {"r2": {"y0": 0.5, "y1": 0.9}}, {"r2": {"y0": 0.8, "y1": 0.9}}
    assert regression.below(summary, theirs, 0.02) == ["y0"]
    assert hybrid_mode("residual", cosmoflow, _regression_task(), 1) == ("residual", None)

    masks = LabelField("mask", (4, 4), "int32", class_names=("a", "b"))
    segmentation = Segmentation({}, DataSpec("x", (4, 4, 3), (masks,), ("mask",)))
    per_pixel = segmentation.classical_baseline()
    x = np.arange(2 * 4 * 4 * 3, dtype=np.float64).reshape(2, 4, 4, 3)
    assert per_pixel.features(x, 2).shape == (32, 3)  # a row per pixel: its channels
    assert per_pixel.outputs(np.zeros((32, 2)), x, 2).shape == (2, 4, 4, 2)
    mode, why = hybrid_mode("residual", unet2d, segmentation, 1)
    assert mode == "none" and "per pixel" in why

    surrogate = Surrogate({}, DataSpec("params", (2,), (LabelField("state", (8,), "float32"),), ("state",)))
    emulator = surrogate.classical_baseline()
    assert (
        emulator.features(np.zeros((5, 2)), 0).shape[0] == 5
        and emulator.features(np.zeros((5, 2)), 0).shape[1] > 2
    )
    assert emulator.below({"nrmse": {"state": 0.3}}, {"nrmse": {"state": 0.2}}, 0.0) == ["state"]
    assert emulator.below({"nrmse": {"state": 0.2}}, {"nrmse": {"state": 0.3}}, 0.0) == []

"""Surrogates: VRMSE as The Well defines it (NRMSE, the headline, in test_scores.py), the classical
emulator against scikit-learn on the same split, the reaction simulator against its equation, and the
forward surrogate of the preset trained on 2 ranks, whose saved model answers a new design point in
physical units."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import yaml

from pipeline.data.scores import nrmse, vrmse
from pipeline.simulators import reaction
from pipeline.training import baseline
from pipeline.training.tasks.base import DataSpec, LabelField
from pipeline.training.tasks.surrogate import Surrogate

from .conftest import REPO, SLOW, run_cli, write_config
from .helpers import doc_blocks, docs_block, records_by_id
from .the_well import write_the_well


def test_vrmse_is_the_wells_per_sample_ratio_and_the_mean_scores_one():
    rng = np.random.default_rng(0)
    true = rng.normal(2.0, 3.0, size=(5, 8, 8))
    predicted = true + rng.normal(0, 0.3, size=true.shape)
    expected = [
        np.sqrt(((p - t) ** 2).mean() / (t.std() ** 2 + 1e-7)) for p, t in zip(predicted, true, strict=True)
    ]
    np.testing.assert_allclose(vrmse(predicted, true), expected, rtol=1e-12)
    means = np.broadcast_to(true.mean(axis=(1, 2), keepdims=True), true.shape)
    np.testing.assert_allclose(vrmse(means, true), 1.0, rtol=1e-6)  # predicting each sample's mean


def surrogate_task(statistics=None, log1p=()) -> Surrogate:
    labels = (LabelField("state", (4, 4), "float32", statistics), LabelField("mass", (3,), "float32"))
    return Surrogate({}, DataSpec("params", (2,), labels, ("state", "mass"), log1p=tuple(log1p)))


def test_scores_are_in_physical_units_and_the_loss_weighs_outputs_alike():
    """Normalisation and log1p are undone before scoring: a prediction off by a constant in normalised
    units scores as its physical error; each output's mean squared error counts once, whatever its size."""
    import tensorflow as tf

    task = surrogate_task({"mean": 1.0, "std": 2.0}, log1p=["state"])
    rng = np.random.default_rng(1)
    labels = rng.normal(size=(6, 19)).astype(np.float32)
    outputs = labels + 0.1
    evaluation = task.evaluation()
    task.update(evaluation, outputs, labels, np.zeros((6, 2)))
    state = np.expm1(labels[:, :16].reshape(6, 4, 4) * 2.0 + 1.0)
    predicted = np.expm1(outputs[:, :16].reshape(6, 4, 4) * 2.0 + 1.0)
    assert task.metrics(evaluation)["nrmse"]["state"] == pytest.approx(nrmse(predicted, state), rel=1e-6)
    scores = task.metrics(evaluation)["vrmse"]
    assert scores["state"] == pytest.approx(vrmse(predicted, state).mean(), rel=1e-6)
    assert scores["mass"] == pytest.approx(vrmse(outputs[:, 16:], labels[:, 16:]).mean(), rel=1e-6)
    errors = np.concatenate([np.full((6, 16), 1.0), np.full((6, 3), 3.0)], axis=1).astype(np.float32)
    loss = float(task.loss()(tf.zeros((6, 19)), tf.constant(errors)))
    assert loss == pytest.approx((1.0 + 9.0) / 2)  # the mean of the two outputs' mean squared errors


def test_the_emulator_equals_an_independent_ridge_and_pca_on_the_same_features(monkeypatch):
    """EmulatorSums (sums over two 'ranks', a fixed penalty) predicts what ridge regression written another
    way predicts: standardised features, centred outputs, the penalised least-squares problem solved as an
    augmented system by numpy's lstsq, then projected onto the principal components of the training
    outputs from their SVD."""
    monkeypatch.setattr(baseline, "PENALTIES", np.array([1e-2]))
    rng = np.random.default_rng(2)
    params = rng.uniform(-1, 1, size=(120, 3))
    grid = np.linspace(-1, 1, 6)
    outputs = np.stack(
        [np.outer(np.sin(3 * p[0] * grid), np.cos(2 * p[1] + grid)).ravel() + p[2] for p in params]
    )
    features = np.concatenate([params, baseline.random_fourier_features(params)], axis=1)
    train, test = slice(0, 100), slice(100, 120)
    halves = [baseline.EmulatorSums(features.shape[1], outputs.shape[1]) for _ in range(2)]
    halves[0].add(features[:50], outputs[:50])
    halves[1].add(features[50:100], outputs[50:100])
    reduced = [a + b for a, b in zip(halves[0].arrays(), halves[1].arrays(), strict=True)]
    fitted = halves[0].fitted(reduced)
    weights, bias = fitted.linear
    ours = features[test] @ weights + bias

    f, y = features[train], outputs[train]
    mean, scale = f.mean(axis=0), f.std(axis=0)
    varying = scale > 1e-9
    z = (f[:, varying] - mean[varying]) / scale[varying]
    augmented = np.vstack([z, np.sqrt(1e-2 * len(z)) * np.eye(z.shape[1])])
    targets = np.vstack([y - y.mean(axis=0), np.zeros((z.shape[1], y.shape[1]))])
    coefficients = np.linalg.lstsq(augmented, targets, rcond=None)[0]
    predicted = ((features[test][:, varying] - mean[varying]) / scale[varying]) @ coefficients + y.mean(
        axis=0
    )
    k = fitted.settings["components"]
    basis = np.linalg.svd(y - y.mean(axis=0), full_matrices=False)[2][:k]
    theirs = (predicted - y.mean(axis=0)) @ basis.T @ basis + y.mean(axis=0)
    np.testing.assert_allclose(ours, theirs, rtol=1e-6, atol=1e-8)
    assert 0 < k < outputs.shape[1]


def spectral_conv_by_modes(x: np.ndarray, weights: np.ndarray, modes: int) -> np.ndarray:
    """The Fourier layer written mode by mode, sharing nothing with pipeline/training/models/fno.py: the
    full complex FFT of each channel; every kept wavenumber (|index| < modes along each axis, 0 <= index <
    modes along the last) mixed across channels by the weight of its block (the blocks ordered by the sign
    of the index along the axes before the last, the first axis slowest) at its offset in that block; the
    other modes zero; then the Hermitian-symmetric spectrum's real inverse."""
    batch, *grid, _ = x.shape
    dims = len(grid)
    spectrum = np.fft.fftn(x, axes=tuple(range(1, 1 + dims)))
    out = np.zeros((batch, *grid, weights.shape[2]), complex)
    for index in np.ndindex(*[2 * modes] * (dims - 1), modes):
        signed = [i if i < modes else i - 2 * modes for i in index[:-1]] + [index[-1]]  # -modes .. modes-1
        block = sum((s < 0) << (dims - 2 - a) for a, s in enumerate(signed[:-1]))
        offset = [s if s >= 0 else s + modes for s in signed[:-1]] + [signed[-1]]
        place = tuple(s % n for s, n in zip(signed, grid, strict=True))
        mixing = weights[(block, slice(None), slice(None), *offset)]  # (in, out)
        out[(slice(None), *place)] = spectrum[(slice(None), *place)] @ mixing
    # the real FFT keeps the last axis' non-negative half: the inverse takes only that half of `out`
    return np.fft.irfftn(out[..., : grid[-1] // 2 + 1, :], s=grid, axes=tuple(range(1, 1 + dims)))


@pytest.mark.parametrize("grid", [(20,), (16, 12), (8, 12, 10)], ids=["1d", "2d", "3d"])
def test_the_fourier_layer_equals_its_numpy_reference(grid):
    """SpectralConv (tf.signal on the channels-first map around channels-last, complex weights for the low
    and the high modes along every axis but the last) computes what numpy's rfftn / irfftn compute with the
    same weights, to float32 precision, on 1-D, 2-D and 3-D grids; a field that holds only modes above `modes`
    comes out zero."""
    import tensorflow as tf

    from pipeline.training.models.fno import spectral_conv_layer

    rng = np.random.default_rng(3)
    x = rng.normal(size=(2, *grid, 3)).astype(np.float32)
    layer = spectral_conv_layer(len(grid))(5, 3)
    out = layer(tf.constant(x)).numpy()
    weights = layer.real.numpy() + 1j * layer.imag.numpy()
    assert weights.shape == (2 ** (len(grid) - 1), 3, 5, *[3] * len(grid))
    np.testing.assert_allclose(
        out, spectral_conv_by_modes(x.astype(np.float64), weights, 3), rtol=1e-4, atol=1e-5
    )
    first = np.arange(grid[0]).reshape(-1, *[1] * (len(grid) - 1)) * np.ones(grid)
    # 4 > 3
    high = np.cos(2 * np.pi * 4 * first / grid[0])[None, ..., None].repeat(3, axis=-1).astype(np.float32)
    assert np.abs(layer(tf.constant(high)).numpy()).max() < 1e-5


def test_the_reaction_simulator_solves_its_equation():
    """Without growth, advection-diffusion conserves the mass and moves the field by v t (a Fourier shift
    blurred by exp(-kappa k² t)); with growth and no transport, each point follows the logistic curve."""
    u0 = reaction.blobs(32, reaction.FIXED_BLOBS)
    moved = reaction.solve(u0, np.array([0.25, -0.5, 1e-3, 0.0]), 1.0, 40, 1)[0]
    k = 2 * np.pi * np.fft.fftfreq(32, 1 / 32)
    exact = np.fft.ifft2(
        np.fft.fft2(u0)
        * np.exp(-1j * (k[None, :] * 0.25 + k[:, None] * -0.5) - 1e-3 * (k[None, :] ** 2 + k[:, None] ** 2))
    ).real
    np.testing.assert_allclose(moved, exact, atol=1e-8)
    assert moved.mean() == pytest.approx(u0.mean(), rel=1e-12)
    grown = reaction.solve(u0, np.array([0.0, 0.0, 0.0, 2.0]), 1.0, 10, 1)[0]
    np.testing.assert_allclose(grown, u0 * np.exp(2.0) / (1 + u0 * (np.exp(2.0) - 1)), rtol=1e-9, atol=1e-12)


@SLOW
def test_the_docs_forward_surrogate_trains_and_answers_a_new_design_point_in_physical_units(tmp_path):
    """docs/training.md's forward surrogate (config/presets/surrogate-forward.yaml's) at a test's size on 2
    ranks: VRMSE per output on the test split beside the emulator's, and the saved model, called on
    parameters nobody simulated, gives the state and the mass in their own units and shapes, close to
    what the simulator then computes."""
    import tensorflow as tf

    from pipeline.steps import validated

    config = docs_block("task: surrogate")
    preset = yaml.safe_load((REPO / "config" / "presets" / "surrogate-forward.yaml").read_text())
    assert all(
        validated(preset)[k] == validated(config)[k] for k in ("simulate", "source", "convert", "train")
    )
    config["workdir"] = str(tmp_path / "work")
    config["simulate"]["runs"] = 160
    config["stage"] = {"target": str(tmp_path / "local")}
    config["train"].update({"epochs": 12, "width": 8, "dense": 64})
    path = write_config(tmp_path, config)
    for step in ("simulate", "ingest", "convert", "merge", "stage", "train"):
        run_cli([step, "--config", str(path)], ranks=2, timeout=600)
    summary = json.loads((tmp_path / "work" / "train" / "summary.json").read_text())
    assert (
        summary["task"] == "surrogate"
        and summary["scored_on"] == "test"
        and summary["score_names"] == ["nrmse"]
    )
    assert (
        set(summary["nrmse"])
        == set(summary["baseline"]["nrmse"])
        == set(summary["vrmse"])
        == {"state", "mass"}
    )
    assert (
        summary["baseline"]["method"].startswith("PCA of the outputs")
        and summary["baseline"]["components"] > 0
    )
    assert summary["vrmse"]["mass"] < 0.5 and summary["vrmse"]["state"] < 1.0, summary["vrmse"]
    assert (tmp_path / "work" / "train" / "scores.png").stat().st_size > 10_000

    model = tf.keras.models.load_model(str(tmp_path / "work" / "train" / "model"), compile=False)
    settings = validated(config)["simulate"]
    fresh = [reaction.make(settings, np.random.default_rng(10**6 + i)) for i in range(8)]
    answered = model(np.stack([f["params"] for f in fresh]))
    assert answered["state"].shape == (8, 32, 32) and answered["mass"].shape == (8, 10)
    mass = np.stack([f["mass"] for f in fresh])
    # physical units: the mass starts near the blobs' own and rises as the simulator's does (normalised, it
    # would be centred on 0 with unit spread), within a few per cent for most entries
    relative = np.abs(answered["mass"].numpy() / mass - 1)
    assert np.median(relative) < 0.05 and relative.max() < 0.5, relative


def next_state_task(
    steps: int = 6,
    k: int = 2,
    m: int = 1,
    horizon: int = 0,
    parameters: int = 0,
    condition: bool | str = True,
    grid: tuple[int, ...] = (8, 8),
) -> Any:
    """A next state on (steps, *grid) trajectories (a 3-D grid: train.next_state.spatial_dims 3);
    `parameters`: a run's parameter vector of that length given by `condition`
    (train.next_state.condition), normalised by convert with mean 3 and std 0.5."""
    from pipeline.training.tasks.next_state import NextState

    labels = (
        (LabelField("params", (parameters,), "float32", {"mean": 3.0, "std": 0.5}),) if parameters else ()
    )
    data = DataSpec(
        "trajectory",
        (steps, *grid),
        labels,
        ("params",) if parameters else (),
        feature_statistics={"trajectory": {"mean": 1.0, "std": 2.0}},
    )
    own = {
        "states_in": k,
        "states_out": m,
        "horizon": horizon,
        "condition": condition if parameters else False,
        "spatial_dims": len(grid),
    }
    return NextState({"next_state": own}, data)


def test_next_state_windows_stay_within_a_trajectory_and_keep_time_order():
    """Every window of a batch of trajectories: k consecutive states of one trajectory in (as channels),
    the m that follow in that same trajectory out; no window mixes two records."""
    import tensorflow as tf

    task = next_state_task(steps=6, k=2, m=2)
    # state t of trajectory b holds the value 100 b + t everywhere: a window says where it came from
    x = np.stack([np.stack([np.full((8, 8), 100 * b + t) for t in range(6)]) for b in range(3)]).astype(
        np.float32
    )
    inputs, targets = task.samples(tf.constant(x), tf.zeros([3, 0]))
    assert inputs.shape == (3 * 3, 8, 8, 2) and targets.shape == (3 * 3, 8 * 8 * 2)
    assert task.samples_per_record() == 3 and task.model_feature_shape == (8, 8, 2)
    ins = inputs.numpy()[:, 0, 0]
    outs = targets.numpy().reshape(-1, 8, 8, 2)[:, 0, 0]
    for window_in, window_out in zip(ins, outs, strict=True):
        record, first = divmod(int(window_in[0]), 100)
        assert list(window_in) == [100 * record + first, 100 * record + first + 1]
        assert list(window_out) == [100 * record + first + 2, 100 * record + first + 3]
    # one window per record at a given start (online training's draw): the same as that one of all of them
    one_in, one_out = task.samples(tf.constant(x), tf.zeros([3, 0]), np.array([2, 0, 1]))
    chosen = np.arange(3) * 3 + [2, 0, 1]
    np.testing.assert_array_equal(one_in.numpy(), inputs.numpy()[chosen])
    np.testing.assert_array_equal(one_out.numpy(), targets.numpy()[chosen])


def test_the_rollout_feeds_the_model_its_own_outputs_and_scores_against_persistence():
    """A model that steps the state exactly scores 0 at every step of the rollout; persistence's curve is
    VRMSE(first state, each later state) in physical units; a model that adds a constant drifts by one more
    each step (it was fed its own outputs)."""
    task = next_state_task(steps=6, k=1)
    rng = np.random.default_rng(4)
    base = rng.normal(size=(2, 8, 8))
    trajectories = np.stack([base * (1 + 0.5 * t) for t in range(6)], axis=1)  # (B, T, H, W): each step x 1.5

    # normalised units: physical = 2 x + 1, the next = 1.5 ... stepped
    def exact(x: np.ndarray) -> np.ndarray:
        state = x[..., 0] * 2 + 1
        t = np.round((state / base - 1) / 0.5).mean(axis=(1, 2))
        return (((base * (1 + 0.5 * (t[:, None, None] + 1))) - 1) / 2).reshape(len(x), -1)

    normalised = (trajectories - 1) / 2
    no_labels = np.zeros((2, 0))
    joined = task.rollout_summary([task.rollout(exact, [(normalised, no_labels)])])
    assert joined["steps"] == 5 and np.allclose(joined["vrmse_per_step"], 0, atol=1e-9)
    expected = [vrmse(trajectories[:, 0], trajectories[:, s]).mean() for s in range(1, 6)]
    np.testing.assert_allclose(joined["persistence_vrmse_per_step"], expected, rtol=1e-9)

    drift = task.rollout_summary(
        [task.rollout(lambda x: (x + 0.5).reshape(len(x), -1), [(normalised, no_labels)])]
    )
    errors = [vrmse(trajectories[:, 0] + (s + 1), trajectories[:, s + 1]).mean() for s in range(5)]
    np.testing.assert_allclose(drift["vrmse_per_step"], errors, rtol=1e-6)  # the model sees float32


def test_run_parameters_are_constant_channels_in_each_window_and_rollout_step_and_the_saved_model_takes_them(
    tmp_path,
):
    """train.next_state.condition: each record's parameters (normalised by convert) are channels after the
    k states, the same in every window of that record and at every step of its rollout; persistence still
    holds the last state (not a parameter channel); the saved model takes the states and the parameters in
    their own units as two inputs. Without normalised, vector labels the key is refused by name."""
    import re

    import tensorflow as tf

    from pipeline import Sim2dlError
    from pipeline.training.tasks.next_state import NextState

    task = next_state_task(steps=5, k=2, m=1, parameters=3)
    task.check()
    assert task.record_labels() == ["params"] and task.model_feature_shape == (8, 8, 2 + 3)
    x = np.stack([np.stack([np.full((8, 8), 100 * b + t) for t in range(5)]) for b in range(2)]).astype(
        np.float32
    )
    params = np.array([[1, 2, 3], [4, 5, 6]], np.float32)  # normalised, as the shards hold them
    labels = task.label_tensor([tf.constant(params)], batched=True)
    inputs, targets = task.samples(tf.constant(x), labels)
    assert inputs.shape == (2 * 3, 8, 8, 5) and targets.shape == (2 * 3, 64)
    for window in inputs.numpy():
        record = int(window[0, 0, 0]) // 100
        np.testing.assert_array_equal(window[..., 2:], np.broadcast_to(params[record], (8, 8, 3)))
    last = task.input_field(inputs.numpy().reshape(6, -1))  # persistence: the second state, physical units
    np.testing.assert_allclose(last[..., 0], inputs.numpy()[..., 1] * 2 + 1)

    seen = []

    def step(states: np.ndarray) -> np.ndarray:  # holds the state; records what it was given
        seen.append(states[..., 2:].copy())
        return states[..., 1].reshape(len(states), -1)

    task.rollout(step, [(x, params)])
    assert len(seen) == 3 and all(
        np.array_equal(s, np.broadcast_to(params[:, None, None, :], s.shape)) for s in seen
    )

    state_in = tf.keras.layers.Input((8, 8, 5))
    network = tf.keras.Model(state_in, tf.keras.layers.Flatten()(state_in[..., 1:2] + state_in[..., 4:5]))
    saved = task.exported(network)
    out = saved(
        {
            "trajectory_now": tf.constant(np.full((1, 8, 8, 2), 3.0, np.float32)),
            "params": tf.constant([[3.0, 3.0, 3.5]]),
        }
    )["trajectory"].numpy()
    # the state 3 is 1 in normalised units, the last parameter 3.5 is 1: the network gives 2, which is 5
    np.testing.assert_allclose(out, np.full((1, 8, 8, 1), 5.0), rtol=1e-6)

    field = LabelField("mask", (8, 8), "float32", {"mean": 0.0, "std": 1.0})  # a field, not a vector
    refused = [
        ((), "train.next_state.condition"),
        ((LabelField("params", (3,), "float32"),), "convert.normalise"),
        ((field,), "train.next_state.condition"),
    ]
    for labels, key in refused:
        data = DataSpec("trajectory", (5, 8, 8), labels, ())
        with pytest.raises(Sim2dlError, match=re.escape(f"config key '{key}'")):
            NextState({"next_state": {"condition": True}}, data).check()


@pytest.mark.parametrize("model", ["fno2d", "unet2d"])
def test_a_conditioning_vector_modulates_every_block_and_is_not_convolved(model):
    """train.next_state.condition: vector: the built-in reads the parameters' channels as one vector (at
    one pixel) that scales and shifts each block's features (FiLM). Untrained, the modulation is the
    identity, so the output does not depend on the parameters at all (they are not convolved as channels:
    as channels they would change it); with the modulation's kernels set, it does, and only through them."""
    import tensorflow as tf

    from pipeline.training.models import build_model

    task = next_state_task(steps=5, k=2, m=1, parameters=3, condition="vector")
    task.check()
    assert task.model_feature_shape == (8, 8, 2 + 3) and task.vector_channels() == 3
    settings = {
        "model": model,
        "depth": 2,
        "width": 8,
        "dense": 16,
        "dropout": 0.0,
        "model_args": {"modes": 3},
    }
    if model == "unet2d":
        settings["model_args"] = {}
    network, _ = build_model(settings, task.model_feature_shape, task)
    rng = np.random.default_rng(1)
    states = rng.normal(size=(2, 8, 8, 2)).astype(np.float32)

    def answer(params: list[float]) -> np.ndarray:
        planes = np.broadcast_to(np.asarray(params, np.float32), (2, 8, 8, 3))
        return network(tf.constant(np.concatenate([states, planes], axis=-1))).numpy()

    np.testing.assert_allclose(answer([0, 0, 0]), answer([5, -3, 2]), atol=1e-6)
    modulation = [
        w for w in network.weights if "dense" in w.name and "kernel" in w.name and not np.any(w.numpy())
    ]
    assert len(modulation) >= 2 * 2  # a scale and a shift per block
    for w in modulation:
        w.assign(rng.normal(scale=0.3, size=w.shape))
    assert np.abs(answer([0, 0, 0]) - answer([5, -3, 2])).max() > 1e-3
    as_channels, _ = build_model(
        settings, task.model_feature_shape, next_state_task(steps=5, k=2, m=1, parameters=3)
    )
    first = next(w for w in as_channels.weights if "conv" in w.name and "kernel" in w.name)
    assert first.shape[-2] == 2 + 3  # as channels: convolved with the states


def test_a_next_state_of_cubes_windows_rolls_out_scores_its_spectrum_and_saves_a_model_of_cubes(tmp_path):
    """train.next_state.spatial_dims: 3: trajectories of (time, D, H, W) cubes give windows of k cubes as
    channels (never across records), the parameters as channels over the cube; a model that steps exactly
    rolls out at VRMSE 0; the power spectrum is binned over |k| in 3-D (a single Fourier mode lands in its
    band); fno3d takes the windows with FiLM, and the saved model takes a cube and the parameters."""
    import tensorflow as tf

    from pipeline.training.models import build_model
    from pipeline.training.tasks.next_state import SPECTRUM_BANDS, band_power

    grid = (4, 6, 8)
    task = next_state_task(steps=5, k=2, m=1, parameters=2, condition="vector", grid=grid)
    task.check()
    assert task.model_feature_shape == (*grid, 2 + 2) and task.samples_per_record() == 3
    x = np.stack([np.stack([np.full(grid, 100 * b + t) for t in range(5)]) for b in range(2)]).astype(
        np.float32
    )
    params = np.array([[1, 2], [3, 4]], np.float32)
    inputs, targets = task.samples(tf.constant(x), task.label_tensor([tf.constant(params)], batched=True))
    assert inputs.shape == (2 * 3, *grid, 4) and targets.shape == (2 * 3, 4 * 6 * 8)
    for window, target in zip(inputs.numpy(), targets.numpy(), strict=True):
        record, first = divmod(int(window[0, 0, 0, 0]), 100)
        assert np.all(window[..., 0] == 100 * record + first) and np.all(
            window[..., 1] == 100 * record + first + 1
        )
        assert np.all(target == 100 * record + first + 2)
        np.testing.assert_array_equal(window[..., 2:], np.broadcast_to(params[record], (*grid, 2)))

    def exact(states: np.ndarray) -> np.ndarray:  # the next state of trajectories whose t-th state is t
        return (states[..., 1] + 1).reshape(len(states), -1)

    ramp = np.stack([np.full(grid, t, np.float64) for t in range(5)])[None].repeat(2, axis=0)
    rolled = task.rollout_summary(
        [task.rollout(exact, [(ramp + np.arange(2)[:, None, None, None, None], params)])]
    )
    assert rolled["steps"] == 3 and np.allclose(rolled["nrmse_per_step"], 0)
    task.rolled_out = rolled
    task.figure(None, tmp_path / "scores.png")  # the rollout's figure: the cubes' middle planes
    assert (tmp_path / "scores.png").stat().st_size

    cube = np.cos(2 * np.pi * 3 * np.arange(8) / 8)[None, None, :, None] * np.ones((1, *grid, 1))  # |k| = 3
    power = band_power(cube)
    # the bands' edges: log-spaced from |k| = 1 to the grid's largest, sqrt(2² + 3² + 4²) = 5.39: 1, 1.75,
    # 3.07, 5.39, so |k| = 3 is the middle band's
    assert power.shape == (1, SPECTRUM_BANDS, 1) and power[0, 1, 0] > 1e-9
    assert np.count_nonzero(power > 1e-9) == 1
    # |k| = 1
    lowest = np.cos(2 * np.pi * np.arange(6) / 6)[None, None, :, None, None] * np.ones((1, *grid, 1))
    assert np.flatnonzero(band_power(lowest)[0, :, 0] > 1e-9).tolist() == [0]

    settings = {
        "model": "fno3d",
        "depth": 1,
        "width": 4,
        "dense": 8,
        "dropout": 0.0,
        "model_args": {"modes": 2},
    }
    network, _ = build_model(settings, task.model_feature_shape, task)
    assert network(inputs).shape == (6, 4 * 6 * 8)
    saved = task.exported(network)
    answer = saved({"trajectory_now": tf.zeros((1, *grid, 2)), "params": tf.constant([[3.0, 3.0]])})[
        "trajectory"
    ]
    assert answer.shape == (1, *grid, 1)


@SLOW
def test_a_population_trains_a_next_state_conditioned_on_each_runs_parameters_end_to_end(tmp_path):
    """The next-state preset with physics drawn per run (growth and drift), each run's parameters given as
    a conditioning vector (FiLM: docs/training.md's `condition: vector` block), trained as a population of
    two trainers on 2 ranks through the workflow's steps: the summary scores one step on the test runs
    beside persistence and the linear model, rolls the kept model out over the trajectories, and reports
    the members' disagreement (per output in its own units, beside the kept model's error); the saved model
    takes a state and the parameters in their own units, and its next state depends on the parameters (a
    faster growth, more mass)."""
    import tensorflow as tf

    from pipeline.steps import validated

    config = yaml.safe_load((REPO / "config" / "presets" / "surrogate-next-state.yaml").read_text())
    [conditioned] = [
        yaml.safe_load(text)
        for _, mark, text in doc_blocks()
        if mark == "reference" and "condition: vector" in text
    ]
    config["convert"].update(conditioned["convert"])
    config["train"].update(conditioned["train"], width=8, depth=2, model_args={"modes": 4}, batch_size=8)
    config["train"]["population"] = {"enabled": True, "trainers": 2, "rounds": 2, "steps_per_round": 50}
    config["train"]["learning_rate"] = 0.005  # enough to step below persistence
    config["simulate"].update(runs=64)
    config["simulate"]["reaction"].update(size=16, time_steps=40, snapshots=6, t_end=0.5, growth=[0.5, 6.0])
    config["source"]["fields"] = {
        "trajectory": {"path": "trajectory", "dtype": "float32", "shape": [6, 16, 16]},
        "params": {"path": "params", "dtype": "float32", "shape": [4]},
    }
    config.update(workdir=str(tmp_path / "work"), stage={"target": str(tmp_path / "local")})
    path = write_config(tmp_path, validated(config))
    for step in ("simulate", "ingest", "convert", "merge", "stage", "train"):
        run_cli([step, "--config", str(path)], ranks=2, timeout=600)
    summary = json.loads((tmp_path / "work" / "train" / "summary.json").read_text())
    assert summary["task"] == "next_state" and summary["scored_on"] == "test" and summary["rounds"] == 2
    assert summary["nrmse"]["trajectory"] < summary["persistence_nrmse"]["trajectory"]
    assert summary["vrmse"]["trajectory"] < summary["persistence_vrmse"]["trajectory"]
    assert summary["baseline"]["nrmse"]["trajectory"] < summary["persistence_nrmse"]["trajectory"]
    rollout = summary["rollout"]
    assert (
        rollout["steps"] == 5
        and len(rollout["vrmse_per_step"]) == len(rollout["persistence_vrmse_per_step"]) == 5
    )
    assert rollout["below_persistence_at_every_step"]
    assert rollout["trajectories"] * 5 == summary["test_records"] > 0  # the test runs, each of 5 windows
    spread = summary["population"]["disagreement"]
    assert spread["records"] == summary["test_records"]
    # in the states' own units: convert's std times the normalised figures (the mean cancels in both)
    from pipeline.paths import Layout

    std = json.loads(Layout(tmp_path / "work").metadata.read_text())["statistics"]["trajectory"]["std"]
    in_units = spread["by_output"]["trajectory"]
    assert std != pytest.approx(1, abs=0.1) and in_units["member_std"] > 0
    assert in_units["member_std"] == pytest.approx(spread["mean_member_std"] * std, rel=1e-4)
    assert in_units["kept_rmse"] == pytest.approx(np.sqrt(spread["kept_mean_squared_error"]) * std, rel=1e-4)
    assert in_units["std_over_rmse"] == pytest.approx(in_units["member_std"] / in_units["kept_rmse"])

    model = tf.keras.models.load_model(str(tmp_path / "work" / "train" / "model"), compile=False)
    settings = validated(config)["simulate"]
    run = reaction.make(settings, np.random.default_rng(10**6))
    state = run["trajectory"][:1][..., None]  # (1, 16, 16, 1): the first state, its own units
    slow, fast = run["params"].copy(), run["params"].copy()
    slow[3], fast[3] = 0.5, 6.0  # the growth rate, the drift kept
    answers = [
        model({"trajectory_now": state, "params": p[None]})["trajectory"].numpy() for p in (slow, fast)
    ]
    assert answers[0].shape == (1, 16, 16, 1) and np.isfinite(answers).all()
    assert answers[1].mean() > answers[0].mean()  # more growth in one step: the parameters reach the network


def online_reaction_config(tmp_path: Path) -> dict:
    """docs/training.md's online surrogate block at a test's size: 16 runs of 6 states of 16 x 16, one
    producer and one training rank, 12 steps of 4, a validation every 4 steps and every 4th run held out."""
    import sys

    from .conftest import make_config

    config = docs_block("reaction_run")
    del config["workdir"]
    command = config["simulate"]["command"]
    for flag, value in (("--size", "16"), ("--steps", "20"), ("--snapshots", "6"), ("--t-end", "0.5")):
        command[command.index(flag) + 1] = value
    command[0] = sys.executable
    config["simulate"].update(runs=16, run_timeout_s=60)
    config["source"]["fields"]["trajectory"]["shape"] = [6, 16, 16]
    config["train"].update(batch_size=4, depth=2, width=8, dense=16, model_args={"modes": 4})
    config["train"]["online"].update(
        optimizer_steps=12,
        validate_every_steps=4,
        validation_every_run=4,
        statistics_runs=2,
        buffer={"capacity": 16, "watermark": 4, "max_reuse": 0},
    )
    return make_config(tmp_path, **config)


@SLOW
def test_a_next_state_trains_online_while_the_ensemble_runs(tmp_path):
    """docs/training.md's online surrogate block, smaller: one producer runs the reaction simulator over a
    design of physics, one rank trains fno2d (FiLM-conditioned) on each run's whole trajectory as it
    arrives (a step: one window of each of batch_size trajectories); the held-out runs score one step
    beside persistence and the linear model and are rolled out; the saved model steps a state given the
    parameters in their units."""
    import tensorflow as tf

    from .helpers import board_events

    config = online_reaction_config(tmp_path)
    # the run's parameters as the design gives them: scalar columns of the runs table, each normalised on
    # its own (convert.per_channel: a scalar is one channel), given to the model as one vector
    parameters = ["vx", "vy", "kappa", "r"]
    config["source"]["fields"] = {
        "trajectory": config["source"]["fields"]["trajectory"],
        **{p: {"column": p} for p in parameters},
    }
    config["convert"].update(labels=parameters, normalise=["trajectory", *parameters], per_channel=parameters)
    config["train"]["online"].update(
        optimizer_steps=600, validate_every_steps=200
    )  # enough to step below persistence
    config["train"]["learning_rate"] = 0.005
    proc = run_cli(["online", "--config", str(write_config(tmp_path, config))], ranks=2, timeout=300)
    summary = json.loads(proc.stdout.strip().splitlines()[-1])
    online = summary["online"]
    assert summary["task"] == "next_state" and online["steps"] == 600 and online["refused"] == 0
    # a run is one trajectory: 12 trained on, every 4th of the 16 held out; each gives 5 windows
    assert (online["samples"]["arrived"], online["samples"]["validation"]) == (12, 4)
    assert online["samples"]["draws"] == 600 * 4  # a step: batch_size windows, one of each of 4 trajectories
    # scored at the kept step, on the validation runs arrived by then (timing): whole runs of 5 windows each
    assert summary["validation_records"] in (5, 10, 15, 20) and set(online["statistics"]) == {
        "trajectory",
        *parameters,
    }
    assert summary["nrmse"]["trajectory"] < summary["persistence_nrmse"]["trajectory"]
    assert summary["vrmse"]["trajectory"] < summary["persistence_vrmse"]["trajectory"]  # 0.21 against 0.29
    # the linear model, fitted on the few runs arrived when training began, is below the network (0.76 against
    # persistence's 0.25 once) and above the set's mean
    assert summary["nrmse"]["trajectory"] < summary["baseline"]["nrmse"]["trajectory"] < 1.0
    rollout = summary["rollout"]
    assert (rollout["split"], rollout["steps"], rollout["trajectories"]) == ("validation", 5, 4)
    assert len(rollout["vrmse_per_step"]) == len(rollout["persistence_vrmse_per_step"]) == 5
    assert rollout["below_persistence_at_every_step"]
    train = tmp_path / "work" / "train"
    assert (train / "scores.png").stat().st_size and (train / "learning_curves.png").stat().st_size
    # TensorBoard: the one-step NRMSE at every validation, the emulator's as a line over the run
    board = board_events(train / "tensorboard" / "online")["scalars"]
    assert sorted(board["validation/nrmse/trajectory"]) == [200, 400, 600]
    line = summary["baseline"]["nrmse"]["trajectory"]
    assert board["baseline/nrmse/trajectory"] == pytest.approx({200: line, 600: line})
    model = tf.keras.models.load_model(str(train / "model"), compile=False)
    state = np.full((1, 16, 16, 1), 0.5, np.float32)
    given = dict(zip(parameters, np.array([[0.1], [0.1], [0.002], [3.0]], np.float32), strict=True))
    answer = model({"trajectory_now": state, **given})
    assert answer["trajectory"].shape == (1, 16, 16, 1) and np.isfinite(answer["trajectory"].numpy()).all()


@SLOW
def test_a_forward_surrogate_trains_online_as_melissa_trains_its_surrogates(tmp_path):
    """The same ensemble with each run's final state and mass as the outputs of its parameters (Melissa's
    use: a surrogate from parameters to fields trained while the runs complete), the parameters taken from
    the design (the runs table's columns, stacked into one vector), not from the files: VRMSE per output
    on the held-out runs beside the emulator's, and the saved model answers parameters in the outputs'
    units."""
    import tensorflow as tf

    config = online_reaction_config(tmp_path)
    command = config["simulate"]["command"]
    command[command.index("--blobs") + 1] = "fixed"  # the same blobs: the outputs follow the parameters
    config["source"]["fields"] = {
        **{p: {"column": p} for p in ("vx", "vy", "kappa", "r")},
        "state": {"path": "state", "dtype": "float32", "shape": [16, 16]},
        "mass": {"path": "mass", "dtype": "float32", "shape": [6]},
    }
    config["convert"].update(
        stack={"params": ["vx", "vy", "kappa", "r"]},
        features=["params"],
        labels=["state", "mass"],
        normalise=["params", "state", "mass"],
        per_channel=["params", "mass"],
    )
    config["train"].update(task="surrogate", model="decoder", model_args={}, learning_rate=0.003)
    config["train"]["online"].update(
        optimizer_steps=48, validate_every_steps=16
    )  # a decoder's steps are cheap
    proc = run_cli(["online", "--config", str(write_config(tmp_path, config))], ranks=2, timeout=300)
    summary = json.loads(proc.stdout.strip().splitlines()[-1])
    assert summary["task"] == "surrogate" and summary["online"]["samples"]["arrived"] == 12
    assert (
        set(summary["nrmse"])
        == set(summary["baseline"]["nrmse"])
        == set(summary["vrmse"])
        == {"state", "mass"}
    )
    # the runs held out by the kept step
    assert 0 < summary["validation_records"] <= 4 and "rollout" not in summary
    model = tf.keras.models.load_model(str(tmp_path / "work" / "train" / "model"), compile=False)
    params = np.array([0.1, -0.2, 0.003, 2.0])
    answer = model(params[None].astype(np.float32))
    assert answer["state"].shape == (1, 16, 16) and answer["mass"].shape == (1, 6)
    # in the mass's own units: near what the simulator computes there (in normalised units, centred on 0
    # with unit spread, it would be off by about 100 % or more)
    mass = reaction.solve(reaction.blobs(16, reaction.FIXED_BLOBS), params, 0.5, 20, 6).mean(axis=(1, 2))
    relative = np.abs(answer["mass"].numpy()[0] / mass - 1)
    assert np.median(relative) < 0.5, relative  # 0.18-0.25 here, from 12 runs


def test_the_wells_layout_gives_a_record_per_trajectory_with_its_parameters(tmp_path, serial):
    """Files written to The Well's format read with samples_along 0: a record per trajectory (its whole
    time series of every field, t0 and t1 side by side), the file's parameter from its root attribute;
    every trajectory of every file, unchanged, and none split across records."""
    from .helpers import data_half, layout_config
    from .helpers import records_by_id as merged_records

    root = tmp_path / "well"
    root.mkdir()
    written = {alpha: write_the_well(root / f"toy_alpha_{alpha}.hdf5", alpha) for alpha in (0.5, 1.5)}
    source = {
        "glob": "*.hdf5",
        "samples_along": 0,
        "fields": {
            "u": {"path": "t0_fields/u", "dtype": "float32", "shape": [6, 8, 8]},
            "velocity": {"path": "t1_fields/velocity", "dtype": "float32", "shape": [6, 8, 8, 2]},
            "alpha": {"attr": "alpha", "dtype": "float32"},
        },
    }
    config = layout_config(tmp_path, source, ["u"], ["alpha", "velocity"])
    summary, meta = data_half(config, root, tmp_path, serial)
    assert summary["accepted"] == 6 and meta["counts"]["records"] == 6
    records = merged_records(tmp_path / "work" / "merged")
    for alpha, u in written.items():
        for b in range(3):
            [record] = [r for sid, r in records.items() if sid == f"toy_alpha_{alpha}#{b}"]
            np.testing.assert_array_equal(record["u"], u[b])
            assert record["velocity"].shape == (6, 8, 8, 2)
            assert float(record["alpha"]) == pytest.approx(alpha)


def test_inspect_recognises_the_wells_layout_and_proposes_a_next_state_config(tmp_path, serial):
    """`sim2dl inspect` on files of The Well's format: a sample per trajectory, the first t0 field the
    feature, the simulation's parameter (a root attribute) its label given as a conditioning vector,
    train.task next_state with fno2d, split by trajectory; the layout's lines in the terminal too; its config
    validates and reads every trajectory."""
    from pipeline.steps.inspect import inspect

    from .helpers import data_half

    root = tmp_path / "well"
    root.mkdir()
    for alpha in (0.5, 1.5, 2.5):
        write_the_well(root / f"toy_alpha_{alpha}.hdf5", alpha, trajectories=4)
    text, config = inspect(str(root), write=tmp_path / "well.yaml")
    assert "layout: The Well's layout" in text and config is not None
    # not only in the file
    assert "  The Well: " in text and "given to the next state as a conditioning vector" in text
    assert config["source"]["samples_along"] == 0 and config["source"]["fields"]["u"]["path"] == "t0_fields/u"
    assert config["convert"]["features"] == ["u"] and config["convert"]["labels"] == ["alpha"]
    assert config["train"]["task"] == "next_state" and config["train"]["model"] == "fno2d"
    assert (
        config["train"]["next_state"]["condition"] == "vector" and "alpha" in config["convert"]["normalise"]
    )
    assert config["merge"]["split_by"] == "sample" and config["source"]["fields"]["alpha"] == {
        "attr": "alpha"
    }
    from pipeline.steps import validated

    config = validated({**config, "workdir": str(tmp_path / "work")})
    summary, meta = data_half(config, root, tmp_path, serial)
    assert summary["accepted"] == 12 and meta["feature_spec"]["u"]["shape"] == [6, 8, 8]


def design_output(a0: float, ne: float, width: float, grid: int = 16) -> dict[str, np.ndarray]:
    """What the stand-in code of an existing ensemble writes for one run: a field and a vector, smooth in its
    three parameters."""
    x = np.linspace(0, 1, grid, endpoint=False)
    field = a0 * np.sin(2 * np.pi * x)[None, :] + ne * width * np.cos(2 * np.pi * x)[:, None]
    return {"field": field.astype(np.float32), "totals": np.array([a0 + ne, a0 * width, ne], np.float32)}


@SLOW
def test_a_forward_surrogate_takes_a_runs_table_attributes_and_path_groups_stacked_as_its_design(tmp_path):
    """Existing ensemble output with its runs table: the design's parameters are a runs table's column
    (a0), a global attribute (ne) and a path group (width), stacked into one vector (convert.stack) as a
    forward surrogate's input; every record's vector is its run's parameters; the saved model, given a
    design point nobody ran, answers the field and the vector in their units close to what the code
    writes."""
    import h5py
    import pyarrow as pa
    import pyarrow.parquet as pq
    import tensorflow as tf

    rng = np.random.default_rng(21)
    data = tmp_path / "ensemble"
    runs = {"run": [], "a0": []}
    for i in range(96):
        a0, ne, width = rng.uniform(1, 3), rng.uniform(0.5, 1.5), rng.choice([1.0, 1.5, 2.0])
        folder = data / f"width{width:.1f}" / f"run-{i:06d}"
        folder.mkdir(parents=True)
        with h5py.File(folder / "out.h5", "w") as f:
            f.attrs["ne"] = ne
            for name, value in design_output(a0, ne, width).items():
                f[name] = value
        runs["run"].append(f"run-{i:06d}")
        runs["a0"].append(a0)
    pq.write_table(pa.table(runs), data / "runs.parquet")
    config = {
        "workdir": str(tmp_path / "work"),
        "source": {
            "path": str(data),
            "glob": "**/out.h5",
            "sample_id": None,
            "labels_table": {"path": "runs.parquet", "key": "run", "match": "run_directory"},
            "path_pattern": r"width(?P<width>[0-9.]+)/",
            "fields": {
                "a0": {"column": "a0"},
                "ne": {"attr": "ne"},
                "width": {"path_group": "width"},
                "field": {"path": "field", "dtype": "float32", "shape": [16, 16]},
                "totals": {"path": "totals", "dtype": "float32", "shape": [3]},
            },
        },
        "convert": {
            "stack": {"design": ["a0", "ne", "width"]},
            "features": ["design"],
            "labels": ["field", "totals"],
            "dtype": "float32",
            "normalise": ["design", "field", "totals"],
            "per_channel": ["design", "totals"],
        },
        "merge": {"splits": {"train": 0.75, "validation": 0.125, "test": 0.125}},
        "stage": {"target": str(tmp_path / "local")},
        "search": {"enabled": False},
        "train": {
            "task": "surrogate",
            "model": "decoder",
            "depth": 2,
            "width": 8,
            "dense": 64,
            "epochs": 40,
            "batch_size": 8,
            "learning_rate": 0.003,
        },
    }
    path = write_config(tmp_path, config)
    for step in ("ingest", "convert", "merge", "stage", "train"):
        run_cli([step, "--config", str(path)], ranks=2, timeout=600)
    merged = tmp_path / "work" / "merged"
    meta = json.loads((merged / "metadata.json").read_text())
    assert meta["feature_spec"]["design"]["shape"] == [3] and meta["component_names"]["design"] == [
        "a0",
        "ne",
        "width",
    ]
    stats = meta["statistics"]

    def own_units(record: dict, name: str) -> np.ndarray:
        return np.asarray(record[name]) * np.asarray(stats[name]["std"]) + np.asarray(stats[name]["mean"])

    records = records_by_id(merged)
    assert len(records) == 96
    for record in records.values():  # the stacked vector is the run's parameters: what its file was made of
        expected = design_output(*own_units(record, "design"))["totals"]
        np.testing.assert_allclose(own_units(record, "totals"), expected, rtol=1e-4, atol=1e-4)
    summary = json.loads((tmp_path / "work" / "train" / "summary.json").read_text())
    assert set(summary["nrmse"]) == {"field", "totals"} and summary["nrmse"]["totals"] < 0.3, summary["nrmse"]

    model = tf.keras.models.load_model(str(tmp_path / "work" / "train" / "model"), compile=False)
    point = np.array([[2.1, 0.8, 1.5]], np.float32)  # nobody ran it
    answered, expected = model(point), design_output(*point[0])
    assert answered["field"].shape == (1, 16, 16) and answered["totals"].shape == (1, 3)
    np.testing.assert_allclose(answered["totals"].numpy()[0], expected["totals"], rtol=0.15)
    assert (
        np.sqrt(np.mean((answered["field"].numpy()[0] - expected["field"]) ** 2))
        < 0.3 * expected["field"].std()
    )


def test_a_state_of_two_fields_is_scored_and_normalised_per_field():
    """A state stacked from two fields (u near 1, v near 0.2: convert.stack's members name them), each with
    its own mean and std over time and space (convert.per_channel): one-step VRMSE, persistence's and the
    rollout's are The Well's per sample, field and step, computed here independently; scoring the channels
    jointly would put the gap between the fields' means into var(truth) and flatter persistence. Per
    channel on a trajectory with no field axis is refused by name."""
    from pipeline.training.tasks.next_state import NextState

    rng = np.random.default_rng(7)
    steps, grid = 4, (8, 8)
    u = 1 + 0.05 * rng.normal(size=(3, steps, *grid)).cumsum(axis=1)
    v = 0.2 + 0.02 * rng.normal(size=(3, steps, *grid)).cumsum(axis=1)
    states = np.stack([u, v], axis=-1)  # (B, T, H, W, 2) in physical units
    stats = {"mean": [1.0, 0.2], "std": [0.05, 0.02], "per_channel": True}
    data = DataSpec(
        "state",
        (steps, *grid, 2),
        (),
        (),
        feature_statistics={"state": stats},
        component_names={"state": ["u", "v"]},
    )
    task = NextState({"next_state": {"states_in": 1, "states_out": 2}}, data)
    task.check()
    normal = (states - np.array(stats["mean"])) / np.array(stats["std"])
    x = normal[:, 0]  # one window per trajectory: state 0 in, states 1 and 2 out (channels t C + c)
    targets = np.concatenate([normal[:, 1], normal[:, 2]], axis=-1).reshape(3, -1)
    outputs = targets + 0.1 * rng.normal(size=targets.shape)
    evaluation = task.evaluation()
    task.update(evaluation, outputs, targets, x.reshape(3, -1))
    scores = task.metrics(evaluation)

    def well(predicted: np.ndarray, true: np.ndarray) -> float:  # per sample, over the grid
        per_sample = [
            np.sqrt(((p - t) ** 2).mean() / (t.var() + 1e-7)) for p, t in zip(predicted, true, strict=True)
        ]
        return float(np.mean(per_sample))

    # (.., step, field)
    predicted = outputs.reshape(3, *grid, 2, 2) * np.array(stats["std"]) + np.array(stats["mean"])
    for c, name in enumerate(["u", "v"]):
        expected = np.mean([well(predicted[..., s, c], states[:, 1 + s, ..., c]) for s in range(2)])
        assert scores["vrmse"][name] == pytest.approx(expected, rel=1e-9)
        held = np.mean([well(states[:, 0, ..., c], states[:, 1 + s, ..., c]) for s in range(2)])
        assert scores["persistence_vrmse"][name] == pytest.approx(held, rel=1e-9)
    assert scores["vrmse_mean"] == pytest.approx(np.mean(list(scores["vrmse"].values())))
    joint = np.mean([well(states[:, 0], states[:, 1 + s]) for s in range(2)])  # both fields as one
    assert joint < 0.2 * scores["persistence_vrmse_mean"]  # the means' gap in the variance flatters it

    # the rollout, per field: an exact stepper scores 0 on each, persistence as computed above per step
    def exact(window: np.ndarray) -> np.ndarray:
        found = [
            int(np.argmin([np.abs(window[b] - normal[b, t]).max() for t in range(steps)])) for b in range(3)
        ]
        return np.stack(
            [
                np.concatenate([normal[b, t + 1], normal[b, min(t + 2, steps - 1)]], axis=-1)
                for b, t in enumerate(found)
            ]
        ).reshape(3, -1)

    rolled = task.rollout_summary([task.rollout(exact, [(normal, np.zeros((3, 0)))])])
    assert set(rolled["by_field"]["vrmse_per_step"]) == {"u", "v"} and np.allclose(
        rolled["vrmse_per_step"], 0
    )
    for c, name in enumerate(["u", "v"]):
        curve = [well(states[:, 0, ..., c], states[:, s, ..., c]) for s in range(1, steps)]
        np.testing.assert_allclose(rolled["by_field"]["persistence_vrmse_per_step"][name], curve, rtol=1e-9)

    by_column = {"state": {"mean": [0.0] * 8, "std": [1.0] * 8}}
    flat = DataSpec("state", (steps, *grid), (), (), feature_statistics=by_column)
    with pytest.raises(Exception, match=r"per_channel.*no axis of fields"):
        NextState({"next_state": {}}, flat).check()


def test_inspect_proposes_a_next_state_for_a_run_per_file_and_its_parameters_as_a_vector(tmp_path, serial):
    """A PDE code's output as plain files, a run each: `t` (a 1-D time coordinate, no calendar) whose
    length is the leading axis of `fields`, stored channels first (time, field, y, x), and the run's
    parameter in an attribute. inspect proposes a trajectory per file (not a sample per step), the field
    axis moved last and normalised per field, the parameter as a conditioning vector; a NetCDF trajectory
    with a `time` dimension alike; the configs validate and read every run whole."""
    import h5py
    import netCDF4

    from pipeline.steps import validated
    from pipeline.steps.inspect import inspect

    from .helpers import data_half

    root = tmp_path / "pde"
    for i, du in enumerate((0.1, 0.2, 0.3)):
        (root / f"run-{i:06d}").mkdir(parents=True)
        with h5py.File(root / f"run-{i:06d}" / "out.h5", "w") as f:
            f["t"] = np.linspace(0, 1, 11)
            f["fields"] = np.random.default_rng(i).normal(size=(11, 2, 16, 12)).astype(np.float32)
            f.attrs["Du"] = du
    text, config = inspect(str(root), write=tmp_path / "pde.yaml")
    assert "a file is one run's trajectory: fields [11, 2, 16, 12] has t's 11 steps first" in text
    fields = config["source"]["fields"]
    assert config["source"]["samples_along"] is None and "t" not in fields
    assert fields["fields"] == {
        "path": "fields",
        "dtype": "float32",
        "shape": [11, 2, 16, 12],
        "channel_axis": 1,
    }
    assert fields["Du"] == {"attr": "Du"} and config["convert"]["labels"] == ["Du"]
    assert config["convert"]["per_channel"] == ["fields"] and config["train"]["task"] == "next_state"
    assert config["train"]["model"] == "fno2d" and config["train"]["next_state"]["condition"] == "vector"
    config = validated({**config, "workdir": str(tmp_path / "work")})
    summary, meta = data_half(config, root, tmp_path, serial)
    assert summary["accepted"] == 3 and meta["feature_spec"]["fields"]["shape"] == [11, 16, 12, 2]
    assert len(meta["statistics"]["fields"]["mean"]) == 2  # one mean and std per field

    nc = tmp_path / "nc"
    nc.mkdir()
    for i in range(2):
        with netCDF4.Dataset(nc / f"run{i}.nc", "w") as f:
            for name, n in (("time", 9), ("y", 8), ("x", 8)):
                f.createDimension(name, n)
            f.createVariable("time", "f8", ("time",))[:] = np.arange(9) * 0.5
            f.createVariable("u", "f4", ("time", "y", "x"))[:] = np.random.default_rng(i).normal(
                size=(9, 8, 8)
            )
    text, config = inspect(str(nc), write=tmp_path / "nc.yaml")
    assert config["source"]["samples_along"] is None and config["train"]["task"] == "next_state", text
    assert config["convert"]["features"] == ["u"] and config["convert"]["labels"] == []
    assert "next_state" in config["train"] and "condition" not in config["train"]["next_state"]


def test_inspect_reads_an_ensembles_runs_table_and_proposes_the_forward_surrogate(tmp_path, serial):
    """`sim2dl inspect` on an adaptive design's raw/ (the runs table sim2dl writes, with its bookkeeping:
    round, acquisition, acquisition_value, uncertainty, attempts, seconds, exit_code): the design's
    parameters alone are proposed, as the inputs of a forward surrogate whose outputs are what each run
    wrote (not the copy of its parameters the simulator keeps beside them); the config validates and reads
    every run."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    from pipeline.design.loop.history import round_table
    from pipeline.ensemble.farm import run_paths
    from pipeline.ensemble.runs_table import OUTCOME_SCHEMA
    from pipeline.simulators import bistable_run
    from pipeline.steps import validated
    from pipeline.steps.inspect import inspect

    from .helpers import data_half

    space = {
        "level": {"type": "uniform", "low": 0.3, "high": 1.0},
        "a": {"type": "uniform", "low": 0.0, "high": 0.4},
    }
    settings = {"space": space, "seed": 7, "runs": 6}
    unit = np.random.default_rng(0).random((6, 2))
    table = round_table(settings, unit, 0, 1, "error_weighted_variance", np.ones(6), np.ones(6), "digest")
    root = tmp_path / "raw"
    for i, row in enumerate(table.to_pylist()):
        bistable_run.main(
            [
                "--out",
                str(run_paths(root, row["run"], i, 1000)[0]),
                "--level",
                repr(row["level"]),
                "--a",
                repr(row["a"]),
                "--size",
                "8",
                "--steps",
                "10",
            ]
        )
    outcome = {
        "status": ["ok"] * 6,
        "attempts": [1] * 6,
        "seconds": [0.5] * 6,
        "exit_code": [0] * 6,
        "started_simulator": [True, False, False, False, False, False],
        "reason": [""] * 6,
    }
    for name, kind in OUTCOME_SCHEMA:
        table = table.append_column(pa.field(name, kind), pa.array(outcome[name], kind))
    pq.write_table(table, root / "runs.parquet")
    _, config = inspect(str(root), write=tmp_path / "design.yaml")
    assert config["source"]["labels_table"] == {
        "path": "runs.parquet",
        "key": "run",
        "match": "run_directory",
    }
    fields = config["source"]["fields"]
    assert {n for n, spec in fields.items() if "column" in spec} == {"level", "a"}, fields
    assert config["convert"]["stack"] == {"design_params": ["level", "a"]}  # `params` is the file's own copy
    assert config["convert"]["features"] == ["design_params"]
    assert sorted(config["convert"]["labels"]) == ["mass", "state"]
    assert config["train"]["task"] == "surrogate" and config["train"]["model"] == "decoder"
    assert "not an output: params" in (tmp_path / "design.yaml").read_text()
    config = validated({**config, "workdir": str(tmp_path / "work")})
    summary, meta = data_half(config, root, tmp_path, serial)
    assert summary["accepted"] == 6 and meta["feature_spec"]["design_params"]["shape"] == [2]

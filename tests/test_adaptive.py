"""Adaptive design (simulate.adaptive): the candidates and choices reproducible by seed, a batch's spacing,
the emulator's variance and leave-one-out against independent computations, the believer against a
refitted GP, and the loop under real mpiexec on the built-in bistable simulator: end to end, failed runs
recorded and never proposed again, a kill mid-round resumed exactly."""

from __future__ import annotations

import itertools
import json
import sys
import time
from pathlib import Path

import numpy as np
import pyarrow.parquet as pq
import pytest
import yaml

from pipeline import Sim2dlError
from pipeline import config as cfg
from pipeline.design.acquisitions import ACQUISITIONS, Context
from pipeline.design.acquisitions.breed import bred_share
from pipeline.design.batch import believer_best
from pipeline.design.emulator import Emulator, Outputs
from pipeline.design.loop.rounds import check_rounds
from pipeline.design.space import candidate_pool, distances, parameter_columns, to_unit, unit_points
from pipeline.online.job import design_settings
from pipeline.simulators.bistable_run import solve

from .conftest import REPO, SLOW, kill_tree, run_cli, start_cli
from .helpers import board_events

SPACE = {
    "level": {"type": "uniform", "low": 0.05, "high": 0.6},
    "a": {"type": "uniform", "low": 0.1, "high": 0.45},
}
OUTPUTS = Outputs.of({"state": (16, 16), "mass": (10,)})


def simulated(unit: np.ndarray, space: dict = SPACE) -> np.ndarray:
    columns = parameter_columns(unit, space)
    rows = []
    for level, a in zip(columns["level"], columns["a"], strict=True):
        state, mass = solve(level, a, size=16, steps=60)
        rows.append(OUTPUTS.row({"state": state, "mass": mass}))
    return np.array(rows)


@pytest.fixture(scope="module")
def fitted() -> Emulator:
    x = candidate_pool(20, 2, 3, 0)
    return Emulator(OUTPUTS, seed=3).fit(x, simulated(x))


# surrogate_disagreement's ensemble, small enough for a unit test (simulate.adaptive.network)
SMALL_NETWORK = {
    "members": 2,
    "epochs": 40,
    "warm_epochs": 10,
    "batch_size": 8,
    "learning_rate": 0.003,
    "depth": 2,
    "width": 4,
    "dense": 32,
    "dropout": 0.0,
}


def context(emulator: Emulator, round_index: int = 1, seed: int = 3, spacing: float = 0.08) -> Context:
    return Context(
        done=emulator.x,
        avoid=emulator.x,
        emulator=emulator,
        pool=candidate_pool(256, 2, seed, round_index),
        spacing=spacing,
        round_index=round_index,
        rounds=4,
        runs_so_far=len(emulator.x),
        design="sobol",
        seed=seed,
        settings={"sigma": 0.05, "committee": 4, "network": SMALL_NETWORK},
    )


# ---------------------------------------------------------------- the pure core


def test_unit_coordinates_round_trip_every_kind_of_parameter():
    space = {
        "u": {"type": "uniform", "low": -1, "high": 3},
        "l": {"type": "log-uniform", "low": 1e-4, "high": 1e-1},
        "i": {"type": "int", "low": 2, "high": 6},
        "c": {"type": "choice", "values": ["x", "y", "z"]},
    }
    unit = candidate_pool(64, 4, 1, 0)
    values = parameter_columns(unit, space)
    back = unit_points(values, space)
    assert np.allclose(back[:, :2], unit[:, :2])  # continuous: exactly back
    # an int or a choice comes back at its slot's middle, within half a slot of where it was drawn
    assert np.all(np.abs(back[:, 2] - unit[:, 2]) <= 0.5 / 5 + 1e-12)
    assert np.all(np.abs(back[:, 3] - unit[:, 3]) <= 0.5 / 3 + 1e-12)
    assert np.allclose(to_unit(np.array([1e-4, 1e-1]), space["l"]), [0, 1])


@pytest.mark.parametrize("name", sorted(ACQUISITIONS))
def test_candidates_and_choices_are_reproducible_by_seed(fitted, name):
    assert np.array_equal(candidate_pool(128, 2, 3, 2), candidate_pool(128, 2, 3, 2))
    assert not np.array_equal(candidate_pool(128, 2, 3, 2), candidate_pool(128, 2, 3, 3))
    assert not np.array_equal(candidate_pool(128, 2, 3, 2), candidate_pool(128, 2, 4, 2))
    first = ACQUISITIONS[name].choose(context(fitted), 6)
    again = ACQUISITIONS[name].choose(context(fitted), 6)
    assert len(first.points) == 6
    assert np.array_equal(first.points, again.points) and np.array_equal(first.values, again.values)
    other = ACQUISITIONS[name].choose(context(fitted, seed=11), 6)
    assert not np.array_equal(first.points, other.points)


@pytest.mark.parametrize("name", sorted(set(ACQUISITIONS) - {"space_filling"}))
def test_a_batch_keeps_its_minimum_spacing(fitted, name):
    spacing = 0.12
    choice = ACQUISITIONS[name].choose(context(fitted, spacing=spacing), 8)
    inside = distances(choice.points, choice.points)[~np.eye(len(choice.points), dtype=bool)]
    assert len(choice.points) == 8 and inside.min() >= spacing
    assert distances(choice.points, fitted.x).min() >= spacing
    assert np.all((choice.points >= 0) & (choice.points < 1))


def test_the_emulators_variance_equals_an_independent_computation(fitted):
    """Each component: k(x, x) - k(x, X) (K + noise)^-1 k(X, x), scaled as its y, from the fitted
    hyperparameters written out (Matérn 5/2, anisotropic), summed; against the emulator and Posterior."""
    x = candidate_pool(50, 2, 9, 0)
    total = np.zeros(len(x))
    for process in fitted.processes:
        params = process.kernel_.get_params()
        amplitude, scales, noise = (
            params["k1__k1__constant_value"],
            params["k1__k2__length_scale"],
            params["k2__noise_level"],
        )

        def matern(a, b, amplitude=amplitude, scales=scales):
            r = np.sqrt(5) * np.sqrt((((a[:, None, :] - b[None, :, :]) / scales) ** 2).sum(-1))
            return amplitude * (1 + r + r**2 / 3) * np.exp(-r)

        train = fitted.x
        gram = matern(train, train) + noise * np.eye(len(train))
        cross = matern(x, train)
        prior = amplitude + noise
        total += (
            prior - np.einsum("ij,ji->i", cross, np.linalg.solve(gram, cross.T))
        ) * process._y_train_std**2
    assert np.allclose(fitted.variance(x), total, rtol=1e-6, atol=1e-9)
    assert np.allclose(np.sum(fitted.posterior(x).variances(), axis=0), total, rtol=1e-6, atol=1e-9)


def test_a_believed_point_conditions_the_variance_as_a_refitted_gp_would(fitted):
    """Kriging believer: after choosing a point, the variance left equals that of each component's GP
    refitted (same kernel, no optimiser) with the point added, whatever value it is believed to take."""
    from sklearn.base import clone

    pool = candidate_pool(64, 2, 5, 1)
    chosen, values = believer_best(fitted.posterior(pool), pool, 2, 0.0, np.zeros((0, 2)))
    first, second = chosen
    assert np.isclose(values[0], fitted.variance(pool[first : first + 1])[0], rtol=1e-6)
    refit = 0.0
    for process in fitted.processes:
        frozen = clone(process).set_params(kernel=process.kernel_, optimizer=None, normalize_y=False)
        x = np.vstack([fitted.x, pool[first]])
        frozen.fit(x, np.zeros(len(x)))  # a GP's variance does not depend on the values
        refit += (
            frozen.predict(pool[second : second + 1], return_std=True)[1][0] ** 2 * process._y_train_std**2
        )
    assert np.isclose(values[1], refit, rtol=1e-5)


@pytest.mark.parametrize("weighted", [False, True])
def test_a_points_integrated_variance_reduction_is_what_a_refitted_gp_takes_off(fitted, weighted):
    """ALC: the value of the first chosen point is the fall of the variance summed over the reference
    points when a GP with the same kernel is refitted with it; each later point's, given those before it
    believed (the sums of squares over the references are updated, never recomputed: this checks the
    updates, with every candidate a reference so that the believed points' covariances overlap). Weighted
    (error_weighted_variance): each reference's fall counts times its weight."""
    from sklearn.base import clone

    pool = candidate_pool(64, 2, 5, 1)
    references = np.arange(len(pool))
    weights = np.random.default_rng(4).uniform(0.01, 3.0, len(references)) if weighted else None
    chosen, values = believer_best(
        fitted.posterior(pool), pool, 4, 0.0, np.zeros((0, 2)), references, weights
    )

    def summed_variance(extra: list[int]) -> float:
        total = 0.0
        for process in fitted.processes:
            frozen = clone(process).set_params(kernel=process.kernel_, optimizer=None, normalize_y=False)
            x = np.vstack([fitted.x, pool[extra]]) if extra else fitted.x
            frozen.fit(x, np.zeros(len(x)))
            variance = frozen.predict(pool[references], return_std=True)[1] ** 2 * process._y_train_std**2
            total += (variance * (1.0 if weights is None else weights)).sum()
        return total

    for k, value in enumerate(values):
        assert np.isclose(value, summed_variance(chosen[:k]) - summed_variance(chosen[: k + 1]), rtol=1e-4)
    # and it is not the largest variance's choice: that one sits on the cube's boundary
    largest, _ = believer_best(fitted.posterior(pool), pool, 1, 0.0, np.zeros((0, 2)))
    assert values[0] >= summed_variance([]) - summed_variance(largest) - 1e-12


def test_error_weighted_variance_weighs_each_reference_by_its_nearest_runs_leave_one_out_error(fitted):
    """A reference's weight: FLOOR + the squared leave-one-out error (standardised outputs) of the run
    nearest to it (found here by brute force) over the runs' mean; and the batch goes where the runs
    disagree with the rest: nearer the worst-predicted run than integrated_variance's."""
    from pipeline.design.acquisitions.error_weighted_variance import FLOOR, reference_weights

    here = context(fitted)
    references = np.arange(128)
    weights = reference_weights(here, references)
    errors = (((fitted.loo() - fitted.y) / fitted.scale) ** 2).mean(axis=1)
    for r in (0, 17, 90):
        nearest = min(range(len(fitted.x)), key=lambda i: float(np.linalg.norm(here.pool[r] - fitted.x[i])))
        assert np.isclose(weights[r], FLOOR + errors[nearest] / errors.mean())
    worst = fitted.x[np.argmax(errors)]
    weighted = ACQUISITIONS["error_weighted_variance"].choose(here, 4).points
    plain = ACQUISITIONS["integrated_variance"].choose(here, 4).points
    assert distances(weighted, worst[None])[:, 0].mean() < distances(plain, worst[None])[:, 0].mean()


def test_a_rounds_space_filling_share_is_the_controls_own_continuation(fitted):
    """simulate.adaptive.space_filling_share: of each round's batch, round(share x batch) points are the
    initial design continued at the indices that follow the earlier rounds' share (so after any round the
    design holds a prefix of the plain Sobol design), the acquisition's the rest, at its spacing from them."""
    from pipeline.design.share import SPACE_FILLING, shared_choice
    from pipeline.ensemble.sampling import unit_design

    initial = len(fitted.x)
    sobol = unit_design("sobol", 64, 2, 3)
    for round_index in (1, 2, 3):
        here = context(fitted, round_index=round_index)
        here.settings.update(batch=6, initial=initial)
        here.space_filled = (round_index - 1) * 3  # the earlier rounds' share, as the runs table counts it
        choice = shared_choice(ACQUISITIONS["integrated_variance"], here, 6, 0.5)
        start = initial + (round_index - 1) * 3
        assert np.allclose(choice.points[:3], sobol[start : start + 3])
        assert choice.chosen_by == [SPACE_FILLING] * 3 + ["integrated_variance"] * 3
        assert distances(choice.points[3:], choice.points[:3]).min() >= here.spacing
    last = shared_choice(ACQUISITIONS["integrated_variance"], here, 2, 0.5)  # a last, shorter batch
    assert (
        np.allclose(last.points[:2], sobol[initial + 6 : initial + 8])
        and last.chosen_by == [SPACE_FILLING] * 2
    )
    alone = shared_choice(ACQUISITIONS["integrated_variance"], here, 6, 0.0)
    assert alone.chosen_by == ["integrated_variance"] * 6


def noisy_left_learnable_right(unit: np.ndarray, seed: int) -> np.ndarray:
    """16 outputs per run: noise that no run can teach where x0 < 0.5 (a fresh draw per run), a wave of one
    period across x1 where x0 >= 0.5 (learnable, and not yet learnt from 24 runs by one GP beside noise)."""
    rng = np.random.default_rng([seed, len(unit)])
    entries = np.linspace(0, 1, 16)
    learnable = np.sin(2 * np.pi * (unit[:, 1:2] + 0.5 * unit[:, :1] + entries[None]))
    noise = rng.normal(0.0, 1.0, size=(len(unit), 16))
    return np.where(unit[:, :1] < 0.5, noise, learnable)


def test_the_nugget_is_the_noise_runs_cannot_teach_and_none_where_the_function_is_smooth():
    from pipeline.design.acquisitions.error_weighted_variance import local_nuggets
    from pipeline.ensemble.sampling import unit_design

    x = unit_design("sobol", 64, 2, 5)
    noise = np.random.default_rng(0).normal(0.0, 1.0, size=(64, 8))
    nuggets, neighbourhoods = local_nuggets(x, noise, np.zeros(64, np.int64))
    assert 0.6 < np.median(nuggets) < 1.4  # the semivariance of independent unit draws is 1 at any distance
    assert all(len(n) == 9 and n[0] == i for i, n in enumerate(neighbourhoods))  # itself and its 8 nearest
    smooth = np.column_stack([x[:, 0] + 2 * x[:, 1], np.sin(3 * x[:, 0])])
    assert np.median(local_nuggets(x, smooth, np.zeros(64, np.int64))[0]) < 0.05 * smooth.var()
    # pairs never cross regimes: two constant regimes far apart have no nugget
    regimes = (x[:, 0] > 0.5).astype(np.int64)
    assert np.allclose(local_nuggets(x, 5.0 * regimes[:, None].astype(float), regimes)[0], 0.0)


def test_a_noisy_region_stops_attracting_runs():
    """Half the space is noise (irreducible), half a learnable function. Weighted by the whole leave-one-out
    error, error_weighted_variance sends most of its batch into the noise; with the nugget taken off
    (irreducible: nugget, the default) the batch goes where runs still teach."""
    from pipeline.ensemble.sampling import unit_design

    x = unit_design("sobol", 24, 2, 11)
    layout = Outputs.of({"y": (16,)})
    emulator = Emulator(layout, seed=11).fit(x, noisy_left_learnable_right(x, 11))
    share = {}
    for rule in ("none", "nugget"):
        here = context(emulator, seed=11, spacing=0.05)
        here.settings.update(irreducible=rule)
        points = ACQUISITIONS["error_weighted_variance"].choose(here, 8).points
        share[rule] = float(np.mean(points[:, 0] < 0.5))
    assert share["none"] >= 0.5 and share["nugget"] <= 0.25, share


def jump_across_the_diagonal(unit: np.ndarray) -> np.ndarray:
    """8 outputs per run: a jump of 1 where x0 + x1 crosses 1, beside a smooth wave along x0 on both sides."""
    wave = 0.1 * np.sin(2 * np.pi * (unit[:, :1] + np.linspace(0, 1, 8)[None]))
    return np.where((unit.sum(axis=1) > 1.0)[:, None], 1.0, 0.0) + wave


def test_the_boundary_entropy_is_the_weighted_share_of_each_regime_among_the_nearest_runs():
    """boundary_variance's classifier, against a hand computation: at a point, each regime's probability is
    the sum of 1/distance over its runs among the point's NEIGHBOURS nearest, over the sum for all of them;
    the entropy is divided by log(regimes). Deep inside a regime it is 0; halfway between two it is 1."""
    from pipeline.design.acquisitions.boundary_variance import NEIGHBOURS, boundary_entropy

    rng = np.random.default_rng(5)
    x = rng.uniform(size=(30, 2))
    labels = (x[:, 0] > 0.5).astype(np.int64) + (x[:, 1] > 0.7)  # three regimes
    points = rng.uniform(size=(20, 2))
    got = boundary_entropy(x, labels, points)
    for point, entropy in zip(points, got, strict=True):
        gaps = np.linalg.norm(x - point, axis=1)
        nearest = np.argsort(gaps)[:NEIGHBOURS]
        shares = np.array([(1 / gaps[nearest][labels[nearest] == k]).sum() for k in range(3)])
        shares = shares[shares > 0] / shares.sum()
        assert np.isclose(entropy, -(shares * np.log(shares)).sum() / np.log(3))
    two = np.array([[0.1, 0.5], [0.2, 0.5], [0.3, 0.5], [0.7, 0.5], [0.8, 0.5], [0.9, 0.5]])
    halves = np.array([0, 0, 0, 1, 1, 1])
    assert np.allclose(boundary_entropy(two, halves, np.array([[0.5, 0.5]])), 1.0)
    assert np.allclose(boundary_entropy(two[:3], halves[:3], np.array([[0.5, 0.5]])), 0.0)  # one regime


def test_boundary_variance_sends_the_batch_to_a_jump_and_without_one_continues_the_space_filling_design():
    """Where the outputs jump across a line, the batch lies nearer it than integrated_variance's (half the
    distance), half of each round the share's; where there are no regimes (a learnable wave beside noise:
    no clustering of the outputs is separated, silhouette at most 0.5) it has nothing to choose by, and the
    whole round continues the space-filling design after the runs that design gave so far: the control's
    own points, so the noise does not attract runs and no learner loses to the control."""
    from pipeline.design.acquisitions.boundary_variance import separated_regimes
    from pipeline.design.share import SPACE_FILLING, shared_choice
    from pipeline.ensemble.sampling import unit_design

    x = unit_design("sobol", 24, 2, 11)
    jump = Emulator(Outputs.of({"y": (8,)}), seed=11).fit(x, jump_across_the_diagonal(x))
    labels = separated_regimes((jump.y - jump.mean) / jump.scale, 4, 11)
    assert np.array_equal(labels == labels[0], (x.sum(axis=1) > 1.0) == (x[0].sum() > 1.0))  # the two sides
    here = context(jump, seed=11, spacing=0.05)
    gap = {
        name: float(np.abs(ACQUISITIONS[name].choose(here, 8).points.sum(axis=1) - 1.0).mean())
        for name in ("integrated_variance", "boundary_variance")
    }
    assert gap["boundary_variance"] < 0.6 * gap["integrated_variance"], gap
    boundary = ACQUISITIONS["boundary_variance"]
    here.settings.update(batch=8, initial=24)
    split = shared_choice(boundary, here, 8, 0.5)
    assert not boundary.defers(here) and split.chosen_by == [SPACE_FILLING] * 4 + ["boundary_variance"] * 4

    noisy = Emulator(Outputs.of({"y": (16,)}), seed=11).fit(x, noisy_left_learnable_right(x, 11))
    assert not separated_regimes((noisy.y - noisy.mean) / noisy.scale, 4, 11).any()
    here = context(noisy, seed=11, spacing=0.05)
    here.settings.update(batch=8, initial=24)
    here.space_filled = 4  # an earlier round's share: the design continues after it
    whole = shared_choice(boundary, here, 8, 0.5)
    assert boundary.defers(here) and whole.chosen_by == [SPACE_FILLING] * 8
    assert np.allclose(whole.points, unit_design("sobol", 36, 2, 11)[28:36]) and whole.figures == {
        "deferred": True
    }


# The preset's space: the jump (level ~ a) in a corner of it
def test_the_networks_batch_weighs_a_neighbourhood_not_a_spike_and_spreads_over_its_features():
    from pipeline.design.network import disagreement, feature_similarity, integrated_batch

    # two outputs of 1 and 3 entries: each weighs the same (the mean over its entries, summed)
    predictions = np.array([[[0.0, 1.0, 1.0, 1.0]], [[2.0, 3.0, 1.0, 1.0]]])  # members x 1 x 4
    assert disagreement(predictions, Outputs.of({"a": (1,), "b": (3,)})) == pytest.approx([1.0 + 1.0 / 3])
    # candidates on a line of the network's features: moderate disagreement over [0.2, 0.45], none
    # elsewhere, and one candidate alone at 0.9 that disagrees most
    features = np.linspace(0, 1, 201)[:, None]
    spread = np.where((features[:, 0] > 0.2) & (features[:, 0] < 0.45), 1.0, 0.01)
    spread[180] = 5.0
    # its width: the distance to the 10th nearest other, 5 steps of 0.005 (they lie on both sides)
    similarity = feature_similarity(features, features, neighbours=10)
    assert similarity[100, 105] == pytest.approx(np.exp(-0.5), rel=1e-6)
    everywhere = np.ones(201, bool)
    chosen, values = integrated_batch(spread, similarity, everywhere, 4, lambda i: everywhere)
    at = features[chosen, 0]
    # the region, not the spike, first: the disagreement its run would take off is the larger
    assert 0.2 < at[0] < 0.45 and values[0] > 5.0 * 1.5
    # the batch spreads: no two within twice the kernel's width, where the four largest lie side by side
    assert np.abs(at[:, None] - at[None, :])[~np.eye(4, dtype=bool)].min() >= 0.05
    largest = features[np.argsort(-spread, kind="stable")[:4], 0]
    assert np.abs(largest[1:, None] - largest[None, 1:])[~np.eye(3, dtype=bool)].min() < 0.01
    assert values == sorted(values, reverse=True)  # each run takes its share off before the next


CORNER = {
    "level": {"type": "uniform", "low": 0.3, "high": 1.0},
    "a": {"type": "uniform", "low": 0.0, "high": 0.4},
}


@pytest.fixture(scope="module")
def gathered() -> tuple[np.ndarray, np.ndarray]:
    """40 runs of the bistable code: 24 Sobol points and 16 gathered at its jump (as an acquisition would)."""
    from pipeline.ensemble.sampling import unit_design

    later = unit_design("sobol", 1024, 2, 3, start=24)
    columns = parameter_columns(later, CORNER)
    x = np.vstack([unit_design("sobol", 24, 2, 3), later[columns["level"] - columns["a"] < 0.1][:16]])
    return x, simulated(x, CORNER)


def test_regimes_split_the_jump_and_predict_it_better_than_one_gp(gathered):
    from pipeline.design.regimes import MIN_RUNS, RegimeEmulator, regime_labels

    x, y = gathered
    regimes = RegimeEmulator(OUTPUTS, seed=3).fit(x, y)
    sizes = np.bincount(regimes.labels)
    assert len(regimes.members) == len(sizes) >= 2 and sizes.min() >= MIN_RUNS
    assert np.array_equal(regimes.regime(x), regimes.labels)  # the classifier places every run in its regime
    z = (y - regimes.mean) / regimes.scale
    assert np.array_equal(regime_labels(z, 3, 3), regimes.labels)  # reproducible
    test = np.random.default_rng(8).random((64, 2))
    truth = simulated(test, CORNER)
    error = {
        kind: OUTPUTS.nrmse(emulator.predict(test), truth)["state"]
        for kind, emulator in (("regimes", regimes), ("gp", Emulator(OUTPUTS, seed=3).fit(x, y)))
    }
    assert error["regimes"] < 0.6 * error["gp"], error  # measured 0.035 against 0.117
    for k, member in enumerate(regimes.members):  # leave-one-out within the run's regime
        assert np.allclose(regimes.loo()[regimes.labels == k], member.loo())


def test_the_clusters_too_small_for_an_emulator_are_pooled_into_one_regime():
    """Four groups of outputs: 20 alike, 8 alike, and two pairs (states between regimes): k-means with 4
    clusters, the pairs pooled into a third regime; with one pair only, too few to pool, it joins the
    nearest group. Regimes are numbered by their first run."""
    from pipeline.design.regimes import regime_labels

    rng = np.random.default_rng(0)
    flat, other = rng.normal(0, 0.1, (20, 5)), rng.normal(5, 0.1, (8, 5))
    pair, far_pair = rng.normal(-5, 0.1, (2, 5)), rng.normal([0, 9, 0, 0, 0], 0.1, (2, 5))
    labels = regime_labels(np.vstack([flat, other, pair, far_pair]), 4, 1)
    assert labels.tolist() == [0] * 20 + [1] * 8 + [2] * 4
    labels = regime_labels(np.vstack([pair, flat, other]), 3, 1)
    assert labels.tolist() == [0] * 22 + [1] * 8  # the pair is nearer the flat group's centre (5) than (10)


def test_a_regime_of_equal_runs_is_predicted_as_they_are(recwarn):
    """A code whose output is exactly the same on one side of its threshold (here 0, on half the runs):
    that side is a regime of its own, predicted exactly, with no warning from its zero variance."""
    from pipeline.design.regimes import RegimeEmulator

    layout = Outputs.of({"state": (8,)})
    x = candidate_pool(12, 2, 0, 0)
    y = np.zeros((12, 8))
    y[x[:, 0] > 0.5] = 1 + x[x[:, 0] > 0.5, :1]
    regimes = RegimeEmulator(layout, seed=1).fit(x, y)
    assert len(regimes.members) == 2
    near = x + 0.01 * (x[:, :1] <= 0.5)  # points beside the zero side's runs
    assert np.allclose(regimes.predict(near[x[:, 0] <= 0.5]), 0.0, atol=1e-9)
    assert not [w for w in recwarn if issubclass(w.category, RuntimeWarning)]


def test_the_regimes_variance_is_its_regimes_in_the_designs_units_and_regimes_do_not_covary(gathered):
    """At each point: its regime's components' posterior variances, each spread over the output entries by
    its component and that regime's scale, divided by the whole design's scale, summed (computed entry by
    entry here); the posterior's covariance between points of different regimes is 0, so a point believed
    in one regime leaves the others' variances alone."""
    from pipeline.design.regimes import RegimeEmulator

    x, y = gathered
    regimes = RegimeEmulator(OUTPUTS, seed=3).fit(x, y)
    pool = candidate_pool(200, 2, 1, 1)
    regime = regimes.regime(pool)
    assert len(set(regime)) >= 2
    expected = np.zeros(len(pool))
    for i, point in enumerate(pool):
        member = regimes.members[regime[i]]
        entries = np.zeros(OUTPUTS.width)
        for c, process in enumerate(member.processes):
            std = process.predict(point[None], return_std=True)[1][0]
            entries += std**2 * (member.components[c] * member.scale) ** 2
        expected[i] = (entries / regimes.scale**2).sum()
    assert np.allclose(regimes.variance(pool), expected, rtol=1e-6, atol=1e-12)
    posterior = regimes.posterior(pool)
    assert np.allclose(np.sum(posterior.variances(), axis=0), expected, rtol=1e-6, atol=1e-12)
    first = int(np.argmax(regime == regime[0]))
    other = regime != regime[first]
    column = np.sum(np.abs(posterior.columns(first)), axis=0)
    among = np.sum(np.abs(posterior.among(np.array([first]))), axis=0)[0]
    assert np.all(column[other] == 0) and np.all(among[other] == 0) and column[~other].max() > 0


def test_leave_one_out_equals_a_refit_without_the_run(fitted):
    from sklearn.base import clone

    loo = fitted.loo()
    z = ((fitted.y - fitted.mean) / fitted.scale) @ fitted.components.T
    for i in (0, 7):
        keep = np.arange(len(fitted.x)) != i
        coefficients = []
        for c, process in enumerate(fitted.processes):
            frozen = clone(process).set_params(kernel=process.kernel_, optimizer=None)
            # normalize_y refits the mean and spread without run i: undo to compare with the closed form
            frozen.set_params(normalize_y=False)
            normalised = (z[:, c] - process._y_train_mean) / process._y_train_std
            frozen.fit(fitted.x[keep], normalised[keep])
            coefficients.append(
                frozen.predict(fitted.x[i : i + 1])[0] * process._y_train_std + process._y_train_mean
            )
        expected = (np.array(coefficients) @ fitted.components) * fitted.scale + fitted.mean
        assert np.allclose(loo[i], expected, rtol=1e-6, atol=1e-8)


def test_breeds_share_rises_as_melissa_schedules_it():
    assert bred_share(1, 10) == pytest.approx(0.15) and bred_share(10, 10) == pytest.approx(0.75)
    assert bred_share(5, 9) == pytest.approx(0.45) and bred_share(12, 10) == pytest.approx(0.75)


def test_adaptive_config_errors_name_the_key():
    base = {"simulate": {"adaptive": {"enabled": True, "outputs": ["state"]}}}
    with pytest.raises(Sim2dlError, match=r"simulate\.adaptive\.enabled"):
        cfg.validate(json.loads(json.dumps(base)))
    with pytest.raises(Sim2dlError, match=r"simulate\.adaptive\.outputs"):
        cfg.validate({"simulate": {"command": ["true"], "space": SPACE, "adaptive": {"enabled": True}}})
    budget = r"simulate\.runs': 10 runs, the adaptive design's budget, is below its initial design's 20"
    with pytest.raises(Sim2dlError, match=budget + r" \(simulate\.adaptive\.initial\)"):
        adaptive = {"enabled": True, "outputs": ["state"], "initial": 20}
        cfg.validate({"simulate": {"command": ["true"], "space": SPACE, "runs": 10, "adaptive": adaptive}})
    # the acquisition's name and what it works with come from its registry: checked as the simulate step
    # starts its rounds (pipeline.design.loop.rounds) or the online step its producers
    unknown = {**base["simulate"]["adaptive"], "acquisition": "alc"}
    config = cfg.validate({"simulate": {"command": ["true"], "space": SPACE, "adaptive": unknown}})
    names = r"'alc' is not one of \['boundary_variance', 'breed', "
    with pytest.raises(Sim2dlError, match=r"simulate\.adaptive\.acquisition': " + names):
        check_rounds(config["simulate"])
    with pytest.raises(Sim2dlError, match=r"simulate\.adaptive\.acquisition.*committee.*emulator 'regimes'"):
        check_rounds({"adaptive": {"acquisition": "committee", "emulator": "regimes"}})
    with pytest.raises(Sim2dlError, match=r"with train.online the trainers choose by breed or space_filling"):
        design_settings(
            {"simulate": {"adaptive": {"enabled": True, "acquisition": "variance", "emulator": "gp"}}}
        )


def test_a_design_made_before_the_emulator_key_keeps_its_digest_and_another_emulator_starts_afresh():
    """The digest that decides whether a rerun continues a design: with emulator gp, no space-filling share
    and the whole error (what designs were made with before those keys existed) it is the digest of the
    keys they were made with (the same sha256 of the same JSON), so they continue; regimes, or another
    count of them, or the defaults' share and nugget, is another design."""
    import hashlib

    from pipeline.design.loop.rounds import ADAPTIVE_DIGEST_KEYS, DIGEST_KEYS, design_digest

    path = REPO / "config" / "presets" / "adaptive-fronts.yaml"
    simulate = cfg.validate(yaml.safe_load(path.read_text()))["simulate"]
    before_keys = {"emulator": "gp", "space_filling_share": 0.0, "irreducible": "none"}
    gp = {**simulate, "adaptive": {**simulate["adaptive"], **before_keys}}
    before = {k: gp[k] for k in DIGEST_KEYS} | {k: gp["adaptive"][k] for k in ADAPTIVE_DIGEST_KEYS}
    old = hashlib.sha256(json.dumps(before, sort_keys=True, default=str).encode()).hexdigest()[:16]
    assert design_digest(gp) == old
    regimes = design_digest(simulate)
    more = design_digest({**simulate, "adaptive": {**simulate["adaptive"], "regimes": 5}})
    shared = design_digest({**gp, "adaptive": {**gp["adaptive"], "space_filling_share": 0.5}})
    assert len({old, regimes, more, shared}) == 4


# ---------------------------------------------------------------- the loop, under mpiexec

# The bistable simulator with a ledger of the runs it started (each run appends its name first).
LEDGER_RUN = """
import sys, time
from pipeline.simulators import bistable_run
ledger, pause, run, *argv = sys.argv[1:]
with open(ledger, "a") as f:
    f.write(run + "\\n")
time.sleep(float(pause))
bistable_run.main(argv)
"""


def adaptive_config(tmp_path: Path, pause: float = 0.0, runs: int = 20, **adaptive) -> Path:
    script = tmp_path / "ledger_run.py"
    script.write_text(LEDGER_RUN)
    preset = yaml.safe_load((REPO / "config" / "presets" / "adaptive-fronts.yaml").read_text())
    simulate = preset["simulate"]
    simulate["command"] = [
        sys.executable,
        str(script),
        str(tmp_path / "ledger.txt"),
        str(pause),
        "{run}",
        "--out",
        "{out}",
        "--level",
        "{level}",
        "--a",
        "{a}",
        "--size",
        "16",
        "--steps",
        "60",
    ]
    simulate["space"] = SPACE  # the tests' own (the failed runs' test fails a band of `a`)
    simulate["runs"] = runs  # the budget
    simulate["adaptive"] = {
        **simulate["adaptive"],
        "initial": 8,
        "batch": 4,
        "pool": 256,
        **adaptive,
    }
    simulate["max_failed_fraction"] = 1.0
    preset["workdir"] = str(tmp_path / "work")
    preset["source"]["fields"]["state"]["shape"] = [16, 16]
    path = tmp_path / "config.yaml"
    path.write_text(yaml.safe_dump(preset))
    return path


def runs(tmp_path: Path) -> list[dict]:
    return pq.read_table(tmp_path / "work" / "raw" / "runs.parquet").to_pylist()


def comparable(rows: list[dict]) -> list[dict]:
    """Rows without their times, NaN (round 0's acquisition value) as None: equal when the runs are."""
    return [
        {k: None if isinstance(v, float) and np.isnan(v) else v for k, v in r.items() if k != "seconds"}
        for r in rows
    ]


@SLOW
def test_the_loop_chooses_in_rounds_and_records_why(tmp_path):
    # the preset's, with its emulator: regimes
    path = adaptive_config(tmp_path, acquisition="error_weighted_variance")
    proc = run_cli(["simulate", "--config", str(path)], ranks=2, timeout=300)
    summary = json.loads(proc.stdout.strip().splitlines()[-1])
    assert summary["runs"] == 20 and summary["ok"] == 20 and summary["stopped"] == "budget"
    rows = runs(tmp_path)
    assert [r["run"] for r in rows] == [f"run-{i:06d}" for i in range(20)]
    assert [r["round"] for r in rows] == [0] * 8 + [1] * 4 + [2] * 4 + [3] * 4
    assert all(r["acquisition"] == "initial" and np.isnan(r["uncertainty"]) for r in rows[:8])
    # each round: 2 of its 4 runs the initial Sobol design continued (space_filling_share 0.5, the default),
    # the other 2 the acquisition's
    from pipeline.ensemble.sampling import unit_design

    simulate = yaml.safe_load(path.read_text())["simulate"]  # its space's order: the config's
    continued = unit_design("sobol", 14, 2, simulate["seed"], 8, 14)
    for round_index in (1, 2, 3):
        first = 4 + 4 * round_index
        filled, chosen = rows[first : first + 2], rows[first + 2 : first + 4]
        assert [r["acquisition"] for r in filled] == ["space_filling"] * 2
        unit = unit_points({k: np.array([r[k] for r in filled]) for k in SPACE}, simulate["space"])
        assert np.allclose(unit, continued[2 * round_index - 2 : 2 * round_index], atol=1e-6)
        assert all(
            r["acquisition"] == "error_weighted_variance"
            and r["acquisition_value"] > 0
            and r["uncertainty"] > 0
            for r in chosen
        )
    # each run's file holds what its row says it was run with
    import h5py

    for r in rows[::5]:
        with h5py.File(next((tmp_path / "work" / "raw").glob(f"0*/{r['run']}/bistable.h5")), "r") as f:
            assert np.allclose(f["params"][()], [r["level"], r["a"]], rtol=1e-6)
    rounds = json.loads((tmp_path / "work" / "raw" / "adaptive" / "rounds.json").read_text())
    fitted = [r for r in rounds if "validation_nrmse_mean" in r]
    assert [r["fitted_on"] for r in fitted] == [8, 12, 16, 20]
    assert all(set(r["validation_nrmse"]) == {"state"} for r in fitted)
    assert rounds[-1]["final"] and rounds[-1]["stopped"] == "budget"
    # TensorBoard: a point per round (the last: the final fit, which stopped the loop), read with its reader
    board = board_events(tmp_path / "work" / "raw" / "adaptive" / "tensorboard")["scalars"]
    assert board["runs"] == {0: 8, 1: 12, 2: 16, 3: 20, 4: 20}
    assert board["validation_nrmse_mean"] == pytest.approx(
        {r["round"]: r["validation_nrmse_mean"] for r in fitted}
    )
    assert (
        board["validation_nrmse/state"] == board["validation_nrmse_mean"]
        and 1 in board["acquisition_value/max"]
    )
    for name in ("design.png", "error.png"):
        assert (tmp_path / "work" / "raw" / "adaptive" / name).stat().st_size > 1000
    ledger = (tmp_path / "ledger.txt").read_text().split()
    assert sorted(ledger) == [r["run"] for r in rows]  # each run ran once
    shown = json.loads(run_cli(["status", str(tmp_path / "work"), "--json"], ranks=None).stdout)["steps"][0]
    assert shown["round"] == {
        "round": 4,
        "runs": 20,
        "validation_nrmse": round(fitted[-1]["validation_nrmse_mean"], 4),
    }
    # a rerun repeats nothing; a larger budget (simulate.runs) continues the same design
    run_cli(["simulate", "--config", str(path)], ranks=2, timeout=300)
    assert len((tmp_path / "ledger.txt").read_text().split()) == 20
    more = yaml.safe_load(path.read_text())
    more["simulate"]["runs"] = 24
    path.write_text(yaml.safe_dump(more))
    run_cli(["simulate", "--config", str(path)], ranks=2, timeout=300)
    again = runs(tmp_path)
    assert (
        len(again) == 24
        and comparable(again[:20]) == comparable(rows)
        and sorted((tmp_path / "ledger.txt").read_text().split()[20:])
        == [f"run-{i:06d}" for i in range(20, 24)]
    )


@SLOW
def test_failed_runs_are_recorded_and_never_proposed_again(tmp_path):
    path = adaptive_config(tmp_path, acquisition="breed", min_spacing=0.05)
    config = yaml.safe_load(path.read_text())
    config["simulate"]["command"] += ["--fail-above", "0.38"]
    config["simulate"]["retries"] = 0
    path.write_text(yaml.safe_dump(config))
    run_cli(["simulate", "--config", str(path)], ranks=2, timeout=300)
    rows = runs(tmp_path)
    failed = [r for r in rows if r["status"] != "ok"]
    assert failed and all(r["a"] > 0.38 and "exit" in r["reason"] for r in failed)
    assert all(r["status"] == "ok" for r in rows if r["a"] <= 0.38)
    unit = unit_points({n: np.array([r[n] for r in rows]) for n in SPACE}, SPACE)
    for i, row in enumerate(rows):
        if row["round"] == 0:
            continue
        earlier_failed = [
            j for j in range(i) if rows[j]["status"] != "ok" and rows[j]["round"] < row["round"]
        ]
        if earlier_failed:
            assert distances(unit[i : i + 1], unit[earlier_failed]).min() >= 0.05
    saved = np.load(tmp_path / "work" / "raw" / "adaptive" / "round-000.outputs.npz")
    round0 = [r for r in rows if r["round"] == 0]
    assert saved["ok"].tolist() == [r["status"] == "ok" for r in round0]
    assert len(saved["outputs"]) == sum(saved["ok"])  # never counted as data


@SLOW
def test_a_kill_mid_round_resumes_with_the_same_choices_and_no_run_repeated(tmp_path):
    killed = tmp_path / "killed"
    killed.mkdir()
    path = adaptive_config(killed, pause=0.4, acquisition="committee", emulator="gp")
    job = start_cli(["simulate", "--config", str(path)], 2)
    raw = killed / "work" / "raw"
    deadline = time.monotonic() + 240
    while time.monotonic() < deadline and not list(raw.glob("0*/run-00001[2-5]")):
        time.sleep(0.02)  # the first of round 2's runs (12..15) is complete
    kill_tree(job)
    adaptive = raw / "adaptive"
    assert (adaptive / "round-002.design.parquet").exists() and not (
        adaptive / "round-002.runs.parquet"
    ).exists()
    completed_before = {p.name for p in raw.glob("0*/run-*")}
    run_cli(["simulate", "--config", str(path)], ranks=2, timeout=300)
    fresh = tmp_path / "fresh"
    fresh.mkdir()
    run_cli(
        ["simulate", "--config", str(adaptive_config(fresh, acquisition="committee", emulator="gp"))],
        ranks=2,
        timeout=300,
    )

    assert comparable(runs(killed)) == comparable(runs(fresh))  # the same choices, the same outcomes
    ledger = (killed / "ledger.txt").read_text().split()
    assert sorted(set(ledger)) == [f"run-{i:06d}" for i in range(20)]
    assert all(ledger.count(run) == 1 for run in completed_before)  # completed runs never ran again
    assert len(ledger) - 20 <= 2  # at most the runs in flight at the kill (one per rank) ran twice


@SLOW
def test_the_network_chooses_trained_on_from_round_to_round_and_a_rerun_chooses_the_same(tmp_path):
    network = {**SMALL_NETWORK, "epochs": 60}
    path = adaptive_config(tmp_path, acquisition="surrogate_disagreement", runs=16, network=network)
    proc = run_cli(["simulate", "--config", str(path)], ranks=2, timeout=300)
    assert json.loads(proc.stdout.strip().splitlines()[-1])["ok"] == 16
    rows = runs(tmp_path)
    chosen = [r for r in rows if r["round"] > 0 and r["acquisition"] != "space_filling"]
    assert [r["round"] for r in chosen] == [1, 1, 2, 2]
    assert all(r["acquisition"] == "surrogate_disagreement" and r["acquisition_value"] > 0 for r in chosen)
    adaptive = tmp_path / "work" / "raw" / "adaptive"
    rounds = {r["round"]: r for r in json.loads((adaptive / "rounds.json").read_text())}
    # round 1 trains the members afresh, round 2 on from round 1's weights
    assert [rounds[r]["network_warm"] for r in (1, 2)] == [False, True]
    assert all(rounds[r]["network_seconds_training"] > 0 for r in (1, 2))
    kept = sorted(p.name for p in (adaptive / "network").iterdir())
    assert kept == [f"round-00{r}.member-{m}.npz" for r in (1, 2) for m in (0, 1)]
    # as if the step died once round 2 was chosen: it is chosen again, from round 1's kept weights, the same
    for name in ("design.parquet", "runs.parquet", "outputs.npz"):
        (adaptive / f"round-002.{name}").unlink()
    run_cli(["simulate", "--config", str(path)], ranks=2, timeout=300)
    assert comparable(runs(tmp_path)) == comparable(rows)


# The bistable simulator served persistently (simulate.persistent): each start appends a line to a ledger.
PERSISTENT_RUN = """
import json, os, sys
from pipeline.simulators import bistable_run
with open(sys.argv[1], "a") as f:
    f.write(f"start {os.getpid()}\\n")
for line in sys.stdin:
    run = json.loads(line)
    argv = ["--out", run["out"], "--level", str(run["level"]), "--a", str(run["a"]), "--size", "16"]
    bistable_run.main([*argv, "--steps", "60"])
    print("sim2dl-done", run["run"], flush=True)
"""


@SLOW
def test_a_persistent_simulator_starts_once_per_rank_across_the_rounds(tmp_path):
    path = adaptive_config(tmp_path, runs=16, acquisition="integrated_variance", emulator="gp")
    script = tmp_path / "persistent_run.py"
    script.write_text(PERSISTENT_RUN)
    config = yaml.safe_load(path.read_text())
    ledger = tmp_path / "starts.txt"
    config["simulate"] |= {"command": [sys.executable, str(script), str(ledger)], "persistent": True}
    path.write_text(yaml.safe_dump(config))
    proc = run_cli(["simulate", "--config", str(path)], ranks=2, timeout=300)
    summary = json.loads(proc.stdout.strip().splitlines()[-1])
    assert summary["ok"] == 16 and summary["rounds"] == 3
    # 3 rounds on 2 ranks: a simulator per rank that ran any (a farm per round would start up to 6)
    assert 1 <= len(ledger.read_text().splitlines()) <= 2


# ---------------------------------------------------------------- online: the trainers choose


def test_the_chosen_share_rises_as_breed_s_and_the_draw_depends_on_seed_and_run_alone():
    from pipeline.design.loop.online import chosen_share, takes_choice

    shares = [chosen_share(i, 8, 40) for i in range(40)]
    assert shares[:8] == [0.0] * 8 and shares[8] == pytest.approx(0.15) and shares[39] == pytest.approx(0.75)
    assert all(b > a for a, b in itertools.pairwise(shares[8:]))
    draws = [takes_choice(5, i, 0.5) for i in range(400)]
    assert draws == [takes_choice(5, i, 0.5) for i in range(400)] and 150 < sum(draws) < 250
    assert draws != [takes_choice(6, i, 0.5) for i in range(400)] and not any(
        takes_choice(5, i, 0.0) for i in range(50)
    )


class FakeWorld:
    """The two messages the design queue exchanges, held in lists: what a test of the pure hand-out needs."""

    def __init__(self, choices: list) -> None:
        self.choices, self.sent = list(choices), []

    def Iprobe(self, source: int, tag: int) -> bool:
        return bool(self.choices)

    def recv(self, source: int, tag: int):
        return self.choices.pop(0)

    def send(self, payload, dest: int, tag: int) -> None:
        self.sent.append((payload, dest, tag))


def test_the_design_queue_is_bounded_keeps_its_spacing_journals_and_a_rerun_hands_out_the_same(tmp_path):
    from pipeline.design.loop.online import DesignQueue, chosen_share, takes_choice
    from pipeline.ensemble import messages
    from pipeline.ensemble.plan import CHOSEN, CONTINUED, EnsemblePlan

    adaptive = {"initial": 4, "queue": 3, "sigma": 0.05, "min_spacing": 0.001}
    settings = {
        "runs": 24,
        "design": "sobol",
        "space": SPACE,
        "seed": 9,
        "adaptive": adaptive,
        "choosing": {"acquisition": "breed", **adaptive},
    }
    rng = np.random.default_rng(0)
    offered = [list(rng.random((5, 2))), [float(v) for v in rng.random(5)]]
    # the queue keeps the last 3; the first of those is within min_spacing of run 0's point: skipped
    offered[0][2] = EnsemblePlan.draw(settings).unit_points(0, 1)[0] + 0.0005
    journal = tmp_path / "online_choices.jsonl"

    def hand_out_all(choices: list) -> tuple[EnsemblePlan, FakeWorld]:
        plan = EnsemblePlan.draw(settings)
        world = FakeWorld(choices)
        queue = DesignQueue(settings, world, 1, journal, validation_every=5)
        queue.restore(plan)
        for index in range(len(plan)):
            queue(plan, index, index + 1)
        return plan, world

    plan, world = hand_out_all([offered])
    chosen = np.flatnonzero(~np.isnan(plan.chosen[:, 0]))
    wanted = [i for i in range(24) if i % 5 != 4 and takes_choice(9, i, chosen_share(i, 4, 24))]
    # the queue held the last 3 offered (bounded), the first of them taken at the first run that wanted
    # one; every chosen run wanted one, none in the space-filling start nor held out for validation
    assert list(chosen) == wanted[:2] and len(wanted) > 2 and wanted[0] >= 4
    assert np.array_equal(plan.chosen[chosen], np.array(offered[0][3:]))
    table = plan.block(0)
    assert [table["acquisition"][i].as_py() for i in range(24)] == [
        CHOSEN if i in chosen else CONTINUED for i in range(24)
    ]
    assert table["acquisition_value"].to_pylist()[chosen[0]] == offered[1][3]
    handed = [payload for payload, dest, tag in world.sent if tag == messages.HANDED]
    assert [run for run, _ in handed] == list(range(24))
    points = np.array([point for _, point in handed])
    for i in chosen:  # each chosen point min_spacing away from every run handed out before it
        assert distances(points[i : i + 1], points[:i]).min() >= 0.001
    assert [json.loads(line)["run"] for line in journal.read_text().splitlines()] == list(chosen)
    # a rerun (the trainers offering nothing yet) hands the journaled runs the same points
    again, _ = hand_out_all([])
    assert np.array_equal(again.chosen, plan.chosen, equal_nan=True)
    assert again.block(0).equals(plan.block(0))


@SLOW
def test_online_the_trainers_choose_as_runs_complete_and_a_rerun_on_two_ranks_keeps_the_choices(tmp_path):
    """docs/ensembles.md's online block, 2 producers (the farm hands chosen runs to the other producer too)
    and 1 training rank: the runs table says which runs the trainers chose (Breed on the loss at arrival),
    their points are the journal's, spaced from every earlier run; validation runs and the start stay
    space-filling; the choices are in TensorBoard. A rerun on 2 ranks (1 producer) repeats no run and keeps
    every choice."""
    from .helpers import online_config

    config = online_config(
        tmp_path,
        runs=36,
        samples=2,
        chosen=True,
        optimizer_steps=200,
        validate_every_steps=2,
        statistics_runs=1,
        buffer={"capacity": 32, "watermark": 4, "max_reuse": 64},
    )
    assert config["simulate"]["adaptive"]["acquisition"] == "breed"  # docs/ensembles.md's block, smaller:
    config["simulate"]["adaptive"].update({"initial": 6, "queue": 6, "min_spacing": 0.02})
    config["train"]["online"]["producers"] = 2
    flag = tmp_path / "work" / "train" / "metrics.json"
    config["simulate"]["command"] = [
        sys.executable,
        str(REPO / "tests" / "programs" / "after_first_validation.py"),
        str(flag),
        "{run}",
        "6",
        "--",
        *config["simulate"]["command"],
    ]
    path = tmp_path / "config.yaml"
    path.write_text(yaml.safe_dump(config))
    run_cli(["online", "--config", str(path)], ranks=3, timeout=600)
    raw = Path(cfg.source_dir(config))
    runs = pq.read_table(raw / "runs.parquet").to_pylist()
    assert len(runs) == 36 and all(r["status"] == "ok" for r in runs)
    chosen = [i for i, r in enumerate(runs) if r["acquisition"] == "breed"]
    assert chosen, "no run took the trainers' choice"
    assert all(i >= 6 and i % 5 != 4 for i in chosen)  # not the start, not a validation run
    assert all(
        r["acquisition"] == "space_filling" and r["acquisition_value"] is None
        for i, r in enumerate(runs)
        if i not in chosen
    )
    assert all(runs[i]["acquisition_value"] > 0 for i in chosen)  # a parent's loss at arrival
    [journal] = raw.glob("online_choices-*.jsonl")
    entries = [json.loads(line) for line in journal.read_text().splitlines()]
    assert [e["run"] for e in entries] == chosen
    # in the order the file gives (the design's)
    space = yaml.safe_load(path.read_text())["simulate"]["space"]
    for entry in entries:  # the run's parameters are the journaled point's (its row, its command's arguments)
        row = runs[entry["run"]]
        assert [row[name] for name in space] == pytest.approx(
            [
                spec["low"] + u * (spec["high"] - spec["low"])
                for u, spec in zip(entry["point"], space.values(), strict=True)
            ]
        )
    import h5py

    for i in chosen:  # the simulator ran at the chosen point, whichever producer ran it
        [cube] = sorted(raw.glob(f"*/{runs[i]['run']}/cube_00000.h5"))
        with h5py.File(cube) as f:
            assert f["params"][()] == pytest.approx(
                [runs[i][n] for n in ("sigma_8", "n_s", "omega_m")], rel=1e-6
            )
    unit = np.array([[(r[n] - s["low"]) / (s["high"] - s["low"]) for n, s in space.items()] for r in runs])
    for i in chosen:
        assert distances(unit[i : i + 1], unit[:i]).min() >= 0.02
    board = board_events(tmp_path / "work" / "train" / "tensorboard" / "online")["scalars"]
    assert board["choice/queue"] and max(board["choice/parents"].values()) >= 2
    summary = json.loads((tmp_path / "work" / "train" / "summary.json").read_text())
    assert summary["online"]["steps"] > 0 and summary["online"]["runs_table"]
    # a rerun: every run complete, none repeated; the chosen runs keep their points
    logs = {p: p.stat().st_mtime_ns for p in (raw / "logs").rglob("*.log")}
    config["train"]["online"]["producers"] = 1
    path.write_text(yaml.safe_dump(config))
    run_cli(["online", "--config", str(path)], ranks=2, timeout=600)
    again = pq.read_table(raw / "runs.parquet").to_pylist()
    assert [{k: r[k] for k in (*space, "acquisition", "acquisition_value")} for r in again[: len(runs)]] == [
        {k: r[k] for k in (*space, "acquisition", "acquisition_value")} for r in runs
    ]
    assert {p: p.stat().st_mtime_ns for p in (raw / "logs").rglob("*.log")} == logs

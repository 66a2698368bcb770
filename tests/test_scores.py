"""The rule every score follows (pipeline/data/scores.py): NRMSE per field over the evaluated set, which a
state that is constant on its own cannot inflate, VRMSE per sample over the samples with spread, and the
count of those too flat for it; computed by hand here, streamed in batches as the tasks stream them, and
through the tasks: a next-state model far better than persistence except on a few flat windows is said to
be better."""

from __future__ import annotations

import numpy as np
import pytest

from pipeline.data.scores import SUMS, batch_sums, field_scores, nrmse, nrmse_of_sums, vrmse, vrmse_of_sums
from pipeline.training.tasks.base import DataSpec, LabelField
from pipeline.training.tasks.next_state import NextState
from pipeline.training.tasks.surrogate import Surrogate


def uniform_and_patterned(rng: np.random.Generator) -> np.ndarray:
    """6 states of 4 x 4: two dead (0 everywhere), two uniform living (0.5), two with a pattern."""
    dead, living = np.zeros((2, 4, 4)), np.full((2, 4, 4), 0.5)
    patterned = 0.5 + 0.2 * rng.normal(size=(2, 4, 4))
    return np.concatenate([dead, living, patterned])


def test_nrmse_over_uniform_states_is_the_rmse_over_the_sets_spread_by_hand():
    rng = np.random.default_rng(0)
    true = uniform_and_patterned(rng)
    predicted = true + 0.01  # off by 0.01 everywhere: the flat states too
    by_hand = 0.01 / np.sqrt(np.mean((true - true.mean()) ** 2))
    assert nrmse(predicted, true) == pytest.approx(by_hand, rel=1e-9)
    sums = batch_sums(predicted, true)
    assert nrmse_of_sums(sums) == pytest.approx(by_hand, rel=1e-9)
    # VRMSE per sample: the 4 uniform states read 0.01 / sqrt(1e-7) = 31.6 each; they are counted, not scored
    assert vrmse(predicted, true)[:4] == pytest.approx(0.01 / np.sqrt(1e-7))
    assert sums[SUMS.index("flat")] == 4 and sums[SUMS.index("with_spread")] == 2
    patterned = [0.01 / np.sqrt(t.var() + 1e-7) for t in true[4:]]
    assert vrmse_of_sums(sums) == pytest.approx(np.mean(patterned), rel=1e-9)
    # predicting the set's mean scores 1, a perfect prediction 0
    assert nrmse(np.full_like(true, true.mean()), true) == pytest.approx(1.0)
    assert nrmse(true, true) == 0.0


def test_the_sums_add_over_batches_and_a_shift_loses_no_digits():
    """Streamed in batches (the ranks' and the loader's), the sums give the whole set's figures; a field
    far from 0 with a small spread is scored about its training mean, not about 0."""
    rng = np.random.default_rng(1)
    true = 1e6 + 1e-2 * rng.normal(size=(40, 8))
    predicted = true + 1e-3 * rng.normal(size=true.shape)
    whole = nrmse(predicted - 1e6, true - 1e6)
    summed = sum(
        batch_sums(predicted[i : i + 7], true[i : i + 7], shift=1e6, reference_variance=1e-4)
        for i in range(0, 40, 7)
    )
    assert nrmse_of_sums(summed) == pytest.approx(whole, rel=1e-9)
    assert summed[SUMS.index("flat")] == 0 and summed[SUMS.index("with_spread")] == 40


def test_a_field_that_never_varies_has_no_nrmse_and_no_figure_is_infinite():
    true = np.zeros((5, 3, 3))
    scores = field_scores(["dead"], batch_sums(true + 0.1, true)[None])
    assert scores["nrmse"] == {"dead": None} and scores["vrmse"] == {"dead": None}
    assert scores["vrmse_flat"] == {"dead": 5} and scores["nrmse_mean"] is None


def test_the_surrogate_scores_each_output_by_nrmse_with_flat_runs_counted():
    """Runs that died (their state exactly 0) and runs that lived: the network off by 0.01 everywhere. NRMSE
    reads the error against the set's spread; the old per-sample mean would have read 16 on the same
    predictions."""
    rng = np.random.default_rng(2)
    state = uniform_and_patterned(rng).reshape(6, 16)
    mass = rng.normal(1.0, 0.3, size=(6, 3))
    labels = np.concatenate([state, mass], axis=1)
    outputs = labels + 0.01
    fields = (LabelField("state", (4, 4), "float32"), LabelField("mass", (3,), "float32"))
    task = Surrogate({}, DataSpec("params", (2,), fields, ("state", "mass")))
    evaluation = task.evaluation()
    task.update(evaluation, outputs[:4], labels[:4], np.zeros((4, 2)))
    task.update(evaluation, outputs[4:], labels[4:], np.zeros((2, 2)))
    scores = task.metrics(evaluation)
    assert scores["nrmse"]["state"] == pytest.approx(nrmse(outputs[:, :16], state), rel=1e-9)
    assert scores["nrmse"]["mass"] == pytest.approx(nrmse(outputs[:, 16:], mass), rel=1e-9)
    assert scores["nrmse"]["state"] < 0.1 and scores["vrmse_flat"]["state"] == 4
    assert vrmse(outputs[:, :16], state).mean() > 10  # what the summary said before
    assert task.scores == ("nrmse",)
    worse = {"nrmse": {"state": scores["nrmse"]["state"] / 2, "mass": scores["nrmse"]["mass"]}}
    assert task.classical_baseline().below(scores, worse, 0.0) == ["state"]


def test_a_next_state_far_better_than_persistence_but_for_a_few_flat_windows_is_said_to_be_better():
    """48 windows of a reaction: 44 living (a pattern that drifts), 4 dead (exactly 0, and the network
    predicts 0.01 there). The network's one-step error on the living windows is a tenth of persistence's:
    NRMSE says so, and so does VRMSE over the windows with spread; the per-window mean over all windows,
    which the dead ones carry, said the network was worse."""
    rng = np.random.default_rng(3)
    grid = (8, 8)
    now = 1.0 + 0.3 * rng.normal(size=(48, *grid))
    step = 0.3 * rng.normal(size=(48, *grid))
    later = now + step
    now[:4], later[:4] = 0.0, 0.0  # dead runs
    predicted = later + 0.1 * step  # a tenth of the step's error
    predicted[:4] = 1e-2
    data = DataSpec("u", (2, *grid), (), (), feature_statistics={"u": {"mean": 1.0, "std": 0.3}})
    task = NextState({"next_state": {"states_in": 1, "states_out": 1}}, data)
    task.check()
    normal = lambda a: ((a - 1.0) / 0.3).reshape(48, -1)  # noqa: E731
    evaluation = task.evaluation()
    task.update(evaluation, normal(predicted), normal(later), normal(now))
    scores = task.metrics(evaluation)
    assert scores["nrmse"]["u"] < 0.2 * scores["persistence_nrmse"]["u"], scores
    assert scores["vrmse"]["u"] < 0.2 * scores["persistence_vrmse"]["u"]
    assert scores["vrmse_flat"]["u"] == scores["persistence_vrmse_flat"]["u"] == 4
    every = lambda p: vrmse(p, later).mean()  # noqa: E731  the old headline, dead windows included
    assert every(predicted) > every(now)
    assert (
        task.classical_baseline().below(scores, {"nrmse": {"u": scores["persistence_nrmse"]["u"]}}, 0.0) == []
    )

"""What every training mode leaves on disk to resume from (pipeline.training.checkpoints): the one resume key
with each mode's length left out, the one weights format, and the one restore, on a real Keras model and
real TF checkpoints (one process: the collectives are SerialComm's; the modes' launches under MPI are in
test_train, test_population and test_online)."""

from __future__ import annotations

import json

import numpy as np
import pytest

from pipeline import Sim2dlError
from pipeline.paths import TrainPaths
from pipeline.runtime.mpi import SerialComm
from pipeline.training import exchange
from pipeline.training.checkpoints import (
    claim,
    load_history,
    packed_weights,
    restore,
    restore_kept,
    resume_key,
    save_model_weights,
    save_packed,
    save_window,
)
from pipeline.training.checksum import weights_checksum
from pipeline.training.kernel import Kept, history_row
from pipeline.training.models import model_source

SETTINGS = {
    "learning_rate": 1e-3,
    "epochs": 4,
    "patience": 0,
    "keep": "best",
    "threads": 2,
    "online": {"optimizer_steps": 100, "buffer": {"capacity": 64}},
    "population": {"rounds": 3, "trainers": 2},
}


def changed(section: str | None, key: str, value: object) -> dict:
    if section is None:
        return {**SETTINGS, key: value}
    return {**SETTINGS, section: {**SETTINGS[section], key: value}}


LENGTHS = [
    ("epoch", (None, "epochs")),
    ("step", ("online", "optimizer_steps")),
    ("round", ("population", "rounds")),
]


@pytest.mark.parametrize(("unit", "length"), LENGTHS)
def test_a_longer_run_of_each_mode_continues_and_a_new_setting_starts_afresh(
    unit: str, length: tuple
) -> None:
    source = model_source("cosmoflow")
    key = resume_key(SETTINGS, "digest", source, unit)
    assert resume_key(changed(*length, 1000), "digest", source, unit) == key  # the mode's own length
    assert resume_key(changed(None, "patience", 5), "digest", source, unit) == key  # not learnt
    assert resume_key(changed(None, "learning_rate", 2e-3), "digest", source, unit) != key
    assert resume_key(SETTINGS, "other data", source, unit) != key
    assert resume_key(SETTINGS, "digest", model_source("unet2d"), unit) != key
    others = [("online", "optimizer_steps"), ("population", "rounds")]
    for section, name in (o for o in others if o != length):  # another mode's length is a setting like any
        assert resume_key(changed(section, name, 1000), "digest", source, unit) != key


def small_model(seed: int, width: int = 3):
    import keras

    keras.utils.set_random_seed(seed)
    model = keras.Sequential(
        [
            keras.Input((4,)),
            keras.layers.Dense(width),
            keras.layers.BatchNormalization(),
            keras.layers.Dense(1),
        ]
    )
    optimizer = keras.optimizers.Adam(1e-2)
    model.compile(optimizer, "mse")
    return model, optimizer


def test_the_best_unit_and_the_latest_checkpoint_come_back_exactly(tmp_path) -> None:
    paths, comm = TrainPaths(tmp_path), SerialComm()
    model, optimizer = small_model(0)
    key = resume_key(SETTINGS, "digest", model_source("cosmoflow"), "step")
    restored = restore(key, paths, model, optimizer, comm, "step")
    assert (restored.done, restored.history) == (0, [])
    kept, history, best = Kept("best", unit="step"), [], None
    x, y = np.random.default_rng(0).normal(size=(32, 4)), np.zeros((32, 1))
    for step, val_loss in zip((10, 20, 30), (0.5, 0.2, 0.4), strict=True):
        model.fit(x, y, epochs=1, verbose=0)
        history.append(history_row("step", step, 1.0, val_loss, 10.0, 0.0, 1.0))
        improved = kept.consider(step, val_loss, lambda: packed_weights(model))
        best = [w.copy() for w in model.get_weights()] if improved else best
        save_window(paths, history, restored.checkpoint, kept, improved)
    last = [w.copy() for w in model.get_weights()]
    # the older gone
    assert sorted(p.name for p in paths.checkpoints.glob("best-*")) == ["best-step-00020.npy"]
    assert not [p for p in paths.checkpoints.iterdir() if ".tmp" in p.name]
    # the history runs past the checkpoint (a kill between the two writes): the resume truncates it
    history.append(history_row("step", 40, 1.0, 0.1, 10.0, 0.0, 1.0))
    paths.metrics.write_text(json.dumps(history))

    fresh, fresh_optimizer = small_model(1)
    again = restore(key, paths, fresh, fresh_optimizer, comm, "step")
    assert again.done == 30 and [row["step"] for row in again.history] == [10, 20, 30]
    assert all(np.array_equal(a, b) for a, b in zip(fresh.get_weights(), last, strict=True))
    resumed = Kept.resumed("best", again.history, "step")
    assert resumed.at == 20 and resumed.weights is None
    assert restore_kept(resumed, fresh, paths, again.history) is None  # validated again: not made by this run
    assert all(np.array_equal(a, b) for a, b in zip(fresh.get_weights(), best, strict=True))

    # another key: the directory is another run's, removed, and training starts afresh
    assert claim(paths.checkpoints, key + "x", comm, writes=True)
    assert restore(key + "x", paths, *small_model(2), comm, "step").done == 0
    assert load_history(paths.root)  # the history file is the step's to rewrite, not the claim's


def test_packed_weights_are_exact_for_every_dtype(tmp_path) -> None:
    import tensorflow as tf

    variables = [
        tf.Variable(np.arange(6, dtype=np.float32).reshape(2, 3) / 7),
        tf.Variable(np.int64(2**40 + 3)),
        tf.Variable(np.array([0.1, -2.5], np.float16)),
    ]
    path = tmp_path / "kept.npy"
    save_packed(path, exchange.pack(variables))
    copies = [tf.Variable(tf.zeros_like(v)) for v in variables]
    exchange.unpack(copies, np.load(path))
    for v, c in zip(variables, copies, strict=True):
        assert c.dtype == v.dtype and np.array_equal(c.numpy(), v.numpy())
    with pytest.raises(ValueError, match="not the same model"):
        exchange.unpack(copies[:2], np.load(path))


def same_weights(model, other) -> bool:
    return all(np.array_equal(a, b) for a, b in zip(model.get_weights(), other.get_weights(), strict=True))


def test_a_fresh_run_warm_starts_from_a_finished_runs_kept_weights_and_a_resumed_run_does_not(
    tmp_path,
) -> None:
    """train.warm_start: true takes this directory's kept weights (none yet: the initialisation stays), a
    path another run's; a run with a checkpoint of its own key resumes it instead; another model is refused
    naming the key and the variable."""
    comm, key = SerialComm(), resume_key(SETTINGS, "digest", model_source("cosmoflow"), "epoch")
    finished = TrainPaths(tmp_path / "finished")
    trained, _ = small_model(0)
    x = np.random.default_rng(0).normal(size=(32, 4))
    trained.fit(x, x[:, :1], epochs=2, verbose=0)  # the batch norm's statistics (not trained) move too
    save_model_weights(finished.kept_weights, trained)
    assert not [p for p in finished.root.iterdir() if ".tmp" in p.name]

    model, optimizer = small_model(1)
    restored = restore(key, finished, model, optimizer, comm, "epoch", True)
    assert same_weights(model, trained) and restored.done == 0
    assert restored.warm_start == {"from": str(finished.kept_weights), "checksum": weights_checksum(trained)}

    other = TrainPaths(tmp_path / "other")  # a path: another run's train directory, or its file
    for named in (finished.root, finished.kept_weights):
        model, optimizer = small_model(1)
        assert restore(key, other, model, optimizer, comm, "epoch", str(named)).warm_start is not None
        assert same_weights(model, trained)
    for setting in (False, True):  # not asked, or asked before this directory has a finished run
        model, optimizer = small_model(1)
        assert restore(key, other, model, optimizer, comm, "epoch", setting).warm_start is None
        assert same_weights(model, small_model(1)[0])

    # a checkpoint of this run's own key: resumed, never overwritten by the warm start
    model, optimizer = small_model(2)
    restored = restore(key, finished, model, optimizer, comm, "epoch", True)
    restored.checkpoint.save(1)
    resumed, resumed_optimizer = small_model(3)
    again = restore(key, finished, resumed, resumed_optimizer, comm, "epoch", True)
    assert again.done == 1 and again.warm_start is None and same_weights(resumed, model)

    with pytest.raises(Sim2dlError, match=r"'train.warm_start'.*missing"):
        restore(key, other, *small_model(1), comm, "epoch", str(tmp_path / "nowhere"))
    with pytest.raises(
        Sim2dlError,
        match=r"'train.warm_start'.*variable 0 .*float32\[4, 5\] in this model, "
        r"float32\[4, 3\] there",
    ):
        restore(
            key, TrainPaths(tmp_path / "wider"), *small_model(1, width=5), comm, "epoch", str(finished.root)
        )

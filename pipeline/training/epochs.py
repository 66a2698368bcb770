"""The epochs of one data-parallel model (the train step's loop): steps over the rank's batches at the
scheduled learning rate, batch-norm statistics averaged over the ranks, validation, the epoch's row of
metrics (averaged over ranks), a checkpoint per epoch (the history first), the best epoch's weights kept
(train.keep) and early stopping (train.patience); the history files (metrics.json and .csv); restoring the
latest checkpoint of the same key. Memory: the model, its optimizer and a copy of the best epoch's
weights; time: epochs x (steps + one validation pass).
"""

from __future__ import annotations

import json
import logging
import math
import os
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from pipeline import Sim2dlError
from pipeline.paths import TrainPaths
from pipeline.storage.fsutil import write_json_atomic, write_text_atomic
from pipeline.training.checkpoints import discard_foreign_checkpoints
from pipeline.training.optimizer import learning_rate
from pipeline.training.tasks import Evaluation

log = logging.getLogger(__name__)


def run_epochs(settings: Mapping[str, Any], steps: int, groups: int, split: int, model: Any, optimizer: Any,
               train_step: Any, iterator: Any, validate: Callable[[], tuple[float, Evaluation]],
               restored: Restored, paths: TrainPaths) -> tuple[list[dict[str, Any]], Any, Kept]:  # fmt: skip
    """The epochs from the restored one to train.epochs (or until train.patience stops them): returns the
    history, the last epoch's validation (None if no epoch was left) and what train.keep kept. groups: the
    data-parallel groups (the learning rate scales with them); split: ranks sharing a sample."""
    import horovod.tensorflow as hvd
    import tensorflow as tf

    history = restored.history
    rank = hvd.rank()

    def one_epoch(epoch: int, first: bool) -> tuple[dict[str, Any], tuple[float, Evaluation]]:
        """The steps of one epoch, then validation: the epoch's row of metrics (averaged over ranks) and
        the validation (loss, evaluation)."""
        waited, losses = 0.0, []
        epoch_start = time.perf_counter()
        for step in range(steps):
            optimizer.learning_rate.assign(learning_rate(settings, groups, epoch + step / steps))
            t0 = time.perf_counter()
            x, y = next(iterator)
            waited += time.perf_counter() - t0
            losses.append(float(train_step(x, y, first and step == 0)))
        seconds = time.perf_counter() - epoch_start
        # State that is not trained (batch-norm moving statistics) follows each rank's own batches: the
        # ranks' mean, so that every rank validates and saves the same model.
        for variable in model.non_trainable_variables:
            if variable.dtype.is_floating:
                variable.assign(hvd.allreduce(variable, op=hvd.Average))
        evaluation = validate()
        rate = steps * settings["batch_size"] / seconds / split  # a group's ranks share its samples
        return {
            "epoch": epoch + 1,
            "loss": float(hvd.allreduce(tf.constant(np.mean(losses)), op=hvd.Average)),
            "val_loss": evaluation[0],
            "samples_per_s": float(hvd.allreduce(tf.constant(rate), op=hvd.Sum)),
            "input_wait_fraction": float(hvd.allreduce(tf.constant(waited / seconds), op=hvd.Average)),
            "learning_rate": float(optimizer.learning_rate.numpy()),
            "seconds": seconds,
            "time": time.time(),  # wall clock at the epoch's end, validation included
        }, evaluation

    evaluation, kept = None, Kept(settings["keep"], best_epoch(history))
    for epoch in range(restored.start_epoch, settings["epochs"]):
        row, evaluation = one_epoch(epoch, first=epoch == restored.start_epoch)
        history.append(row)
        restored.epoch.assign(epoch + 1)
        improved = kept.consider(epoch + 1, row["val_loss"], model, evaluation)
        if rank == 0:
            # History first: a kill between the two leaves the older checkpoint, whose resume truncates the
            # history back to it (the other order would lose this epoch's row for good). The best weights
            # before the checkpoint, and older best weights removed only after it: a resume finds the file
            # of the best epoch its history names.
            write_history(paths.root, history)
            if improved and kept.keep == "best":
                save_weights_atomic(model, paths.best_weights(epoch + 1))
            restored.manager.save()
            if improved:
                for old in paths.checkpoints.glob("best-epoch-*.h5"):
                    if old != paths.best_weights(epoch + 1):
                        old.unlink(missing_ok=True)
            log.info(json.dumps(row))
        if settings["patience"] and kept.epoch is not None and epoch + 1 - kept.epoch >= settings["patience"]:
            # every rank sees the same validation losses, so every rank stops after the same epoch
            kept.stopped_after = epoch + 1
            log.info("sim2dl train: no lower validation loss for %d epochs (train.patience): stopping after epoch %d",
                     settings["patience"], epoch + 1)  # fmt: skip
            break
    return history, evaluation, kept


@dataclass
class Restored:
    manager: Any  # tf.train.CheckpointManager
    epoch: Any  # tf.Variable: epochs done, saved with the checkpoint
    start_epoch: int
    history: list[dict[str, Any]]


def restore(key: str, paths: TrainPaths, model: Any, optimizer: Any, comm: Any, rank: int) -> Restored:
    """The latest checkpoint written under the same key (settings, model code and data: the train step's
    resume key), if any, and the history up to it."""
    import tensorflow as tf

    epoch_var = tf.Variable(0, dtype=tf.int64, trainable=False)
    checkpoint = tf.train.Checkpoint(model=model, optimizer=optimizer, epoch=epoch_var)
    if rank == 0:
        discard_foreign_checkpoints(paths.checkpoints, key)
    comm.barrier()
    manager = tf.train.CheckpointManager(checkpoint, str(paths.checkpoints), max_to_keep=2)
    if manager.latest_checkpoint:
        checkpoint.restore(manager.latest_checkpoint)
    start_epoch = int(epoch_var.numpy())
    history = load_history(paths.root)[:start_epoch] if start_epoch else []
    return Restored(manager, epoch_var, start_epoch, history)


def best_epoch(history: Sequence[Mapping[str, Any]]) -> tuple[int, float] | None:
    """(epoch, validation loss) of the first epoch with the lowest validation loss (None: no finite one)."""
    finite = [(row["epoch"], row["val_loss"]) for row in history if math.isfinite(row["val_loss"])]
    return min(finite, key=lambda e: (e[1], e[0])) if finite else None


@dataclass
class Kept:
    """train.keep: which epoch's model is saved and scored. Tracks the lowest validation loss (every rank
    alike: the loss is the same everywhere), this run's weights and evaluation at it."""

    keep: str
    best: tuple[int, float] | None
    weights: list[np.ndarray] | None = None  # the best epoch's, when this run trained it
    evaluation: tuple[float, Evaluation] | None = None
    stopped_after: int | None = None

    @property
    def epoch(self) -> int | None:
        return self.best[0] if self.best else None

    def consider(self, epoch: int, val_loss: float, model: Any, evaluation: tuple[float, Evaluation]) -> bool:
        """Whether this epoch is the best so far (then its weights and evaluation are kept in memory)."""
        if not math.isfinite(val_loss) or (self.best is not None and val_loss >= self.best[1]):
            return False
        self.best = (epoch, val_loss)
        if self.keep == "best":
            self.weights, self.evaluation = model.get_weights(), evaluation
        return True

    def is_last(self, history: Sequence[Mapping[str, Any]]) -> bool:
        return bool(history) and self.epoch == history[-1]["epoch"]

    def restore(self, model: Any, paths: TrainPaths, history: Sequence[Mapping[str, Any]]) -> tuple | None:
        """Put the best epoch's weights back into the model; returns its evaluation when this run made it
        (None: validate again). Nothing to load when the best epoch is the model's last (a resumed run
        with no epoch left)."""
        if self.weights is None and self.is_last(history):
            return None
        if self.weights is not None:
            model.set_weights(self.weights)
            return self.evaluation
        path = paths.best_weights(self.epoch)
        if not path.exists():
            raise Sim2dlError(f"{path} is missing: the best epoch's weights (train.keep: best); rerun train afresh "
                              f"(remove {paths.checkpoints})")  # fmt: skip
        model.load_weights(str(path))
        return None

    def summary(self, history: Sequence[Mapping[str, Any]]) -> dict[str, Any]:
        return {"keep": self.keep, "epoch": self.epoch if self.keep == "best" else (history[-1]["epoch"] if history
                else None), "best_epoch": self.epoch, "best_val_loss": self.best[1] if self.best else None,
                "epochs_trained": len(history), "stopped_early_after_epoch": self.stopped_after}  # fmt: skip


def save_weights_atomic(model: Any, path: Path) -> None:
    """The model's weights as HDF5, written beside and renamed into place."""
    tmp = path.with_name(f".{path.stem}.tmp.h5")  # HDF5 by its suffix, as the final name
    model.save_weights(str(tmp))
    os.replace(tmp, path)


def load_history(out_dir: Path) -> list[dict[str, Any]]:
    path = TrainPaths(out_dir).metrics
    return json.loads(path.read_text()) if path.exists() else []


def write_history(out_dir: Path, history: Sequence[Mapping[str, Any]]) -> None:
    paths = TrainPaths(out_dir)
    write_json_atomic(paths.metrics, list(history))
    columns = list(history[0])
    lines = [",".join(columns)] + [",".join(_fmt(row[c]) for c in columns) for row in history]
    write_text_atomic(paths.metrics_table, "\n".join(lines) + "\n")


def _fmt(value: Any) -> str:
    return f"{value:.6g}" if isinstance(value, float) and not math.isnan(value) else str(value)

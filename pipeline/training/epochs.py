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

from pipeline import Sim2dlError
from pipeline.paths import TrainPaths
from pipeline.storage.fsutil import write_json_atomic, write_text_atomic
from pipeline.training.checkpoints import discard_foreign_checkpoints
from pipeline.training.kernel import (
    Best,
    CounterCheckpoint,
    average_unlearned_state,
    best_unit,
    run_steps,
    schedule,  # fmt: skip
    window_row,
)
from pipeline.training.tasks import Evaluation

log = logging.getLogger(__name__)


def run_epochs(settings: Mapping[str, Any], steps: int, groups: int, split: int, model: Any, optimizer: Any,
               train_step: Any, iterator: Any, validate: Callable[[], tuple[float, Evaluation]],
               restored: Restored, paths: TrainPaths,
               report: Callable[[dict[str, Any], Any], None] = lambda row, evaluation: None,
               ) -> tuple[list[dict[str, Any]], Any, Kept]:  # fmt: skip
    """The epochs from the restored one to train.epochs (or until train.patience stops them), each a window
    of the training kernel: returns the history, the last epoch's validation (None if no epoch was left)
    and what train.keep kept. groups: the data-parallel groups (the learning rate scales with them);
    split: ranks sharing a sample; report: called on rank 0 with each epoch's row and validation (the
    TensorBoard writer)."""
    import horovod.tensorflow as hvd
    import tensorflow as tf

    history = restored.history
    rank = hvd.rank()
    rate = schedule(settings, groups, settings["epochs"], steps)

    def over_ranks(op: Any) -> Callable[[float], float]:
        return lambda value: float(hvd.allreduce(tf.constant(value, tf.float64), op=op))

    evaluation, kept = None, Kept(settings["keep"], best_unit(history, "epoch"))
    for epoch in range(restored.start_epoch, settings["epochs"]):
        window = run_steps(train_step, optimizer, iterator, steps, lambda step, e=epoch: rate(e, step),
                           first=epoch == restored.start_epoch)  # fmt: skip
        average_unlearned_state(model)
        evaluation = validate()
        reduced = window_row(window, settings["batch_size"], split, over_ranks(hvd.Average), over_ranks(hvd.Sum))
        row = {"epoch": epoch + 1, "loss": reduced["loss"], "val_loss": evaluation[0],
               "samples_per_s": reduced["samples_per_s"], "input_wait_fraction": reduced["input_wait_fraction"],
               "learning_rate": float(optimizer.learning_rate.numpy()), "seconds": window.seconds,
               "time": time.time()}  # fmt: skip  # time: the wall clock at the epoch's end, validation included
        history.append(row)
        improved = kept.consider(epoch + 1, row["val_loss"], model.get_weights, evaluation)
        if rank == 0:
            # History first: a kill between the two leaves the older checkpoint, whose resume truncates the
            # history back to it (the other order would lose this epoch's row for good). The best weights
            # before the checkpoint, and older best weights removed only after it: a resume finds the file
            # of the best epoch its history names.
            write_history(paths.root, history)
            if improved and kept.keep == "best":
                save_weights_atomic(model, paths.best_weights(epoch + 1))
            restored.checkpoint.save(epoch + 1)
            if improved:
                for old in paths.checkpoints.glob("best-epoch-*.h5"):
                    if old != paths.best_weights(epoch + 1):
                        old.unlink(missing_ok=True)
            log.info(json.dumps(row))
            report(row, evaluation)
        if kept.patience_over(epoch + 1, settings["patience"]):
            # every rank sees the same validation losses, so every rank stops after the same epoch
            log.info("sim2dl train: no lower validation loss for %d epochs (train.patience): stopping after epoch %d",
                     settings["patience"], epoch + 1)  # fmt: skip
            break
    return history, evaluation, kept


@dataclass
class Restored:
    checkpoint: CounterCheckpoint  # its counter: the epochs done
    start_epoch: int
    history: list[dict[str, Any]]


def restore(key: str, paths: TrainPaths, model: Any, optimizer: Any, comm: Any, rank: int) -> Restored:
    """The latest checkpoint written under the same key (settings, model code and data: the train step's
    resume key), if any, and the history up to it."""
    if rank == 0:
        discard_foreign_checkpoints(paths.checkpoints, key)
    comm.barrier()
    checkpoint = CounterCheckpoint(paths.checkpoints, model, optimizer, "epoch")
    start_epoch = checkpoint.restore_latest()
    history = load_history(paths.root)[:start_epoch] if start_epoch else []
    return Restored(checkpoint, start_epoch, history)


@dataclass
class Kept(Best):
    """train.keep over epochs (or a population's rounds: unit): the kernel's record, restored into the
    model at the end and summarised in its unit."""

    unit: str = "epoch"

    @property
    def epoch(self) -> int | None:
        return self.at

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
        """The kept unit (best: the lowest validation loss; last: the last one trained), the best one, how
        many were trained and where train.patience stopped, named in the unit (epoch, or round)."""
        unit = self.unit
        last = history[-1][unit] if history else None
        return {"keep": self.keep, unit: self.epoch if self.keep == "best" else last, f"best_{unit}": self.epoch,
                "best_val_loss": self.best[1] if self.best else None, f"{unit}s_trained": len(history),
                f"stopped_early_after_{unit}": self.stopped_after}  # fmt: skip


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

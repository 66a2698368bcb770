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
    CounterCheckpoint,
    Kept,
    average_unlearned_state,
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

    evaluation, kept = None, Kept.resumed(settings["keep"], history, "epoch")
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
            save_window(paths, history, model, restored.checkpoint, kept, improved)
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


def save_window(paths: TrainPaths, history: Sequence[Mapping[str, Any]], model: Any, checkpoint: CounterCheckpoint,
                kept: Kept, improved: bool) -> None:  # fmt: skip
    """The end of a window on the rank that writes (every mode's): the history, the best weights where this
    window improved them (train.keep: best), the checkpoint, older best weights removed. History first: a
    kill between the two leaves the older checkpoint, whose resume truncates the history back to it (the
    other order would lose this window's row for good). The best weights before the checkpoint, and older
    best weights removed only after it: a resume finds the file of the best unit its history names."""
    at = history[-1][kept.unit]
    write_history(paths.root, history)
    if improved and kept.keep == "best":
        save_weights_atomic(model, paths.best_weights(at, kept.unit))
    checkpoint.save(at)
    if improved:
        for old in paths.checkpoints.glob(f"best-{kept.unit}-*.h5"):
            if old != paths.best_weights(at, kept.unit):
                old.unlink(missing_ok=True)


def restore_kept(kept: Kept, model: Any, paths: TrainPaths, history: Sequence[Mapping[str, Any]]) -> tuple | None:
    """Put the best unit's weights back into the model (from memory, else the file save_window wrote);
    returns its evaluation when this run made it (None: validate again). Nothing to load when the best unit
    is the model's last (a resumed run with nothing left to train)."""
    if kept.weights is None and kept.is_last(history):
        return None
    if kept.weights is not None:
        model.set_weights(kept.weights)
        return kept.evaluation
    path = paths.best_weights(kept.at, kept.unit)
    if not path.exists():
        raise Sim2dlError(f"{path} is missing: the best {kept.unit}'s weights (train.keep: best); rerun train afresh "
                          f"(remove {paths.checkpoints})")  # fmt: skip
    model.load_weights(str(path))
    return None


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

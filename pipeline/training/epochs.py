"""The epochs of one data-parallel model (the train step's loop): steps over the rank's batches at the
scheduled learning rate, batch-norm statistics averaged over the ranks, validation, the epoch's row of
metrics (averaged over ranks), the end of the window written as every mode writes it (the history, the
best epoch's weights kept (train.keep), a checkpoint: pipeline.training.checkpoints) and early stopping
(train.patience). Memory: the model, its optimizer and a copy of the best epoch's
weights; time: epochs x (steps + one validation pass).
"""

from __future__ import annotations

import json
import logging
from collections.abc import Callable, Mapping
from typing import Any

from pipeline.paths import TrainPaths
from pipeline.training.checkpoints import Restored, packed_weights, save_window
from pipeline.training.kernel import Kept, average_unlearned_state, run_steps, schedule, window_row
from pipeline.training.tasks import Evaluation

log = logging.getLogger(__name__)


def run_epochs(
    settings: Mapping[str, Any],
    steps: int,
    groups: int,
    split: int,
    model: Any,
    optimizer: Any,
    train_step: Any,
    iterator: Any,
    validate: Callable[[], tuple[float, Evaluation]],
    restored: Restored,
    paths: TrainPaths,
    report: Callable[[dict[str, Any], Any], None] = lambda row, evaluation: None,
) -> tuple[list[dict[str, Any]], Any, Kept]:
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
    for epoch in range(restored.done, settings["epochs"]):
        window = run_steps(
            train_step,
            optimizer,
            iterator,
            steps,
            lambda step, e=epoch: rate(e, step),
            first=epoch == restored.done,
        )
        average_unlearned_state(model)
        evaluation = validate()
        row = window_row(
            "epoch",
            epoch + 1,
            window,
            evaluation[0],
            settings["batch_size"],
            split,
            over_ranks(hvd.Average),
            over_ranks(hvd.Sum),
            learning_rate=float(optimizer.learning_rate.numpy()),
        )
        history.append(row)
        improved = kept.consider(epoch + 1, row["val_loss"], lambda: packed_weights(model), evaluation)
        if rank == 0:
            save_window(paths, history, restored.checkpoint, kept, improved)
            log.info(json.dumps(row))
            report(row, evaluation)
        if kept.patience_over(epoch + 1, settings["patience"]):
            # every rank sees the same validation losses, so every rank stops after the same epoch
            log.info(
                "sim2dl train: no lower validation loss for %d epochs (train.patience): "
                "stopping after epoch %d",
                settings["patience"],
                epoch + 1,
            )
            break
    return history, evaluation, kept

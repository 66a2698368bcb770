"""Training in epochs over the staged shards (the train step's mode): the run's start (Horovod, the task and
model, this rank's data, the baseline's fit before training where the model needs it, the checkpoint
restored, the start announced), the epochs, and the run's end (pipeline.training.run).

An epoch is a window of the training kernel: steps over the rank's batches at the scheduled learning rate,
batch-norm statistics averaged over the ranks, validation, the epoch's row of metrics (averaged over
ranks), the end of the window written as every mode writes it (the history, the best epoch's weights kept
(train.keep), a checkpoint: pipeline.training.checkpoints) and early stopping (train.patience).

Memory: the model, its optimizer and a copy of the best epoch's weights, the input pipeline's buffers;
time: epochs x (steps + one validation pass), plus the baseline's pass.
"""

from __future__ import annotations

import json
import logging
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

from pipeline.formats.metadata import load_metadata
from pipeline.paths import TrainPaths
from pipeline.reporting.board import Board
from pipeline.training.checkpoints import Restored, packed_weights, restore, resume_key, save_window
from pipeline.training.classical import baseline_start
from pipeline.training.inputs import RankData, Read, Records, Staging, input_pipeline, rank_data
from pipeline.training.kernel import Kept, average_unlearned_state, run_steps, schedule, window_row
from pipeline.training.optimizer import make_optimizer
from pipeline.training.run import Ranks, StagedEnding, Trained, TrainingRun
from pipeline.training.session import prepare, start_horovod
from pipeline.training.steps import evaluate, step_functions
from pipeline.training.tasks import Evaluation

log = logging.getLogger(__name__)  # to stderr (cli): stdout carries only the step's JSON summary


def train_epochs(
    config: Mapping[str, Any],
    merged_dir: Path,
    stage_summary: Path,
    out_dir: Path,
    comm: Any,
    baseline: bool = True,
    trial: Mapping[str, Any] | None = None,
) -> dict[str, Any]:
    """Set up (settings and model checked, Horovod, this rank's data), restore, run the epochs, end the run.
    baseline False: no classical baseline (search trials, which only need the validation loss); trial: a
    search trial's {id, hyperparameters}, written beside its curves for TensorBoard's HParams dashboard."""
    # imported before start_horovod sets Horovod's environment: the other order measured 18 % slower on 2
    # ranks
    import horovod.tensorflow as hvd

    settings = config["train"]
    meta = load_metadata(merged_dir)
    layout, process_set = start_horovod(settings, comm)
    task, model, device = prepare(config, meta, comm, hvd, (layout, process_set))
    rank, size = hvd.rank(), hvd.size()
    log.info(json.dumps({"rank": rank, "device": device}))
    paths = TrainPaths(out_dir)
    per_record = task.samples_per_record()
    staging = Staging(merged_dir, stage_summary, paths.restaged)
    data = rank_data(config, meta, staging, comm, layout, samples_per_record=per_record)
    model, classical, hybrid = baseline_start(config, meta, task, model, data, comm, layout.split)
    board = Board.of(settings, paths.tensorboard / "train", rank == 0, trial)
    ranks = Ranks(hvd, rank, size, device, layout, comm)
    run = TrainingRun(config, task, model, paths, ranks, "epoch", board, hybrid, trial is not None)
    epochs = Epochs(run, meta, data)
    run.announce(
        settings["epochs"],
        spatial_split=layout.split,
        epochs=settings["epochs"],
        steps_per_epoch=data.steps,
        train_records_per_rank=data.records,
        resume_from_epoch=epochs.restored.done,
        warm_start=epochs.restored.warm_start,
    )
    return run.end(epochs.train(), StagedEnding(meta, data, classical, asked=baseline))


class Epochs:
    """The epochs of one data-parallel model, from the restored one to train.epochs (or until
    train.patience stops them): its optimizer and checkpoint (restored), its compiled step and
    prediction, and the input pipeline of this rank's planes (its slab files' under a spatial split, or
    cut from whole records)."""

    def __init__(self, run: TrainingRun, meta: Mapping[str, Any], data: RankData) -> None:
        settings, model, layout = run.settings, run.model, run.ranks.layout
        self.run, self.meta, self.data = run, meta, data
        self.optimizer = make_optimizer(settings, run.ranks.device["precision"])
        key = resume_key(settings, meta["plan_digest"], model.source, "epoch")
        self.restored: Restored = restore(
            key, run.paths, model.keras, self.optimizer, run.ranks.comm, "epoch", settings["warm_start"]
        )
        self.train_step, self.predict = step_functions(
            model.keras,
            self.optimizer,
            run.task.loss(),
            autograph=model.source.built_in is None,
            averaged_over=model.eval_transforms,
        )
        split = layout.split > 1 and data.pieces is None
        self.slab = layout.slab(int(model.input_shape[0])) if split else None

    def validate(self, split: str = "validation") -> tuple[float, Evaluation]:
        run = self.run
        records = Records(self.meta, run.settings, run.task, run.model.input_shape)
        pipeline = self.data.evaluation_input(split, records, slab=self.slab)
        return evaluate(
            pipeline, run.task, self.predict, run.ranks.comm, counted=run.ranks.layout.spatial_rank == 0
        )

    def batches(self) -> Any:
        """One pipeline for the whole run: its shuffle buffers fill once, and each pass over the data is
        reshuffled from the seed (the seed includes the start epoch, so a resumed run does not replay)."""
        run, data = self.run, self.data
        seed = run.settings["seed"] * 1000 + self.restored.done
        records = Records(self.meta, run.settings, run.task, run.model.input_shape, run.model.transforms)
        read = Read(True, data.shard, seed, data.fraction, slab=self.slab, pieces=data.pieces)
        return iter(input_pipeline(data.files, records, read))

    def train(self) -> Trained:
        """The epochs, then the kept model's scores (validation, and test where there is a test split)."""
        history, last, kept = self.loop(self.batches())
        scores = self.run.scores(kept, history, last, self.validate, test=self.data.test_files is not None)
        return Trained(history, scores, kept, self.restored.warm_start)

    def loop(self, iterator: Any) -> tuple[list[dict[str, Any]], Any, Kept]:
        """Each epoch a window of the training kernel: returns the history, the last epoch's validation
        (None if no epoch was left) and what train.keep kept. The learning rate scales with the
        data-parallel groups; rank 0 writes each epoch's row and validation to TensorBoard."""
        import horovod.tensorflow as hvd

        run, restored = self.run, self.restored
        settings, layout, model = run.settings, run.ranks.layout, run.model.keras
        history = restored.history
        rate = schedule(settings, layout.groups, settings["epochs"], self.data.steps)
        evaluation, kept = None, Kept.resumed(settings["keep"], history, "epoch")
        for epoch in range(restored.done, settings["epochs"]):
            window = run_steps(
                self.train_step,
                self.optimizer,
                iterator,
                self.data.steps,
                lambda step, e=epoch: rate(e, step),
                first=epoch == restored.done,
            )
            average_unlearned_state(model)
            evaluation = self.validate()
            row = window_row(
                "epoch",
                epoch + 1,
                window,
                evaluation[0],
                settings["batch_size"],
                layout.split,
                over_ranks(hvd.Average),
                over_ranks(hvd.Sum),
                learning_rate=float(self.optimizer.learning_rate.numpy()),
            )
            history.append(row)
            improved = kept.consider(epoch + 1, row["val_loss"], lambda: packed_weights(model), evaluation)
            if run.ranks.rank == 0:
                save_window(run.paths, history, restored.checkpoint, kept, improved)
                log.info(json.dumps(row))
                run.board.row(row["epoch"], row, run.task.metrics(evaluation[1]))
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


def over_ranks(op: Any) -> Callable[[float], float]:
    """A number reduced over every rank by Horovod's op (Average, Sum)."""
    import horovod.tensorflow as hvd
    import tensorflow as tf

    return lambda value: float(hvd.allreduce(tf.constant(value, tf.float64), op=op))

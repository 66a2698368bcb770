"""train: data-parallel TensorFlow + Horovod training from the staged shards.

Each rank reads its own staged files (from the node's `staged.json`), interleaves them, shuffles records
across shards with a per-epoch seed, batches, parses (one vectorised parse per batch) and prefetches.
Variable-length records are bucketed by length. The task (pipeline.training.tasks: regression, classification,
segmentation) shapes the labels and gives the loss and metrics; the model (pipeline.training.models) is a
built-in or the user's own builder, checked before any data is touched.

Horovod: hvd.init, weights and optimizer state broadcast from rank 0 after the first step, gradients
averaged with DistributedGradientTape, metrics averaged with allreduce, learning rate scaled by the number
of ranks with a linear warm-up. The loop is explicit (not Keras fit) so the time spent waiting for input
is measured directly: the time blocked in `next(iterator)` against the step time.

Spatial parallelism (`train.spatial.split: S`, pipeline.training.spatial): the ranks form data-parallel
groups of S consecutive ranks (on one node, or across nodes that each hold every shard); the ranks of a
group read the same records, each decodes its depth slab of every sample, and the split model exchanges
halos within the group.
The learning rate scales with the groups, validation counts each group once, and the model saved at the
end is the unsplit one with the trained weights (it takes whole samples).

Few simulations (docs/training.md): `train.augment` draws a symmetry of each training sample's spatial
axes in the input pipeline (pipeline.training.augment, seeded by the epoch seed and the batch's number);
`train.keep: best` saves and scores the epoch of lowest validation loss (its weights written beside the
checkpoints, so a resumed run keeps it), `train.patience` stops early, `train.weight_decay` is AdamW's.
After training, a classical baseline (pipeline.training.baseline) is fitted on the same training records
and scored on the same validation records: one more streamed pass, its sums allreduced; the summary has
it beside every score and the log warns where the network is below it.

Rank 0 writes a TF checkpoint every epoch (TF writes the data first and the `checkpoint` state file
last, so an interrupted save leaves the previous checkpoint valid); a rerun resumes from it. Outputs in
{workdir}/train: metrics.csv/json, the final model, learning curves, the task's validation figure
(predicted vs true, a confusion matrix, or masks), and a summary with the task's metrics on the validation
set (R² per label; accuracy and macro-F1; IoU per class) and the model's provenance.

The step is thin: set-up, the epochs, finish. What runs lives below it in pipeline/training/: the set-up
every way of training shares (session.py), the input pipeline and each rank's files (inputs.py), the
epochs of one model (epochs.py) over the training kernel (kernel.py), the baseline and the summary
(finish.py), and a population (train.population: population_run.py, its rounds tournament.py, its plan
population.py, its model transfers exchange.py).

Memory: the model (and a copy of the best epoch's weights), the input pipeline's buffers, the task's
validation sums and the baseline's (never a value per record). Time: epochs x records / (ranks x
samples/s per rank), plus one pass for the baseline.
"""

from __future__ import annotations

import json
import logging
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from pipeline.formats.metadata import load_metadata
from pipeline.paths import TrainPaths
from pipeline.reporting.board import Board
from pipeline.training import devices
from pipeline.training.after_training import after_training
from pipeline.training.checkpoints import kept_evaluation, restore, resume_key
from pipeline.training.classical import baseline_start, classical_baseline
from pipeline.training.epochs import run_epochs
from pipeline.training.finish import Ranks, Scores, finish
from pipeline.training.inputs import input_pipeline, rank_data
from pipeline.training.optimizer import make_optimizer
from pipeline.training.population_run import train_population
from pipeline.training.session import announce_start, prepare, start_horovod
from pipeline.training.steps import evaluate, step_functions
from pipeline.training.tasks import Evaluation

log = logging.getLogger(__name__)  # to stderr (cli): stdout carries only the step's JSON summary


def training_batches(
    data: Any,
    meta: Mapping[str, Any],
    settings: Mapping[str, Any],
    task: Any,
    model: Any,
    slab: Any,
    start_epoch: int,
) -> Any:
    """One pipeline for the whole run: its shuffle buffers fill once, and each pass over the data is
    reshuffled from the seed (the seed includes the start epoch, so a resumed run does not replay)."""
    seed = settings["seed"] * 1000 + start_epoch
    return iter(
        input_pipeline(
            data.files,
            meta,
            settings,
            task,
            model.input_shape,
            training=True,
            shard=data.shard,
            epoch_seed=seed,
            fraction=data.fraction,
            slab=slab,
            pieces=data.pieces,
            transforms=model.transforms,
        )
    )


def train(
    config: Mapping[str, Any],
    merged_dir: Path,
    stage_summary: Path,
    out_dir: Path,
    comm: Any,
    baseline: bool = True,
    trial: Mapping[str, Any] | None = None,
) -> dict[str, Any]:
    """Set up (settings and model checked, Horovod, this rank's data), restore, run the epochs, finish.
    baseline False: no classical baseline (search trials, which only need the validation loss); trial: a
    search trial's {id, hyperparameters}, written beside its curves for TensorBoard's HParams dashboard."""
    settings = config["train"]
    devices.hide_gpus_if_cpu(settings)  # before TensorFlow is imported (start_horovod's again: idempotent)
    if settings["population"]["enabled"]:
        return train_population(config, merged_dir, stage_summary, out_dir, comm, baseline)
    # imported before start_horovod sets Horovod's environment: the other order measured 18 % slower on 2
    # ranks
    import horovod.tensorflow as hvd

    meta = load_metadata(merged_dir)
    layout, process_set = start_horovod(settings, comm)
    task, model, device = prepare(config, meta, comm, hvd, (layout, process_set))
    rank, size = hvd.rank(), hvd.size()
    log.info(json.dumps({"rank": rank, "device": device}))
    paths = TrainPaths(out_dir)
    data = rank_data(
        config,
        meta,
        merged_dir,
        stage_summary,
        paths,
        comm,
        layout,
        samples_per_record=task.samples_per_record(),
    )
    model, classical, hybrid = baseline_start(config, meta, task, model, data, comm, layout.split)
    # this rank's planes: its slab files' (merge.slabs), or cut from whole records
    slab = layout.slab(int(model.input_shape[0])) if layout.split > 1 and data.pieces is None else None
    keras_model = model.keras
    optimizer = make_optimizer(settings, device["precision"])
    key = resume_key(settings, meta["plan_digest"], model.source, "epoch")
    restored = restore(key, paths, keras_model, optimizer, comm, "epoch", settings["warm_start"])
    train_step, predict = step_functions(
        keras_model,
        optimizer,
        task.loss(),
        autograph=model.source.built_in is None,
        averaged_over=model.eval_transforms,
    )

    def validate(split: str = "validation") -> tuple[float, Evaluation]:
        pipeline = data.evaluation_input(split, meta, settings, task, model.input_shape, slab=slab)
        return evaluate(pipeline, task, predict, comm, counted=layout.spatial_rank == 0)

    if rank == 0:
        announce_start(
            paths,
            {
                "unit": "epoch",
                "length": settings["epochs"],
                "ranks": size,
                "spatial_split": layout.split,
                "epochs": settings["epochs"],
                "steps_per_epoch": data.steps,
                "train_records_per_rank": data.records,
                "resume_from_epoch": restored.done,
                "warm_start": restored.warm_start,
            },
        )
    iterator = training_batches(data, meta, settings, task, model, slab, restored.done)
    board = Board.of(settings, paths.tensorboard / "train", rank == 0, trial)

    def report(row: dict[str, Any], scored: tuple[float, Evaluation]) -> None:
        board.row(row["epoch"], row, task.metrics(scored[1]))

    history, evaluation, kept = run_epochs(
        settings,
        data.steps,
        layout.groups,
        layout.split,
        model.keras,
        optimizer,
        train_step,
        iterator,
        validate,
        restored,
        paths,
        report,
    )
    final = kept_evaluation(kept, keras_model, paths, history, evaluation)
    scores = Scores(final or validate(), validate("test") if data.test_files is not None else None)
    found = classical_baseline(
        config, meta, task, model, data, layout, comm, asked=baseline, classical=classical
    )
    ranks = Ranks(hvd, rank, size, device, layout, comm)
    extra = {
        "hybrid": hybrid,
        "warm_start": restored.warm_start,
        **after_training(task, model, data, meta, settings, comm, paths.root),  # a rollout
    }
    return finish(config, task, model, history, scores, paths, ranks, kept, found, extra, board=board)

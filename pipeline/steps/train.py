"""train: data-parallel TensorFlow + Horovod training from the staged shards.

Each rank reads its own staged files (from the node's `staged.json`), interleaves them, shuffles records
across shards with a per-epoch seed, batches, parses (one vectorised parse per batch) and prefetches.
Variable-length records are bucketed by length. The task (pipeline.training.tasks: regression, classification,
segmentation) shapes the labels and gives the loss and metrics; the model (pipeline.training.models) is a built-in
or the user's own builder, checked before any data is touched.

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

The step plans and finishes; what runs lives below the steps in pipeline/training/: the input pipeline
and each rank's files (inputs.py), the epochs of one model (epochs.py), a population's rounds
(train.population: tournament.py, its plan population.py, its model transfers exchange.py).

Memory: the model (and a copy of the best epoch's weights), the input pipeline's buffers, the task's
validation sums and the baseline's (never a value per record). Time: epochs x records / (ranks x
samples/s per rank), plus one pass for the baseline.
"""

from __future__ import annotations

import json
import logging
import os
import socket
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from pipeline import Sim2dlError
from pipeline.formats.metadata import load_metadata
from pipeline.formats.shards import shard_format
from pipeline.formats.slabs import check_split
from pipeline.paths import TrainPaths
from pipeline.runtime.mpi import all_ok
from pipeline.runtime.placement import topology
from pipeline.storage.fsutil import write_json_atomic
from pipeline.training import determinism, devices
from pipeline.training.augment import Transform
from pipeline.training.augment import plan as augment_plan
from pipeline.training.baseline import fit_and_score as baseline_fit_and_score
from pipeline.training.checksum import weights_checksum
from pipeline.training.epochs import Kept, restore, run_epochs, write_history
from pipeline.training.finish import add_baseline, validation_records
from pipeline.training.inputs import RankData, input_pipeline, rank_data
from pipeline.training.models import ModelSource, build_model, spatial_dims
from pipeline.training.optimizer import make_optimizer
from pipeline.training.population import Population
from pipeline.training.population import check as check_population
from pipeline.training.spatial.layout import SpatialLayout, check_spatial
from pipeline.training.steps import evaluate, step_functions
from pipeline.training.tasks import Evaluation, Task, data_spec, make_task
from pipeline.training.tournament import Trainer, run_rounds

log = logging.getLogger(__name__)  # to stderr (cli): stdout carries only the step's JSON summary


# ---------------------------------------------------------------- configuration checks (before any work)


def check_settings(settings: Mapping[str, Any], meta: Mapping[str, Any], label_names: Sequence[str] | None) -> Task:
    """The task for the dataset, its labels checked; errors name the key or field and what was found."""
    if not 0 < settings["learning_rate"] < 1:
        raise Sim2dlError(f"config key 'train.learning_rate': {settings['learning_rate']} is not in (0, 1)")
    if not shard_format(meta["format"]).trainable:
        raise Sim2dlError(f"train reads TFRecord shards, not {meta['format']}: set merge.format to tfrecord")
    missing = sorted({"train", "validation"} - set(meta.get("splits", {"train": 0, "validation": 0})))
    if missing:
        raise Sim2dlError(
            f"config key 'merge.splits': training needs the splits {missing} (have {sorted(meta['splits'])})"
        )
    task = make_task(settings, data_spec(meta, label_names))
    task.check()
    return task


def resume_key(settings: Mapping[str, Any], meta: Mapping[str, Any], source: ModelSource) -> str:
    """What a checkpoint must match to be resumed: the data, the model's code and every setting except the
    epoch count, threads, device and which epoch is kept (so a longer run continues a shorter one, also on
    a GPU, but a new learning rate or model starts afresh)."""
    kept = {k: v for k, v in settings.items() if k not in ("epochs", "threads", "device", "keep", "patience")}
    return json.dumps({"data": meta["plan_digest"], "train": kept, "model": source.provenance()}, sort_keys=True)


@dataclass
class Model:
    """The model, where its code came from, and the input shape it takes."""

    keras: Any
    source: ModelSource
    input_shape: tuple[int | None, ...]
    transforms: Sequence[Transform] = ()  # train.augment's symmetries of a training sample


def prepare(
    config: Mapping[str, Any],
    meta: Mapping[str, Any],
    comm: Any,
    hvd: Any,
    spatial: tuple[SpatialLayout, Any],
    node_local: tuple[int, int] | None = None,
) -> tuple[Task, Model, dict]:
    """This rank's device chosen (and the precision policy for it), seeds set, the settings and labels
    checked and the model built and checked, on every rank alike: a configuration error is reported once
    by rank 0 and every rank exits before any data is touched (no MPI_Abort, which can tear down the job
    before rank 0's message is out). node_local: this rank's (rank, count) among the job's ranks on its
    node, where Horovod sees fewer (a population's trainer). Returns the task, the model and the device's
    record."""
    import tensorflow as tf

    settings = config["train"]
    if settings["threads"]:
        tf.config.threading.set_intra_op_parallelism_threads(settings["threads"])
        tf.config.threading.set_inter_op_parallelism_threads(settings["threads"])
    error, task, model, device = None, None, None, {}
    try:
        device = devices.apply(settings, *(node_local or (hvd.local_rank(), hvd.local_size())))
        determinism.seed_and_fix(settings)
        task = check_settings(settings, meta, _label_names(meta))
        from pipeline.training.models import input_shape, model_source

        layout = spatial[0]
        shape = input_shape(model_source(settings["model"]), task.data.feature_shape)
        check_spatial(layout.split, layout.size, shape, settings["model"], True)
        check_split(meta.get("slabs", {}).get("count", 1), layout.split)
        split = spatial if layout.split > 1 else None
        transforms = augmentation(settings, task, model_source(settings["model"]), shape, layout.split)
        keras_model, source = build_model(settings, task.data.feature_shape, task, split)
        model = Model(keras_model, source, shape, transforms)
    except Sim2dlError as e:
        error = e
    all_ok(comm, error)
    assert task is not None and model is not None
    return task, model, device


def augmentation(settings: Mapping[str, Any], task: Task, source: ModelSource, shape: Sequence[int | None],
                 split: int) -> list[Transform]:  # fmt: skip
    """train.augment's symmetries of this model's input's spatial axes."""
    if not any(settings["augment"][k] for k in ("symmetries", "permute", "flips", "vector_labels")):
        return []
    if task.data.several:
        raise Sim2dlError("config key 'train.augment': a model of several inputs cannot be augmented (one feature)")
    return augment_plan(settings["augment"], shape[: spatial_dims(source, shape)], split)


def train(
    config: Mapping[str, Any], merged_dir: Path, stage_summary: Path, out_dir: Path, comm: Any, baseline: bool = True
) -> dict[str, Any]:
    """Set up (settings and model checked, Horovod, this rank's data), restore, run the epochs, finish.
    baseline False: no classical baseline (search trials, which only need the validation loss)."""
    settings = config["train"]
    devices.hide_gpus_if_cpu(settings)  # before TensorFlow is imported
    if settings["population"]["enabled"]:
        return train_population(config, merged_dir, stage_summary, out_dir, comm, baseline)
    import horovod.tensorflow as hvd

    meta = load_metadata(merged_dir)
    determinism.before_horovod(settings)
    layout, process_set = start_horovod(settings, comm)
    task, model, device = prepare(config, meta, comm, hvd, (layout, process_set))
    rank, size = hvd.rank(), hvd.size()
    log.info(json.dumps({"rank": rank, "device": device}))
    paths = TrainPaths(out_dir)
    data = rank_data(config, meta, merged_dir, stage_summary, paths, comm, layout)
    # this rank's planes: its slab files' (merge.slabs), or cut from whole records
    slab = layout.slab(int(model.input_shape[0])) if layout.split > 1 and data.pieces is None else None
    keras_model = model.keras
    optimizer = make_optimizer(settings, device["precision"])
    restored = restore(resume_key(settings, meta, model.source), paths, keras_model, optimizer, comm, rank)
    loss_fn = task.loss()
    train_step, predict = step_functions(keras_model, optimizer, loss_fn, autograph=model.source.built_in is None)

    def validate() -> tuple[float, Evaluation]:
        pipeline = input_pipeline(data.validation_files, meta, settings, task, model.input_shape, training=False,
                                  shard=data.validation_shard, epoch_seed=0, fraction=data.fraction,
                                  slab=slab, pieces=data.pieces)  # fmt: skip
        return evaluate(pipeline, task, predict, comm, counted=layout.spatial_rank == 0)

    if rank == 0:
        start = {"ranks": size, "spatial_split": layout.split, "steps_per_epoch": data.steps,
                 "train_records_per_rank": data.records, "resume_from_epoch": restored.start_epoch,
                 "slurm_job": os.environ.get("SLURM_JOB_ID")}  # fmt: skip
        log.info(json.dumps({"train": start}))
        # Every start of training, kept across retries (Snakemake clears a job's log when it starts).
        out_dir.mkdir(parents=True, exist_ok=True)
        with open(paths.attempts, "a") as attempts:
            attempts.write(json.dumps({**start, "time": time.time()}) + "\n")
    # One pipeline for the whole run: its shuffle buffers fill once, and each pass over the data is
    # reshuffled from the seed (the seed includes the start epoch, so a resumed run does not replay).
    seed = settings["seed"] * 1000 + restored.start_epoch
    iterator = iter(input_pipeline(data.files, meta, settings, task, model.input_shape, training=True,
                                   shard=data.shard, epoch_seed=seed, fraction=data.fraction, slab=slab,
                                   pieces=data.pieces, transforms=model.transforms))  # fmt: skip
    history, evaluation, kept = run_epochs(settings, data.steps, layout.groups, layout.split, model.keras,
                                           optimizer, train_step, iterator, validate, restored, paths)  # fmt: skip
    # The final evaluation: the kept epoch's (train.keep), else the last epoch's, unless a resumed run had
    # no epoch left.
    final = evaluation
    if kept.keep == "best" and kept.epoch is not None:
        final = kept.restore(keras_model, paths, history)  # None: the restored weights are validated again
    final = final or validate()
    if baseline:
        found = classical_baseline(config, meta, task, model, data, layout, comm)
    else:
        found = {"method": None, "skipped": "not asked for (sim2dl train --no-baseline: a search trial)"}
    ranks = Ranks(hvd, rank, size, device, layout, comm)
    return finish(config, task, model, history, final, paths, ranks, kept, found)


INIT_SEED_STEP = 7919  # trainer t's model starts from weights drawn with train.seed + t x this


def train_population(config: Mapping[str, Any], merged_dir: Path, stage_summary: Path, out_dir: Path, comm: Any,
                     baseline: bool) -> dict[str, Any]:  # fmt: skip
    """train.population: the settings checked against the job and the data (before any is read), a Horovod
    world per trainer (hvd.init on the trainer's communicator: its ranks, consecutive), each trainer's
    model from its own seed, the rounds (pipeline.training.tournament), then the kept model finished as
    one trainer's would be (the baseline on the same split, the summary with the population's record)."""
    import horovod.tensorflow as hvd

    settings = config["train"]
    meta = load_metadata(merged_dir)
    error, population = None, None
    try:
        population = check_population(config, comm.Get_size(), meta)
    except Sim2dlError as e:
        error = e
    all_ok(comm, error)
    assert population is not None
    determinism.before_horovod(settings)
    rank, size = comm.Get_rank(), comm.Get_size()
    number = population.trainer_of(rank)
    trainer_comm = comm.Split(number, rank)
    hvd.init(comm=trainer_comm)
    node = topology(comm, 0)  # the real nodes: a GPU per rank of a node, whatever its trainer
    on_node = node.node_ranks[node.node]
    local = (on_node.index(rank), len(on_node))
    own = {**config, "train": {**settings, "seed": settings["seed"] + INIT_SEED_STEP * number}}
    own_layout = SpatialLayout(1, trainer_comm.Get_size(), trainer_comm.Get_rank())
    task, model, device = prepare(own, meta, comm, hvd, (own_layout, None), local)
    log.info(json.dumps({"rank": rank, "trainer": number, "device": device}))
    paths = TrainPaths(out_dir)
    layout = SpatialLayout(1, size, rank)  # the ranks of a node share out its files: trainers read apart
    data = rank_data(config, meta, merged_dir, stage_summary, paths, comm, layout, disjoint=True)
    trainer = Trainer(comm, trainer_comm, population)
    if rank == 0:
        start = {"ranks": size, "trainers": population.trainers, "ranks_per_trainer": population.ranks_per_trainer,
                 "rounds": population.rounds, "steps_per_round": population.steps_per_round,
                 "train_records_per_rank": data.records, "slurm_job": os.environ.get("SLURM_JOB_ID")}  # fmt: skip
        log.info(json.dumps({"train": start}))
        out_dir.mkdir(parents=True, exist_ok=True)
        with open(paths.attempts, "a") as attempts:
            attempts.write(json.dumps({**start, "time": time.time()}) + "\n")
    key_settings = {**settings, "population": {k: v for k, v in settings["population"].items() if k != "rounds"}}
    outcome = run_rounds(config, meta, task, model, data, trainer, paths,
                         resume_key(key_settings, meta, model.source), model.source.built_in is None,
                         lambda: make_optimizer(settings, device["precision"]))  # fmt: skip
    if rank == 0:
        write_history(out_dir, outcome.history)
    if baseline:
        found = classical_baseline(config, meta, task, model, data, layout, comm)
    else:
        found = {"method": None, "skipped": "not asked for (sim2dl train --no-baseline: a search trial)"}
    kept = Kept(settings["keep"], (outcome.kept["round"], outcome.kept["val_loss"]))
    record = {"trainers": population.trainers, "ranks_per_trainer": population.ranks_per_trainer,
              "exchange": population.exchange, "rounds_trained": len(outcome.state.rounds),
              "kept": outcome.kept, "initial_hyperparameters": population.hyperparameters(settings),
              **outcome.state.to_json(),
              "trainer_hosts": [sorted(set(h)) for h in _by_trainer(comm.allgather(socket.gethostname()), population)],
              "trainer_files": [sorted({n for names in files for n in names}) for files in _by_trainer(
                  comm.allgather([f.name for f in data.files]), population)],
              "trainer_records": [sum(n) for n in _by_trainer(comm.allgather(data.records), population)],
              "round_cost": _median([r["round_cost"] for r in outcome.state.rounds if r["pairs"] != []])}  # fmt: skip

    def curves(path: Path) -> None:
        from pipeline.reporting.plots import population_curves

        population_curves(outcome.state.rounds, outcome.kept, task.loss_name, path)

    ranks = Ranks(hvd, rank, size, device, layout, comm)
    assert outcome.evaluation is not None
    return finish(config, task, model, outcome.history, outcome.evaluation, paths, ranks, kept, found,
                  {"population": record}, curves)  # fmt: skip


def _by_trainer(values: Sequence[Any], population: Population) -> list[list[Any]]:
    return [[values[r] for r in population.members(t)] for t in range(population.trainers)]


def _median(values: Sequence[float]) -> float | None:
    return float(np.median(values)) if values else None


def classical_baseline(config: Mapping[str, Any], meta: Mapping[str, Any], task: Task, model: Model, data: RankData,
                       layout: SpatialLayout, comm: Any) -> dict[str, Any]:  # fmt: skip
    """pipeline.training.baseline on this run's split: fitted on the training records, scored on the
    validation records by the task's metrics; each rank streams its own share. Not under a spatial
    split, where no rank holds whole samples."""
    if layout.split > 1:
        return {"method": None, "skipped": "train.spatial.split: no rank holds whole samples"}
    settings, feature = config["train"], task.data.feature
    start = time.perf_counter()

    def batches(files: list[Path], shard: tuple[int, int] | None, validation: bool) -> Any:
        pipeline = input_pipeline(files, meta, settings, task, model.input_shape, training=False, shard=shard,
                                  epoch_seed=0, fraction=data.fraction, pieces=data.pieces,
                                  holdout=validation)  # fmt: skip
        for x, y in pipeline:
            yield (x[feature] if isinstance(x, dict) else x).numpy(), y.numpy()

    shape = [1 if n is None else n for n in model.input_shape]
    result = baseline_fit_and_score(
        task, shape, batches(data.files, data.shard, False),
        batches(data.validation_files, data.validation_shard, True),
        spatial_dims(model.source, model.input_shape),
        lambda arrays: [comm.allreduce(a) for a in arrays],
        lambda evaluation: Evaluation.combine(comm.allgather(evaluation), task.max_examples),
    )  # fmt: skip
    return {"method": result.method, **result.metrics, **result.settings,
            "seconds": round(time.perf_counter() - start, 3)}  # fmt: skip


def start_horovod(settings: Mapping[str, Any], comm: Any) -> tuple[SpatialLayout, Any]:
    """hvd.init, with one Horovod process set per spatial set under train.spatial.split (a split that does
    not divide the ranks is a config error on every rank, before Horovod starts). Returns this rank's
    layout and its spatial set."""
    from pipeline.training.spatial.layers import init_horovod

    split, error = settings["spatial"]["split"], None
    try:
        check_spatial(split, comm.Get_size(), None, settings["model"], True)
    except Sim2dlError as e:
        error = e
    all_ok(comm, error)
    return init_horovod(split, comm.Get_size(), comm.Get_rank())


def whole_model(config: Mapping[str, Any], task: Task, model: Model) -> Any:
    """The model to save: the trained one, or under spatial parallelism the unsplit model with its
    weights (same variables, same order), which takes whole samples."""
    settings = config["train"]
    if settings["spatial"]["split"] == 1:
        return model.keras
    whole, _ = build_model(settings, task.data.feature_shape, task)
    whole.set_weights(model.keras.get_weights())
    return whole


@dataclass
class Ranks:
    """Where this process stands: Horovod, its rank among `size`, and the device it computes on."""

    hvd: Any
    rank: int
    size: int
    device: dict[str, Any]
    layout: SpatialLayout
    comm: Any  # the job's ranks (a population's trainers each run Horovod on their own)


def finish(config: Mapping[str, Any], task: Task, model: Model, history: Sequence[Mapping[str, Any]],
           evaluation: tuple[float, Evaluation], paths: TrainPaths, ranks: Ranks, kept: Kept,
           baseline: Mapping[str, Any], extra: Mapping[str, Any] | None = None,
           curves: Callable[[Path], None] | None = None) -> dict[str, Any]:  # fmt: skip
    """The summary of the final evaluation (the task's metrics, with a check that every rank holds the same
    weights, the device each rank used and where the model's code came from), and on rank 0 the model, the
    figures and summary.json. extra: more of the summary; curves: draws the learning curves' figure
    (default: the history's)."""
    settings = config["train"]
    hvd, rank, size = ranks.hvd, ranks.rank, ranks.size
    val_loss, result = evaluation
    summary = {
        "task": task.name,
        "epochs": settings["epochs"],
        "ranks": size,
        "spatial": {"split": ranks.layout.split, "groups": ranks.layout.groups},
        "val_loss": val_loss,
        "kept": kept.summary(history),
        **task.metrics(result),
        "validation_records": validation_records(task, result),
        "model": model.source.provenance(),
        "weights_checksum": weights_checksum(model.keras),
        "settings": dict(settings),  # what was trained (with search.enabled: the search's best merged in)
    }
    # what a classical estimator learns from the same split (pipeline.training.baseline), and where the
    # network does worse
    summary.update(extra or {})
    add_baseline(summary, task, baseline, warn=rank == 0)
    all_checksums = ranks.comm.allgather(summary["weights_checksum"])
    summary["weights_identical_across_ranks"] = len(set(all_checksums)) == 1
    summary["hosts"] = ranks.comm.allgather(socket.gethostname())  # per rank: where it trained
    summary["devices"] = ranks.comm.allgather(ranks.device)  # per rank: on what
    if rank == 0:
        whole_model(config, task, model).save(str(paths.model))
        from pipeline.reporting.plots import learning_curves

        if curves is None:
            learning_curves(history, task.loss_name, paths.learning_curves)
        else:
            curves(paths.learning_curves)
        task.figure(result, paths.validation_figure, baseline)
        write_json_atomic(paths.summary, summary)
    hvd.join()
    return summary


def _label_names(meta: Mapping[str, Any]) -> list[str] | None:
    """The names of a single label's entries where the inputs named them (metadata.json's component_names:
    the cube simulator's parameters), else None (the fields' own names)."""
    labels = [n for n, f in meta["feature_spec"].items() if f["role"] == "label"]
    names = meta.get("component_names", {}).get(labels[0]) if len(labels) == 1 else None
    shape = meta["feature_spec"][labels[0]]["shape"] if names else None
    return list(names) if names and shape and shape[-1] == len(names) else None

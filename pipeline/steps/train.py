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

Memory: the model (and a copy of the best epoch's weights), the input pipeline's buffers, the task's
validation sums and the baseline's (never a value per record). Time: epochs x records / (ranks x
samples/s per rank), plus one pass for the baseline.
"""

from __future__ import annotations

import json
import logging
import math
import os
import socket
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from pipeline import Sim2dlError
from pipeline.data.splits import holdout_validation
from pipeline.formats.metadata import fixed, load_metadata
from pipeline.formats.shards import shard_format
from pipeline.formats.shards.tfrecord.tfdata import READ_BUFFER_BYTES, decode_field, feature_description
from pipeline.formats.slabs import check_split, sibling, slab_of, slabs_read
from pipeline.paths import StagedPaths, TrainPaths
from pipeline.runtime.mpi import all_ok
from pipeline.storage.fsutil import write_json_atomic, write_text_atomic
from pipeline.training import determinism, devices
from pipeline.training.augment import Transform, augment_batch
from pipeline.training.augment import plan as augment_plan
from pipeline.training.baseline import fit_and_score as baseline_fit_and_score
from pipeline.training.checkpoints import discard_foreign_checkpoints
from pipeline.training.checksum import weights_checksum
from pipeline.training.models import ModelSource, build_model
from pipeline.training.optimizer import learning_rate, make_optimizer
from pipeline.training.spatial.layout import SpatialLayout, check_spatial
from pipeline.training.steps import evaluate, step_functions
from pipeline.training.tasks import Evaluation, Task, data_spec, make_task

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


# ---------------------------------------------------------------- which files this rank reads


def rank_files(
    listing: Mapping[str, Any],
    node_dir: Path,
    local_rank: int,
    local_size: int,
    split: str | None = None,
    slab: int | None = None,
) -> tuple[list[Path], tuple[int, int] | None]:
    """This rank's share of its node's staged files of a split (None: all; sample mode: the rank's own
    file for training), and how to shard their records: with fewer files than ranks on the node, every
    rank reads them all and takes every n-th record instead (else None). slab: of slab shards
    (merge.slabs), the files of that slab stand for their shards."""
    names = [n for n in listing["files"] if split is None or n.startswith(f"{split}/")]
    if slab is not None:
        names = [n for n in names if slab_of(n)[1] == slab]
    files = [node_dir / name for name in names]
    missing = [f for f in files if not f.exists()]
    if missing:
        raise Sim2dlError(f"staged file {missing[0]} is missing ({len(missing)} of {len(files)}): rerun stage")
    if listing["mode"] == "sample" and split in (None, "train"):
        rank = listing["ranks"][local_rank]
        own = f"rank-{rank:05d}{shard_format(listing['format']).suffix}"
        return [node_dir / n for n in listing["files"] if n == own], None
    if len(files) >= local_size:
        return files[local_rank::local_size], None
    return files, (local_size, local_rank)


def resume_key(settings: Mapping[str, Any], meta: Mapping[str, Any], source: ModelSource) -> str:
    """What a checkpoint must match to be resumed: the data, the model's code and every setting except the
    epoch count, threads, device and which epoch is kept (so a longer run continues a shorter one, also on
    a GPU, but a new learning rate or model starts afresh)."""
    kept = {k: v for k, v in settings.items() if k not in ("epochs", "threads", "device", "keep", "patience")}
    return json.dumps({"data": meta["plan_digest"], "train": kept, "model": source.provenance()}, sort_keys=True)


def count_records(files: Sequence[Path], fraction: float | None, shard: tuple[int, int] | None) -> tuple[int, int]:
    """(train, validation) records in the files, reading only their sample ids (fraction None: all are
    training records)."""
    import tensorflow as tf

    ds = tf.data.TFRecordDataset([str(f) for f in files], buffer_size=READ_BUFFER_BYTES)
    if shard:
        ds = ds.shard(*shard)
    ids = ds.map(
        lambda r: tf.io.parse_single_example(r, {"sample_id": tf.io.FixedLenFeature([], tf.string)})["sample_id"]
    )
    val = train = 0
    for batch in ids.batch(4096):
        v = 0 if fraction is None else int(tf.reduce_sum(tf.cast(holdout_validation(batch, fraction), tf.int32)))
        val += v
        train += int(batch.shape[0]) - v
    return train, val


# ---------------------------------------------------------------- input pipeline


def input_pipeline(
    files: Sequence[Path],
    meta: Mapping[str, Any],
    settings: Mapping[str, Any],
    task: Task,
    model_input: Sequence[int | None],
    *,
    training: bool,
    shard: tuple[int, int] | None,
    epoch_seed: int,
    fraction: float | None,
    slab: tuple[int, int] | None = None,
    pieces: range | None = None,
    transforms: Sequence[Transform] = (),
    holdout: bool | None = None,
) -> Any:
    """Batches of (features, labels) from the files: features shaped as the model's input (a channel axis
    added where it has one more axis), labels as the task wants them. fraction: the share of records held
    out for validation by a hash of their sample ids (training passes skip them, validation reads only
    them); None: the files hold one split, read whole. slab: the planes [start, stop) of the feature's
    first axis this rank keeps (spatial parallelism), cut from whole records. pieces: slab shards
    (merge.slabs): `files` are slab `pieces[0]`'s files, and the rank reads these slabs' files of each
    shard side by side, their planes joined (its slab, or with no split the whole sample). transforms:
    training batches' samples each under one of these symmetries (train.augment), drawn from a stream
    seeded by epoch_seed and the batch's number. holdout: which side of `fraction`'s hold-out to read
    (default: validation records when not training; False: the training records in one ordered pass)."""
    import tensorflow as tf

    data = task.data
    feature, labels = data.feature, [f.name for f in data.labels]
    features = list(data.feature_shapes) or [feature]
    spec = meta["feature_spec"]
    pieces = pieces or range(1)  # whole records: one file per shard
    slab_files = [[str(sibling(f, k)) for k in pieces] for f in files]
    names = tf.data.Dataset.from_tensor_slices(slab_files)  # a row per shard: its files, one per slab read
    if training:
        names = names.shuffle(len(files), seed=epoch_seed, reshuffle_each_iteration=True).repeat()

    def side_by_side(shard_files: Any) -> Any:  # the records of one shard's slab files, zipped
        return tf.data.Dataset.zip(
            tuple(tf.data.TFRecordDataset(shard_files[k], buffer_size=READ_BUFFER_BYTES) for k in range(len(pieces)))
        )

    ds = names.interleave(
        side_by_side,
        cycle_length=max(1, min(len(files), 4)),
        num_parallel_calls=tf.data.AUTOTUNE,
        deterministic=not training or settings["deterministic"],
    )
    if shard:
        ds = ds.shard(*shard)
    description = feature_description(spec, (*features, *labels))
    field = spec[feature]
    thickness = (field["shape"][0] // meta["slabs"]["count"]) if "slabs" in meta else None
    slab_field = {**field, "shape": [thickness, *field["shape"][1:]]}  # a slab file's planes of the feature

    validation_side = (not training) if holdout is None else holdout

    def keep(record: Any, *_: Any) -> Any:
        sid = tf.io.parse_single_example(record, {"sample_id": tf.io.FixedLenFeature([], tf.string)})["sample_id"]
        val = holdout_validation(sid, fraction)
        return val if validation_side else tf.logical_not(val)

    if fraction is not None:
        ds = ds.filter(keep)
    if training:
        # Shuffle serialized records (cheap strings) across the interleaved shards; a new order each pass.
        ds = ds.shuffle(settings["shuffle_buffer"], seed=epoch_seed, reshuffle_each_iteration=True)
    add_channel = not data.several and len(model_input) == len(data.feature_shape) + 1

    def features_and_labels(parsed: Any, batched: bool, others: Sequence[Any]) -> Any:
        y = task.label_tensor([decode_field(parsed, n, spec[n], batched) for n in labels], batched)
        if data.several:  # your own model's inputs, by name
            return {n: tf.cast(decode_field(parsed, n, spec[n], batched), tf.float32) for n in features}, y
        if thickness is None:
            x = decode_field(parsed, feature, field, batched, planes=slab)
        else:  # the slabs read, in order: the first file's parsed whole, the others' feature only
            x = tf.concat([decode_field(p, feature, slab_field, batched) for p in (parsed, *others)],
                          axis=1 if batched else 0)  # fmt: skip
        if add_channel:
            x = x[..., tf.newaxis]
        return tf.cast(x, tf.float32), y

    only_feature = {feature: tf.io.FixedLenFeature([], tf.string)}

    def parse_batch(first: Any, *more: Any) -> Any:
        others = [tf.io.parse_example(r, only_feature) for r in more]
        return features_and_labels(tf.io.parse_example(first, description), True, others)

    def parse_one(first: Any, *more: Any) -> Any:
        others = [tf.io.parse_single_example(r, only_feature) for r in more]
        return features_and_labels(tf.io.parse_single_example(first, description), False, others)

    batch = settings["batch_size"]
    if all(fixed(spec[n]) for n in features):
        ds = ds.batch(batch, drop_remainder=training).map(parse_batch, num_parallel_calls=tf.data.AUTOTUNE)
        if training and transforms:
            moves_labels = task.per_pixel

            def symmetries(xy: Any, number: Any) -> Any:
                return augment_batch(*xy, transforms, tf.stack([tf.constant(epoch_seed, tf.int64), number]),
                                     moves_labels)  # fmt: skip

            ds = tf.data.Dataset.zip((ds, tf.data.Dataset.counter())).map(
                symmetries, num_parallel_calls=tf.data.AUTOTUNE)  # fmt: skip
    else:
        # Variable lengths: bucket so a batch pads little (merge sorted by length, buckets keep that order).
        ds = ds.map(parse_one, num_parallel_calls=tf.data.AUTOTUNE).bucket_by_sequence_length(
            lambda x, y: tf.shape(x[feature] if data.several else x)[0],
            bucket_boundaries=settings["length_buckets"],
            bucket_batch_sizes=[batch] * (len(settings["length_buckets"]) + 1),
            drop_remainder=training,
        )
    return ds.prefetch(tf.data.AUTOTUNE)


# ---------------------------------------------------------------- the training loop


@dataclass
class RankData:
    """What one rank trains and validates on: its staged files (or its record shard of them), the hash
    hold-out fraction (None with splits), and the steps per epoch every rank takes."""

    files: list[Path]
    shard: tuple[int, int] | None
    validation_files: list[Path]
    validation_shard: tuple[int, int] | None
    fraction: float | None
    records: int
    steps: int
    pieces: range | None = None  # the slab files of each shard it reads (merge.slabs), else whole records


def rank_data(config: Mapping[str, Any], meta: Mapping[str, Any], merged_dir: Path, stage_summary: Path,
              paths: TrainPaths, comm: Any, layout: SpatialLayout) -> RankData:  # fmt: skip
    """The staged files this rank reads (staging again if this node's copies are gone), and the steps
    per epoch: the fewest any rank's records allow. The ranks of a spatial set read the same records."""
    from pipeline.runtime.placement import topology
    from pipeline.storage.staging import ensure_staged

    settings = config["train"]
    topo = topology(comm, config["stage"]["emulate_nodes"])
    node_dir, _ = ensure_staged(config, merged_dir, stage_summary, paths.restaged, comm, topo)
    listing = json.loads(StagedPaths(node_dir).listing.read_text())
    local = data_rank(layout, topo.node_ranks, topo.node, listing["mode"])
    pieces = slabs_read(meta["slabs"]["count"], layout.split, layout.spatial_rank) if "slabs" in meta else None
    first = pieces[0] if pieces else None
    if "splits" in meta:  # merge wrote the splits apart: no validation record is read in a training pass
        files, shard = rank_files(listing, node_dir, *local, "train", first)
        validation_files, validation_shard = rank_files(listing, node_dir, *local, "validation", first)
        fraction = None
    else:  # one set of shards: validation records are held out by a hash of their sample ids
        files, shard = rank_files(listing, node_dir, *local, slab=first)
        validation_files, validation_shard = files, shard
        fraction = settings["validation_fraction"]
    n_train, _ = count_records(files, fraction, shard)
    steps = int(comm.allreduce(n_train, op=_mpi_min())) // settings["batch_size"]
    if steps == 0:
        batch = settings["batch_size"]
        raise Sim2dlError(f"rank {layout.rank}: {n_train} training records, fewer than one batch of {batch}")
    return RankData(files, shard, validation_files, validation_shard, fraction, n_train, steps, pieces)


def data_rank(layout: SpatialLayout, node_ranks: Sequence[Sequence[int]], node: int, mode: str) -> tuple[int, int]:
    """(index, count) of this rank's share of its node's staged files. The ranks of a spatial set share
    one. Where every set lies within a node, the node's sets share out the node's files; where a set spans
    nodes, every node must hold every file (stage.mode replica), and the groups share them out globally."""
    within = all(any(set(ranks) <= set(held) for held in node_ranks) for ranks in layout.spatial_sets())
    if within:
        local = list(node_ranks[node])
        return local.index(layout.rank) // layout.split, len(local) // layout.split
    if mode != "replica":
        raise Sim2dlError(
            f"config key 'train.spatial.split': ranks that share samples are on different nodes, which needs "
            f"every node to hold every shard (stage.mode: replica, not {mode}), or place whole groups of "
            f"{layout.split} ranks on each node"
        )
    return layout.group, layout.groups


@dataclass
class Restored:
    manager: Any  # tf.train.CheckpointManager
    epoch: Any  # tf.Variable: epochs done, saved with the checkpoint
    start_epoch: int
    history: list[dict[str, Any]]


def restore(settings: Mapping[str, Any], meta: Mapping[str, Any], source: ModelSource, paths: TrainPaths,
            model: Any, optimizer: Any, comm: Any, rank: int) -> Restored:  # fmt: skip
    """The latest checkpoint of the same settings, model code and data, if any, and the history up to it."""
    import tensorflow as tf

    epoch_var = tf.Variable(0, dtype=tf.int64, trainable=False)
    checkpoint = tf.train.Checkpoint(model=model, optimizer=optimizer, epoch=epoch_var)
    if rank == 0:
        discard_foreign_checkpoints(paths.checkpoints, resume_key(settings, meta, source))
    comm.barrier()
    manager = tf.train.CheckpointManager(checkpoint, str(paths.checkpoints), max_to_keep=2)
    if manager.latest_checkpoint:
        checkpoint.restore(manager.latest_checkpoint)
    start_epoch = int(epoch_var.numpy())
    history = _load_history(paths.root)[:start_epoch] if start_epoch else []
    return Restored(manager, epoch_var, start_epoch, history)


@dataclass
class Model:
    """The model, where its code came from, and the input shape it takes."""

    keras: Any
    source: ModelSource
    input_shape: tuple[int | None, ...]
    transforms: Sequence[Transform] = ()  # train.augment's symmetries of a training sample


def prepare(
    config: Mapping[str, Any], meta: Mapping[str, Any], comm: Any, hvd: Any, spatial: tuple[SpatialLayout, Any]
) -> tuple[Task, Model, dict]:
    """This rank's device chosen (and the precision policy for it), seeds set, the settings and labels
    checked and the model built and checked, on every rank alike: a configuration error is reported once
    by rank 0 and every rank exits before any data is touched (no MPI_Abort, which can tear down the job
    before rank 0's message is out). Returns the task, the model and the device's record."""
    import tensorflow as tf

    settings = config["train"]
    if settings["threads"]:
        tf.config.threading.set_intra_op_parallelism_threads(settings["threads"])
        tf.config.threading.set_inter_op_parallelism_threads(settings["threads"])
    error, task, model, device = None, None, None, {}
    try:
        device = devices.apply(settings, hvd.local_rank(), hvd.local_size())
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


def spatial_dims(source: ModelSource, shape: Sequence[int | None]) -> int:
    """How many leading axes of the model's input are space: a built-in's own count, else every axis but
    the last (channels last)."""
    module = source.built_in
    return module.SPATIAL_DIMS if module is not None and module.SPATIAL_DIMS is not None else len(shape) - 1


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
    import horovod.tensorflow as hvd
    import tensorflow as tf

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
    restored = restore(settings, meta, model.source, paths, keras_model, optimizer, comm, rank)
    history = restored.history
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

    def one_epoch(epoch: int, first: bool) -> tuple[dict[str, Any], tuple[float, Evaluation]]:
        """The steps of one epoch, then validation: the epoch's row of metrics (averaged over ranks) and
        the validation (loss, evaluation)."""
        waited, losses = 0.0, []
        epoch_start = time.perf_counter()
        for step in range(data.steps):
            optimizer.learning_rate.assign(learning_rate(settings, layout.groups, epoch + step / data.steps))
            t0 = time.perf_counter()
            x, y = next(iterator)
            waited += time.perf_counter() - t0
            losses.append(float(train_step(x, y, first and step == 0)))
        seconds = time.perf_counter() - epoch_start
        # State that is not trained (batch-norm moving statistics) follows each rank's own batches: the
        # ranks' mean, so that every rank validates and saves the same model.
        for variable in keras_model.non_trainable_variables:
            if variable.dtype.is_floating:
                variable.assign(hvd.allreduce(variable, op=hvd.Average))
        evaluation = validate()
        rate = data.steps * settings["batch_size"] / seconds / layout.split  # a group's ranks share its samples
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
        improved = kept.consider(epoch + 1, row["val_loss"], keras_model, evaluation)
        if rank == 0:
            # History first: a kill between the two leaves the older checkpoint, whose resume truncates the
            # history back to it (the other order would lose this epoch's row for good). The best weights
            # before the checkpoint, and older best weights removed only after it: a resume finds the file
            # of the best epoch its history names.
            _write_history(out_dir, history)
            if improved and kept.keep == "best":
                save_weights_atomic(keras_model, paths.best_weights(epoch + 1))
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
    ranks = Ranks(hvd, rank, size, device, layout)
    return finish(config, task, model, history, final, paths, ranks, kept, found)


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


def below_baseline(task: Task, summary: Mapping[str, Any], baseline: Mapping[str, Any]) -> list[str]:
    """The labels (regression) or the score (classification: accuracy, segmentation: mean IoU) on which
    the network scores below the baseline."""
    if baseline.get("method") is None:
        return []
    if task.name == "regression":
        return [n for n, v in summary["r2"].items() if v is not None and baseline["r2"].get(n) is not None
                and v < baseline["r2"][n]]  # fmt: skip
    key = "accuracy" if task.name == "classification" else "mean_iou"
    return [key] if summary[key] < baseline[key] else []


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


@dataclass
class Ranks:
    """Where this process stands: Horovod, its rank among `size`, and the device it computes on."""

    hvd: Any
    rank: int
    size: int
    device: dict[str, Any]
    layout: SpatialLayout


def finish(config: Mapping[str, Any], task: Task, model: Model, history: Sequence[Mapping[str, Any]],
           evaluation: tuple[float, Evaluation], paths: TrainPaths, ranks: Ranks,
           kept: Kept, baseline: Mapping[str, Any]) -> dict[str, Any]:  # fmt: skip
    """The summary of the final evaluation (the task's metrics, with a check that every rank holds the same
    weights, the device each rank used and where the model's code came from), and on rank 0 the model, the
    figures and summary.json."""
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
        "validation_records": _validation_records(task, result),
        "model": model.source.provenance(),
        "weights_checksum": weights_checksum(model.keras),
        "settings": dict(settings),  # what was trained (with search.enabled: the search's best merged in)
    }
    # what a classical estimator learns from the same split (pipeline.training.baseline), and where the
    # network does worse
    summary["baseline"] = dict(baseline)
    summary["below_baseline"] = below_baseline(task, summary, baseline)
    if summary["below_baseline"] and rank == 0:
        log.warning("sim2dl train: warning: the network scores below the classical baseline (%s) on %s: %s",
                    baseline["method"], ", ".join(summary["below_baseline"]),
                    _score_pairs(task, summary, baseline))  # fmt: skip
    all_checksums = hvd.allgather_object(summary["weights_checksum"])
    summary["weights_identical_across_ranks"] = len(set(all_checksums)) == 1
    summary["hosts"] = hvd.allgather_object(socket.gethostname())  # per rank: where it trained
    summary["devices"] = hvd.allgather_object(ranks.device)  # per rank: on what
    if rank == 0:
        whole_model(config, task, model).save(str(paths.model))
        from pipeline.reporting.plots import learning_curves

        learning_curves(history, task.loss_name, paths.learning_curves)
        task.figure(result, paths.validation_figure, baseline)
        write_json_atomic(paths.summary, summary)
    hvd.join()
    return summary


def _score_pairs(task: Task, summary: Mapping[str, Any], baseline: Mapping[str, Any]) -> str:
    if task.name == "regression":
        return ", ".join(f"{n} R² {summary['r2'][n]:.3f} < {baseline['r2'][n]:.3f}" for n in summary["below_baseline"])
    key = summary["below_baseline"][0]
    return f"{key} {summary[key]:.3f} < {baseline[key]:.3f}"


def _validation_records(task: Task, evaluation: Evaluation) -> int:
    sums = evaluation.sums
    if "n" in sums:
        return int(sums["n"][0])
    pixels = int(np.prod(task.output_shape(task.data.feature_shape)[:-1])) if task.per_pixel else 1
    return int(sums["confusion"].sum()) // pixels


def _mpi_min() -> Any:
    from mpi4py import MPI

    return MPI.MIN


def _label_names(meta: Mapping[str, Any]) -> list[str] | None:
    """The names of a single label's entries where the inputs named them (metadata.json's component_names:
    the cube simulator's parameters), else None (the fields' own names)."""
    labels = [n for n, f in meta["feature_spec"].items() if f["role"] == "label"]
    names = meta.get("component_names", {}).get(labels[0]) if len(labels) == 1 else None
    shape = meta["feature_spec"][labels[0]]["shape"] if names else None
    return list(names) if names and shape and shape[-1] == len(names) else None


def _load_history(out_dir: Path) -> list[dict[str, Any]]:
    path = TrainPaths(out_dir).metrics
    return json.loads(path.read_text()) if path.exists() else []


def _write_history(out_dir: Path, history: Sequence[Mapping[str, Any]]) -> None:
    paths = TrainPaths(out_dir)
    write_json_atomic(paths.metrics, list(history))
    columns = list(history[0])
    lines = [",".join(columns)] + [",".join(_fmt(row[c]) for c in columns) for row in history]
    write_text_atomic(paths.metrics_table, "\n".join(lines) + "\n")


def _fmt(value: Any) -> str:
    return f"{value:.6g}" if isinstance(value, float) and not math.isnan(value) else str(value)

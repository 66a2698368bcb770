"""The set-up every way of training from staged shards shares (the train step, a search trial, each
trainer of a population): the settings checked against the dataset, Horovod started (with its spatial
process sets), this rank's device and seeds, the task and the model built and checked, train.augment's
symmetries, and the key a checkpoint must match to be resumed. Every check runs on every rank alike before
any data is touched: a config error is reported once and every rank exits. Memory and time: the model.
"""

from __future__ import annotations

import json
import logging
import os
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from pipeline import Sim2dlError
from pipeline.formats.shards import shard_format
from pipeline.formats.slabs import check_split
from pipeline.paths import TrainPaths
from pipeline.runtime.mpi import all_ok
from pipeline.training import determinism, devices
from pipeline.training.augment import Transform
from pipeline.training.augment import plan as augment_plan
from pipeline.training.models import BUILT_IN, ModelSource, build_model, spatial_dims
from pipeline.training.spatial.layout import SpatialLayout, check_spatial
from pipeline.training.tasks import Task, data_spec, make_task

log = logging.getLogger(__name__)


def check_settings(
    settings: Mapping[str, Any],
    meta: Mapping[str, Any],
    label_names: Sequence[str] | None,
    staged: bool = True,
) -> Task:
    """The task for the dataset, its labels checked (and, `staged`, the shards training reads: online
    training has none); errors name the key or field and what was found."""
    if not 0 < settings["learning_rate"] < 1:
        raise Sim2dlError(f"config key 'train.learning_rate': {settings['learning_rate']} is not in (0, 1)")
    if staged:
        check_staged(meta)
    task = make_task(settings, data_spec(meta, label_names))
    task.check()
    return task


def check_before_tensorflow(config: Mapping[str, Any], meta: Mapping[str, Any], comm: Any) -> None:
    """What a run's configuration can be checked for before TensorFlow and Horovod are imported (5 CPU-s a
    rank): train's settings, the task against the data, the model's name and train.population against the
    job. On every rank alike: an error is reported once by rank 0 and every rank exits. `prepare` checks
    the rest with the model built."""
    from pipeline.training.models import model_source
    from pipeline.training.population import check as check_population

    error = None
    try:
        settings = config["train"]
        task = check_settings(settings, meta, label_names(meta))
        model_source(settings["model"])
        if settings["population"]["enabled"]:
            check_population(config, comm.Get_size(), meta, task.samples_per_record())
    except Sim2dlError as e:
        error = e
    all_ok(comm, error)


def check_staged(meta: Mapping[str, Any]) -> None:
    """The merged dataset is one training reads: TFRecord shards with a training and a validation split."""
    if not shard_format(meta["format"]).trainable:
        raise Sim2dlError(f"train reads TFRecord shards, not {meta['format']}: set merge.format to tfrecord")
    missing = sorted({"train", "validation"} - set(meta.get("splits", {"train": 0, "validation": 0})))
    if missing:
        raise Sim2dlError(
            f"config key 'merge.splits': training needs the splits {missing} (have {sorted(meta['splits'])})"
        )
    empty = [n for n in ("train", "validation") if "splits" in meta and not meta["splits"][n]["records"]]
    if empty:
        raise Sim2dlError(
            f"config key 'merge.splits': the {empty[0]} split holds none of the {meta['counts']['records']} "
            "records (each file or sample goes to a split by a hash: with few inputs, raise its fraction, or "
            "split by sample rather than by file)"
        )


@dataclass
class Model:
    """The model, where its code came from, and the input shape it takes."""

    keras: Any
    source: ModelSource
    input_shape: tuple[int | None, ...]
    transforms: Sequence[Transform] = ()  # train.augment's symmetries of a training sample
    # train.augment_eval's: evaluation averages the outputs over them
    eval_transforms: Sequence[Transform] = ()


def prepare(
    config: Mapping[str, Any],
    meta: Mapping[str, Any],
    comm: Any,
    hvd: Any,
    spatial: tuple[SpatialLayout, Any],
    node_local: tuple[int, int] | None = None,
    staged: bool = True,
) -> tuple[Task, Model, dict]:
    """This rank's device chosen (and the precision policy for it), seeds set, the settings and labels
    checked and the model built and checked, on every rank alike: a configuration error is reported once
    by rank 0 and every rank exits before any data is touched (no MPI_Abort, which can tear down the job
    before rank 0's message is out). node_local: this rank's (rank, count) among the job's ranks on its
    node, where Horovod sees fewer (a population's trainer). `staged`: the data are merged shards (every
    mode's but online training's, whose `meta` describes the fields as they arrive). Returns the task, the
    model and the device's record."""
    settings = config["train"]
    apply_threads(settings)
    local_rank, local_size = node_local or (hvd.local_rank(), hvd.local_size())
    limit_blas_threads(local_size)
    error, task, model, device = None, None, None, {}
    try:
        device = devices.apply(settings, local_rank, local_size)
        determinism.seed_and_fix(settings)
        task = check_settings(settings, meta, label_names(meta), staged)
        from pipeline.training.models import input_shape, model_source

        layout = spatial[0]
        named = model_source(settings["model"])
        shape = input_shape(named, task.model_feature_shape)
        check_spatial(layout.split, layout.size, shape, settings["model"], True)
        check_split(meta.get("slabs", {}).get("count", 1), layout.split)
        split = spatial if layout.split > 1 else None
        transforms = augmentation(settings, task, named, shape, layout.split)
        averaged = evaluation_symmetries(settings, task, named, shape, layout.split)
        keras_model, source = build_model(settings, task.model_feature_shape, task, split)
        model = Model(keras_model, source, shape, transforms, averaged)
    except Sim2dlError as e:
        error = e
    all_ok(comm, error)
    assert task is not None and model is not None
    return task, model, device


def apply_threads(settings: Mapping[str, Any]) -> None:
    """train.threads: TensorFlow's intra- and inter-op threads (0: TensorFlow's choice)."""
    import tensorflow as tf

    if settings["threads"]:
        tf.config.threading.set_intra_op_parallelism_threads(settings["threads"])
        tf.config.threading.set_inter_op_parallelism_threads(settings["threads"])


def limit_blas_threads(ranks_on_node: int) -> None:
    """numpy's BLAS threads (OpenBLAS, as numpy's wheels ship it) per rank: the cores the launcher bound
    this rank to, or where it bound none, its share of the node's. Left alone, every rank's BLAS starts a
    thread per core, and the ranks' threads spinning on the same cores made the classical baseline's fit
    ten times slower at random (2.4 s or 24 s, the forward surrogate's emulator, 2 ranks on 2 cores)."""
    from threadpoolctl import threadpool_limits

    node = os.cpu_count() or 1
    bound = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else node
    threadpool_limits(bound if bound < node else max(1, node // max(ranks_on_node, 1)), user_api="blas")


def augmentation(
    settings: Mapping[str, Any], task: Task, source: ModelSource, shape: Sequence[int | None], split: int
) -> list[Transform]:
    """train.augment's symmetries of this model's input's spatial axes."""
    if not any(settings["augment"][k] for k in ("symmetries", "permute", "flips", "vector_labels")):
        return []
    if task.data.several:
        raise Sim2dlError(
            "config key 'train.augment': a model of several inputs cannot be augmented (one feature)"
        )
    return augment_plan(settings["augment"], shape[: spatial_dims(source, shape)], split)


def evaluation_symmetries(
    settings: Mapping[str, Any], task: Task, source: ModelSource, shape: Sequence[int | None], split: int
) -> list[Transform]:
    """train.augment_eval's symmetries: train.augment's group, or with augmentation off every symmetry of the
    input's spatial axes (symmetries: true)."""
    if not settings["augment_eval"]:
        return []
    why = task.test_time_augmentation_refused()
    if why:
        raise Sim2dlError(
            f"config key 'train.augment_eval': test-time augmentation averages per-sample outputs ({why})"
        )
    spatial = shape[: spatial_dims(source, shape)]
    return augment_plan(settings["augment"], spatial, split) or augment_plan(
        {"symmetries": True}, spatial, split
    )


def start_horovod(settings: Mapping[str, Any], comm: Any) -> tuple[SpatialLayout, Any]:
    """Every mode's start of Horovod on `comm` (the job's ranks offline, a trainer's in a population, the
    training ranks online): no GPU visible where train.device is cpu, the determinism settings Horovod
    reads, then hvd.init, with one Horovod process set per spatial set under
    train.spatial.ranks_per_sample (a split that does not divide the ranks is a config error on every rank,
    before Horovod starts). Returns this rank's layout and its spatial set."""
    from pipeline.training.spatial.layers import init_horovod

    devices.hide_gpus_if_cpu(settings)
    determinism.before_horovod(settings)
    split, error = settings["spatial"]["ranks_per_sample"], None
    try:
        check_spatial(split, comm.Get_size(), None, settings["model"], True)
    except Sim2dlError as e:
        error = e
    all_ok(comm, error)
    return init_horovod(split, comm)


def label_names(meta: Mapping[str, Any]) -> list[str] | None:
    """The names of a single label's entries where the inputs named them (metadata.json's component_names:
    the cube simulator's parameters), else None (the fields' own names)."""
    labels = [n for n, f in meta["feature_spec"].items() if f["role"] == "label"]
    names = meta.get("component_names", {}).get(labels[0]) if len(labels) == 1 else None
    shape = meta["feature_spec"][labels[0]]["shape"] if names else None
    return list(names) if names and shape and shape[-1] == len(names) else None


def announce_start(paths: TrainPaths, start: Mapping[str, Any]) -> None:
    """A start of training (with its Slurm job) in the log and in train/attempts.jsonl: every mode's names
    its `unit` (epoch, round, step) and `length` (how many), which `sim2dl status` reads. Rank 0."""
    start = {**start, "slurm_job": os.environ.get("SLURM_JOB_ID")}
    log.info(json.dumps({"train": start}))
    record_start(paths, start)


def record_start(paths: TrainPaths, start: Mapping[str, Any]) -> None:
    """Every start of training appended to train/attempts.jsonl, kept across retries (Snakemake clears a
    job's log when it starts). Rank 0."""
    paths.root.mkdir(parents=True, exist_ok=True)
    with open(paths.attempts, "a") as attempts:
        attempts.write(json.dumps({**start, "time": time.time()}) + "\n")


def check_spatial_model(
    train: Mapping[str, Any], search: Mapping[str, Any], merge: Mapping[str, Any]
) -> None:
    """train.spatial.ranks_per_sample > 1 needs a model that can be split (a built-in with build_split),
    search trials of a multiple of split ranks, and slab shards (merge.slabs) that split evenly between its
    ranks."""
    split, model = train["spatial"]["ranks_per_sample"], train["model"]
    check_split(merge["slabs"], split)
    if split > 1:
        check_spatial(split, None, None, model, hasattr(BUILT_IN.get(model), "build_split"))  # the model only
        ranks = search["ranks_per_trial"]
        if search["enabled"] and ranks % split:
            raise Sim2dlError(
                f"config key 'search.ranks_per_trial': {ranks}, but each trial trains with "
                "train.spatial.ranks_per_sample "
                f"{split}, which must divide its ranks (set ranks_per_trial: {split})"
            )

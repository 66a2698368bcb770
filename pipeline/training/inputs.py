"""What each rank of training reads: its share of its node's staged files (or a record shard of them),
how many records and steps that makes, and the tf.data input pipeline over them (interleaved shards,
records shuffled across shards with a per-epoch seed, a vectorised parse per batch, slabs for spatial
parallelism, symmetries for augmentation, the hash hold-outs of validation and of a population's tournament
set). Shared by the ways of training that read staged shards (pipeline.steps.train, the population in
pipeline.training.population_run). Memory: the pipeline's shuffle and prefetch buffers (serialized records),
never the dataset; time: one pass over the rank's files per epoch, plus one over their sample ids to count.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from pipeline import Sim2dlError
from pipeline.data.splits import holdout_tournament, holdout_validation
from pipeline.formats.metadata import fixed
from pipeline.formats.shards import shard_format
from pipeline.formats.shards.tfrecord.tfdata import READ_BUFFER_BYTES, decode_field, feature_description
from pipeline.formats.slabs import sibling, slab_of, slabs_read
from pipeline.paths import StagedPaths
from pipeline.training.augment import Transform
from pipeline.training.spatial.layout import SpatialLayout
from pipeline.training.tasks import Task, built_in

# ---------------------------------------------------------------- functions tf.data traces


def as_written(function: Any, task: Task | None = None) -> Any:
    """`function` for tf.data, traced as written, without autograph's conversion to graph control flow:
    our parsing and a built-in task's code branch in Python on settings only, never on tensors, and
    converting them cost a CPU-second per rank per training (each dataset built converts them again). A
    task of your own (train.task 'file.py:Class') may branch on tensors, so its code is converted."""
    import tensorflow as tf

    if task is not None and not built_in(task):
        return function
    return tf.autograph.experimental.do_not_convert(function)


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
        raise Sim2dlError(
            f"staged file {missing[0]} is missing ({len(missing)} of {len(files)}): rerun stage"
        )
    if listing["mode"] == "sample" and split in (None, "train"):
        rank = listing["ranks"][local_rank]
        own = f"rank-{rank:05d}{shard_format(listing['format']).suffix}"
        return [node_dir / n for n in listing["files"] if n == own], None
    if len(files) >= local_size:
        return files[local_rank::local_size], None
    return files, (local_size, local_rank)


def count_records(
    files: Sequence[Path], fraction: float | None, shard: tuple[int, int] | None
) -> tuple[int, int]:
    """(train, validation) records in the files, reading only their sample ids (fraction None: all are
    training records)."""
    import tensorflow as tf

    ds = tf.data.TFRecordDataset([str(f) for f in files], buffer_size=READ_BUFFER_BYTES)
    if shard:
        ds = ds.shard(*shard)
    ids = ds.map(
        as_written(
            lambda r: tf.io.parse_single_example(r, {"sample_id": tf.io.FixedLenFeature([], tf.string)})[
                "sample_id"
            ]
        )
    )
    val = train = 0
    for batch in ids.batch(4096):
        v = (
            0
            if fraction is None
            else int(tf.reduce_sum(tf.cast(holdout_validation(batch, fraction), tf.int32)))
        )
        val += v
        train += int(batch.shape[0]) - v
    return train, val


# ---------------------------------------------------------------- input pipeline


@dataclass(frozen=True)
class Records:
    """What a rank's records become: parsed by the dataset's metadata, features shaped as the model's
    input (`model_input`: a channel axis added where it has one more axis), labels as the task wants them,
    batched by train's settings, training batches under train.augment's symmetries (`transforms`)."""

    meta: Mapping[str, Any]
    settings: Mapping[str, Any]
    task: Task
    model_input: Sequence[int | None]
    transforms: Sequence[Transform] = ()


@dataclass(frozen=True)
class Read:
    """Which of the files' records one pass reads, and how.
    training: shuffled and repeated, the samples augmented. shard: (n, k), every n-th record from the k-th.
    epoch_seed: the shuffles' and the symmetries' seed (with the batch's number). fraction: the share of
    records held out for validation by a hash of their sample ids (training passes skip them, validation
    reads only them); None: the files hold one split, read whole. slab: the planes [start, stop) of the
    feature's first axis this rank keeps (spatial parallelism), cut from whole records. pieces: slab
    shards (merge.slabs): the files are slab `pieces[0]`'s, and the rank reads these slabs' files of
    each shard side by side, their planes joined. holdout: which side of `fraction`'s hold-out to read
    (default: validation records when not training; False: the training records in one ordered pass).
    tournament: (fraction, side) of the training records held out again as a population trainer's
    tournament set (pipeline.data.splits.holdout_tournament): side True reads only them, False skips them.
    cache: keep the records that pass the hold-outs in memory after the first pass (a held-out set read
    again and again is read once). whole: the records as they are, not cut into the task's samples
    (Task.samples: a rollout's trajectories)."""

    training: bool
    shard: tuple[int, int] | None
    epoch_seed: int
    fraction: float | None
    slab: tuple[int, int] | None = None
    pieces: range | None = None
    holdout: bool | None = None
    tournament: tuple[float, bool] | None = None
    cache: bool = False
    whole: bool = False


def input_pipeline(files: Sequence[Path], records: Records, read: Read) -> Any:
    """Batches of (features, labels) from the files' records, as `records` says, of those `read` says."""
    pieces = read.pieces or range(1)  # whole records: one file per shard
    training, settings = read.training, records.settings
    ds = shard_records(
        files, pieces, settings, training=training, shard=read.shard, epoch_seed=read.epoch_seed
    )
    ds = held_out(
        ds, read.fraction, (not training) if read.holdout is None else read.holdout, read.tournament
    )
    if read.cache and not training:
        ds = ds.cache()
    if training:
        # Shuffle serialized records (cheap strings) across the interleaved shards; a new order each pass.
        ds = ds.shuffle(settings["shuffle_buffer"], seed=read.epoch_seed, reshuffle_each_iteration=True)
    return batches(ds, records, read)


def shard_records(
    files: Sequence[Path],
    pieces: range,
    settings: Mapping[str, Any],
    *,
    training: bool,
    shard: tuple[int, int] | None,
    epoch_seed: int,
) -> Any:
    """The serialized records of the files (each a tuple of its slab files' records, zipped), interleaved
    across files (shuffled and repeated for training), this rank's every shard[0]-th from the shard[1]-th."""
    import tensorflow as tf

    slab_files = [[str(sibling(f, k)) for k in pieces] for f in files]
    names = tf.data.Dataset.from_tensor_slices(slab_files)  # a row per shard: its files, one per slab read
    if training:
        names = names.shuffle(len(files), seed=epoch_seed, reshuffle_each_iteration=True).repeat()

    def side_by_side(shard_files: Any) -> Any:  # the records of one shard's slab files, zipped
        return tf.data.Dataset.zip(
            tuple(
                tf.data.TFRecordDataset(shard_files[k], buffer_size=READ_BUFFER_BYTES)
                for k in range(len(pieces))
            )
        )

    ds = names.interleave(
        side_by_side,
        cycle_length=max(1, min(len(files), 4)),
        num_parallel_calls=tf.data.AUTOTUNE,
        deterministic=not training or settings["deterministic"],
    )
    return ds.shard(*shard) if shard else ds


def held_out(
    ds: Any, fraction: float | None, validation_side: bool, tournament: tuple[float, bool] | None
) -> Any:
    """The records on the asked side of the hold-outs, from one parse of the sample id: fraction's
    validation hold-out (validation_side: its held-out records, else the others), and a tournament set's
    (tournament: (fraction, side))."""
    import tensorflow as tf

    if fraction is None and tournament is None:
        return ds

    def keep(record: Any, *_: Any) -> Any:
        sid = tf.io.parse_single_example(record, {"sample_id": tf.io.FixedLenFeature([], tf.string)})[
            "sample_id"
        ]
        kept = tf.constant(True)
        if fraction is not None:
            val = holdout_validation(sid, fraction)
            kept = val if validation_side else tf.logical_not(val)
        if tournament is not None:
            held = holdout_tournament(sid, tournament[0])
            kept = tf.logical_and(kept, held if tournament[1] else tf.logical_not(held))
        return kept

    return ds.filter(as_written(keep))


def batches(ds: Any, records: Records, read: Read) -> Any:
    """Records parsed into batches of (features, labels) (one vectorised parse per batch where every
    field has a fixed shape, else bucketed by length), cut into the task's samples (Task.samples; whole:
    not cut, a rollout's trajectories), augmented for training, prefetched."""
    import tensorflow as tf

    meta, settings, task, transforms = records.meta, records.settings, records.task, records.transforms
    training, epoch_seed, whole = read.training, read.epoch_seed, read.whole
    several = not whole and task.samples_per_record() > 1  # a record's samples are batched again
    data = task.data
    feature = data.feature
    parse_batch, parse_one = (
        as_written(parse, task)
        for parse in record_parsers(meta, task, records.model_input, read.slab, whole=whole)
    )
    batch = settings["batch_size"]
    if all(fixed(meta["feature_spec"][n]) for n in (list(data.feature_shapes) or [feature])):
        ds = ds.batch(batch, drop_remainder=training and not several).map(
            parse_batch, num_parallel_calls=tf.data.AUTOTUNE
        )
        if several:  # a trajectory's windows: shuffled across records
            ds = ds.unbatch()
            if training:
                ds = ds.shuffle(
                    batch * task.samples_per_record() * 4, seed=epoch_seed, reshuffle_each_iteration=True
                )
            ds = ds.batch(batch, drop_remainder=training)
        if training and transforms:

            def symmetries(xy: Any, number: Any) -> Any:
                return task.augmented(*xy, transforms, tf.stack([tf.constant(epoch_seed, tf.int64), number]))

            ds = tf.data.Dataset.zip((ds, tf.data.Dataset.counter())).map(
                as_written(symmetries, task), num_parallel_calls=tf.data.AUTOTUNE
            )
    else:
        # Variable lengths: bucket so a batch pads little (merge sorted by length, buckets keep that order).
        ds = ds.map(parse_one, num_parallel_calls=tf.data.AUTOTUNE).bucket_by_sequence_length(
            as_written(lambda x, *_: tf.shape(x[feature] if data.several else x)[0]),
            bucket_boundaries=settings["length_buckets"],
            bucket_batch_sizes=[batch] * (len(settings["length_buckets"]) + 1),
            drop_remainder=training,
        )
    return ds.prefetch(tf.data.AUTOTUNE)


def record_parsers(
    meta: Mapping[str, Any],
    task: Task,
    model_input: Sequence[int | None],
    slab: tuple[int, int] | None,
    whole: bool = False,
) -> tuple[Any, Any]:
    """(parse a batch of records, parse one record) into (features, labels): features shaped as the
    model's input (a channel axis added where it has one more axis; slab: the planes kept; slab shards'
    planes joined), labels as the task wants them, a batch's records cut into the task's samples
    (Task.samples); whole: the records not cut, and their sample ids third (features, labels, ids)."""
    import tensorflow as tf

    data = task.data
    feature, labels = data.feature, task.record_labels()
    features = list(data.feature_shapes) or [feature]
    spec = meta["feature_spec"]
    description = feature_description(spec, (*features, *labels))  # with the sample id
    field = spec[feature]
    thickness = (field["shape"][0] // meta["slabs"]["count"]) if "slabs" in meta else None
    slab_field = {**field, "shape": [thickness, *field["shape"][1:]]}  # a slab file's planes of the feature
    add_channel = not data.several and len(model_input) == len(task.model_feature_shape) + 1

    def features_and_labels(parsed: Any, batched: bool, others: Sequence[Any]) -> Any:
        y = task.label_tensor([decode_field(parsed, n, spec[n], batched) for n in labels], batched)
        if data.several:  # your own model's inputs, by name
            return {n: tf.cast(decode_field(parsed, n, spec[n], batched), tf.float32) for n in features}, y
        if thickness is None:
            x = decode_field(parsed, feature, field, batched, planes=slab)
        else:  # the slabs read, in order: the first file's parsed whole, the others' feature only
            x = tf.concat(
                [decode_field(p, feature, slab_field, batched) for p in (parsed, *others)],
                axis=1 if batched else 0,
            )
        if add_channel:
            x = x[..., tf.newaxis]
        return tf.cast(x, tf.float32), y

    only_feature = {feature: tf.io.FixedLenFeature([], tf.string)}

    def parse_batch(first: Any, *more: Any) -> Any:
        others = [tf.io.parse_example(r, only_feature) for r in more]
        parsed = tf.io.parse_example(first, description)
        x, y = features_and_labels(parsed, True, others)
        return (x, y, parsed["sample_id"]) if whole else task.samples(x, y)

    def parse_one(first: Any, *more: Any) -> Any:
        others = [tf.io.parse_single_example(r, only_feature) for r in more]
        parsed = tf.io.parse_single_example(first, description)
        x, y = features_and_labels(parsed, False, others)
        return (x, y, parsed["sample_id"]) if whole else (x, y)

    return parse_batch, parse_one


# ---------------------------------------------------------------- the training loop


@dataclass
class RankData:
    """What one rank trains, validates and is tested on: its staged files (or its record shard of them),
    the hash hold-out fraction (None with splits), and the steps per epoch every rank takes. The test
    split (merge.splits' 'test') is None without one: nothing that chooses (keep-best, patience, a
    search's trials, a population's tournaments) reads it; it is read once, to score the kept model."""

    files: list[Path]
    shard: tuple[int, int] | None
    validation_files: list[Path]
    validation_shard: tuple[int, int] | None
    fraction: float | None
    records: int
    steps: int
    pieces: range | None = None  # the slab files of each shard it reads (merge.slabs), else whole records
    test_files: list[Path] | None = None
    test_shard: tuple[int, int] | None = None

    def evaluation_input(
        self,
        split: str,
        records: Records,
        slab: tuple[int, int] | None = None,
        cache: bool = False,
        whole: bool = False,
    ) -> Any:
        """The batches of this rank's share of the validation or the test split, in order."""
        if split == "test":
            if self.test_files is None:
                raise ValueError("no test split (merge.splits has no 'test')")
            files, shard, fraction = self.test_files, self.test_shard, None
        else:
            files, shard, fraction = self.validation_files, self.validation_shard, self.fraction
        read = Read(False, shard, 0, fraction, slab=slab, pieces=self.pieces, cache=cache, whole=whole)
        return input_pipeline(files, records, read)


@dataclass(frozen=True)
class Staging:
    """Where a run's data comes from: merge's output, the stage step's summary, and where a restaging
    (this node's copies gone) records what it did."""

    merged_dir: Path
    stage_summary: Path
    restaged: Path


def rank_data(
    config: Mapping[str, Any],
    meta: Mapping[str, Any],
    staging: Staging,
    comm: Any,
    layout: SpatialLayout,
    disjoint: bool = False,
    samples_per_record: int = 1,
) -> RankData:
    """The staged files this rank reads (staging again if this node's copies are gone), and the steps
    per epoch: the fewest any rank's records allow. The ranks of a spatial set read the same records.
    disjoint: no two ranks read the same records, also where every node holds every file (a
    population's trainers each train on their own part)."""
    from pipeline.runtime.placement import topology
    from pipeline.staging import ensure_staged

    settings = config["train"]
    topo = topology(comm, config["stage"]["emulate_nodes"])
    merged, summary, restaged = staging.merged_dir, staging.stage_summary, staging.restaged
    node_dir, _ = ensure_staged(config, merged, summary, restaged, comm, topo)
    listing = json.loads(StagedPaths(node_dir).listing.read_text())
    local = data_rank(layout, topo.node_ranks, topo.node, listing["mode"], disjoint)
    pieces = (
        slabs_read(meta["slabs"]["count"], layout.split, layout.spatial_rank) if "slabs" in meta else None
    )
    first = pieces[0] if pieces else None
    test_files: list[Path] | None = None
    test_shard: tuple[int, int] | None = None
    if "splits" in meta:  # merge wrote the splits apart: no validation record is read in a training pass
        files, shard = rank_files(listing, node_dir, *local, "train", first)
        validation_files, validation_shard = rank_files(listing, node_dir, *local, "validation", first)
        if meta["splits"].get("test", {}).get("records"):  # an empty test split scores nothing: as none
            test_files, test_shard = rank_files(listing, node_dir, *local, "test", first)
        fraction = None
    else:  # one set of shards: validation records are held out by a hash of their sample ids
        files, shard = rank_files(listing, node_dir, *local, slab=first)
        validation_files, validation_shard = files, shard
        fraction = settings["validation_fraction"]
    n_train, _ = count_records(files, fraction, shard)
    steps = int(comm.allreduce(n_train, op=_mpi_min())) * samples_per_record // settings["batch_size"]
    if steps == 0:
        batch = settings["batch_size"]
        raise Sim2dlError(f"rank {layout.rank}: {n_train} training records, fewer than one batch of {batch}")
    return RankData(
        files,
        shard,
        validation_files,
        validation_shard,
        fraction,
        n_train,
        steps,
        pieces,
        test_files,
        test_shard,
    )


def data_rank(
    layout: SpatialLayout, node_ranks: Sequence[Sequence[int]], node: int, mode: str, disjoint: bool = False
) -> tuple[int, int]:
    """(index, count) of this rank's share of its node's staged files. The ranks of a spatial set share
    one. Where every set lies within a node, the node's sets share out the node's files; where a set spans
    nodes, every node must hold every file (stage.mode replica), and the groups share them out globally.
    disjoint: with replicas on every node, the groups share them out globally too (else each node's ranks
    read all of them, as every other node's do)."""
    if disjoint and mode == "replica":
        return layout.group, layout.groups
    within = all(any(set(ranks) <= set(held) for held in node_ranks) for ranks in layout.spatial_sets())
    if within:
        local = list(node_ranks[node])
        return local.index(layout.rank) // layout.split, len(local) // layout.split
    if mode != "replica":
        raise Sim2dlError(
            f"config key 'train.spatial.ranks_per_sample': ranks that share samples are on different nodes, "
            f"which needs every node to hold every shard (stage.mode: replica, not {mode}), or place whole "
            f"groups of {layout.split} ranks on each node"
        )
    return layout.group, layout.groups


def _mpi_min() -> Any:
    from mpi4py import MPI

    return MPI.MIN

"""sim2dl: simulation output to deep-learning training data and models.

The folders are the tiers; a module imports only from its own tier or the tiers below it, and no step
imports another step (tests/test_architecture.py reads the imports to hold this). From the bottom:
the package and paths.py; storage/; reporting/; config.py (the schema and its own rules); runtime/;
formats/; staging/; data/; ensemble/; training/; design/ (above training, whose network it may train to
choose runs, and above the ensemble, whose farm its loop runs); simulators/; online/; steps/ (whose
package holds the tiers' config checks); cli.py.

    cli.py, config.py,     the spine: the `sim2dl` command (one subcommand per step, and the tools launch,
    schema.yaml, paths.py  image, doctor, inspect), the config and its schema, every file name (Layout)

    steps/          the workflow's steps, one module or small package each: a pure core and
                    `step(config, inputs..., out_dir, comm)` that the CLI and the rule files call
        simulate.py     -> raw/ (HDF5 samples from simulators/, or an ensemble of your command)
        ingest/         raw/ or source.path -> ingest/: parts, manifest, rejects (step.py: listing and
                        parts; samples.py: many samples per file, and fields from formats/fields/)
        convert.py      ingest/ -> convert/: converted parts, statistics
        merge/          ingest/, convert/ -> merged/: sorted shards (+ .idx), provenance, metadata.json
        stage.py        merged/ -> node-local copies (the engine is pipeline/staging/)
        search.py       merged/, staged -> search/best.yaml (BOHB; trials run train)
        train.py        merged/, staged -> train/: model, metrics, summary, figures
        online.py       the ensemble and training in one MPI job (train.online) -> raw/, train/
        throughput.py, sweep.py   figures of finished runs
        inspect.py      `sim2dl inspect`: what existing files hold, and a starter config (the readers'
                        conventions and events.py's tables say what a layout is; the models which fits)
    formats/        what files hold
        readers/        input formats (HDF5, NetCDF, NumPy, ROOT, Zarr, ADIOS2 BP: bp.py, openPMD:
                        openpmd.py), one file each behind `Reader` (each says what it recognises: a
                        its `Conventions` for inspect); cf.py decodes CF fill values and packing, events.py
                        event-indexed tables (and which of a file's tables inspect proposes as events)
        fields/         values that are not arrays of a file (attributes, run tables, path groups), classes
        shards/         shard formats, one home each (`ShardFormat`: writer, index, reading, verification,
                        tf.data records): tfrecord/, hdf5.py; shard_reader.py reads shards without TensorFlow
        parts.py        ingest's parts of framed records;  metadata.py  metadata.json, read without TensorFlow
        slabs.py        slab shards (merge.slabs): names and checks of a shard's per-depth-slab files
    data/           rules about samples several steps share: splits.py (which split a record is in),
                    transforms.py (convert's array transforms, merge's normalisation), deposit.py
                    (particles onto grids: NGP/CIC/TSC, convert.deposit), tables.py (manifest,
                    provenance, rejects), scores.py (NRMSE over a set, VRMSE)
    training/       models/ (Keras builders, one file each), tasks/ (regression, classification,
                    segmentation, surrogate, next_state, autoencoder, one file each), tfdata.py
                    (tf.data over shards), devices.py (a GPU or the CPU per rank, precision),
                    determinism.py (the same weights twice), augment.py (symmetries of a sample,
                    train.augment), baseline.py (the classical estimator beside every result), spatial/
                    (samples split across ranks: layout.py, layers.py with the halo exchange); the ways of
                    training: kernel.py (the step loop, schedule, history rows, keep-best every way
                    drives), checkpoints.py (what every way leaves to resume from: resume key,
                    checkpoint, history, kept weights), session.py (set-up, Horovod's start), inputs.py
                    (each rank's records as tf.data), run.py (one training run's ends, every mode's:
                    the start's record, the baseline, the summary, the saved model), epochs.py (offline
                    epochs), population_run.py, tournament.py, population.py and
                    exchange.py (train.population), steps.py (the compiled step), optimizer.py
    online/         online training (train.online): producer.py (the ensemble's ranks sending samples),
                    arrivals.py (reading a run's files or stream steps), stream.py (ADIOS2 SST),
                    buffer.py (replay buffers), training_rank.py (the ranks that train), tables.py (its
                    runs table)
    simulators/     built-in simulator families (one file each; *_run.py: one run as a program, as a user's
                    simulator is)
    ensemble/       your simulator over MPI: sampling.py (space-filling designs, scaled to the
                    parameters), plan.py (the design, one row per run), farm.py (the runs over the ranks,
                    retries, resume), runs_table.py, messages.py (to the online trainers)
    design/         where the simulator runs next: space.py (designs, the unit cube, candidates),
                    emulator.py (a GP per principal component), network.py (an ensemble of the decoder
                    a user trains), batch.py (batches that do not cluster),
                    acquisitions/ (one file per way of choosing, behind `Acquisition`); loop/ (the design
                    under MPI: rounds.py, simulate.adaptive; online.py, the trainers choosing online)
    runtime/        where steps run: mpi.py (blocks, exchange, collective errors), placement.py (nodes,
                    ranks, staged directories), launch.py (a step's argument vector: launcher and
                    container), runtimes/ (one file per container runtime: its argument vector, image
                    name, pull, doctor's checks),
                    startup.py (a launch that failed in MPI start-up, recognised and started again),
                    container_image.py, oci_registry.py, host_mpi.py (the bind model), doctor.py,
                    slurm_watch.py, processes.py, run_worker.py (the process that runs an ensemble
                    rank's commands with retries; here, so that it starts without the simulator families)
    storage/        fsutil.py (atomic writes, checksums), directio.py (O_DIRECT reads, batches of extents)
    staging/        copying shards to node-local storage over MPI (plan.py, copier.py): the engine of
                    the stage step, and of train and search where node-local files were purged
    reporting/      progress.py (bars counting every rank's work), plots.py (figures for the report)

Where a new thing goes: an input reader, formats/readers/ (one file, registered in its __init__); a shard
format, formats/shards/; a model, training/models/; a task, training/tasks/; a simulator family,
simulators/; a container runtime, runtime/runtimes/ (one file, registered in its __init__); a step, steps/
plus its rule file in rules/ and its subcommand in cli.py. Every step prints one JSON summary line on stdout;
its progress and diagnostics go to stderr.

Words with one meaning each:

    part           a file of framed records written by ingest (or convert), about one shard's worth; merge
                   turns parts into shards, often by linking a whole part
    sample number  a sample's place when ingest numbers every sample of the sorted inputs (many per file,
                   steps/ingest/samples.py; a file whose samples cannot be counted has one: its reject)
    framed record  one sample's bytes as the shard format frames them (a TFRecord record with its length
                   and CRCs), so a part's records can be copied into a shard unchanged
    home           the part (file and offset) where a record's bytes live when merge gathers them
    shard          a large output file of sorted records (shards/), with its index (.idx)
    split          a named subset of the shards (train/, validation/ ...) chosen by a hash of the parent id
    layout         the workdir's paths (`paths.Layout`); nothing else is called a layout
    placement      which node and rank holds or reads which shard (stage, train)
    trainer        a group of consecutive ranks training one model of a population (train.population,
                   training/tournament.py); online training's ranks that train are training ranks
                   (online/training_rank.py; its summary's `training_ranks` and `*_per_training_rank`)
    step           one of the workflow's steps (simulate, ingest, ... train: steps/, rules/); in training,
                   an optimizer step is a training step (one batch: training/steps.py compiles it, the
                   kernel's run_steps runs a window of them, train.online.steps counts them); an ADIOS2
                   stream's step is a stream step (online/stream.py)
    kept record    train.keep's record of the lowest validation loss (training/kernel.py `Kept`), one for
                   every way of training, in its unit: epoch (offline), round (a population), step (online)
    conventions    what a reader recognises in a file beyond its arrays (readers/base.py), for inspect
    image          a container image; the bytes of one input file are its contents
    template       the places of fields in an HDF5 file that files of the same shape share (readers/hdf5.py)
    MB             10^6 bytes, everywhere (config sizes, summaries, benchmarks)
"""

import gc
import hashlib
import importlib
import importlib.abc
import importlib.machinery
import json
import os
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

# Horovod's Keras integration needs Keras 2 (tf_keras); this must be set before TensorFlow is imported.
os.environ.setdefault("TF_USE_LEGACY_KERAS", "1")
os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")

__version__ = "0.1.0"
OLD_NAMES_UNTIL = "0.2"  # the release that drops old names: renamed config keys, old keyword arguments
MB = 1_000_000  # one MB everywhere: config sizes, summaries and benchmarks are in 10^6 bytes


def json_digest(value: Any) -> str:
    """A short digest of JSON-able settings (keys sorted, other values as text): what a step compares to
    know whether what an earlier run left was made under the same settings."""
    return hashlib.sha256(json.dumps(value, sort_keys=True, default=str).encode()).hexdigest()[:16]


class Sim2dlError(Exception):
    """An error the user can act on: the message names the file or config key and the reason."""


class CollectiveError(Sim2dlError):
    """A Sim2dlError every rank knows about (raised by `parallel.all_ok`): printed once, no abort needed."""

    def __init__(self, message: str, rank: int) -> None:
        super().__init__(message)
        self.rank = rank


@contextmanager
def gc_paused() -> Iterator[None]:
    """Runs a data step with Python's cyclic garbage collector paused (usable as a decorator).

    Ingest, convert and merge build hundreds of thousands of small, acyclic, long-lived objects (manifest
    rows, index entries, provenance); the collector would scan them again and again for cycles they do not
    have (about half of convert's and merge's time at a few thousand records: docs/benchmarks.md, design
    measurements). Reference counting still frees every acyclic object at once, so memory does not grow
    from this; the collector runs again when the step returns."""
    enabled = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if enabled:
            gc.enable()


# Module paths users import from code written before the tiers existed: each old name is the module it
# moved to (the same object), so `from pipeline.reader import ShardReader` keeps working.
MOVED = {
    "pipeline.reader": "pipeline.formats.shards.shard_reader",
    "pipeline.dataset": "pipeline.training.tfdata",
    "pipeline.models": "pipeline.training.models",
    "pipeline.tasks": "pipeline.training.tasks",
    "pipeline.readers": "pipeline.formats.readers",
}


class _MovedModules(importlib.abc.MetaPathFinder, importlib.abc.Loader):
    def find_spec(
        self, name: str, path: object, target: object = None
    ) -> importlib.machinery.ModuleSpec | None:
        return importlib.machinery.ModuleSpec(name, self) if name in MOVED else None

    def create_module(self, spec: importlib.machinery.ModuleSpec) -> None:
        return None

    def exec_module(self, module: object) -> None:
        # the import system returns whatever sys.modules holds under the name after exec_module
        name = module.__name__  # type: ignore[attr-defined]
        sys.modules[name] = importlib.import_module(MOVED[name])


sys.meta_path.append(_MovedModules())

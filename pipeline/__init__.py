"""sim2dl: simulation output to deep-learning training data and models.

The steps, in workflow order. Each is one module with a pure core and a function
`step(config, input directories..., output directory, comm)` that the CLI (`pipeline.cli`, one
subcommand per step) and the rule files call; every step prints one JSON summary line on stdout, and
its progress and diagnostics go to stderr. File names are written once, in `pipeline.paths`.

    simulate  simulate.py   -> raw/ (HDF5 samples), simulate.json
    ingest    ingest.py     raw/ or source.path -> ingest/: parts/, manifest/, rejects.csv, summary.json
    convert   convert.py    ingest/ -> convert/: parts/ (what was done to each part), stats.json
    merge     merge.py      ingest/, convert/ -> merged/: shards/ (+ .idx), provenance/, metadata.json
    stage     stage.py      merged/ -> node-local copies (stage.target), staged/summary.json
    search    search.py     merged/, staged -> search/: best.yaml (BOHB; trials run `train`)
    train     train.py      merged/, staged -> train/: model/, metrics, summary.json, figures
    throughput, sweep       figures of finished runs (throughput.py, sweep.py)

Which module to open for what:

    paths.py       every file name; Layout (the workdir) for the Snakefile and the CLI's defaults
    config.py      loading and validating configs (schema.yaml); each step's view of the config
    cli.py         the `sim2dl` command: steps and tools (launch, image, doctor, inspect), errors, summaries
    readers/       input formats (HDF5, NetCDF, NumPy, ROOT, Zarr): one small file each, `Reader` in base.py;
                   cf.py decodes CF fill values and packing for all of them, events.py reads event-indexed
                   tables (one sample per event: a range of rows)
    fields/        values of a file that are not arrays in it (attributes, run table columns, path groups)
                   and categorical classes: one small file each, `ValueSource` in base.py
    file_samples.py  ingest in samples (many per file, or fields from fields/): planning and reading
    writers/       shard formats (TFRecord, HDF5): one small file each, `Writer` in base.py
    records.py     parts: framed records, their index, Part and PartWriter
    tables.py      manifest and provenance tables (Parquet), rejects lists (CSV)
    directio.py    O_DIRECT reads: whole files read ahead, byte ranges gathered for merge
    splits.py      which split (train, validation, ...) a record belongs to: merge's shards, convert's statistics
    parallel.py    MPI helpers: blocks of work, all-to-all exchange, collective error checks
    dataset.py     reading shards with tf.data; reader.py: the same without TensorFlow (numpy, PyTorch)
    models.py      the Keras models train builds
    launch.py, image.py, registry.py, hostmpi.py, doctor.py
                   containers: argument vectors per runtime, building, pushing and pulling the image,
                   the host's MPI for the bind model, checks of a site
    inspection.py  `sim2dl inspect`: what existing files hold, and a starter config

Words with one meaning each:

    part           a file of framed records written by ingest (or convert), about one shard's worth; merge
                   turns parts into shards, often by linking a whole part
    sample number  a sample's place when ingest numbers every sample of the sorted inputs (many per file,
                   pipeline/steps/ingest/samples.py; a file whose samples cannot be counted has one: its reject)
    framed record  one sample's bytes as the shard format frames them (a TFRecord record with its length
                   and CRCs), so a part's records can be copied into a shard unchanged
    home           the part (file and offset) where a record's bytes live when merge gathers them
    shard          a large output file of sorted records (shards/), with its index (.idx)
    split          a named subset of the shards (train/, validation/ ...) chosen by a hash of the parent id
    layout         the workdir's paths (`paths.Layout`); nothing else is called a layout
    placement      which node and rank holds or reads which shard (stage, train)
    image          a container image; the bytes of one input file are its contents
    template       the places of fields in an HDF5 file that files of the same shape share (readers/hdf5.py)
    MB             10^6 bytes, everywhere (config sizes, summaries, benchmarks)
"""

import gc
import importlib
import importlib.abc
import importlib.machinery
import os
import sys
from collections.abc import Iterator
from contextlib import contextmanager

# Horovod's Keras integration needs Keras 2 (tf_keras); this must be set before TensorFlow is imported.
os.environ.setdefault("TF_USE_LEGACY_KERAS", "1")
os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")

__version__ = "0.1.0"
MB = 1_000_000  # one MB everywhere: config sizes, summaries and benchmarks are in 10^6 bytes


class Sim2dlError(Exception):
    """An error the user can act on: the message names the file or config key and the reason."""


class CollectiveError(Sim2dlError):
    """A Sim2dlError every rank knows about (raised by `parallel.all_ok`): printed once, no abort needed."""

    def __init__(self, message: str, rank: int) -> None:
        super().__init__(message)
        self.rank = rank


@contextmanager
def bookkeeping_step() -> Iterator[None]:
    """Runs a data step with Python's cyclic garbage collector paused (usable as a decorator).

    Ingest, convert and merge build hundreds of thousands of small, acyclic, long-lived objects (manifest
    rows, index entries, provenance); the collector would scan them again and again for cycles they do not
    have (measured at 6,000 records: convert 0.41 -> 0.18 s, merge 0.40 -> 0.18 s). Reference counting
    still frees every acyclic object at once, so memory does not grow from this; the collector runs again
    when the step returns."""
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
    def find_spec(self, name: str, path: object, target: object = None) -> importlib.machinery.ModuleSpec | None:
        return importlib.machinery.ModuleSpec(name, self) if name in MOVED else None

    def create_module(self, spec: importlib.machinery.ModuleSpec) -> None:
        return None

    def exec_module(self, module: object) -> None:
        # the import system returns whatever sys.modules holds under the name after exec_module
        name = module.__name__  # type: ignore[attr-defined]
        sys.modules[name] = importlib.import_module(MOVED[name])


sys.meta_path.append(_MovedModules())

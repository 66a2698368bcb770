"""Run sim2dl ingest + convert + merge in-process on every MPI rank and time them (import excluded), until
the output is on storage.
Launched by bench/merge.py under mpiexec (arguments: config, settle seconds, and `warm` to read the inputs
into the page cache first instead of evicting them: ingest's time without waiting on the disk); prints one
JSON line from rank 0."""

import json
import os
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from common import settle

from pipeline import config as cfg
from pipeline.formats.shards.tfrecord.encode import TFRecordShardWriter  # noqa: F401  (imports TensorFlow now)
from pipeline.runtime.mpi import world
from pipeline.steps.convert import convert
from pipeline.steps.ingest.step import ingest
from pipeline.steps.merge.step import merge


def main() -> None:
    config = cfg.load(sys.argv[1])
    comm = world()
    lay = cfg.layout(config)
    import tensorflow  # noqa: F401

    if comm.Get_rank() == 0:
        inputs = sorted(lay.raw.rglob("*.h5"))
        if sys.argv[3:] == ["warm"]:
            for path in inputs:
                path.read_bytes()
        else:
            settle(inputs, float(sys.argv[2]))
    comm.barrier()
    times = {}
    start = time.perf_counter()
    ingest(cfg.step_config(config, "ingest"), lay.raw, lay.ingest, comm)
    comm.barrier()
    times["ingest"] = time.perf_counter() - start
    convert(cfg.step_config(config, "convert"), lay.ingest, lay.convert, comm)
    comm.barrier()
    times["convert"] = time.perf_counter() - start - times["ingest"]
    merge(cfg.step_config(config, "merge"), lay.ingest, lay.convert, lay.merged, comm)
    comm.barrier()
    times["written"] = time.perf_counter() - start
    times["merge"] = times["written"] - times["ingest"] - times["convert"]
    if comm.Get_rank() == 0:
        os.sync()  # on storage, as every variant (bench/common.py ON_STORAGE)
    comm.barrier()
    times["total"] = time.perf_counter() - start
    times["sync"] = times["total"] - times["written"]
    if comm.Get_rank() == 0:
        print(json.dumps(times), flush=True)


if __name__ == "__main__":
    main()

"""Run sim2dl ingest + convert + merge in-process on every MPI rank over SOURCE into WORK/{ingest,
convert,merged}, timing each (imports excluded, the inputs as they are in the page cache): bench/merge.py's
`grown` runs it twice over a growing listing and once afresh. Arguments: config, source, work; prints
one JSON line from rank 0: each step's summary with its `seconds`."""

import json
import sys
import time
from pathlib import Path

from pipeline import config as cfg
from pipeline.formats.shards.tfrecord.encode import TFRecordShardWriter  # noqa: F401  (imports TensorFlow now)
from pipeline.runtime.mpi import world
from pipeline.steps.convert import convert
from pipeline.steps.ingest.step import ingest
from pipeline.steps.merge.step import merge


def main() -> None:
    config = cfg.load(sys.argv[1])
    source, work = Path(sys.argv[2]), Path(sys.argv[3])
    comm = world()
    ingested, converted, merged = work / "ingest", work / "convert", work / "merged"
    steps = {
        "ingest": lambda: ingest(cfg.step_config(config, "ingest"), source, ingested, comm),
        "convert": lambda: convert(cfg.step_config(config, "convert"), ingested, converted, comm),
        "merge": lambda: merge(cfg.step_config(config, "merge"), ingested, converted, merged, comm),
    }
    summaries = {}
    for name, step in steps.items():
        comm.barrier()
        start = time.perf_counter()
        summary = step()
        comm.barrier()
        summaries[name] = {**summary, "seconds": time.perf_counter() - start}
    if comm.Get_rank() == 0:
        print(json.dumps(summaries), flush=True)


if __name__ == "__main__":
    main()

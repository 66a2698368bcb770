"""Run `sim2dl ARGS` in this process and record the kernel's I/O counters for it (/proc/self/io).

Used by bench/stage.py as the program of every MPI rank, so that bytes read from storage are measured
independently of the stager's own counters. The counters are taken after start-up (the interpreter,
the libraries, MPI and the config are loaded first), so what they count is what the command reads: the
source directory's shards and metadata. Usage: _io_probe.py OUT_DIR sim2dl-args...
"""

import json
import os
import sys
from pathlib import Path


def io_counters() -> dict[str, int]:
    with open("/proc/self/io") as f:
        return {k: int(v) for k, v in (line.split(": ") for line in f)}


def main() -> int:
    out_dir, args = Path(sys.argv[1]), sys.argv[2:]
    import tqdm  # noqa: F401  (start-up: imported now, not counted below)

    import pipeline.steps.stage  # noqa: F401
    from pipeline import config as cfg
    from pipeline.cli import main as sim2dl
    from pipeline.runtime.mpi import world

    world()
    cfg.load(args[args.index("--config") + 1])
    before = io_counters()
    try:
        return sim2dl(args)
    finally:
        after = io_counters()
        names = ("PMI_RANK", "OMPI_COMM_WORLD_RANK", "SLURM_PROCID")
        rank = next((os.environ[k] for k in names if k in os.environ), "0")
        (out_dir / f"rank-{rank}.json").write_text(json.dumps({k: after[k] - before[k] for k in after}))


if __name__ == "__main__":
    sys.exit(main())

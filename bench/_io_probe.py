"""Run `sim2dl ARGS` in this process and record the kernel's I/O counters for it (/proc/self/io).

Used by bench/stage.py as the program of every MPI rank, so that bytes read from storage are measured
independently of the stager's own counters. Usage: _io_probe.py OUT_DIR sim2dl-args...
"""

import json
import os
import sys
from pathlib import Path


def io_counters() -> dict[str, int]:
    with open("/proc/self/io") as f:
        return {k: int(v) for k, v in (line.split(": ") for line in f)}


def main() -> int:
    out_dir = Path(sys.argv[1])
    from pipeline.cli import main as sim2dl

    try:
        return sim2dl(sys.argv[2:])
    finally:
        rank = os.environ.get("PMI_RANK", os.environ.get("OMPI_COMM_WORLD_RANK", "0"))
        (out_dir / f"rank-{rank}.json").write_text(json.dumps(io_counters()))


if __name__ == "__main__":
    sys.exit(main())

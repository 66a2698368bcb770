"""Benchmark: spatial parallelism (train.spatial.ranks_per_sample), memory and time per rank.

The built-in cosmoflow model at the demo's widths (depth 3, width 8, dense 64) trains on 128³ x 4 samples,
batch 16 (activations dominate: about 5 GB of a 7.4 GB rank unsplit), whole on 1 rank (S = 1) and split
across 2 and 4 ranks (S = 2, 4; one group), each rank holding only its slab of the samples. Per S:

- peak_rss_mb: the largest rank's peak resident memory (ru_maxrss) over start-up and the timed steps;
- rss_per_rank_vs_unsplit: that / S = 1's. Target <= 0.6 at S = 2, <= 0.35 at S = 4;
- step_s and step_time_vs_unsplit: median training step (Horovod's gradient average and Adam included).
  On this 2-core machine every rank shares the same 2 cores (S = 1 runs TensorFlow's 2 threads, S = 4
  oversubscribes them), so this says what the halo exchanges and the smaller kernels cost, not the
  speed-up a core or GPU per rank would give.

input_per_rank: what one rank of a spatial set reads per pass to get its planes of every sample (24
samples of the same size, cold page cache), from whole records (the planes cut after reading) against
slab shards (merge.slabs = S: only its slab's files): bytes_read_vs_whole_records (1/S expected) and
read_time_vs_whole_records, through train's own input pipeline (bench/_spatial_read.py).

memory_limit: every rank run under the same per-rank limit, enforced by the kernel (prlimit --data:
RLIMIT_DATA caps a process's private writable memory, where TensorFlow's tensors live; a Slurm job's
--mem-per-cpu with cgroup enforcement is the cluster's form of it): does a training step fit, per S.
"""

from __future__ import annotations

import argparse
import json
import shutil
import subprocess
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from common import BIN, OUT, REPO, bench_env, emit

SHAPE = (128, 128, 128, 4)
BATCH = 16
READ_SAMPLES = 24  # 0.8 GB of 128³ x 4 float32 samples per copy
LIMIT_MB = 6500  # between S = 2's ~5.2 GB of private memory and S = 1's ~9.8 GB


def run(split: int, steps: int, out: Path, limit_mb: int | None = None) -> list[dict] | None:
    """The ranks' figures (None when a rank failed, e.g. past the memory limit)."""
    shutil.rmtree(out, ignore_errors=True)
    out.mkdir(parents=True)
    limit = ["prlimit", f"--data={limit_mb * 10**6}"] if limit_mb else []
    program = [*limit, sys.executable, str(REPO / "bench" / "_spatial_step.py"), str(out), str(split)]
    cmd = [str(BIN / "mpiexec"), "-n", str(split), *program, *map(str, (*SHAPE, BATCH, steps))]
    proc = subprocess.run(cmd, capture_output=True, text=True, env=bench_env())
    if proc.returncode != 0:
        if limit_mb is None:
            raise SystemExit(f"{cmd} failed:\n{proc.stderr[-2000:]}")
        return None
    return [json.loads(p.read_text()) for p in sorted(out.glob("rank-*.json"))]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--quick", action="store_true", help="2 timed steps instead of 5")
    args = parser.parse_args()
    steps = 2 if args.quick else 5
    work = OUT / "spatial"
    figures: dict = {"sample": list(SHAPE), "batch": BATCH}
    for split in (1, 2, 4):
        ranks = run(split, steps, work / f"s{split}")
        assert ranks is not None
        figures[f"split_{split}"] = {
            "peak_rss_mb": round(max(r["peak_rss_mb"] for r in ranks), 1),
            "startup_rss_mb": round(max(r["startup_rss_mb"] for r in ranks), 1),
            "step_s": round(max(r["step_s"] for r in ranks), 3),
        }
    whole = figures["split_1"]
    for split in (2, 4):
        part = figures[f"split_{split}"]
        part["rss_per_rank_vs_unsplit"] = round(part["peak_rss_mb"] / whole["peak_rss_mb"], 3)
        part["step_time_vs_unsplit"] = round(part["step_s"] / whole["step_s"], 3)
    read_dir = work / "read"
    shutil.rmtree(read_dir, ignore_errors=True)
    read_dir.mkdir(parents=True)
    cmd = [
        sys.executable,
        str(REPO / "bench" / "_spatial_read.py"),
        str(read_dir),
        *map(str, SHAPE),
        str(READ_SAMPLES),
    ]
    proc = subprocess.run(cmd, capture_output=True, text=True, env=bench_env())
    if proc.returncode != 0:
        raise SystemExit(f"{cmd} failed:\n{proc.stderr[-2000:]}")
    figures["input_per_rank"] = json.loads(proc.stdout.strip().splitlines()[-1])
    shutil.rmtree(read_dir, ignore_errors=True)
    figures["memory_limit"] = {"limit_mb_per_rank": LIMIT_MB, "enforced_by": "prlimit --data (RLIMIT_DATA)"}
    for split in (1, 2):
        fits = run(split, 1, work / f"limit{split}", LIMIT_MB) is not None
        figures["memory_limit"][f"split_{split}_trains"] = fits
    shutil.rmtree(work, ignore_errors=True)
    emit(figures)


if __name__ == "__main__":
    main()

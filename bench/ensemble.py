"""Benchmark: the ensemble's task farm (simulate.command) against the usual ways of running many short
simulator runs, and its memory with many runs.

- runs_per_s_vs_xargs: the farm's dispatch overhead: runs/s of `sim2dl simulate` on 2 ranks with a
  trivial command (`touch {out}/done`: a run must write something to count as done) / runs/s of
  `xargs -P 2` running the same command in directories made beforehand (outside its timing). Both on a
  tmpfs (/dev/shm, a node-local RAM disk), medians of 3 interleaved repetitions. Target >= 0.8. sim2dl
  does more per run: a directory made under a temporary name and renamed, and a log file.
- runs_per_s_vs_xargs_disk: the same on the work directory's disk. On this VM's ext4 both slow down from
  one repetition to the next however long the pause (write-back of the earlier repetitions' tens of
  thousands of directories), sim2dl more as it makes 4 entries per run to xargs' 1: a figure of the disk
  as much as of the farm, reported beside the tmpfs one.
- runs_per_s_vs_snakemake_jobs: the same against one Snakemake job per run (--cores 2), as a workflow
  without the farm would run them (measured on fewer runs: Snakemake's DAG grows with the jobs).
- peak_rss_mb_per_rank at `runs` runs (100,000 in full mode): bounded (a few arrays per rank).
Times exclude interpreter start-up alike: sim2dl's is the farm's own `seconds_running`.
"""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))

import numpy as np
import yaml
from common import BIN, bench_env, emit, parse_size, sim2dl

TOUCH = shutil.which("touch") or "/usr/bin/touch"


def farm(work: Path, runs: int) -> dict:
    config = {
        "workdir": str(work),
        "simulate": {
            "enabled": True,
            "command": [TOUCH, "{out}/done"],
            "runs": runs,
            "design": "random",
            "space": {"x": {"type": "uniform", "low": 0, "high": 1}},
            "files_per_dir": 1000,
        },
        "source": {"glob": "**/done"},
    }
    path = work / "config.yaml"
    work.mkdir(parents=True, exist_ok=True)
    path.write_text(yaml.safe_dump(config))
    return json.loads(sim2dl("simulate", "--config", str(path)).strip().splitlines()[-1])


def xargs(work: Path, runs: int) -> float:
    dirs = [work / f"{i // 1000:05d}" / f"run-{i:06d}" for i in range(runs)]
    for d in dirs:
        d.mkdir(parents=True)
    listing = "".join(f"{d}/done\n" for d in dirs).encode()
    start = time.perf_counter()
    subprocess.run(["xargs", "-P", "2", "-n", "1", TOUCH], input=listing, check=True)
    return time.perf_counter() - start


def snakemake_jobs(work: Path, runs: int) -> float:
    work.mkdir(parents=True, exist_ok=True)
    (work / "Snakefile").write_text(
        f"RUNS = range({runs})\n"
        "rule all:\n    input: expand('runs/run-{i}/done', i=RUNS)\n"
        "rule run:\n    output: 'runs/run-{i}/done'\n    shell: 'touch {output}'\n"
    )
    start = time.perf_counter()
    subprocess.run([str(BIN / "snakemake"), "--cores", "2", "--quiet", "all"], cwd=work, check=True,
                   env=bench_env(), capture_output=True)  # fmt: skip
    return time.perf_counter() - start


def settle(*paths: Path) -> None:
    """Remove earlier variants' files and let the file system write back: creating tens of thousands of
    directories right after deleting as many runs up to 2x slower (measured), whichever variant it is."""
    for path in paths:
        shutil.rmtree(path, ignore_errors=True)
    subprocess.run(["sync"], check=True)
    time.sleep(2)


def compare(work: Path, runs: int) -> tuple[list[float], list[float]]:
    """Runs/s of the farm and of xargs: 3 interleaved repetitions each."""
    farm_rates, xargs_rates = [], []
    for _ in range(3):  # interleaved, medians: file-system write-back makes single runs noisy
        settle(work / "farm", work / "xargs")
        sim = farm(work / "farm", runs)
        farm_rates.append(runs / sim["seconds_running"])
        settle(work / "farm", work / "xargs")
        xargs_rates.append(runs / xargs(work / "xargs", runs))
    settle(work / "farm", work / "xargs")
    return farm_rates, xargs_rates


def ratios(farm_rates: list[float], xargs_rates: list[float]) -> dict[str, Any]:
    farm_rate, xargs_rate = float(np.median(farm_rates)), float(np.median(xargs_rates))
    return {
        "farm_runs_per_s": round(farm_rate, 1),
        "xargs_runs_per_s": round(xargs_rate, 1),
        "runs_per_s_vs_xargs": round(farm_rate / xargs_rate, 3),
        "runs_per_s_vs_xargs_each": [round(f / x, 3) for f, x in zip(farm_rates, xargs_rates, strict=True)],
    }


def main() -> None:
    n, keep, work = parse_size(__doc__, "ensemble")
    quick = n == 2000
    runs = 2000 if quick else 20000
    shutil.rmtree(work, ignore_errors=True)
    ram = Path(tempfile.mkdtemp(prefix="sim2dl-bench-ensemble-", dir="/dev/shm"))
    try:
        ram_farm, ram_xargs = compare(ram, runs)
    finally:
        shutil.rmtree(ram, ignore_errors=True)
    disk_farm, disk_xargs = compare(work, runs)
    snake_runs = 100 if quick else 400
    snake_s = snakemake_jobs(work / "snakemake", snake_runs)
    many = 10000 if quick else 100000
    settle(work / "snakemake")
    big = farm(work / "many", many)
    on_ram = ratios(ram_farm, ram_xargs)
    on_disk = ratios(disk_farm, disk_xargs)
    result = {
        "benchmark": "ensemble",
        "ranks": 2,
        "runs": runs,
        "command": "touch {out}/done",
        **on_ram,
        "runs_per_s_vs_xargs_disk": on_disk["runs_per_s_vs_xargs"],
        "disk": on_disk,
        "snakemake_jobs": snake_runs,
        "snakemake_runs_per_s": round(snake_runs / snake_s, 1),
        "runs_per_s_vs_snakemake_jobs": round(on_disk["farm_runs_per_s"] / (snake_runs / snake_s), 1),  # both on disk
        "many_runs": many,
        "many_runs_ok": big["ok"],
        "many_runs_per_s": round(many / big["seconds_running"], 1),
        "peak_rss_mb_per_rank": big["peak_rss_mb_per_rank"],
        "targets": {"runs_per_s_vs_xargs": ">= 0.8"},
    }
    if not keep:
        shutil.rmtree(work)
    emit(result)


if __name__ == "__main__":
    main()

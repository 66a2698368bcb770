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
- scaling (`--scaling`, or after the comparisons in full mode): the farm alone at 10^4, 10^5 and 10^6 trivial
  runs on tmpfs (--quick: 2,000 and 10,000): runs/s, every rank's peak RSS (flat: no rank holds the design
  or the outcomes of all runs: rank 0 writes the runs table a block of 16,384 runs at a time), the runs
  table's bytes and the seconds to read it back (Parquet, pyarrow), the most entries in one directory; at
  the largest size xargs beside it (`runs_per_s_vs_xargs_at_largest`), and the farm killed with SIGKILL at
  60 % of its runs then rerun: the rerun's wall time, the seconds it spent before its first new run
  (`seconds_to_first_new_run`: finding the completed runs), and no completed run run again (every run
  directory that existed at the kill has the same inode after the rerun).
- persistent (`--persistent`, or after the comparisons in full mode): a real code with a slow start,
  py-pde's Swift–Hohenberg equation (bench/codes/swift_hohenberg.py, in its own venv) on its numpy backend
  (each process imports py-pde, numba and sympy) and its numba backend (each process also compiles), 8
  runs on 2 ranks: one process per run against simulate.persistent (one process per rank): runs per
  minute of each and `persistent_speedup`, their ratio, per backend.
Times exclude interpreter start-up alike: sim2dl's is the farm's own `seconds_running`.
"""

from __future__ import annotations

import json
import os
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
from common import BIN, OUT, bench_env, emit, sim2dl, sim2dl_killed

TOUCH = shutil.which("touch") or "/usr/bin/touch"


def farm_config(work: Path, runs: int) -> Path:
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
    return path


def persistent(root: Path, runs: int = 8) -> dict[str, Any]:
    """A compiling code run once per run and as a persistent simulator (see the module doc)."""
    from codes.environment import python

    code = [str(python()), str(Path(__file__).resolve().parent / "codes" / "swift_hohenberg.py")]
    space = {
        "rate": {"type": "uniform", "low": -0.3, "high": 0.3},
        "delta": {"type": "uniform", "low": 0.0, "high": 2.0},
    }
    figures: dict[str, Any] = {"code": "py-pde SwiftHohenbergPDE", "runs": runs}
    for backend in ("numpy", "numba"):
        one_run = ["--out", "{out}", "--rate", "{rate}", "--delta", "{delta}", "--backend", backend]
        ways = {
            "per_run_process": {"command": [*code, *one_run]},
            "persistent": {"command": [*code, "--persistent", "--backend", backend], "persistent": True},
        }
        rates = {}
        for way, simulate in ways.items():
            work = root / f"persistent-{backend}-{way}"
            shutil.rmtree(work, ignore_errors=True)
            work.mkdir(parents=True)
            config = {
                "workdir": str(work),
                "simulate": {"enabled": True, "runs": runs, "design": "sobol", "space": space, **simulate},
                "source": {"glob": "**/*.h5"},
            }
            (work / "config.yaml").write_text(yaml.safe_dump(config))
            out = sim2dl("simulate", "--config", str(work / "config.yaml"))
            summary = json.loads(out.strip().splitlines()[-1])
            assert summary["ok"] == runs, summary
            rates[f"{way}_runs_per_min"] = round(60 * runs / summary["seconds_running"], 2)
            shutil.rmtree(work, ignore_errors=True)
        speedup = rates["persistent_runs_per_min"] / rates["per_run_process_runs_per_min"]
        figures[backend] = {**rates, "persistent_speedup": round(speedup, 2)}
    return figures


def farm(work: Path, runs: int) -> dict:
    return json.loads(sim2dl("simulate", "--config", str(farm_config(work, runs))).strip().splitlines()[-1])


def run_dirs(raw: Path) -> dict[str, int]:
    """Every completed run's directory (name: inode)."""
    found = {}
    for group in os.scandir(raw):
        if group.is_dir() and group.name.isdigit():
            for entry in os.scandir(group.path):
                if not entry.name.startswith("."):
                    found[entry.name] = entry.inode()
    return found


def most_entries(raw: Path) -> int:
    """The most entries in one directory below raw (run groups, logs)."""
    return max(len(os.listdir(d)) for d, _, _ in os.walk(raw))


def killed_farm(work: Path, runs: int, at: float = 0.6) -> dict[str, Any]:
    """The farm killed (SIGKILL: mpiexec, ranks, workers, the running commands) once `at` of its runs are
    complete, then rerun."""
    path = farm_config(work, runs)
    raw = work / "raw"
    groups = -(-runs // 1000)

    # a group directory holds 1,000 runs: the groups begun, less the last, are full
    def begun_groups() -> int:
        return len(list(raw.glob("[0-9]" * 5))) if raw.is_dir() else 0

    sim2dl_killed("simulate", "--config", path, when=lambda: begun_groups() - 1 >= at * groups, poll_s=0.2)
    before = run_dirs(raw)
    started = time.perf_counter()
    resumed = json.loads(sim2dl("simulate", "--config", str(path)).strip().splitlines()[-1])
    wall = time.perf_counter() - started
    after = run_dirs(raw)
    rerun = sum(1 for name, inode in before.items() if after.get(name) != inode)
    return {
        "runs": runs,
        "complete_at_kill": len(before),
        "resume_wall_s": round(wall, 2),
        "resume_seconds_running": resumed["seconds_running"],
        "seconds_to_first_new_run": resumed.get("seconds_to_first_new_run"),
        "ok_after_resume": resumed["ok"],
        "completed_runs_run_again": rerun,
    }


def scaling(root: Path, sizes: list[int]) -> dict[str, Any]:
    """The farm at each size on tmpfs, xargs and a killed farm at the largest (see the module doc)."""
    import pyarrow.parquet as pq

    figures: dict[str, Any] = {}
    for n in sizes:
        work = root / f"farm-{n}"
        sim = farm(work, n)
        table = work / "raw" / "runs.parquet"
        started = time.perf_counter()
        rows = pq.read_table(table).num_rows
        figures[str(n)] = {
            "runs_per_s": round(n / sim["seconds_running"], 1),
            "ok": sim["ok"],
            "peak_rss_mb_by_rank": sim["peak_rss_mb_by_rank"],
            "runs_table_bytes": table.stat().st_size,
            "runs_table_read_s": round(time.perf_counter() - started, 3),
            "rows": rows,
            "most_entries_per_dir": most_entries(work / "raw"),
        }
        print(json.dumps({"runs": n, **figures[str(n)]}), flush=True)
        settle(work)
    largest = sizes[-1]
    xargs_rate = largest / xargs(root / "xargs", largest)
    settle(root / "xargs")
    killed = killed_farm(root / "killed", largest)
    settle(root / "killed")
    peaks = [max(figures[str(n)]["peak_rss_mb_by_rank"]) for n in sizes]
    return {
        "sizes": figures,
        "peak_rss_mb_per_rank": peaks,
        "rss_mb_per_million_runs": round((peaks[-1] - peaks[0]) / ((largest - sizes[0]) / 1e6), 1),
        "xargs_runs_per_s_at_largest": round(xargs_rate, 1),
        "runs_per_s_vs_xargs_at_largest": round(figures[str(largest)]["runs_per_s"] / xargs_rate, 3),
        "killed_at_60_percent": killed,
    }


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
    subprocess.run(
        [str(BIN / "snakemake"), "--cores", "2", "--quiet", "all"],
        cwd=work,
        check=True,
        env=bench_env(),
        capture_output=True,
    )
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
    import argparse

    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument(
        "--quick", action="store_true", help="2,000 runs compared; the farm at 2,000 and 10,000"
    )
    parser.add_argument("--scaling", action="store_true", help="only the farm at 10^4, 10^5 and 10^6 runs")
    parser.add_argument("--keep", action="store_true", help="keep the disk variant's runs in bench/out")
    parser.add_argument(
        "--persistent", action="store_true", help="only a compiling code, per run and persistent"
    )
    args = parser.parse_args()
    quick, only_scaling, keep = args.quick, args.scaling, args.keep
    if args.persistent:
        emit({"benchmark": "ensemble", "ranks": 2, "persistent": persistent(OUT)})
        return
    runs = 2000 if quick else 20000
    work = OUT / f"ensemble-{runs}"
    shutil.rmtree(work, ignore_errors=True)
    result: dict[str, Any] = {"benchmark": "ensemble", "ranks": 2, "command": "touch {out}/done"}
    if not only_scaling:
        result.update(comparisons(work, runs, quick))
    ram = Path(tempfile.mkdtemp(prefix="sim2dl-bench-ensemble-", dir="/dev/shm"))
    try:
        result["scaling"] = scaling(ram, [2000, 10000] if quick else [10_000, 100_000, 1_000_000])
    finally:
        shutil.rmtree(ram, ignore_errors=True)
    if not quick and not only_scaling:
        result["persistent"] = persistent(OUT)
    result["rss_mb_per_million_runs"] = result["scaling"]["rss_mb_per_million_runs"]
    result["runs_per_s_vs_xargs_at_largest"] = result["scaling"]["runs_per_s_vs_xargs_at_largest"]
    result["completed_runs_run_again"] = result["scaling"]["killed_at_60_percent"]["completed_runs_run_again"]
    result["targets"] = {
        "runs_per_s_vs_xargs": ">= 0.8",
        "runs_per_s_vs_xargs_at_largest": ">= 0.8",
        "rss_mb_per_million_runs": "flat (<= 20)",
        "completed_runs_run_again": "0",
    }
    if not keep:
        shutil.rmtree(work, ignore_errors=True)
    emit(result)


def comparisons(work: Path, runs: int, quick: bool) -> dict[str, Any]:
    """The farm against xargs (tmpfs and disk) and one Snakemake job per run."""
    ram = Path(tempfile.mkdtemp(prefix="sim2dl-bench-ensemble-", dir="/dev/shm"))
    try:
        ram_farm, ram_xargs = compare(ram, runs)
    finally:
        shutil.rmtree(ram, ignore_errors=True)
    disk_farm, disk_xargs = compare(work, runs)
    snake_runs = 100 if quick else 400
    snake_s = snakemake_jobs(work / "snakemake", snake_runs)
    settle(work / "snakemake")
    on_ram = ratios(ram_farm, ram_xargs)
    on_disk = ratios(disk_farm, disk_xargs)
    return {
        "runs": runs,
        **on_ram,
        "runs_per_s_vs_xargs_disk": on_disk["runs_per_s_vs_xargs"],
        "disk": on_disk,
        "snakemake_jobs": snake_runs,
        "snakemake_runs_per_s": round(snake_runs / snake_s, 1),
        # both on disk
        "runs_per_s_vs_snakemake_jobs": round(on_disk["farm_runs_per_s"] / (snake_runs / snake_s), 1),
    }


if __name__ == "__main__":
    main()

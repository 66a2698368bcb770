"""Shared pieces of the benchmarks: test data, cold-cache reads, the naive baseline, JSON output.

Reads are measured cold: before every variant the input files are evicted from the page cache
(posix_fadvise DONTNEED, which needs no privileges), as on a parallel file system where the client has
not cached the data. Interpreter and library start-up is excluded from every variant alike.

Variants that write are timed until their output is on storage (ON_STORAGE: `sync` inside the timing), as
IO500 requires of its write phases: a conversion is done when the data is where the training job can
read it, and without the sync a variant writing through the page cache (the naive baseline) would stop
its clock with gigabytes still to write back, paid by whatever runs next, while sim2dl's direct writes
are on the device already. The times before the sync are reported too.

Memory is made cold too where a benchmark compares variants that move gigabytes through memory
(`settle`): on VMs with free page reporting (as this machine class has: virtio-balloon,
page_reporting_order=11), memory freed in the last seconds is still backed by the host and cheap to
reuse, while memory idle for longer is returned to the host and costs a fault per page on first touch
(measured: 1 GB first touched 0.1 s right after a free, 0.6 s after 1 s, 2.2 s after 10 s). Without a
pause, a variant that runs right after another frees its page cache (evicted inputs, deleted outputs)
would start with gigabytes of warm memory the others do not get.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from collections.abc import Iterable, Sequence
from pathlib import Path
from typing import Any

import yaml

REPO = Path(__file__).resolve().parent.parent
BIN = Path(sys.executable).parent
OUT = REPO / "bench" / "out"


def parse_size(doc: str | None, name: str) -> tuple[int, bool, Path]:
    """The command line every benchmark shares: (number of files, keep data?, work directory)."""
    import argparse

    parser = argparse.ArgumentParser(description=doc)
    parser.add_argument("--quick", action="store_true", help="2,000 files, under a minute")
    parser.add_argument("--files", type=int, help="number of input files (default 20,000; quick 2,000)")
    parser.add_argument("--keep", action="store_true", help="keep the generated data in bench/out")
    args = parser.parse_args()
    n = args.files or (2000 if args.quick else 20000)
    return n, args.keep, OUT / f"{name}-{n}"


def bench_env() -> dict[str, str]:
    env = dict(os.environ)
    env["PATH"] = f"{BIN}:{env.get('PATH', '')}"
    env.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")
    env["PYTHONPATH"] = str(REPO)
    return env


def mpi_argv(ranks: int, *command: str | Path, options: tuple[str, ...] = ()) -> list[str]:
    return [str(BIN / "mpiexec"), "-n", str(ranks), *options, *(str(c) for c in command)]


def mpi(ranks: int, *command: str | Path, options: tuple[str, ...] = ()) -> str:
    """Run `command` as an MPI job of `ranks` ranks with the venv's launcher; returns its stdout."""
    argv = mpi_argv(ranks, *command, options=options)
    return subprocess.run(argv, check=True, env=bench_env(), capture_output=True, text=True).stdout


def sim2dl_killed(*args: str | Path, when: Any, ranks: int = 2, poll_s: float = 0.05) -> float:
    """`sim2dl ARGS` under MPI, killed with SIGKILL (mpiexec, every rank and whatever they started: its
    own session) once `when()` is true or it ends; returns the seconds until the kill."""
    import signal

    proc = subprocess.Popen(
        mpi_argv(ranks, BIN / "sim2dl", *args),
        env=bench_env(),
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
        start_new_session=True,
    )
    start = time.perf_counter()
    while proc.poll() is None and not when():
        time.sleep(poll_s)
    os.killpg(proc.pid, signal.SIGKILL)
    proc.wait()
    return time.perf_counter() - start


def sim2dl(*args: str | Path, ranks: int = 2, options: tuple[str, ...] = ()) -> str:
    """`sim2dl ARGS` under MPI; returns its stdout."""
    return mpi(ranks, BIN / "sim2dl", *args, options=options)


def workflow(config: dict[str, Any], path: Path, *options: str) -> float:
    """The workflow as a user runs it (`snakemake --cores 2 --configfile PATH`, from the repository) on
    `config`, written to `path`; returns its seconds."""
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(yaml.safe_dump(config, sort_keys=False))
    start = time.perf_counter()
    subprocess.run(
        [str(BIN / "snakemake"), "--cores", "2", "--configfile", str(path), *options],
        cwd=REPO,
        env=bench_env(),
        check=True,
        capture_output=True,
    )
    return time.perf_counter() - start


def prepared(work: Path, config: dict[str, Any]) -> Path:
    """The config below `work` (its workdir there, staging to work/local), simulated, ingested, converted,
    merged and staged with 2 ranks; returns the config file's path."""
    config = {
        **config,
        "workdir": str(work),
        "stage": {**config.get("stage", {}), "target": str(work / "local")},
    }
    work.mkdir(parents=True, exist_ok=True)
    path = work / "config.yaml"
    path.write_text(yaml.safe_dump(config, sort_keys=False))
    for step in ("simulate", "ingest", "convert", "merge", "stage"):
        sim2dl(step, "--config", str(path))
    return path


def bench_config(workdir: Path, samples: int, **sections: Any) -> Path:
    """A config for `samples` cubes of 32^3 with a pass-through conversion (no log1p, no normalisation)
    so sim2dl does the same work as the baseline: read, cast, serialise, write."""
    config: dict[str, Any] = yaml.safe_load((REPO / "config" / "config.yaml").read_text())
    config["workdir"] = str(workdir)
    config["simulate"]["runs"] = samples
    config["convert"].update({"log1p": [], "normalise": []})
    config["merge"]["shard_size_mb"] = 64
    for key, value in sections.items():
        config[key].update(value)
    path = workdir / "config.yaml"
    workdir.mkdir(parents=True, exist_ok=True)
    path.write_text(yaml.safe_dump(config, sort_keys=False))
    return path


def simulated_inputs(workdir: Path, samples: int) -> tuple[Path, list[Path]]:
    """Simulate once per size (kept in bench/out between runs); returns the config and the files."""
    config = bench_config(workdir, samples)
    raw = workdir / "raw"
    if (
        not (raw / "simulate.json").exists()
        or json.loads((raw / "simulate.json").read_text())["samples"] != samples
    ):
        print(f"generating {samples} input files in {raw} ...", file=sys.stderr, flush=True)
        sim2dl("simulate", "--config", config)
    files = sorted(raw.rglob("*.h5"))
    assert len(files) == samples, f"expected {samples} files in {raw}, found {len(files)}"
    return config, files


def evict(paths: Iterable[Path]) -> None:
    """Drop the files' pages from the page cache (written data is synced first)."""
    os.sync()
    for p in paths:
        fd = os.open(p, os.O_RDONLY)
        try:
            os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_DONTNEED)
        finally:
            os.close(fd)


ON_STORAGE = "each variant timed until its output is on storage (sync inside the timing)"
SETTLE_SECONDS = {"default": 10.0, "quick": 1.0}  # quick: within its minute


def settle(paths: Iterable[Path], seconds: float) -> None:
    """Evict the files, then wait until the memory freed so far has gone cold (see the module doc)."""
    evict(paths)
    time.sleep(seconds)


def read_floor_seconds(paths: Sequence[Path], settle_seconds: float = 0.0) -> float:
    """Every file's bytes read once: `cat` to /dev/null (xargs batches the file names)."""
    settle(paths, settle_seconds)
    listing = "\0".join(str(p) for p in paths).encode()
    start = time.perf_counter()
    subprocess.run(["xargs", "-0", "cat"], input=listing, stdout=subprocess.DEVNULL, check=True)
    return time.perf_counter() - start


def total_mb(paths: Sequence[Path]) -> float:
    return sum(p.stat().st_size for p in paths) / 1e6


def rate(count: int, mb: float, seconds: float) -> dict[str, float]:
    return {
        "seconds": round(seconds, 3),
        "files_per_s": round(count / seconds, 1),
        "mb_per_s": round(mb / seconds, 1),
    }


# The naive baseline, as the MLPerf HPC CosmoFlow reference's prepare.py does it: a process pool, each
# input file read with h5py and written as ONE tf.train.Example in its own TFRecord file.
def _naive_init() -> None:
    global _tf, _h5py
    import h5py as _h5py
    import tensorflow as _tf


def naive_one(args: tuple[str, str]) -> None:
    path, out_dir = args
    with _h5py.File(path, mode="r") as f:
        x = f["density"][:]
        y = f["params"][:]
    feature = {
        "x": _tf.train.Feature(bytes_list=_tf.train.BytesList(value=[x.tobytes()])),
        "y": _tf.train.Feature(float_list=_tf.train.FloatList(value=y)),
    }
    example = _tf.train.Example(features=_tf.train.Features(feature=feature))
    with _tf.io.TFRecordWriter(
        os.path.join(out_dir, os.path.basename(path).replace(".h5", ".tfrecord"))
    ) as w:
        w.write(example.SerializeToString())


def naive_tfrecords(
    paths: Sequence[Path], out_dir: Path, processes: int, settle_seconds: float = 0.0
) -> tuple[float, float]:
    """Seconds until every file is written, and until it is on storage (see ON_STORAGE)."""
    import multiprocessing as mp

    out_dir.mkdir(parents=True, exist_ok=True)
    jobs = [(str(p), str(out_dir)) for p in paths]
    with mp.get_context("fork").Pool(processes, initializer=_naive_init) as pool:
        pool.map(naive_one, jobs[:processes])  # warm up: workers have imported TensorFlow
        settle(paths, settle_seconds)
        start = time.perf_counter()
        pool.map(naive_one, jobs, chunksize=16)
        written = time.perf_counter() - start
        os.sync()
        return written, time.perf_counter() - start


def emit(result: dict[str, Any]) -> None:
    """The last line of every benchmark: one JSON object."""
    print(json.dumps(result), flush=True)

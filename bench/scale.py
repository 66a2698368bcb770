"""Bookkeeping at scale: per-step time per record and peak memory per rank as the number of files grows.

Tiny files (the simulator's 4^3 cubes: the point is bookkeeping, not bytes) at three sizes (10^6, 3x10^6,
10^7; --quick 20k, 80k, 200k) through ingest, convert, merge and stage with 2 ranks, then one epoch read
back (tf.data over the staged copies, and the numpy reader over the merged directory, each in a process of
its own). Each step runs as `mpiexec -n R sim2dl STEP` and reports its own wall time (start-up excluded)
and every rank's peak RSS (`peak_rss_mb_by_rank` in its JSON summary). At the largest size no more than
10^6 (the checked size), merge runs three more times: again with 2 ranks and with 1 (the shards' bytes
must be identical: one xxh3 checksum over all of them), and killed with SIGKILL once half its shards are
written, then rerun (its wall time, the shards it kept, and no finished shard written again).

How the inputs are made: `sim2dl simulate` with 2 ranks, once, at the largest size (4^3 cubes; with
`--family trace`, variable-length records of 10 to 40 steps, which merge sorts by length as etalumis
did). The simulator writes every file after its first from that file's HDF5 image with the data and id
bytes replaced (pipeline.steps.simulate.Templates, byte-identical to h5py's files). The largest size is
every file, found by a glob (the ranks walk the tree apart); each smaller size is the first N files,
named in a `source.list` file (one path per line, read by the ranks from their blocks of its bytes).
A file is 6,220 bytes (HDF5's own structures around 268 bytes of data): 10^7 of them take 80 GB on
ext4 with 4 KB blocks, more than this machine's disk, so the full run's bench/out was a loop-mounted
btrfs image with zstd compression (`raw_gb_on_disk`, `file_system`).

Figures (last line, one JSON object):
- rss_mb_per_million_records: the largest per-step slope of peak RSS per rank (MB per million records,
  between the smallest and largest size); target <= 100.
- time_per_record_growth: the largest per-step ratio of seconds per record at the largest size to the
  smallest; target <= 1.25.
- rank0_vs_others: the largest per-step ratio of rank 0's peak RSS to the other ranks' at the largest
  size; target <= 1.5 (no rank holds the whole listing).
- merge_speedup_2_ranks: merge time with 1 rank / with 2 at the checked size; target >= 1.6.
- checksums: the shards identical on a rerun, with 1 rank, and after the killed merge's resume.
- metadata_json_bytes at each size: a few hundred bytes per shard, nothing per record.

With `--layouts`: the same records (4^3 cubes and 3 parameters, equal bytes) as they come from real
simulations with many samples per file (HDF5 with a leading axis, chunked 1,024 samples, read with
source.samples_along 0), at two sizes each (half and all of N records; N is 1,000,000, --quick 200,000,
both past the size where parts reach their largest, 8,192 samples, so that the slope shows what grows
with the records and not with the parts): `samples_1000_per_file` (N/1000 files of 1,000 samples) and
`four_files` (N/4 each), beside `one_per_file` (N files of one sample, the simulator's). Figures per
layout: ingest records/s (the step that differs) and records/s through ingest + convert + merge, their
ratio to one_per_file
(`records_per_s_vs_one_per_file`; target >= 0.8), the peak RSS per rank of each step and its slope
(`rss_mb_per_million_records`, between the two sizes; target <= 100).

With `--events`: one HDF5 file of 10^7 hit rows (--quick 2 x 10^6), and one of half as many, in
km3pipe's layout (/hits a group of columns time, dom_id, channel with /hits/_indices; /mc_tracks keyed by
group_id, a few rows per event; about 100 hits per event) through ingest, convert and merge with 2 ranks
(events as row ranges, spread over the ranks). Baseline in the same run: the workaround users write
today, reading the whole columns with h5py, splitting them into per-event arrays and writing one HDF5
file per event (one process). Figures: `ingest_events_per_s` and `events_per_s` (the data half),
`ingest_rows_per_s`, `ingest_events_per_s_vs_one_file_per_event`, the peak RSS per rank of each step
and its slope between the two sizes (`rss_mb_per_million_rows`; ingest's target <= 5: a rank holds a
batch of events, ingest.batch_mb, never a column), and the baseline's peak RSS (it holds every column).
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import shutil
import sys
from pathlib import Path
from typing import Any

import yaml

from pipeline.formats.shards.base import SHARD_INDEX_SUFFIX
from pipeline.steps.simulate import sample_path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from common import OUT, sim2dl

FILES_PER_DIR = 1000  # the simulator's default


def simulate(root: Path, files: int, family: str) -> None:
    """`files` samples in root (the simulator keeps files already there, so a larger set extends one)."""
    doc = {
        "workdir": str(root / "sim-work"),
        "simulate": {
            "runs": files,
            "family": family,
            "cube": {"size": 4},
            "trace": {"min_length": 10, "max_length": 40},
        },
    }
    path = root / "simulate.yaml"
    root.mkdir(parents=True, exist_ok=True)
    path.write_text(yaml.safe_dump(doc))
    sim2dl("simulate", "--config", str(path), "--out", str(root / "raw"), ranks=2)


def input_list(root: Path, files: int) -> Path:
    """A list file naming the first `files` samples."""
    path = root / f"inputs-{files}.txt"
    with open(path, "w") as f:
        for i in range(files):
            f.write(f"{sample_path(Path('.'), i, FILES_PER_DIR)}\n")
    return path


# --quick's shards: 2 MB (about 7,000 tiny records), so that every rank writes full-size shards from the
# smallest size on. With 16 MB shards merge's peak at 20,000 records holds one 6 MB shard and at 200,000
# 16 MB ones: the slope then measured the shard buffers filling up to their size (a constant of the shard
# size, reached once), about 400 MB "per million records", not a cost per record.
QUICK_SHARD_MB = 2


def config(work: Path, root: Path, listed: Path | None, family: str, shard_mb: float = 16) -> Path:
    """The data steps' config: the inputs named by the list file `listed`, or (None) every file found by
    a glob (the ranks walk the tree apart)."""
    fields = (
        {"density": {"path": "density", "dtype": "float32", "shape": [4, 4, 4]}}
        if family == "cube"
        else {"trace": {"path": "trace", "dtype": "float32", "shape": [None, 4]}}
    )
    feature = next(iter(fields))
    fields["params"] = {"path": "params", "dtype": "float32", "shape": [3]}
    doc: dict[str, Any] = {
        "workdir": str(work),
        "simulate": {"enabled": False},
        "source": {
            "path": str(root / "raw"),
            **({"list": str(listed)} if listed else {"glob": "**/*.h5"}),
            "sample_id": {"attr": "sample_id"},
            "fields": fields,
        },
        "ingest": {"max_reject_fraction": 0.0},
        "convert": {"features": [feature], "labels": ["params"], "normalise": [feature, "params"]},
        "merge": {"shard_size_mb": shard_mb, "sort_by": "sort_key" if family == "cube" else "length"},
    }
    path = work / "config.yaml"
    work.mkdir(parents=True, exist_ok=True)
    path.write_text(yaml.safe_dump(doc))
    return path


def run_step(step: str, config_path: Path, ranks: int) -> dict[str, Any]:
    out = sim2dl(step, "--config", str(config_path), ranks=ranks)
    return json.loads(out.strip().splitlines()[-1])


def bundles(root: Path, files: int, per_file: int, seed: int = 7) -> None:
    """`files` HDF5 files of `per_file` samples along axis 0 (4^3 cubes, 3 parameters), chunked by 1,024
    samples, as ensemble codes write them; each with its file id as a root attribute."""
    import h5py
    import numpy as np

    root.mkdir(parents=True, exist_ok=True)
    rng = np.random.default_rng(seed)
    block = 65_536  # samples generated at a time (a 4 x 250,000 file is not made in memory at once)
    for f in range(files):
        with h5py.File(root / f"bundle-{f:05d}.h5", "w") as out:
            chunks = min(1024, per_file)
            density = out.create_dataset("density", (per_file, 4, 4, 4), "f4", chunks=(chunks, 4, 4, 4))
            params = out.create_dataset("params", (per_file, 3), "f4", chunks=(chunks, 3))
            for start in range(0, per_file, block):
                n = min(block, per_file - start)
                density[start : start + n] = rng.gamma(2.0, 1.0, (n, 4, 4, 4)).astype("f4")
                params[start : start + n] = rng.uniform(0.2, 1.0, (n, 3)).astype("f4")
            out.attrs["bundle_id"] = f"bundle-{f:05d}"


def layout_config(work: Path, raw: Path) -> Path:
    doc = {
        "workdir": str(work),
        "simulate": {"enabled": False},
        "source": {
            "path": str(raw),
            "glob": "*.h5",
            "samples_along": 0,
            "sample_id": {"attr": "bundle_id"},
            "fields": {
                "density": {"path": "density", "dtype": "float32", "shape": [4, 4, 4]},
                "params": {"path": "params", "dtype": "float32", "shape": [3]},
            },
        },
        "ingest": {"max_reject_fraction": 0.0},
        "convert": {"features": ["density"], "labels": ["params"], "normalise": ["density", "params"]},
        "merge": {"shard_size_mb": 16},
    }
    work.mkdir(parents=True, exist_ok=True)
    path = work / "config.yaml"
    path.write_text(yaml.safe_dump(doc))
    return path


def data_half(config_path: Path, records: int) -> dict[str, Any]:
    steps = {step: run_step(step, config_path, 2) for step in ("ingest", "convert", "merge")}
    seconds = sum(s["seconds"] for s in steps.values())
    return {
        "records": records,
        "ingest_records_per_s": round(records / steps["ingest"]["seconds"]),
        "records_per_s": round(records / seconds),
        "peak_rss_mb_per_rank": {step: s["peak_rss_mb_per_rank"] for step, s in steps.items()},
    }


def layouts(records: int, keep: bool) -> None:
    """Many samples per file beside one per file, at equal bytes (see the module doc)."""
    root = OUT / "scale-layouts"
    sizes = (records // 2, records)
    cases = {"samples_1000_per_file": lambda n: (n // 1000, 1000), "four_files": lambda n: (4, n // 4)}
    figures: dict[str, Any] = {}
    try:
        simulate(root, records, "cube")
        work = root / "work-one"
        figures["one_per_file"] = data_half(config(work, root, input_list(root, records), "cube"), records)
        shutil.rmtree(work)
        print(json.dumps({"one_per_file": figures["one_per_file"]}), flush=True)
        for name, shape in cases.items():
            runs = []
            for n in sizes:
                files, per_file = shape(n)
                raw = root / f"{name}-{n}"
                bundles(raw, files, per_file)
                work = root / f"work-{name}-{n}"
                runs.append(data_half(layout_config(work, raw), files * per_file))
                shutil.rmtree(work)
                shutil.rmtree(raw)
                print(json.dumps({name: runs[-1], "files": files, "per_file": per_file}), flush=True)
            small, large = runs
            slope = {
                step: round(
                    (large["peak_rss_mb_per_rank"][step] - small["peak_rss_mb_per_rank"][step])
                    / ((large["records"] - small["records"]) / 1e6),
                    1,
                )
                for step in large["peak_rss_mb_per_rank"]
            }
            figures[name] = {
                **large,
                "files": shape(records)[0],
                "samples_per_file": shape(records)[1],
                "records_per_s_vs_one_per_file": round(
                    large["records_per_s"] / figures["one_per_file"]["records_per_s"], 3
                ),
                "ingest_records_per_s_vs_one_per_file": round(
                    large["ingest_records_per_s"] / figures["one_per_file"]["ingest_records_per_s"], 3
                ),
                "rss_mb_per_million_records": max(slope.values()),
                "rss_slope_by_step": slope,
                "smaller_size": small,
            }
    finally:
        if not keep:
            shutil.rmtree(root, ignore_errors=True)
    many = [v for k, v in figures.items() if k != "one_per_file"]
    print(
        json.dumps(
            {
                "benchmark": "scale-layouts",
                "records": records,
                "ranks": 2,
                "layouts": figures,
                "records_per_s_vs_one_per_file": min(v["records_per_s_vs_one_per_file"] for v in many),
                "rss_mb_per_million_records": max(v["rss_mb_per_million_records"] for v in many),
                "targets": {
                    "records_per_s_vs_one_per_file": ">= 0.8",
                    "rss_mb_per_million_records": "<= 100",
                },
                "cpus": os.cpu_count(),
            }
        )
    )


def km3net_file(path: Path, rows: int, seed: int = 3) -> int:
    """rows hits in km3pipe's layout, about 100 per event; the number of events."""
    import h5py
    import numpy as np

    rng = np.random.default_rng(seed)
    counts = rng.poisson(100, size=rows // 100 + 1)
    counts = counts[np.cumsum(counts) <= rows]
    rows = int(counts.sum())
    starts = np.concatenate([[0], np.cumsum(counts)[:-1]])
    chunk = 1 << 16
    with h5py.File(path, "w") as f:
        hits = f.create_group("hits")
        hits.create_dataset("time", data=rng.uniform(0, 1e4, rows), chunks=(chunk,))
        hits.create_dataset("dom_id", data=rng.integers(0, 2000, rows, dtype="i4"), chunks=(chunk,))
        hits.create_dataset("channel", data=rng.integers(0, 31, rows, dtype="u1"), chunks=(chunk,))
        hits["_indices"] = np.array(
            list(zip(starts, counts, strict=True)), dtype=[("index", "<i8"), ("n_items", "<i8")]
        )
        muons = rng.integers(1, 4, len(counts))
        tracks = np.zeros(int(muons.sum()), dtype=[("group_id", "<i8"), ("energy", "<f4")])
        tracks["group_id"] = np.repeat(np.arange(len(counts)), muons)
        tracks["energy"] = rng.gamma(2.0, 100.0, len(tracks))
        f.create_dataset("mc_tracks", data=tracks, chunks=(min(chunk, len(tracks)),))
    return len(counts)


ONE_FILE_PER_EVENT = """
import json, os, resource, sys, time
import h5py, numpy as np
t = time.perf_counter()
out = sys.argv[2]
with h5py.File(sys.argv[1], "r") as f:
    index = f["hits/_indices"][()]
    columns = np.stack([f["hits/time"][()], f["hits/dom_id"][()], f["hits/channel"][()]], axis=1).astype("f4")
    tracks = f["mc_tracks"][()]
events = np.split(columns, np.cumsum(index["n_items"])[:-1])
ids, starts = np.unique(tracks["group_id"], return_index=True)
energy = np.add.reduceat(tracks["energy"], starts)
for k, hits in enumerate(events):
    directory = os.path.join(out, f"{k // 1000:04d}")
    os.makedirs(directory, exist_ok=True)
    with h5py.File(os.path.join(directory, f"event-{k:07d}.h5"), "w") as e:
        e["hits"], e["energy"] = hits, energy[k]
os.sync()
print(json.dumps({"events": len(events), "files": len(events), "seconds": time.perf_counter() - t,
                  "peak_rss_mb": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024}))
"""


def events_config(root: Path, raw: Path) -> Path:
    doc = {
        "workdir": str(root / "work"),
        "simulate": {"enabled": False},
        "source": {
            "path": str(raw),
            "glob": "*.h5",
            "fields": {
                "hits": {
                    "path": "hits",
                    "columns": ["time", "dom_id", "channel"],
                    "ragged_by": "hits/_indices",
                    "dtype": "float32",
                    "shape": [None, 3],
                },
                "energy": {"path": "mc_tracks", "columns": ["energy"], "key": "group_id", "reduce": "sum"},
            },
        },
        # 8 MB of events read at a time: both sizes (each rank's half of the rows) are past it, so the
        # memory figure shows what grows with the rows, not the batch growing up to its bound
        "ingest": {"max_reject_fraction": 0.0, "batch_mb": 8},
        "convert": {"features": ["hits"], "labels": ["energy"], "normalise": ["energy"]},
        "merge": {"shard_size_mb": 16, "sort_by": "length"},
        "train": {"model": "sequence"},
    }
    path = root / "config.yaml"
    path.write_text(yaml.safe_dump(doc))
    return path


def events(rows: int, keep: bool) -> None:
    """Event-indexed tables: files of rows / 2 and `rows` hit rows through the data half, against the
    workaround of one file per event (see the module doc)."""
    import subprocess

    from common import bench_env

    root = OUT / f"scale-events-{rows}"
    runs = []
    try:
        for size in (rows // 2, rows):
            shutil.rmtree(root, ignore_errors=True)
            raw = root / "raw"
            raw.mkdir(parents=True)
            count = km3net_file(raw / "run.h5", size)
            steps = {
                step: run_step(step, events_config(root, raw), 2) for step in ("ingest", "convert", "merge")
            }
            assert steps["ingest"]["accepted"] == count, steps["ingest"]
            runs.append({"rows": size, "events": count, "steps": steps})
            print(json.dumps({"rows": size, "events": count, **steps}), flush=True)
        cmd = [sys.executable, "-c", ONE_FILE_PER_EVENT, str(raw / "run.h5"), str(root / "per-event")]
        baseline = json.loads(
            subprocess.run(cmd, capture_output=True, text=True, check=True, env=bench_env()).stdout
        )
    finally:
        if not keep:
            shutil.rmtree(root, ignore_errors=True)
    small, large = runs
    ingest = large["steps"]["ingest"]
    count = large["events"]
    slope = {
        step: round(
            (large["steps"][step]["peak_rss_mb_per_rank"] - small["steps"][step]["peak_rss_mb_per_rank"])
            / ((large["rows"] - small["rows"]) / 1e6),
            2,
        )
        for step in ("ingest", "convert", "merge")
    }
    seconds = sum(s["seconds"] for s in large["steps"].values())
    print(
        json.dumps(
            {
                "benchmark": "scale-events",
                "rows": rows,
                "events": count,
                "ranks": 2,
                "columns_mb": round(rows * (8 + 4 + 1) / 1e6, 1),
                "ingest_seconds": ingest["seconds"],
                "ingest_events_per_s": round(count / ingest["seconds"]),
                "ingest_rows_per_s": round(rows / ingest["seconds"]),
                "events_per_s": round(count / seconds),
                "peak_rss_mb_per_rank": {
                    step: s["peak_rss_mb_per_rank"] for step, s in large["steps"].items()
                },
                "rss_mb_per_million_rows": slope,
                "one_file_per_event": baseline,
                "ingest_events_per_s_vs_one_file_per_event": round(
                    baseline["seconds"] / ingest["seconds"], 2
                ),
                "ingest_rss_vs_one_file_per_event": round(
                    ingest["peak_rss_mb_per_rank"] / baseline["peak_rss_mb"], 3
                ),
                "targets": {"rss_mb_per_million_rows": "ingest <= 5 (ranks never hold a column)"},
                "cpus": os.cpu_count(),
            }
        )
    )


READ_EPOCH = """
import json, resource, sys, time
from pathlib import Path
merged, reader, files = Path(sys.argv[1]), sys.argv[2], [Path(p) for p in sys.argv[3:]]
start, count = time.perf_counter(), 0
if reader == "tf.data":
    from pipeline.formats.metadata import load_metadata
    from pipeline.training.tfdata import parse_batch, raw_records
    spec = load_metadata(merged)["feature_spec"]
    dataset = raw_records(merged, files=files or None).batch(1024).map(lambda r: parse_batch(r, spec))
    for batch in dataset:
        count += int(next(iter(batch.values())).shape[0])
else:
    from pipeline.formats.shards.shard_reader import ShardReader
    for batch in ShardReader(merged).batches(1024):
        count += len(next(iter(batch.values())))
print(json.dumps({"records": count, "seconds": round(time.perf_counter() - start, 3),
                  "peak_rss_mb": round(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024, 1)}))
"""


def read_epoch(merged: Path, reader: str, files: list[Path]) -> dict[str, Any]:
    """One pass over the shards in a process of its own (its peak memory is the reader's): tf.data over
    the staged copies, or the numpy reader (ShardReader) over the merged directory."""
    import subprocess

    from common import bench_env

    cmd = [sys.executable, "-c", READ_EPOCH, str(merged), reader, *map(str, files)]
    out = subprocess.run(cmd, capture_output=True, text=True, check=True, env=bench_env()).stdout
    return json.loads(out.strip().splitlines()[-1])


def shard_files(merged: Path) -> list[Path]:
    meta = json.loads((merged / "metadata.json").read_text())
    return [merged / "shards" / s["file"] for s in meta["shards"]]


def shards_checksum(merged: Path) -> str:
    """One checksum of every shard's bytes, in metadata.json's order."""
    import xxhash

    digest = xxhash.xxh3_128()
    for path in shard_files(merged):
        with open(path, "rb") as f:
            while chunk := f.read(8 << 20):
                digest.update(chunk)
    return digest.hexdigest()


def finished_shards(merged: Path) -> dict[str, tuple[int, int, int]]:
    """The shards a merge has finished (the shard and its index renamed into place), with their inode and
    modification time."""
    shards = merged / "shards"
    if not shards.is_dir():
        return {}
    done = {}
    for path in shards.iterdir():
        if not path.name.startswith(".") and not path.name.endswith(SHARD_INDEX_SUFFIX):
            index = path.with_name(path.name + SHARD_INDEX_SUFFIX)
            with contextlib.suppress(FileNotFoundError):
                done[path.name] = (path.stat().st_ino, path.stat().st_mtime_ns, index.stat().st_ino)
    return done


def killed_merge(config_path: Path, merged: Path, shards: int) -> dict[str, Any]:
    """Merge killed with SIGKILL (every rank and mpiexec) once about half its shards are written, then
    rerun: the rerun's wall time, the shards it kept, and whether any finished shard was written again."""
    import time

    from common import sim2dl_killed

    shutil.rmtree(merged)
    killed_after = sim2dl_killed(
        "merge", "--config", config_path, when=lambda: len(finished_shards(merged)) >= shards // 2
    )
    before = finished_shards(merged)
    started = time.perf_counter()
    resumed = run_step("merge", config_path, 2)
    wall = time.perf_counter() - started
    after = finished_shards(merged)
    rewritten = sorted(name for name, stamp in before.items() if after.get(name) != stamp)
    return {
        "killed_after_s": round(killed_after, 3),
        "finished_shards_at_kill": len(before),
        "resume_wall_s": round(wall, 3),
        "resume_seconds": resumed["seconds"],
        "reused_shards": resumed["reused_shards"],
        "rewritten_finished_shards": len(rewritten),
    }


def stage_config(config_path: Path, work: Path) -> None:
    doc = yaml.safe_load(config_path.read_text())
    doc["stage"] = {"target": str(work / "local")}
    config_path.write_text(yaml.safe_dump(doc))


def run_size(root: Path, n: int, family: str, quick: bool, checks: bool, every: bool) -> dict[str, Any]:
    """Every step at one size (`every`: all the files there, found by a glob; else the first n, listed);
    with `checks`, merge again with 2 ranks and with 1 (the same bytes?) and killed half way then resumed."""
    work = root / f"work-{n}"
    shutil.rmtree(work, ignore_errors=True)
    listed = None if every else input_list(root, n)
    config_path = config(work, root, listed, family, QUICK_SHARD_MB if quick else 16)
    stage_config(config_path, work)
    result: dict[str, Any] = {step: run_step(step, config_path, 2) for step in ("ingest", "convert", "merge")}
    merged = work / "merged"
    meta = json.loads((merged / "metadata.json").read_text())
    result["metadata"] = {
        "bytes": (merged / "metadata.json").stat().st_size,
        "shards": meta["counts"]["shards"],
        "shard_bytes": sum(s["bytes"] for s in meta["shards"]),
    }
    result["stage"] = run_step("stage", config_path, 2)
    staged = json.loads((Path(result["stage"]["node_dirs"][0]) / "staged.json").read_text())
    staged_files = [Path(result["stage"]["node_dirs"][0]) / f for f in staged["files"]]
    result["read"] = {
        r: read_epoch(merged, r, staged_files if r == "tf.data" else []) for r in ("tf.data", "numpy")
    }
    for r in result["read"].values():
        assert r["records"] == n, r
    shutil.rmtree(work / "local")
    if checks:
        checksum = shards_checksum(merged)
        shutil.rmtree(merged)
        result["merge_rerun"] = run_step("merge", config_path, 2)
        rerun_same = shards_checksum(merged) == checksum
        shutil.rmtree(merged)
        result["merge_1_rank"] = run_step("merge", config_path, 1)
        one_rank_same = shards_checksum(merged) == checksum
        result["merge_killed"] = killed_merge(config_path, merged, meta["counts"]["shards"])
        result["checksums"] = {
            "shards_xxh3": checksum,
            "rerun_identical": rerun_same,
            "one_rank_identical": one_rank_same,
            "resumed_identical": shards_checksum(merged) == checksum,
        }
    shutil.rmtree(work)
    return result


STEPS = ("ingest", "convert", "merge", "stage")


def disk_used(path: Path) -> tuple[int, int]:
    """Bytes and inodes in use on the file system holding `path`."""
    st = os.statvfs(path)
    return (st.f_blocks - st.f_bfree) * st.f_frsize, st.f_files - st.f_ffree


def file_system(path: Path) -> str:
    """The type and mount options of the file system holding `path` (from /proc/mounts)."""
    best = ("", "?")
    for line in Path("/proc/mounts").read_text().splitlines():
        _, mount, kind, options, *_ = line.split()
        if str(path.resolve()).startswith(mount) and len(mount) >= len(best[0]):
            best = (mount, f"{kind} ({options})")
    return best[1]


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--quick", action="store_true", help="20k, 80k and 200k files: a few minutes")
    parser.add_argument("--layouts", action="store_true", help="many samples per file beside one per file")
    parser.add_argument("--sizes", type=int, nargs="+", help="numbers of files (default 1M 3M 10M)")
    parser.add_argument("--family", choices=("cube", "trace"), default="cube")
    parser.add_argument("--keep", action="store_true", help="keep the inputs in bench/out")
    parser.add_argument(
        "--events", action="store_true", help="a file of 10^7 hit rows as event-indexed tables"
    )
    args = parser.parse_args()
    if args.events:
        events(2_000_000 if args.quick else 10_000_000, args.keep)
        return
    if args.layouts:
        layouts(200_000 if args.quick else 1_000_000, args.keep)
        return
    sizes = sorted(
        args.sizes or ([20_000, 80_000, 200_000] if args.quick else [1_000_000, 3_000_000, 10_000_000])
    )
    checked = max(n for n in sizes if n <= 1_000_000) if min(sizes) <= 1_000_000 else sizes[0]
    root = OUT / f"scale-{args.family}"
    results: dict[int, dict[str, Any]] = {}
    import time

    try:
        root.mkdir(parents=True, exist_ok=True)
        before = disk_used(root)
        started = time.perf_counter()
        simulate(root, sizes[-1], args.family)
        simulate_seconds = time.perf_counter() - started
        raw_disk = [after - earlier for after, earlier in zip(disk_used(root), before, strict=True)]
        # the largest size first, then the smallest: the two the figures compare, should a long run be cut
        # short
        for n in [sizes[-1], sizes[0], *sizes[1:-1]]:
            results[n] = run_size(root, n, args.family, args.quick, n == checked, n == sizes[-1])
            print(json.dumps({"files": n, **results[n]}), flush=True)
    finally:
        if not args.keep:
            shutil.rmtree(root, ignore_errors=True)
    print(json.dumps(summary(results, sizes, checked, args.family, simulate_seconds, raw_disk)))


def summary(
    results: dict[int, dict[str, Any]],
    sizes: list[int],
    checked: int,
    family: str,
    simulate_seconds: float,
    raw_disk: list[int],
) -> dict[str, Any]:
    small, large = sizes[0], sizes[-1]
    per_step = {}
    for step in STEPS:
        rss = [results[n][step]["peak_rss_mb_per_rank"] for n in sizes]
        per_record = [results[n][step]["seconds"] / n for n in sizes]
        by_rank = results[large][step]["peak_rss_mb_by_rank"]
        per_step[step] = {
            "seconds": [results[n][step]["seconds"] for n in sizes],
            "us_per_record": [round(1e6 * t, 2) for t in per_record],
            "peak_rss_mb_per_rank": rss,
            "peak_rss_mb_by_rank_at_largest": by_rank,
            "rank0_vs_others": round(by_rank[0] / max(by_rank[1:]), 3),
            "rss_mb_per_million_records": round((rss[-1] - rss[0]) / ((large - small) / 1e6), 1),
            "time_per_record_growth": round(per_record[-1] / per_record[0], 3),
        }
    for reader in ("tf.data", "numpy"):
        runs = [results[n]["read"][reader] for n in sizes]
        per_step[f"read_{reader}"] = {
            "seconds": [r["seconds"] for r in runs],
            "records_per_s": [round(n / r["seconds"]) for n, r in zip(sizes, runs, strict=True)],
            "peak_rss_mb": [r["peak_rss_mb"] for r in runs],
            "rss_mb_per_million_records": round(
                (runs[-1]["peak_rss_mb"] - runs[0]["peak_rss_mb"]) / ((large - small) / 1e6), 1
            ),
            "time_per_record_growth": round(runs[-1]["seconds"] / large / (runs[0]["seconds"] / small), 3),
        }
    checks = results[checked]
    data_steps = ("ingest", "convert", "merge")
    return {
        "benchmark": "scale",
        "family": family,
        "files": sizes,
        "ranks": 2,
        "simulate_seconds": round(simulate_seconds, 1),
        "raw_gb_on_disk": round(raw_disk[0] / 1e9, 2),
        "raw_inodes": raw_disk[1],
        "file_system": file_system(OUT),
        "steps": per_step,
        "wall_seconds_largest": round(
            sum(results[large][s]["seconds"] for s in STEPS)
            + sum(results[large]["read"][r]["seconds"] for r in ("tf.data", "numpy")),
            1,
        ),
        "rss_mb_per_million_records": max(per_step[s]["rss_mb_per_million_records"] for s in data_steps),
        "time_per_record_growth": max(per_step[s]["time_per_record_growth"] for s in data_steps),
        "rank0_vs_others": max(per_step[s]["rank0_vs_others"] for s in data_steps),
        "metadata_json_bytes": [results[n]["metadata"]["bytes"] for n in sizes],
        "shards": [results[n]["metadata"]["shards"] for n in sizes],
        "shard_gb": [round(results[n]["metadata"]["shard_bytes"] / 1e9, 3) for n in sizes],
        "checks_at": checked,
        "checksums": checks["checksums"],
        "merge_seconds_1_rank": checks["merge_1_rank"]["seconds"],
        "merge_speedup_2_ranks": round(checks["merge_1_rank"]["seconds"] / checks["merge"]["seconds"], 3),
        "merge_killed": checks["merge_killed"],
        "targets": {
            "rss_mb_per_million_records": "<= 100",
            "time_per_record_growth": "<= 1.25",
            "rank0_vs_others": "<= 1.5",
            "merge_speedup_2_ranks": ">= 1.6",
            "metadata_json_bytes": "flat",
            "checksums": "identical",
            "merge_killed.rewritten_finished_shards": "0",
        },
        "cpus": os.cpu_count(),
    }


if __name__ == "__main__":
    main()

"""openPMD series into training data: sim2dl's ingest (`source.format: openpmd`, one sample per iteration,
2 ranks) against the way WarpX's documentation reads PIC output for ML (openpmd-viewer per iteration into
numpy, then one training file, one process), and against converting first (`openpmd-pipe` from BP5 to a
file-based HDF5 series, then sim2dl's ingest of that).

Each iteration holds what a 2-d PIC diagnostic writes: E (x, y, z) on 64 x 64 cells (float32) and an
electron species of 2,000 macro-particles (position x, y + positionOffset, weighting). The series is
written by openPMD-api twice: file-based HDF5 (`openpmd_%06T.h5`, one file per iteration) and
variable-based BP5 (one directory, one ADIOS2 step per iteration). Inputs are evicted from the page cache
before every variant (bench/common.py); each variant's records are E plus the electrons' positions.

Figures (last line, one JSON object):
- `records_per_s`: per variant; `vs_viewer`: sim2dl's records/s over the viewer's on the same series
  (goal >= 3);
- `peak_rss_mb_per_rank`: sim2dl ingest at N/4 and N iterations (flat memory: the slope
  `rss_mb_per_1000_iterations` should be near 0), and the viewer's peak RSS (it holds every iteration);
- `pipe_then_ingest_s` against `ingest_bp5_s`: converting first costs a full extra pass.

Usage: python bench/exascale.py [--quick] [--files N] (N iterations; default 1000, quick 200).
"""

from __future__ import annotations

import json
import resource
import shutil
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import numpy as np
import yaml

sys.path.insert(0, str(Path(__file__).resolve().parent))
from common import BIN, REPO, bench_env, emit, evict, parse_size, sim2dl

CELLS = (64, 64)
PARTICLES = 2000


def write_series(name: str, iterations: int, encoding: str | None) -> None:
    import openpmd_api as io

    series = io.Series(name, io.Access.create)
    if encoding:
        series.iteration_encoding = getattr(io.Iteration_Encoding, encoding)
    rng = np.random.default_rng(1)
    for step in range(iterations):
        it = series.write_iterations()[step]
        it.time, it.dt = float(step), 1.0
        e_field = it.meshes["E"]
        e_field.axis_labels, e_field.grid_spacing, e_field.grid_global_offset = (
            ["x", "y"],
            [1.0, 1.0],
            [0.0, 0.0],
        )
        for c in "xyz":
            values = rng.random(CELLS, dtype=np.float32)
            e_field[c].reset_dataset(io.Dataset(values.dtype, values.shape))
            e_field[c].store_chunk(values)
            e_field[c].position = [0.0, 0.0]
        electrons = it.particles["electrons"]
        for c in "xy":
            for record, values in (
                ("position", rng.random(PARTICLES)),
                ("positionOffset", rng.integers(0, 64, PARTICLES).astype(np.float64)),
            ):
                electrons[record][c].reset_dataset(io.Dataset(values.dtype, values.shape))
                electrons[record][c].store_chunk(values)
        w = electrons["weighting"][io.Record_Component.SCALAR]
        w.reset_dataset(io.Dataset(np.dtype("float64"), [PARTICLES]))
        w.make_constant(1.0)
        it.close()
    series.close()


def ingest_config(work: Path, data: Path, glob: str) -> Path:
    config: dict[str, Any] = yaml.safe_load((REPO / "config" / "config.yaml").read_text())
    config["workdir"] = str(work)
    config["simulate"]["enabled"] = False
    config["source"] = {
        "path": str(data),
        "glob": glob,
        "format": "openpmd",
        "samples_along": "iteration",
        "sample_id": None,
        "fields": {
            "E": {"path": "meshes/E", "dtype": "float32", "shape": [*CELLS, 3]},
            "position": {"path": "particles/electrons/position", "shape": [None, 2]},
            "time": {"path": "time"},
        },
    }
    config["convert"].update(
        {"features": ["E"], "labels": ["time"], "log1p": [], "normalise": [], "per_channel": []}
    )
    work.mkdir(parents=True, exist_ok=True)
    path = work / "config.yaml"
    path.write_text(yaml.safe_dump(config, sort_keys=False))
    return path


def inputs_of(data: Path) -> list[Path]:
    return [p for p in data.rglob("*") if p.is_file()]


def ingest(work: Path, data: Path, glob: str) -> dict[str, Any]:
    config = ingest_config(work, data, glob)
    evict(inputs_of(data))
    summary = json.loads(sim2dl("ingest", "--config", config, ranks=2).strip().splitlines()[-1])
    print(json.dumps(summary), file=sys.stderr)
    shutil.rmtree(work / "ingest", ignore_errors=True)
    return summary


def viewer(data: Path, out: Path, backend: str) -> None:
    """As WarpX's ML docs do: every iteration through openpmd-viewer into numpy, then one training file."""
    import h5py
    from openpmd_viewer import OpenPMDTimeSeries

    start = time.perf_counter()
    series = OpenPMDTimeSeries(str(data), check_all_files=False, backend=backend)
    fields, positions = [], []
    for iteration in series.iterations:
        fields.append(np.stack([series.get_field("E", c, iteration=iteration)[0] for c in "xyz"], axis=-1))
        x, y = series.get_particle(["x", "y"], species="electrons", iteration=iteration)
        positions.append(np.stack([x, y], axis=-1))
    with h5py.File(out, "w") as f:
        f["E"] = np.stack(fields)
        f["position"] = np.stack(positions)
    seconds = time.perf_counter() - start
    rss = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    print(json.dumps({"records": len(fields), "seconds": seconds, "peak_rss_mb": rss}))


def run_viewer(data: Path, out: Path, backend: str) -> dict[str, Any]:
    evict(inputs_of(data))
    argv = [str(BIN / "python"), __file__, "--viewer", str(data), str(out), backend]
    proc = subprocess.run(argv, env=bench_env(), capture_output=True, text=True, check=True)
    out.unlink(missing_ok=True)
    return json.loads(proc.stdout.strip().splitlines()[-1])


def main() -> None:
    if sys.argv[1:2] == ["--viewer"]:
        viewer(Path(sys.argv[2]), Path(sys.argv[3]), sys.argv[4])
        return
    n, keep, root = parse_size(__doc__, "exascale")
    n = n if "--files" in sys.argv else (200 if "--quick" in sys.argv else 1000)
    root = root.parent / f"exascale-{n}"
    result: dict[str, Any] = {
        "benchmark": "exascale",
        "iterations": n,
        "particles": PARTICLES,
        "cells": list(CELLS),
    }
    small = max(n // 4, 8)
    for count in (small, n):
        base = root / f"series-{count}"
        if not (base / "done").exists():
            shutil.rmtree(base, ignore_errors=True)
            (base / "h5").mkdir(parents=True)
            print(
                f"writing {count} iterations (HDF5 file-based, BP5 variable-based) in {base} ...",
                file=sys.stderr,
            )
            write_series(str(base / "h5" / "openpmd_%06T.h5"), count, None)
            write_series(str(base / "bp5" / "series.bp5"), count, "variable_based")
            (base / "done").touch()
    big = root / f"series-{n}"
    h5 = {
        count: ingest(root / f"work-h5-{count}", root / f"series-{count}" / "h5", "openpmd_*.h5")
        for count in (small, n)
    }
    bp5 = {
        count: ingest(root / f"work-bp5-{count}", root / f"series-{count}" / "bp5", "*.bp5")
        for count in (small, n)
    }
    seen = viewer_h5 = run_viewer(big / "h5", root / "viewer.h5", "h5py")
    assert seen["records"] == n, seen
    start = time.perf_counter()
    piped = root / "piped"
    shutil.rmtree(piped, ignore_errors=True)
    piped.mkdir()
    evict(inputs_of(big / "bp5"))
    subprocess.run(
        [
            str(BIN / "openpmd-pipe"),
            "--infile",
            str(big / "bp5" / "series.bp5"),
            "--outfile",
            str(piped / "openpmd_%06T.h5"),
        ],
        check=True,
        env=bench_env(),
        capture_output=True,
    )
    pipe_s = time.perf_counter() - start
    after_pipe = ingest(root / "work-piped", piped, "openpmd_*.h5")
    shutil.rmtree(piped)

    def rate(summary: dict[str, Any]) -> float:
        return summary["accepted"] / summary["seconds"]

    def rss(summary: dict[str, Any]) -> float:
        return (
            max(summary["peak_rss_mb_per_rank"])
            if isinstance(summary["peak_rss_mb_per_rank"], list)
            else summary["peak_rss_mb_per_rank"]
        )

    result.update(
        {
            "records_per_s": {
                "sim2dl_h5_file_based": round(rate(h5[n]), 1),
                "sim2dl_bp5_variable_based": round(rate(bp5[n]), 1),
                "viewer_h5": round(viewer_h5["records"] / viewer_h5["seconds"], 1),
            },
            "vs_viewer": {
                "h5_file_based": round(rate(h5[n]) / (viewer_h5["records"] / viewer_h5["seconds"]), 2),
                "bp5_variable_based": round(rate(bp5[n]) / (viewer_h5["records"] / viewer_h5["seconds"]), 2),
            },
            "peak_rss_mb_per_rank": {
                f"h5_{small}": rss(h5[small]),
                f"h5_{n}": rss(h5[n]),
                f"bp5_{small}": rss(bp5[small]),
                f"bp5_{n}": rss(bp5[n]),
                "viewer_h5": round(viewer_h5["peak_rss_mb"], 1),
            },
            "rss_mb_per_1000_iterations": {
                "h5": round((rss(h5[n]) - rss(h5[small])) / (n - small) * 1000, 1),
                "bp5": round((rss(bp5[n]) - rss(bp5[small])) / (n - small) * 1000, 1),
            },
            "ingest_bp5_s": round(bp5[n]["seconds"], 2),
            "pipe_then_ingest_s": round(pipe_s + after_pipe["seconds"], 2),
            "targets": {"vs_viewer": ">= 3", "rss_mb_per_1000_iterations": "~0 (flat)"},
        }
    )
    if not keep:
        shutil.rmtree(root, ignore_errors=True)
    emit(result)


if __name__ == "__main__":
    main()

"""Input side of bench/spatial.py, one process: what the first rank of a spatial set reads to get its planes
of every sample, from whole records (each record read whole, its planes cut from the raw bytes) against
slab shards (merge.slabs = S: only its slab's file of each shard). Both through train's own input pipeline
(pipeline.training.inputs.input_pipeline) over the same records, written by merge's own slab writer
(pipeline.steps.merge.write.write_shard's per-record path: TFRecordShardWriter + slab_arrays).

Each read starts from a cold page cache (`sync; echo 1 > /proc/sys/vm/drop_caches`, root only; without it
the figures say `cold_cache: false`). bytes_read: the process's read() bytes (/proc/self/io rchar) over
the pass. Usage: _spatial_read.py DIR DEPTH HEIGHT WIDTH CHANNELS SAMPLES; prints one JSON object.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path

import numpy as np

os.environ.setdefault("TF_USE_LEGACY_KERAS", "1")
os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")

SPLITS = (2, 4)
SHARDS = 2


def rchar() -> int:
    with open("/proc/self/io") as f:
        return next(int(line.split()[1]) for line in f if line.startswith("rchar:"))


def drop_caches() -> bool:
    try:
        subprocess.run(["sync"], check=True)
        Path("/proc/sys/vm/drop_caches").write_text("1\n")
        return True
    except OSError:
        return False


def write(out: Path, spec: dict, samples: int, count: int) -> list[Path]:
    """SHARDS shards of the samples, as `count` slab files each (1: whole records); the slab-0 files."""
    from pipeline.formats.shards.tfrecord.encode import TFRecordShardWriter
    from pipeline.formats.slabs import slab_arrays, slab_name, sliced_fields

    rng = np.random.default_rng(0)
    shape = spec["density"]["shape"]
    firsts = []
    for s in range(SHARDS):
        name = f"shard-{s:05d}-of-{SHARDS:05d}.tfrecord"
        writers = [TFRecordShardWriter(out / slab_name(name, k, count), spec, "none") for k in range(count)]
        for i in range(s, samples, SHARDS):
            arrays = {
                "density": rng.standard_normal(shape, np.float32),
                "params": rng.standard_normal(3, np.float32),
            }
            for k, w in enumerate(writers):
                w.write(
                    f"sample-{i:05d}", slab_arrays(arrays, sliced_fields(spec) if count > 1 else [], k, count)
                )
        for w in writers:
            w.close()
        firsts.append(out / slab_name(name, 0, count))
    return firsts


def main() -> None:
    work, *dims, samples = sys.argv[1], *map(int, sys.argv[2:])
    from pipeline import config as cfg
    from pipeline.formats.slabs import slabs_read
    from pipeline.training.inputs import Read, Records, input_pipeline
    from pipeline.training.session import check_settings
    from pipeline.training.spatial.layout import SpatialLayout

    spec = {
        "density": {"dtype": "float32", "shape": list(dims), "role": "feature", "encoding": "bytes"},
        "params": {"dtype": "float32", "shape": [3], "role": "label", "encoding": "bytes"},
    }
    settings = {**cfg.validate({})["train"], "batch_size": 4}
    figures: dict = {"samples": samples, "sample_mb": round(np.prod(dims) * 4 / 1e6, 1)}
    cold = True

    def read(files: list[Path], meta: dict, slab: tuple[int, int] | None, pieces: range | None) -> dict:
        nonlocal cold
        task = check_settings(settings, {"format": "tfrecord", **meta}, None)
        cold = drop_caches() and cold
        before, start = rchar(), time.perf_counter()
        planes = 0
        records = Records(meta, settings, task, (*dims[:3], dims[3]))
        for x, _ in input_pipeline(files, records, Read(False, None, 0, None, slab=slab, pieces=pieces)):
            planes += int(x.shape[0]) * int(x.shape[1])
        return {"seconds": time.perf_counter() - start, "bytes_read": rchar() - before, "planes": planes}

    base = {"feature_spec": spec}
    whole_dir = Path(work) / "whole"
    whole_dir.mkdir(parents=True)
    whole_files = write(whole_dir, spec, samples, 1)
    read(whole_files, base, None, None)  # warm-up: TensorFlow's first pipeline, imports (not measured)
    for split in SPLITS:
        layout = SpatialLayout(split, split, 0)  # the set's first rank; the others read alike
        whole = read(whole_files, base, layout.slab(dims[0]), None)
        slab_dir = Path(work) / f"slabs{split}"
        slab_dir.mkdir()
        slab_files = write(slab_dir, spec, samples, split)
        meta = {**base, "slabs": {"count": split, "fields": ["density"]}}
        slabs = read(slab_files, meta, None, slabs_read(split, split, 0))
        assert whole["planes"] == slabs["planes"] == samples * dims[0] // split, (whole, slabs)
        figures[f"split_{split}"] = {
            "whole_records": {
                "bytes_read_mb": round(whole["bytes_read"] / 1e6, 1),
                "s": round(whole["seconds"], 3),
            },
            "slab_shards": {
                "bytes_read_mb": round(slabs["bytes_read"] / 1e6, 1),
                "s": round(slabs["seconds"], 3),
            },
            "bytes_read_vs_whole_records": round(slabs["bytes_read"] / whole["bytes_read"], 3),
            "read_time_vs_whole_records": round(slabs["seconds"] / whole["seconds"], 3),
        }
    figures["cold_cache"] = cold
    print(json.dumps(figures))


if __name__ == "__main__":
    main()

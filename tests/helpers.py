"""Helpers several test modules share (test modules never import each other; conftest.py holds fixtures
and the commands that run steps)."""

from __future__ import annotations

import json
import re
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import h5py
import numpy as np
import yaml

from pipeline.formats.metadata import load_metadata
from pipeline.formats.shards import shard_format
from pipeline.formats.shards.shard_reader import ShardReader
from pipeline.steps.convert import convert
from pipeline.steps.ingest import ingest
from pipeline.steps.merge import merge
from pipeline.training.tfdata import parse_example, raw_records

from .conftest import REPO, make_config, run_cli, run_snakemake, write_config


def tfrecord_dataset(merged_dir: Path) -> Any:
    """All records of a TFRecord dataset in shard order, parsed by tf.data."""
    spec = load_metadata(merged_dir)["feature_spec"]
    return raw_records(merged_dir, parallel_reads=1).map(lambda s: parse_example(s, spec))


def hdf5_records(shard: Path, spec: Mapping[str, Mapping[str, Any]]) -> list[dict[str, Any]]:
    """All records of one HDF5 shard as dicts of arrays (plus 'sample_id'), by the format's own reader."""
    with h5py.File(shard, "r") as f:
        count = len(f["sample_id"])
    hdf5 = shard_format("hdf5")
    return list(hdf5.records(shard, hdf5.load(shard, 0, count, spec, "none"), spec, True, False))


MODELS = {"MODEL-B": 12, "MODEL-A": 5, "MODEL-C": 7}  # CMIP6-like: a model's name and its time steps


def write_cmip_like(root: Path) -> None:
    """ta(time, plev, lat, lon) per model, with CF coordinates, bounds, and a tracking_id shared by all."""
    import netCDF4

    root.mkdir(parents=True, exist_ok=True)
    for k, (model, steps) in enumerate(MODELS.items()):
        with netCDF4.Dataset(root / f"ta_{model}.nc", "w") as ds:
            for dim, n in (("time", None), ("plev", 2), ("lat", 4), ("lon", 6), ("bnds", 2)):
                ds.createDimension(dim, n)
            time = ds.createVariable("time", "f8", ("time",))
            time[:] = np.arange(steps)
            time.bounds = "time_bnds"
            ds.createVariable("time_bnds", "f8", ("time", "bnds"))[:] = np.stack([np.arange(steps)] * 2, 1)
            ds.createVariable("plev", "f8", ("plev",))[:] = [85000.0, 50000.0]
            lat = ds.createVariable("lat", "f8", ("lat",))
            lat[:], lat.bounds = np.linspace(-60, 60, 4), "lat_bnds"
            ds.createVariable("lat_bnds", "f4", ("lat", "bnds"))[:] = np.zeros((4, 2))
            ds.createVariable("lon", "f8", ("lon",))[:] = np.arange(6) * 60.0
            ta = ds.createVariable("ta", "f4", ("time", "plev", "lat", "lon"), chunksizes=(1, 2, 4, 6))
            ta[:] = ta_values(k, steps)
            ds.source_id, ds.tracking_id, ds.experiment_id = (
                model,
                "hdl:21.14100/same-everywhere",
                "historical",
            )


def ta_values(k: int, steps: int) -> np.ndarray:
    return (k * 1000 + np.arange(steps)[:, None, None, None] + np.zeros((steps, 2, 4, 6))).astype("f4")


def layout_config(
    tmp_path: Path,
    source: dict[str, Any],
    features: list[str],
    labels: list[str],
    convert_stack=None,
    **sections: Any,
):
    convert = {"features": features, "labels": labels, "log1p": [], "normalise": [], "per_channel": []}
    return make_config(
        tmp_path,
        source={"sample_id": None, **source},
        convert={**convert, "stack": convert_stack or {}},
        **sections,
    )


def data_half(config: dict[str, Any], root: Path, tmp_path: Path, comm: Any) -> tuple[dict, dict]:
    """ingest -> convert -> merge; the ingest summary and the merged metadata."""
    work = tmp_path / "work"
    summary = ingest(config, root, work / "ingest", comm)
    convert(config, work / "ingest", work / "convert", comm)
    merge(config, work / "ingest", work / "convert", work / "merged", comm)
    return summary, json.loads((work / "merged" / "metadata.json").read_text())


def records_by_id(merged: Path) -> dict[str, dict[str, Any]]:
    return {
        r["sample_id"].decode() if isinstance(r["sample_id"], bytes) else r["sample_id"]: r
        for r in ShardReader(merged)
    }


CMIP_SOURCE = {
    "glob": "*.nc",
    "samples_along": "time",
    "fields": {
        "ta": {"path": "ta", "dtype": "float32", "shape": [2, None, None]},
        "model": {"attr": "source_id", "categorical": True},
    },
}


def doc_block(name: str) -> tuple[str, str]:
    """The mark and text of one block, by the name doc_blocks gives it."""
    return next((mark, text) for block, mark, text in doc_blocks() if block == name)


def prepare(tmp_path, ranks=2, **sections):
    """simulate + ingest + convert with the CLI; returns (config path, workdir)."""
    config = make_config(tmp_path, **sections)
    config_path = write_config(tmp_path, config)
    for step in ("simulate", "ingest", "convert"):
        run_cli([step, "--config", str(config_path)], ranks=ranks)
    return config_path, tmp_path / "work"


def merge_cli(config_path, out, ranks):
    """The merge step through the CLI; its JSON summary."""
    proc = run_cli(["merge", "--config", str(config_path), "--out", str(out)], ranks=ranks)
    return json.loads(proc.stdout.strip().splitlines()[-1])


TRACE_SOURCE = {
    "fields": {
        "trace": {"path": "trace", "dtype": "float32", "shape": [None, 4]},
        "params": {"path": "params", "dtype": "float32", "shape": [3]},
    }
}


TRACE_CONVERT = {"features": ["trace"], "labels": ["params"], "log1p": [], "normalise": ["trace"]}


def prepare_cubes(tmp_path, samples, **sections):
    """prepare() for `samples` small cubes (8^3)."""
    cube_fields = {
        "density": {"path": "density", "dtype": "float32", "shape": [8, 8, 8]},
        "params": {"path": "params", "dtype": "float32", "shape": [3]},
    }
    simulate = {"runs": samples, "cube": {"size": 8}}
    return prepare(tmp_path, simulate=simulate, source={"fields": cube_fields}, **sections)


def write_cosmoflow(root: Path, count: int, size: int = 16) -> tuple[float, np.ndarray]:
    """MLPerf-CosmoFlow-style files: `full` int16 (n, n, n, 4) counts, `unitPar` float32[4]; two
    directories, as a real dataset spreads them. Returns the sum of the counts and of the labels."""
    rng = np.random.default_rng(1)
    total, labels = 0.0, np.zeros(4)
    for i in range(count):
        path = root / f"dir{i % 2}" / f"univ_ics_2019-03_a{i:05d}.hdf5"
        path.parent.mkdir(parents=True, exist_ok=True)
        full = rng.poisson(4.0, (size, size, size, 4)).astype(np.int16)
        par = rng.random(4, dtype=np.float32)
        with h5py.File(path, "w") as f:
            f["full"], f["unitPar"] = full, par
        total += float(full.sum())
        labels += par
    return total, labels


def assert_report_holds(tmp_path: Path, args: list[str], figures: list[str]) -> None:
    """`snakemake --report` of a finished run shows these figures (each an output marked with report())."""
    report = tmp_path / "report.html"
    proc = run_snakemake(["--cores", "1", *args, "--report", str(report)], 300)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    html = report.read_text(errors="replace")
    for figure in figures:
        assert figure in html, figure


BLOCK = re.compile(r"(?:<!-- config: (?P<mark>[a-z]+) -->\s*\n)?```yaml\n(?P<text>.*?)```", re.S)


def doc_blocks() -> list[tuple[str, str, str]]:
    """(name, mark, text) of every ```yaml block in README.md and docs/*.md; mark '' where none."""
    blocks = []
    for path in [REPO / "README.md", *sorted((REPO / "docs").glob("*.md"))]:
        for k, match in enumerate(BLOCK.finditer(path.read_text())):
            blocks.append((f"{path.relative_to(REPO)}#{k}", match["mark"] or "", match["text"]))
    return blocks


ONLINE_CUBE = 8  # online tests' cubes: 8³, so the network and the FFTs stay small


def online_config(
    tmp_path: Path, source: str = "runs", runs: int = 10, samples: int = 6, chosen: bool = False, **online
) -> dict:
    """docs/training.md's online-training config (chosen: docs/ensembles.md's, whose trainers choose the
    runs), at a test's size: cubes of ONLINE_CUBE³, `runs` runs of `samples` cubes, a small network and 12
    steps."""
    import sys

    [text] = [
        text
        for _, mark, text in doc_blocks()
        if mark == "run" and "online:" in text and "cube_run" in text and ("adaptive:" in text) == chosen
    ]
    config = yaml.safe_load(text)
    del config["workdir"]  # make_config's, below tmp_path
    command = config["simulate"]["command"]
    command[command.index("--samples") + 1] = str(samples)
    command[command.index("--size") + 1] = str(ONLINE_CUBE)
    command[0] = sys.executable
    if source == "stream":
        command += ["--write", "sst"]
    config["simulate"].update({"runs": runs, "run_timeout_s": 60, "max_failed_fraction": 0.2})
    config["source"]["fields"]["density"]["shape"] = [ONLINE_CUBE] * 3
    config["train"].update({"batch_size": 4, "depth": 2, "width": 4, "dense": 16})
    config["train"]["online"].update(
        {
            "source": source,
            "optimizer_steps": 12,
            "validate_every_steps": 4,
            "statistics_runs": 2,
            "buffer": {"capacity": 32, "watermark": 8},
            **online,
        }
    )
    return make_config(tmp_path, **config)


def board_events(run_dir: Path) -> dict[str, Any]:
    """A TensorBoard run directory read back with TensorBoard's own reader: {'scalars': {tag: {step:
    value}}, 'text': {tag: [text]}, 'hparams': the HParams plugin's session start info or None}."""
    from tensorboard.backend.event_processing.plugin_event_accumulator import EventAccumulator
    from tensorboard.plugins.hparams import plugin_data_pb2
    from tensorboard.util import tensor_util

    events = EventAccumulator(str(run_dir), size_guidance={"tensors": 0})
    events.Reload()
    plugins = events.ActivePlugins()

    def content(plugin: str) -> dict[str, bytes]:
        return events.PluginTagToContent(plugin) if plugin in plugins else {}

    scalars = {
        tag: {e.step: float(tensor_util.make_ndarray(e.tensor_proto)) for e in events.Tensors(tag)}
        for tag in content("scalars")
    }
    text = {
        tag: [tensor_util.make_ndarray(e.tensor_proto).item().decode() for e in events.Tensors(tag)]
        for tag in content("text")
    }
    hparams = None
    for raw in content("hparams").values():
        data = plugin_data_pb2.HParamsPluginData.FromString(raw)
        if data.HasField("session_start_info"):
            start = data.session_start_info
            hparams = {
                "group": start.group_name,
                "values": {
                    k: v.WhichOneof("kind") and getattr(v, v.WhichOneof("kind"))
                    for k, v in start.hparams.items()
                },
            }
    return {"scalars": scalars, "text": text, "hparams": hparams}


def docs_block(needle: str) -> dict:
    texts = [text for _, mark, text in doc_blocks() if mark == "run" and needle in text]
    assert len(texts) == 1, needle
    return yaml.safe_load(texts[0])


def inspected(tmp_path: Path, data: Path) -> dict:
    """`sim2dl inspect DATA --write` as a user runs it; the config it wrote (what it printed: inspect.txt)."""
    out = tmp_path / "inspected.yaml"
    proc = run_cli(["inspect", str(data), "--write", str(out)], ranks=1)
    assert "wrote" in proc.stdout, proc.stdout
    (tmp_path / "inspect.txt").write_text(proc.stdout)
    return yaml.safe_load(out.read_text())


def run_written_config(tmp_path: Path, config: dict) -> dict:
    """ingest, convert and merge on 2 ranks with the config inspect wrote (only the workdir moved)."""
    config = {**config, "workdir": str(tmp_path / "work"), "search": {"enabled": False}}
    path = tmp_path / "run.yaml"
    path.write_text(yaml.safe_dump(config))
    for step in ("ingest", "convert", "merge"):
        run_cli([step, "--config", str(path)], ranks=2)
    return json.loads((tmp_path / "work" / "merged" / "metadata.json").read_text())


# A code at two resolutions: the fine level takes longer, and its run at point 1 fails its first attempt.
LEVELS = """
import os, sys, time
import numpy as np
out, level, x, seed, ledger, run = sys.argv[1:7]
with open(ledger, "a") as f:
    f.write(f"{run} {level}\\n")
tries = os.path.join(os.path.dirname(ledger), run + ".tries")
attempt = int(open(tries).read()) + 1 if os.path.exists(tries) else 1
open(tries + ".tmp", "w").write(str(attempt))
os.replace(tries + ".tmp", tries)
cells = {"coarse": 4, "fine": 16}[level]
if level == "fine":
    time.sleep(0.25)
    if seed == os.environ.get("FAIL_SEED") and attempt == 1:
        sys.exit(4)
grid = (np.arange(cells) + 0.5) / cells
field = np.sin(float(x) * 6 * grid)  # the same function, resolved on each level's grid
np.save(os.path.join(out, "out.npy"), np.interp(np.linspace(0, 1, 8), grid, field).astype(np.float32))
"""

LEVELS_SPACE = {"x": {"type": "uniform", "low": 0.0, "high": 1.0}}


def levels_config(tmp_path: Path, **simulate: Any) -> dict:
    """A config of the code at two resolutions (LEVELS): 8 coarse runs and 3 fine, the level an input of
    the surrogate (simulate.fidelities; tests/test_fidelity*.py)."""
    script = tmp_path / "levels.py"
    script.write_text(LEVELS)
    (tmp_path / "ledger").mkdir(exist_ok=True)
    ledger = str(tmp_path / "ledger" / "runs.txt")
    return make_config(
        tmp_path,
        simulate={
            "command": ["python3", str(script), "{out}", "{fidelity}", "{x}", "{seed}", ledger, "{run}"],
            "design": "sobol",
            "space": LEVELS_SPACE,
            "fidelities": [{"name": "coarse", "runs": 8}, {"name": "fine", "runs": 3}],
            "retries": 1,
            "run_timeout_s": 30,
            "max_failed_fraction": 0.0,
            **simulate,
        },
        source={
            "glob": "**/*.npy",
            "format": "auto",
            "sample_id": None,
            "fields": {
                "field": {"path": ".", "dtype": "float32", "shape": [8]},
                "x": {"column": "x"},
                "level": {"column": "fidelity_index"},
            },
        },
        convert={
            "stack": {"design": ["x", "level"]},
            "features": ["design"],
            "labels": ["field"],
            "log1p": [],
            "normalise": [],
            "per_channel": [],
        },
        train={"task": "surrogate", "model": "decoder"},
    )

"""Bring your own simulation output, as the README says: `sim2dl inspect --write`, then
`snakemake --configfile`; the demo config never leaks into a user's run."""

from __future__ import annotations

import json
import re
import shutil
import subprocess
import sys
import zipfile
from pathlib import Path

import h5py
import numpy as np
import pytest
import yaml

from pipeline import Sim2dlError
from pipeline import config as cfg
from pipeline.steps.inspect import inspect, survey

from .conftest import REPO, env, run_snakemake, snakemake_configfile
from .helpers import write_cosmoflow


def write_deepcam(root: Path, count: int, height: int = 12, width: int = 20) -> int:
    """DeepCAM-style files: `climate/data` H x W x 16 float32, `climate/labels` H x W int32 (3 classes).
    Returns the sum of the label masks."""
    rng = np.random.default_rng(2)
    total = 0
    for i in range(count):
        with h5py.File(root / f"data-2106-{i:03d}.h5", "w") as f:
            f["climate/data"] = rng.normal(size=(height, width, 16)).astype(np.float32)
            labels = rng.integers(0, 3, (height, width), dtype=np.int32)
            f["climate/labels"] = labels
            f.attrs["sample_id"] = f"cam5-{i:03d}"
        total += int(labels.sum())
    return total


def write_npz(root: Path, count: int) -> np.ndarray:
    """One .npz per run: `field` (24, 24) float32 and `params` float64[2]. Returns the label sums."""
    rng = np.random.default_rng(3)
    labels = np.zeros(2)
    for i in range(count):
        params = rng.random(2)
        np.savez(root / f"run{i:04d}.npz", field=rng.random((24, 24), dtype=np.float32), params=params)
        labels += params
    return labels


def tfrecord_sums(metadata_path: Path, label: str) -> tuple[int, np.ndarray, list[str]]:
    """Records, the sum of `label` (undoing the normalisation with the statistics in metadata.json) and the
    sample ids, read back with plain tf.data and tf.train.Example."""
    import tensorflow as tf

    meta = json.loads(metadata_path.read_text())
    files = [str(metadata_path.parent / "shards" / s["file"]) for s in meta["shards"]]
    stats = meta["statistics"].get(label)
    count, total, ids = 0, np.zeros(meta["feature_spec"][label]["shape"]), []
    for record in tf.data.TFRecordDataset(files):
        example = tf.train.Example.FromString(record.numpy()).features.feature
        value = (
            np.frombuffer(example[label].bytes_list.value[0], dtype="<f4")
            .astype(np.float64)
            .reshape(total.shape)
        )
        if stats is not None:
            value = value * np.asarray(stats["std"]) + np.asarray(stats["mean"])
        total += value
        ids.append(example["sample_id"].bytes_list.value[0].decode())
        count += 1
    return count, total, ids


def sim2dl_inspect(*args: str) -> str:
    proc = subprocess.run(
        ["sim2dl", "inspect", *args], capture_output=True, text=True, env=env(), timeout=120
    )
    assert proc.returncode == 0, proc.stderr
    return proc.stdout


def test_inspect_describes_every_format_and_what_differs(tmp_path):
    import netCDF4
    import uproot

    # HDF5: the first axis varies between files; an id attribute differs per file, a version does not.
    for i, n in enumerate((10, 12, 10)):
        with h5py.File(tmp_path / f"h{i}.h5", "w") as f:
            f["group/x"] = np.zeros((n, 5), np.float32)
            f["y"] = np.zeros(3, np.float64)
            f["names"] = np.array([b"a", b"b"])
            f.attrs["version"] = 2
            f.attrs["run_id"] = f"run-{i}"
    result = survey(str(tmp_path / "*.h5"))
    fields = {f.path: f for f in result.fields}
    assert fields["group/x"].shape == (None, 5) and fields["group/x"].dtype == "float32"
    assert fields["y"].shape == (3,) and fields["y"].is_label and not fields["group/x"].is_label
    assert not fields["names"].numeric
    assert result.sample_id == "run_id" and len(result.files) == 3
    text, config = inspect(str(tmp_path / "*.h5"), write=tmp_path / "h.yaml")
    assert "shape differs between files" in text and "not numeric" in text
    assert config["source"]["fields"] == {
        "x": {"path": "group/x", "dtype": "float32", "shape": [None, 5]},
        "y": {"path": "y", "dtype": "float64", "shape": [3]},
    }
    assert config["convert"]["features"] == ["x"] and config["convert"]["labels"] == ["y"]
    assert config["source"]["sample_id"] == {"attr": "run_id"} and config["train"]["model"] == "sequence"
    cfg.load(tmp_path / "h.yaml")  # the written file validates as it is

    # NetCDF-4 with a group and a global id attribute
    for i in range(2):
        with netCDF4.Dataset(tmp_path / f"n{i}.nc", "w") as ds:
            ds.createDimension("lat", 6)
            ds.createDimension("lon", 8)
            ds.setncattr("sample_id", f"nc-{i}")
            atmos = ds.createGroup("atmos")
            atmos.createVariable("tas", "f4", ("lat", "lon"))[:] = np.ones((6, 8))
            ds.createVariable("co2", "f8", ())[...] = 400.0 + i
    nc = survey(str(tmp_path / "n0.nc"))  # one file: its siblings of the same suffix
    assert {(f.path, f.shape, f.dtype) for f in nc.fields} == {
        ("atmos/tas", (6, 8), "float32"),
        ("co2", (), "float64"),
    }
    assert nc.sample_id == "sample_id" and nc.source.pattern == "*.nc" and len(nc.files) == 2

    # .npz (headers only; a one-element text array is an id) and .npy
    np.savez(tmp_path / "a.npz", field=np.zeros((4, 4, 4), np.uint8), label=np.zeros(1), id=np.array("a-1"))
    npz = survey(str(tmp_path / "a.npz"))
    assert {(f.path, f.shape) for f in npz.fields} == {("field", (4, 4, 4)), ("label", (1,)), ("id", ())}
    assert npz.sample_id == "id"
    np.save(tmp_path / "b.npy", np.zeros((7, 3), np.int64))
    assert [(f.path, f.shape, f.dtype) for f in survey(str(tmp_path / "b.npy")).fields] == [
        (".", (7, 3), "int64")
    ]

    # ROOT: branches over the file's events
    with uproot.recreate(tmp_path / "events.root") as f:
        f["events"] = {"px": np.zeros(50, np.float32), "hits": np.zeros((50, 3), np.int32)}
    root = survey(str(tmp_path / "events.root"))
    assert {(f.path, f.shape, f.dtype) for f in root.fields} == {
        ("events/px", (50,), "float32"),
        ("events/hits", (50, 3), "int32"),
    }

    # a directory: its most common known suffix, at any depth; bad input names the path
    assert survey(str(tmp_path)).source.pattern == "**/*.h5"
    with pytest.raises(Sim2dlError, match="no such file or directory"):
        survey(str(tmp_path / "missing"))
    with pytest.raises(Sim2dlError, match="no files match"):
        survey(str(tmp_path / "*.hdf5"))
    (tmp_path / "broken.h5").write_bytes(b"not hdf5")
    assert "cannot open as HDF5" in survey(str(tmp_path / "broken.h5")).unreadable.get(
        str(tmp_path / "broken.h5"), ""
    )


def test_cosmoflow_layout_inspected_split_into_subvolumes_and_trained(tmp_path):
    data = tmp_path / "cosmoUniverse"
    _, labels = write_cosmoflow(data, 24)
    printed = sim2dl_inspect(str(data), "--write", str(tmp_path / "cosmoflow.yaml"))
    assert re.search(r"full +int16 +\(16, 16, 16, 4\)", printed) and re.search(
        r"unitPar +float32 +\(4,\)", printed
    )
    config = yaml.safe_load((tmp_path / "cosmoflow.yaml").read_text())
    assert config["source"]["fields"]["full"] == {"path": "full", "dtype": "int16", "shape": [16, 16, 16, 4]}
    assert config["source"]["sample_id"] is None  # no id attribute: the relative path
    # As the MLPerf reference: sub-volumes, log(1 + counts); a user's --config on top of their file.
    snakemake_configfile(
        tmp_path / "cosmoflow.yaml",
        tmp_path,
        "--config",
        "convert={subvolume: [8, 8, 8], log1p: [full]}",
        "train={epochs: 2}",
    )
    workdir = Path(config["workdir"])
    meta = json.loads((workdir / "merged" / "metadata.json").read_text())
    assert meta["counts"]["records"] == 24 * 8 and meta["feature_spec"]["full"]["shape"] == [8, 8, 8, 4]
    records, label_sum, ids = tfrecord_sums(workdir / "merged" / "metadata.json", "unitPar")
    assert records == 24 * 8 and len(set(ids)) == records
    np.testing.assert_allclose(label_sum, 8 * labels, rtol=1e-5)  # every sub-volume carries its file's label
    trained = json.loads((workdir / "train" / "summary.json").read_text())
    assert trained["ranks"] == 2 and trained["epochs"] == 2 and np.isfinite(trained["val_loss"])
    # the sub-volumes tile each cube: log(1 + counts) summed over every record is the files' own
    _, transformed, _ = tfrecord_sums(workdir / "merged" / "metadata.json", "full")
    written = sum(
        float(np.log1p(h5py.File(f, "r")["full"][...].astype(np.float64)).sum()) for f in data.rglob("*.hdf5")
    )
    assert transformed.sum() == pytest.approx(written, rel=1e-4)


def test_npz_layout_runs_the_whole_workflow_from_the_written_config_unedited(tmp_path):
    data = tmp_path / "runs"
    data.mkdir()
    labels = write_npz(data, 48)
    sim2dl_inspect(str(data), "--write", str(tmp_path / "runs.yaml"))
    snakemake_configfile(tmp_path / "runs.yaml", tmp_path)
    workdir = Path(yaml.safe_load((tmp_path / "runs.yaml").read_text())["workdir"])
    records, label_sum, _ = tfrecord_sums(workdir / "merged" / "metadata.json", "params")
    assert records == 48
    np.testing.assert_allclose(label_sum, labels, rtol=1e-5)
    trained = json.loads((workdir / "train" / "summary.json").read_text())
    # a fixed 2-D field is an image: inspect proposes the 2-D encoder with a pooled regression head
    assert trained["settings"]["model"] == "unet2d" and trained["task"] == "regression"
    assert np.isfinite(trained["val_loss"])


def test_deepcam_layout_to_hdf5_shards(tmp_path):
    data = tmp_path / "deepcam"
    data.mkdir()
    label_total = write_deepcam(data, 20)
    sim2dl_inspect(str(data), "--write", str(tmp_path / "deepcam.yaml"))
    config = yaml.safe_load((tmp_path / "deepcam.yaml").read_text())
    assert config["source"]["sample_id"] == {"attr": "sample_id"}
    assert config["source"]["fields"]["labels"] == {
        "path": "climate/labels",
        "dtype": "int32",
        "shape": [12, 20],
    }
    # Both arrays are large, so inspect makes both features: the mask is a segmentation target, say so.
    config["convert"] = {"features": ["data"], "labels": ["labels"], "normalise": ["data"]}
    config["merge"] = {"format": "hdf5"}
    (tmp_path / "deepcam.yaml").write_text(yaml.safe_dump(config))
    workdir = Path(config["workdir"])
    snakemake_configfile(tmp_path / "deepcam.yaml", tmp_path, str(workdir / "merged" / "metadata.json"))
    meta = json.loads((workdir / "merged" / "metadata.json").read_text())
    records, total, ids = 0, 0, []
    for shard in meta["shards"]:
        with h5py.File(workdir / "merged" / "shards" / shard["file"], "r") as f:
            records += len(f["labels"])
            total += int(np.asarray(f["labels"]).sum())
            ids += [i.decode() for i in f["sample_id"]]
    assert records == 20 and total == label_total and sorted(ids) == [f"cam5-{i:03d}" for i in range(20)]


def test_a_users_config_file_replaces_the_demo_config(tmp_path):
    """No key of the demo config reaches a user's run unless their file or the schema's defaults put it
    there: the resolved config is exactly their file, validated."""
    data = tmp_path / "cosmoUniverse"
    write_cosmoflow(data, 2, size=4)
    sim2dl_inspect(str(data), "--write", str(tmp_path / "mine.yaml"))
    user = yaml.safe_load((tmp_path / "mine.yaml").read_text())
    proc = run_snakemake(["-n", "--cores", "2", "--configfile", str(tmp_path / "mine.yaml")], 120)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    resolved = yaml.safe_load((Path(user["workdir"]) / "config.resolved.yaml").read_text())
    assert resolved == cfg.validate(json.loads(json.dumps(user)))
    assert set(resolved["source"]["fields"]) == {"full", "unitPar"}  # not the demo's density and params
    assert (
        resolved["search"]["space"] == cfg.schema()["properties"]["search"]["properties"]["space"]["default"]
    )
    assert resolved["simulate"]["runs"] == 1024  # the schema's default (null: a family's 1024), not the demo
    assert "rule simulate" not in proc.stdout


def test_a_step_without_config_asks_for_one(tmp_path):
    proc = subprocess.run(
        ["sim2dl", "ingest"], capture_output=True, text=True, env=env(), cwd=tmp_path, timeout=120
    )
    assert proc.returncode == 2 and "--config" in proc.stderr and "required" in proc.stderr
    assert not (tmp_path / "results").exists()
    proc = subprocess.run(["sim2dl", "image", "ref"], capture_output=True, text=True, env=env(), timeout=120)
    assert proc.returncode == 0 and "using the demo config" in proc.stderr


def test_the_schema_travels_with_a_built_wheel(tmp_path):
    """A non-editable install finds its schema: build the wheel, install it alone into a directory and
    validate a user's config from elsewhere."""
    source = tmp_path / "src"  # a copy: setuptools writes build/ into the tree it builds
    source.mkdir()
    for name in ("pyproject.toml", "README.md"):
        shutil.copy(REPO / name, source / name)
    shutil.copytree(REPO / "pipeline", source / "pipeline", ignore=shutil.ignore_patterns("__pycache__"))
    build = subprocess.run(
        [
            sys.executable,
            "-m",
            "pip",
            "wheel",
            "--no-deps",
            "--no-build-isolation",
            "-w",
            str(tmp_path),
            str(source),
        ],
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert build.returncode == 0, build.stderr
    (wheel,) = tmp_path.glob("sim2dl-*.whl")
    assert "pipeline/schema.yaml" in zipfile.ZipFile(wheel).namelist()
    target = tmp_path / "site"
    install = [sys.executable, "-m", "pip", "install", "--no-deps", "--target", str(target), str(wheel)]
    assert subprocess.run(install, capture_output=True, timeout=300).returncode == 0
    (tmp_path / "mine.yaml").write_text(yaml.safe_dump({"workdir": "w", "merge": {"shard_size_mb": 4}}))
    check = (
        "import pipeline, pipeline.config as c; from pathlib import Path; "
        f"assert Path(pipeline.__file__).is_relative_to({str(target)!r}), pipeline.__file__; "
        "print(c.load('mine.yaml')['merge']['shard_size_mb'], c.SCHEMA_PATH)"
    )
    proc = subprocess.run(
        [sys.executable, "-c", check],
        capture_output=True,
        text=True,
        cwd=tmp_path,
        env={**env(), "PYTHONPATH": str(target)},
        timeout=120,
    )
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.split() == ["4", str(target / "pipeline" / "schema.yaml")]

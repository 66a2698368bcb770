"""PDEBench's HDF5 layouts (readers/pdebench.py), in files written as PDEBench's generators write them
(pdebench/data_gen: gen_diff_react.py appends a group per seed with `data`, `grid/*` and the run's YAML
`config`; the CFD and 1-D merge scripts write an array per field of [N, T, *grid] beside `x-coordinate`,
`t-coordinate`): the HDF5 reader reads them, `sim2dl inspect` recognises them and proposes a next state
whose config reads every trajectory, value for value."""

from __future__ import annotations

import json
from pathlib import Path

import h5py
import numpy as np
import yaml

from pipeline.steps import validated
from pipeline.steps.inspect import inspect

from .conftest import SLOW
from .helpers import data_half, records_by_id

DIFF_REACT_CONFIG = {
    "sim": {
        "t": 5.0,
        "tdim": 6,
        "x_left": -1.0,
        "x_right": 1.0,
        "xdim": 8,
        "ydim": 8,
        "Du": 1e-3,
        "Dv": 5e-3,
        "k": 5e-3,
        "seed": 0,
    }
}


def write_diff_react(path: Path, seeds: int) -> np.ndarray:
    """As gen_diff_react.py's `simulator` writes each seed (the file opened in append mode per seed):
    `{seed:04d}/data` [t, x, y, 2] float32 (lzf), `grid/x`, `grid/y`, `grid/t`, the config as YAML."""
    written = []
    for seed in range(seeds):
        data = np.random.default_rng(seed).normal(size=(6, 8, 8, 2)).astype(np.float32)
        written.append(data)
        with h5py.File(path, "a") as f:
            key = str(seed).zfill(4)
            f.create_dataset(f"{key}/data", data=data, dtype="float32", compression="lzf")
            for axis, n in (("x", 8), ("y", 8), ("t", 6)):
                f.create_dataset(
                    f"{key}/grid/{axis}", data=np.linspace(-1, 1, n), dtype="float32", compression="lzf"
                )
            f[key].attrs["config"] = yaml.safe_dump(
                {**DIFF_REACT_CONFIG, "sim": {**DIFF_REACT_CONFIG["sim"], "seed": seed}}
            )
    return np.stack(written)


def test_a_group_per_seed_is_a_record_per_seed_and_inspect_proposes_its_next_state(tmp_path, serial):
    root = tmp_path / "pdebench"
    root.mkdir()
    written = write_diff_react(root / "2D_diff-react_NA_NA.h5", seeds=5)
    text, config = inspect(str(root), write=tmp_path / "dr.yaml")
    assert "layout: PDEBench's layout, a group per seed" in text and "Du 0.001, Dv 0.005, k 0.005" in text
    assert "0001/data" not in text  # the seeds' arrays are listed once, as */NAME
    field = config["source"]["fields"]["data"]
    assert field == {"path": "*/data", "dtype": "float32", "shape": [6, 8, 8, 2]}, field
    assert config["source"]["samples_along"] == 0 and config["merge"]["split_by"] == "sample"
    assert config["convert"]["features"] == ["data"] and config["convert"]["per_channel"] == ["data"]
    assert config["train"]["task"] == "next_state" and config["train"]["model"] == "fno2d"
    summary, meta = data_half(
        validated({**config, "workdir": str(tmp_path / "work")}), root, tmp_path, serial
    )
    assert summary["accepted"] == 5 and meta["feature_spec"]["data"]["shape"] == [6, 8, 8, 2]
    records = records_by_id(tmp_path / "work" / "merged")
    stats = meta["statistics"]["data"]
    for name, record in records.items():
        seed = int(str(name).rsplit("#", 1)[-1])
        value = np.asarray(record["data"]) * np.asarray(stats["std"]) + np.asarray(stats["mean"])
        np.testing.assert_allclose(value, written[seed], rtol=1e-5, atol=1e-5)


def write_cfd(path: Path, trajectories: int = 4, steps: int = 5, grid: tuple[int, ...] = (8, 8)) -> dict:
    """As PDEBench's merge scripts write a file: on a 2-D grid (CFD) `density`, `pressure`, `Vx`, `Vy`
    [N, T, X, Y], on a 1-D grid (advection, Burgers) `tensor` [N, T, X], float32; the cell centres in
    `x-coordinate` (`y-coordinate`), and T + 1 times in `t-coordinate`."""
    rng = np.random.default_rng(3)
    names = ["density", "pressure", "Vx", "Vy"] if len(grid) == 2 else ["tensor"]
    arrays = {n: rng.normal(size=(trajectories, steps, *grid)).astype(np.float32) for n in names}
    with h5py.File(path, "w") as f:
        for name, values in arrays.items():
            f.create_dataset(name, data=values, dtype="f")
        for axis, n in zip("xyz", grid, strict=False):
            f.create_dataset(f"{axis}-coordinate", data=np.linspace(0, 1, n), dtype="f")
        f.create_dataset("t-coordinate", data=np.linspace(0, 1, steps + 1), dtype="f")
    return arrays


def test_an_array_per_field_is_a_record_per_trajectory_with_the_fields_stacked(tmp_path, serial):
    root = tmp_path / "cfd"
    root.mkdir()
    arrays = write_cfd(root / "2D_CFD_Rand_M0.1_Eta0.01_Zeta0.01_periodic_128_Train.hdf5")
    text, config = inspect(str(root), write=tmp_path / "cfd.yaml")
    assert "layout: PDEBench's layout, an array per field" in text
    members = ["Vx", "Vy", "density", "pressure"]
    assert config["convert"]["stack"] == {"state": members} and config["convert"]["features"] == ["state"]
    assert config["convert"]["per_channel"] == ["state"] and config["train"]["task"] == "next_state"
    assert config["source"]["samples_along"] == 0 and "t_coordinate" not in config["convert"]["labels"]
    summary, meta = data_half(
        validated({**config, "workdir": str(tmp_path / "work")}), root, tmp_path, serial
    )
    assert summary["accepted"] == 4 and meta["feature_spec"]["state"]["shape"] == [5, 8, 8, 4]
    assert meta["component_names"]["state"] == members  # what the next state scores per field
    stats = meta["statistics"]["state"]
    for name, record in records_by_id(tmp_path / "work" / "merged").items():
        i = int(str(name).rsplit("#", 1)[-1])
        value = np.asarray(record["state"]) * np.asarray(stats["std"]) + np.asarray(stats["mean"])
        np.testing.assert_allclose(
            value, np.stack([arrays[m][i] for m in members], axis=-1), rtol=1e-5, atol=1e-5
        )


@SLOW
def test_a_1d_tensor_is_a_next_state_of_lines_that_fno1d_steps_below_persistence(tmp_path, serial):
    """A 1-D file (`tensor` [N, T, X], PDEBench's advection and Burgers sets): a record per trajectory,
    proposed as a next state on a line (fno1d, spatial_dims 1); trained through the steps on 2 ranks on
    periodic advection by one cell a step, the network beats persistence one step ahead and at every step
    of the rollout on the test trajectories."""
    from .conftest import run_cli, write_config

    root = tmp_path / "advection"
    root.mkdir()
    rng = np.random.default_rng(11)
    x = np.arange(32) / 32
    lines = []
    for _ in range(40):  # smooth periodic profiles, moved one cell per step
        first = sum(rng.normal() * np.sin(2 * np.pi * k * x + rng.uniform(0, 6.3)) for k in (1, 2, 3))
        lines.append(np.stack([np.roll(first, t) for t in range(8)]))
    with h5py.File(root / "1D_Advection_Sols_beta1.0.hdf5", "w") as f:
        f.create_dataset("tensor", data=np.stack(lines), dtype="f")
        f.create_dataset("x-coordinate", data=x, dtype="f")
        f.create_dataset("t-coordinate", data=np.linspace(0, 2, 9), dtype="f")
    text, config = inspect(str(root), write=tmp_path / "adv.yaml")
    assert "an array per field: tensor" in text, text
    assert config["train"]["task"] == "next_state" and config["train"]["model"] == "fno1d"
    assert config["train"]["next_state"]["spatial_dims"] == 1 and config["source"]["samples_along"] == 0
    config.update(
        workdir=str(tmp_path / "work"), stage={"target": str(tmp_path / "local")}, search={"enabled": False}
    )
    config["train"].update(epochs=10, batch_size=16, width=16, depth=2, dense=32, learning_rate=0.005)
    path = write_config(tmp_path, validated(config))
    for step in ("ingest", "convert", "merge", "stage", "train"):
        run_cli([step, "--config", str(path)], ranks=2, timeout=600)
    summary = json.loads((tmp_path / "work" / "train" / "summary.json").read_text())
    assert (
        summary["scored_on"] == "test" and summary["vrmse"]["tensor"] < summary["persistence_vrmse"]["tensor"]
    )
    assert summary["rollout"]["below_persistence_at_every_step"], summary["rollout"]

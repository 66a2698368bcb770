"""Every input format through the same ingest: NetCDF4, NumPy (.npz and .npy), ROOT."""

import numpy as np

from pipeline.data.tables import read_csv, read_rows
from pipeline.formats.parts import Part
from pipeline.steps.ingest.step import ingest

from .conftest import make_config


def fields_config(tmp_path, fmt_glob, fields, sample_id=None):
    return make_config(
        tmp_path,
        source={"glob": fmt_glob, "sample_id": sample_id, "fields": fields},
        convert={
            "features": [next(iter(fields))],
            "labels": [],
            "log1p": [],
            "normalise": [],
            "per_channel": [],
        },
    )


def accepted_arrays(out):
    rows = [r for r in read_rows(out / "manifest") if r["status"] == "accepted"]
    return {r["sample_id"]: Part(out / "parts" / r["part"]).read(int(r["record"])) for r in rows}


def test_netcdf(tmp_path, serial):
    import netCDF4

    root = tmp_path / "nc"
    root.mkdir()
    for i in range(2):
        with netCDF4.Dataset(root / f"run{i}.nc", "w") as ds:
            ds.createDimension("lat", 4)
            ds.createDimension("lon", 5)
            group = ds.createGroup("atmos")
            var = group.createVariable("tas", "f4", ("lat", "lon"))
            var[:] = np.full((4, 5), i, "f4")
            ds.setncattr("run_id", f"run-{i}")
    (root / "broken.nc").write_bytes(b"this is not a NetCDF file" * 10)
    config = fields_config(
        tmp_path,
        "*.nc",
        {"tas": {"path": "atmos/tas", "dtype": "float32", "shape": [4, 5]}},
        sample_id={"attr": "run_id"},
    )
    summary = ingest(config, root, tmp_path / "out", serial)
    assert (summary["accepted"], summary["rejected"]) == (2, 1)
    arrays = accepted_arrays(tmp_path / "out")
    assert set(arrays) == {"run-0", "run-1"} and np.all(arrays["run-1"]["tas"] == 1)
    assert "cannot open as NetCDF" in read_csv(tmp_path / "out" / "rejects.csv")[0]["reason"]


def test_numpy_npz_and_npy(tmp_path, serial):
    root = tmp_path / "np"
    root.mkdir()
    np.savez(root / "a.npz", x=np.arange(6, dtype="f4").reshape(2, 3), y=np.ones(2, "f4"))
    np.savez(root / "b.npz", y=np.ones(2, "f4"))
    config = fields_config(tmp_path, "*.npz", {"x": {"path": "x", "shape": [2, 3]}, "y": {"path": "y"}})
    summary = ingest(config, root, tmp_path / "o1", serial)
    assert (summary["accepted"], summary["rejected"]) == (1, 1)
    assert "missing field 'x': no array 'x'" in read_csv(tmp_path / "o1" / "rejects.csv")[0]["reason"]
    np.testing.assert_array_equal(accepted_arrays(tmp_path / "o1")["a"]["x"], np.arange(6).reshape(2, 3))

    root = tmp_path / "npy"
    root.mkdir()
    np.save(root / "c.npy", np.ones((3, 3), "f8"))
    np.save(root / "d.npy", np.array([object()], dtype=object), allow_pickle=True)
    config = fields_config(tmp_path, "*.npy", {"x": {"path": ".", "dtype": "float64"}})
    summary = ingest(config, root, tmp_path / "o2", serial)
    assert (summary["accepted"], summary["rejected"]) == (1, 1)  # the pickled one is refused


def test_root_event_data(tmp_path, serial):
    import uproot

    root = tmp_path / "root"
    root.mkdir()
    for i, n_events in enumerate((5, 50)):
        with uproot.recreate(root / f"gen{i}.root") as f:
            f["events"] = {
                "energy": np.linspace(0, 1, n_events).astype("f8"),
                "nhits": np.arange(n_events, dtype="i4"),
            }
    (root / "bad.root").write_bytes(b"root" + b"\x00" * 100)
    config = fields_config(
        tmp_path,
        "*.root",
        {
            "energy": {"path": "events/energy", "dtype": "float64", "shape": [None]},
            "nhits": {"path": "events/nhits", "dtype": "int32"},
        },
    )
    summary = ingest(config, root, tmp_path / "out", serial)
    assert (summary["accepted"], summary["rejected"]) == (2, 1)
    rows = {r["sample_id"]: r for r in read_rows(tmp_path / "out" / "manifest") if r["status"] == "accepted"}
    # record length = events (typed column)
    assert rows["gen0"]["length"] == 5 and rows["gen1"]["length"] == 50
    np.testing.assert_array_equal(accepted_arrays(tmp_path / "out")["gen1"]["nhits"], np.arange(50))

"""Real output that nobody here wrote: the NetCDF files of iris-sample-data (Met Office, NEMO, OSTIA, ...),
through the readers' CF decoding, ingest -> convert -> merge and `sim2dl inspect --write`. Files are used as
PyPI ships them (read-only, from the installed package); the workflow reads them in place."""

from __future__ import annotations

import json
from pathlib import Path

import netCDF4
import numpy as np
import pytest
import yaml

from pipeline.formats.readers.netcdf import NetCDFFile

from .conftest import make_config
from .helpers import data_half

iris_sample_data = pytest.importorskip("iris_sample_data")
IRIS = Path(iris_sample_data.__file__).parent / "sample_data"
IRIS_NETCDF = sorted(IRIS.glob("**/*.nc"))


def test_cf_decoding_masks_and_unpacks_every_variable_as_netcdf4_does():
    """Every numeric variable of every file: the same missing values and the same values as netCDF4's own
    auto mask-and-scale (the reference implementation of CF decoding)."""
    compared = masked_variables = 0
    for path in IRIS_NETCDF:
        opened = NetCDFFile(path)
        with netCDF4.Dataset(path) as ds, opened:
            for name, variable in ds.variables.items():
                if not isinstance(variable.dtype, np.dtype) or variable.dtype.kind not in "biuf":
                    continue
                want = variable[...]
                got = opened.decoded(name, opened.read(name, ()))
                want_mask, got_mask = np.ma.getmaskarray(want), np.ma.getmaskarray(got)
                assert np.array_equal(want_mask, got_mask), (path.name, name)
                assert np.array_equal(np.ma.getdata(want)[~want_mask], np.ma.getdata(got)[~got_mask]), (
                    path.name,
                    name,
                )
                compared += 1
                masked_variables += bool(want_mask.any())
    assert compared > 100 and masked_variables >= 10  # fill values of several kinds were there to find


def ostia_config(tmp_path: Path, missing: str, **field: object) -> dict:
    spec = {
        "path": "surface_temperature",
        "dtype": "float32",
        "shape": [18, 432],
        "missing": missing,
        **field,
    }
    labels = ["surface_temperature_mask"] if missing == "mask" else []
    source = {
        "path": str(IRIS),
        "glob": "ostia_monthly.nc",
        "format": "netcdf",
        "samples_along": "time",
        "sample_id": None,
        "fields": {"surface_temperature": spec},
    }
    convert = {
        "features": ["surface_temperature"],
        "labels": labels,
        "log1p": [],
        "normalise": ["surface_temperature"],
        "per_channel": [],
    }
    return make_config(
        tmp_path,
        source=source,
        convert=convert,
        ingest={"max_reject_fraction": 1.0},
        train={"validation_fraction": 0.0},  # statistics over every sample, to compare with netCDF4's
    )


def test_fill_values_of_real_sea_surface_temperatures_never_reach_records_or_statistics(tmp_path, serial):
    """OSTIA monthly SST (54 months, land and sea ice as _FillValue 1e20): rejected with the count and the
    marker by default; with missing: mask, filled, masked beside, and left out of the statistics."""
    with netCDF4.Dataset(IRIS / "ostia_monthly.nc") as ds:
        sst = ds["surface_temperature"][...]
    missing_per_step = np.ma.getmaskarray(sst).reshape(54, -1).sum(axis=1)
    assert missing_per_step.min() > 0

    rejected = ingest_only(ostia_config(tmp_path / "reject", "reject"), tmp_path / "reject")
    assert rejected["accepted"] == 0 and rejected["rejected"] == 54
    reasons = (tmp_path / "reject" / "ingest" / "rejects.csv").read_text()
    assert (
        f"surface_temperature': {missing_per_step[0]} of 7776 values are missing (_FillValue 1e+20)"
        in reasons
    )

    summary, metadata = data_half(ostia_config(tmp_path, "mask", fill_value=-1.0), IRIS, tmp_path, serial)
    assert summary["accepted"] == 54
    stats = json.loads((tmp_path / "work" / "convert" / "stats.json").read_text())["statistics"]
    valid = np.ma.compressed(sst).astype(np.float64)
    assert stats["surface_temperature"]["count"] == valid.size
    assert stats["surface_temperature"]["max"] == pytest.approx(valid.max()) and valid.max() < 400  # kelvin
    assert stats["surface_temperature"]["min"] == pytest.approx(valid.min())
    assert stats["surface_temperature"]["mean"] == pytest.approx(valid.mean(), rel=1e-9)
    assert metadata["feature_spec"]["surface_temperature_mask"]["dtype"] == "uint8"
    assert metadata["units"] == {"surface_temperature": "K"}  # the variable's CF units
    from pipeline.formats.shards.shard_reader import ShardReader

    records = list(ShardReader(tmp_path / "work" / "merged"))
    assert len(records) == 54
    masks = np.stack([r["surface_temperature_mask"] for r in records])
    temperatures = np.stack([r["surface_temperature"] for r in records])
    assert int(masks.sum()) == int(np.ma.count_masked(sst))  # every missing value marked, none else
    mean, std = stats["surface_temperature"]["mean"], stats["surface_temperature"]["std"]
    assert np.allclose(temperatures[masks == 1], (-1.0 - mean) / std, rtol=1e-5)  # fill_value, normalised
    got, want = np.sort(temperatures[masks == 0]), np.sort((valid - mean) / std)  # records in shard order
    assert np.allclose(got, want, rtol=1e-4, atol=1e-5)


def ingest_only(config: dict, work: Path) -> dict:
    from pipeline.runtime.mpi import SerialComm
    from pipeline.steps.ingest.step import ingest

    return ingest(config, IRIS, work / "ingest", SerialComm())


def real_files() -> list[Path]:
    """Every NetCDF file of iris-sample-data, and the HDF5 files PyTables and h5py ship for their own tests
    (tables, nested compound types, enums, big-endian numbers, HDF5 time types, external links, text)."""
    import h5py
    import tables

    shipped = [
        *Path(tables.__file__).parent.glob("tests/*.h5"),
        *Path(h5py.__file__).parent.glob("tests/**/*.h5"),
    ]
    return IRIS_NETCDF + sorted(shipped)


def test_inspect_never_crashes_and_every_config_it_writes_validates(tmp_path):
    """`sim2dl inspect --write` on each real file alone: a config that validates, or a clear error that
    names what the file holds; never a traceback."""
    from pipeline import Sim2dlError
    from pipeline import config as cfg
    from pipeline.steps.inspect import inspect

    written, refused = [], {}
    for k, path in enumerate(real_files()):
        directory = tmp_path / f"d{k}"
        directory.mkdir()
        (directory / path.name).symlink_to(path)
        try:
            text, content = inspect(str(directory), write=tmp_path / f"d{k}.yaml")
        except Sim2dlError as e:
            refused[path.name] = str(e)
            continue
        assert content is not None and "Traceback" not in text
        cfg.validate(yaml.safe_load((tmp_path / f"d{k}.yaml").read_text()))
        written.append(path.name)
    assert len(written) >= 30, refused
    assert {"ostia_monthly.nc", "SOI_Darwin.nc", "smpl_i64be.h5", "smpl_enum.h5", "float.h5"} <= set(written)
    for name, reason in refused.items():  # files of tables or text only: said, with what was found
        assert "found:" in reason, (name, reason)
    assert "a table (compound dataset)" in refused["Tables_lzo1.h5"]


def test_inspect_reports_tables_fill_values_and_writes_yaml_that_holds_any_attribute_text(tmp_path):
    """Global attributes with ': ', '#', quotes and newlines (CMIP6's source attribute) stay inside the
    YAML's comments and values; a compound table is shown with its columns; fill values are reported."""
    from pipeline import config as cfg
    from pipeline.steps.inspect import inspect

    text = "seaIce: FESOM 1.4, CIESM (2019): # not a comment\n  'quoted' \"and\" more: {x: [1]}"
    root = tmp_path / "runs"
    root.mkdir()
    for k in range(3):
        with netCDF4.Dataset(root / f"run{k}.nc", "w") as ds:
            ds.createDimension("time", None)
            ds.createDimension("x", 4)
            ta = ds.createVariable("ta", "f4", ("time", "x"), fill_value=np.float32(1e20))
            ta[:] = np.ones((2 + k, 4), "f4")
            ta.units = "K"
            ds.source = f"{text} {k}"
    report, _ = inspect(str(root), write=tmp_path / "runs.yaml")
    assert "_FillValue 1e+20; units K" in report
    written = (tmp_path / "runs.yaml").read_text()
    config = cfg.validate(yaml.safe_load(written))
    assert config["source"]["fields"]["ta"]["missing"] == "reject"
    attribute_lines = [line for line in written.splitlines() if "seaIce" in line or "'quoted'" in line]
    assert attribute_lines and all(line.startswith("#") for line in attribute_lines)  # inside comments

    import tables

    table = Path(tables.__file__).parent / "tests" / "smpl_compound_chunked.h5"
    (tmp_path / "table").mkdir()
    (tmp_path / "table" / table.name).symlink_to(table)
    from pipeline import Sim2dlError

    with pytest.raises(Sim2dlError, match=r"a table \(compound dataset\)"):
        inspect(str(tmp_path / "table"), write=tmp_path / "table.yaml")
    report, _ = inspect(str(tmp_path / "table"))
    assert "a table, columns: a_name int32, c_name |S6, d_name int16[5, 10]" in report


def test_packed_values_fill_values_in_labels_and_unusable_packing_per_sample(tmp_path, serial):
    """NetCDF with an int16 variable packed by scale_factor/add_offset (unpacked as netCDF4 unpacks it), a
    label holding its _FillValue at one time step (that sample rejected with the count and the marker),
    and a file whose scale_factor is text (every sample rejected, naming the attribute); HDF5 files with CF
    attributes, one sample per file, decoded on the same rules."""
    import h5py

    from pipeline.formats.shards.shard_reader import ShardReader
    from pipeline.steps.ingest.step import ingest

    root = tmp_path / "nc"
    root.mkdir()
    temperature = np.linspace(250.0, 300.0, 6 * 8, dtype="f4").reshape(6, 8)
    for name, scale in (("good", 0.01), ("bad", "0.01")):
        with netCDF4.Dataset(root / f"{name}.nc", "w") as ds:
            ds.createDimension("time", 6)
            ds.createDimension("x", 8)
            ta = ds.createVariable("ta", "i2", ("time", "x"))
            ta.set_auto_maskandscale(False)
            ta.scale_factor, ta.add_offset, ta.units = scale, 275.0, "K"
            ta[:] = np.round((temperature - 275.0) / 0.01).astype("i2")
            y = ds.createVariable("y", "f4", ("time",), fill_value=np.float32(-999.0))
            y[:] = np.arange(6, dtype="f4")
            y[3] = np.ma.masked
    fields = {"ta": {"path": "ta", "dtype": "float32", "shape": [8]}, "y": {"path": "y", "dtype": "float32"}}
    config = make_config(
        tmp_path,
        source={
            "path": str(root),
            "glob": "*.nc",
            "samples_along": "time",
            "sample_id": None,
            "fields": fields,
        },
        convert={"features": ["ta"], "labels": ["y"], "log1p": [], "normalise": [], "per_channel": []},
        ingest={"max_reject_fraction": 1.0},
    )
    summary = ingest(config, root, tmp_path / "ingest", serial)
    assert (summary["samples"], summary["accepted"], summary["rejected"]) == (12, 5, 7)
    from pipeline.data.tables import read_csv

    reasons = {r["sample_id"]: r["reason"] for r in read_csv(tmp_path / "ingest" / "rejects.csv")}
    assert reasons["good#3"] == "field 'y': 1 of 1 values are missing (_FillValue -999)"
    assert all("attribute scale_factor = '0.01' is not a number" in reasons[f"bad#{k}"] for k in range(6))
    with netCDF4.Dataset(root / "good.nc") as ds:
        expected = ds["ta"][...]  # netCDF4's own unpacking
    from pipeline.runtime.mpi import SerialComm

    data_half_config = {**config, "workdir": str(tmp_path / "work")}

    data_half(data_half_config, root, tmp_path, SerialComm())
    for record in ShardReader(tmp_path / "work" / "merged"):
        k = int(record["sample_id"].split("#")[1])
        np.testing.assert_allclose(record["ta"], expected[k], rtol=1e-6)

    # HDF5, one sample per file (the contents-image and template path): CF attributes decoded alike
    h5 = tmp_path / "h5"
    h5.mkdir()
    for k in range(4):
        with h5py.File(h5 / f"s{k}.h5", "w") as f:
            density = f.create_dataset("density", data=np.full((4, 4, 4), 7, "i2"))
            density.attrs["scale_factor"], density.attrs["_FillValue"] = np.float32(0.5), np.int16(-1)
            if k == 2:
                density[0, 0, 0] = -1
            f["params"] = np.ones(3, "f4")
    config = make_config(
        tmp_path / "h5work",
        source={
            "path": str(h5),
            "glob": "*.h5",
            "sample_id": None,
            "fields": {
                "density": {"path": "density", "dtype": "float32", "shape": [4, 4, 4]},
                "params": {"path": "params", "dtype": "float32", "shape": [3]},
            },
        },
        ingest={"max_reject_fraction": 1.0},
    )
    summary = ingest(config, h5, tmp_path / "h5ingest", serial)
    assert (summary["accepted"], summary["rejected"]) == (3, 1)
    [reject] = read_csv(tmp_path / "h5ingest" / "rejects.csv")
    assert (
        reject["sample_id"] == ""
        and "field 'density': 1 of 64 values are missing (_FillValue -1)" in reject["reason"]
    )

"""openPMD meshes in thetaMode geometry as a real particle-in-cell code writes them: FBPIC's own output
(tests/data/fbpic: two laser-wakefield runs of examples/wakefield/simulate.py, FBPIC 0.27.1, iterations 0
and 40, E and rho of shape (3, 24, 128), axisLabels [r, z], with the runs table an ensemble would keep),
WarpX's (z, r) order written by openPMD-api to the standard, and `dataOrder: F`. The layouts are checked
against the raw arrays and against openpmd-viewer (`get_field`), the tool PIC users read these files with."""

from __future__ import annotations

import csv
import json
import shutil
from pathlib import Path

import h5py
import numpy as np
import pytest

from pipeline.formats.readers import READERS, SampleError, field_descriptions
from pipeline.formats.readers.base import FieldSpec

from .conftest import REPO
from .helpers import docs_block, inspected, run_written_config

FBPIC = REPO / "tests" / "data" / "fbpic"
RUN = FBPIC / "run-000001" / "diags" / "hdf5"
ITERATION = 40
THETAS = (0.0, 0.7, 2.2)


def fbpic_file(iteration: int = ITERATION) -> Path:
    return RUN / f"data{iteration:08d}.h5"


def stored(path: Path, record: str) -> h5py.Group | h5py.Dataset:
    f = h5py.File(path, "r")
    return f[f"data/{int(path.stem[4:])}/fields/{record}"]


def read(path: Path, array: str) -> np.ndarray:
    with READERS["openpmd"].open(path) as f:
        return f.read(array, (slice(0, 1),))[0]


def test_fbpic_modes_are_channels_over_the_r_z_plane_and_the_geometry_is_recorded():
    """The default layout changes no value: each component's modes side by side over (r, z), r first;
    the geometry, axes, grid and staggering are what the file says, in metadata.json's words."""
    path = fbpic_file()
    e_field = read(path, "meshes/E")
    assert e_field.shape == (24, 128, 9)
    group = stored(path, "E")
    for k, component in enumerate("rtz"):
        np.testing.assert_array_equal(
            e_field[..., 3 * k : 3 * k + 3], np.moveaxis(group[component][()], 0, -1)
        )
    np.testing.assert_array_equal(read(path, "meshes/rho"), np.moveaxis(stored(path, "rho")[()], 0, -1))
    fields = [FieldSpec("E", "meshes/E"), FieldSpec("rho", "meshes/rho@theta=0.5")]
    described = field_descriptions(path, "openpmd", fields)
    assert described["component_names"]["E"][:4] == ["r_m0", "r_m1_re", "r_m1_im", "t_m0"]
    assert described["component_names"]["rho"] == ["value"]
    geometry = described["geometry"]["E"]
    assert geometry["geometry"] == "thetaMode" and geometry["geometry_parameters"] == "m=2;imag=+"
    assert geometry["axes"] == ["r", "z"] and geometry["data_order"] == "C"
    assert geometry["grid_spacing_m"] == pytest.approx(list(group.attrs["gridSpacing"]), rel=1e-12)
    assert geometry["grid_global_offset_m"] == pytest.approx(list(group.attrs["gridGlobalOffset"]), rel=1e-12)
    assert geometry["position"]["r"] == [0.5, 0.5] and geometry["layout"] == {"kind": "modes"}
    assert described["geometry"]["rho"]["layout"] == {"kind": "plane", "theta": 0.5}


@pytest.mark.parametrize("theta", THETAS)
def test_the_plane_at_theta_equals_openpmd_viewers_get_field(theta):
    """E's x, y and z and rho on the plane at θ, r mirrored below the axis, as openpmd-viewer rebuilds
    them."""
    from openpmd_viewer import OpenPMDTimeSeries

    series = OpenPMDTimeSeries(str(RUN), check_all_files=False)
    plane = read(fbpic_file(), f"meshes/E@theta={theta}")
    assert plane.shape == (48, 128, 3)
    for k, coord in enumerate("xyz"):
        expected, _ = series.get_field("E", coord, iteration=ITERATION, theta=theta)
        np.testing.assert_allclose(plane[..., k], expected, rtol=1e-12, atol=1e-12 * np.abs(expected).max())
    expected, _ = series.get_field("rho", iteration=ITERATION, theta=theta)
    np.testing.assert_allclose(read(fbpic_file(), f"meshes/rho@theta={theta}")[..., 0], expected, rtol=1e-12)
    assert np.abs(plane[..., :2]).max() > 1e11  # the laser (mode 1) is there: the test compares real fields


def test_the_cartesian_volume_equals_openpmd_viewers_3d_reconstruction():
    from openpmd_viewer import OpenPMDTimeSeries

    series = OpenPMDTimeSeries(str(RUN), check_all_files=False)
    volume = read(fbpic_file(), "meshes/E@cartesian")
    assert volume.shape == (48, 48, 128, 3)
    for k, coord in enumerate("xyz"):
        expected, _ = series.get_field("E", coord, iteration=ITERATION, theta=None)
        np.testing.assert_allclose(volume[..., k], expected, rtol=1e-9, atol=1e-12 * np.abs(expected).max())


def write_warpx_order(path: Path, source: Path) -> None:
    """The FBPIC file's E as WarpX RZ writes thetaMode fields (openPMD-api, axisLabels [z, r], each
    component (modes, Nz, Nr)), with the grid's attributes in the same order."""
    import openpmd_api as io

    group = stored(source, "E")
    series = io.Series(str(path), io.Access.create)
    it = series.write_iterations()[ITERATION]
    mesh = it.meshes["E"]
    mesh.geometry, mesh.geometry_parameters = io.Geometry.thetaMode, "m=2;imag=+"
    mesh.axis_labels = ["z", "r"]
    mesh.grid_spacing = list(group.attrs["gridSpacing"][::-1])
    mesh.grid_global_offset = list(group.attrs["gridGlobalOffset"][::-1])
    mesh.grid_unit_SI = 1.0
    mesh.unit_dimension = {
        io.Unit_Dimension.M: 1,
        io.Unit_Dimension.L: 1,
        io.Unit_Dimension.I: -1,
        io.Unit_Dimension.T: -3,
    }
    for component in "rtz":
        values = np.ascontiguousarray(group[component][()].transpose(0, 2, 1))
        mesh[component].reset_dataset(io.Dataset(values.dtype, values.shape))
        mesh[component].store_chunk(values)
        mesh[component].position = [0.5, 0.5]
    it.close()
    series.close()


def test_warpx_z_r_order_and_fortran_data_order_read_as_the_same_r_z_layouts(tmp_path):
    """Whichever code wrote the file, r comes first: WarpX's [z, r] (openPMD-api, to the standard) and a
    `dataOrder: F` file (labels listed fastest axis first) read as FBPIC's own file does; openpmd-viewer
    agrees on the WarpX-order file's plane."""
    from openpmd_viewer import OpenPMDTimeSeries

    fbpic_modes, fbpic_plane = read(fbpic_file(), "meshes/E"), read(fbpic_file(), "meshes/E@theta=0.7")
    warpx = tmp_path / "warpx" / f"openpmd_{ITERATION:06d}.h5"
    warpx.parent.mkdir()
    write_warpx_order(tmp_path / "warpx" / "openpmd_%06T.h5", fbpic_file())
    np.testing.assert_array_equal(read(warpx, "meshes/E"), fbpic_modes)
    np.testing.assert_allclose(read(warpx, "meshes/E@theta=0.7"), fbpic_plane, rtol=1e-12)
    expected, _ = OpenPMDTimeSeries(str(warpx.parent), check_all_files=False).get_field(
        "E", "x", iteration=ITERATION, theta=0.7
    )
    np.testing.assert_allclose(read(warpx, "meshes/E@theta=0.7")[..., 0], expected.T, rtol=1e-12)

    fortran = tmp_path / "fortran.h5"
    shutil.copy(fbpic_file(), fortran)
    with h5py.File(fortran, "r+") as f:
        group = f[f"data/{ITERATION}/fields/E"]
        group.attrs["dataOrder"], group.attrs["axisLabels"] = np.bytes_("F"), np.array([b"z", b"r"])
        group.attrs["gridSpacing"] = group.attrs["gridSpacing"][::-1]
        group.attrs["gridGlobalOffset"] = group.attrs["gridGlobalOffset"][::-1]
    np.testing.assert_array_equal(read(fortran, "meshes/E"), fbpic_modes)
    np.testing.assert_array_equal(
        read(fortran, "meshes/E@cartesian"), read(fbpic_file(), "meshes/E@cartesian")
    )
    with READERS["openpmd"].open(fortran) as f:
        geometry = f.attributes("meshes/E")["geometry"]
    assert geometry["axes"] == ["r", "z"] and geometry["data_order"] == "F"
    assert geometry["grid_spacing_m"] == pytest.approx(list(stored(fbpic_file(), "E").attrs["gridSpacing"]))


def test_other_geometries_and_misplaced_layouts_are_refused_by_name(tmp_path):
    import openpmd_api as io

    series = io.Series(str(tmp_path / "cyl_%T.h5"), io.Access.create)
    it = series.write_iterations()[0]
    for name, geometry in (("B", io.Geometry.cylindrical), ("J", io.Geometry.spherical)):
        values = np.ones((4, 5), np.float64)
        mesh = it.meshes[name]
        mesh.geometry = geometry
        mesh[io.Mesh_Record_Component.SCALAR].reset_dataset(io.Dataset(values.dtype, values.shape))
        mesh[io.Mesh_Record_Component.SCALAR].store_chunk(values)
    it.close()
    series.close()
    with READERS["openpmd"].open(tmp_path / "cyl_0.h5") as f:
        with pytest.raises(
            SampleError, match=r"'meshes/B' is in cylindrical geometry.*never treated as Cartesian"
        ):
            f.shape("meshes/B")
        with pytest.raises(SampleError, match="spherical geometry"):
            f.read("meshes/J", (slice(0, 1),))
    with (
        READERS["openpmd"].open(fbpic_file()) as f,
        pytest.raises(SampleError, match=r"unknown layout 'phi=1'.*@theta"),
    ):
        f.shape("meshes/E@phi=1")


def test_inspect_names_the_geometry_proposes_a_2d_model_and_the_runs_parameters_and_the_config_runs(tmp_path):
    """`sim2dl inspect` on FBPIC's output as an ensemble leaves it: the thetaMode layout named, a 2-D model
    for the plane of modes, the runs table's a0 and density as labels; the config ingests every
    iteration of every run through convert and merge on 2 ranks, each with its run's parameters, and
    metadata.json says the geometry."""
    data = tmp_path / "fbpic"
    shutil.copytree(FBPIC, data)
    config = inspected(tmp_path, data)
    assert config["source"]["fields"]["E"] == {"path": "meshes/E", "dtype": "float64", "shape": [24, 128, 9]}
    assert config["source"]["labels_table"] == {"path": "runs.csv", "key": "run", "match": "run_directory"}
    assert config["convert"]["labels"] == ["a0", "density"] and config["train"]["model"] == "unet2d"
    text = (tmp_path / "inspected.yaml").read_text()
    assert "meshes/E: thetaMode geometry (m=2;imag=+; axisLabels ['r', 'z'])" in text
    assert "meshes/E@theta=0 is the field on the x-z plane (48, 128, 3)" in text
    printed = (tmp_path / "inspect.txt").read_text()  # in the terminal too, not only in the file's comments
    assert "layout: openPMD" in printed and "meshes/E: thetaMode geometry (m=2;imag=+" in printed
    config["merge"] = {**config["merge"], "splits": {}, "format": "hdf5"}
    meta = run_written_config(tmp_path, config)
    assert meta["counts"]["records"] == 4 and meta["geometry"]["E"]["layout"] == {"kind": "modes"}
    with (FBPIC / "runs.csv").open() as f:
        runs = {row["run"]: (float(row["a0"]), float(row["density"])) for row in csv.DictReader(f)}
    shards = sorted((tmp_path / "work" / "merged" / "shards").glob("*.h5"))
    seen = {}
    for shard in shards:
        with h5py.File(shard, "r") as f:
            for sample_id, a0, density in zip(f["sample_id"][()], f["a0"][()], f["density"][()], strict=True):
                seen[sample_id.decode()] = (a0, density)
    stats = json.loads((tmp_path / "work" / "merged" / "metadata.json").read_text())["statistics"]
    assert len(seen) == 4
    for sample_id, (a0, density) in seen.items():
        run = next(part for part in sample_id.split("/") if part.startswith("run-"))
        expected = np.array(runs[run])
        got = np.array([a0, density]) * [stats["a0"]["std"], stats["density"]["std"]] + [
            stats["a0"]["mean"],
            stats["density"]["mean"],
        ]
        np.testing.assert_allclose(got, expected, rtol=1e-5)


def test_the_docs_wakefield_config_learns_from_fbpic_output_in_the_plane_layout(tmp_path):
    """docs/configuration.md's laser-wakefield block, its source pointed at FBPIC's files (the test's runs:
    iteration 40, the runs table as CSV), E read as the plane at θ = 0: ingest, convert and merge on 2
    ranks, each record with its layout, channels and run (the modes layout goes through the same steps in
    the inspect test above)."""
    block = docs_block("examples/wakefield/simulate.py")
    assert block["simulate"]["command"][:2] == [
        "examples/wakefield/.venv/bin/python",
        "examples/wakefield/simulate.py",
    ]
    assert (REPO / "examples" / "wakefield" / "setup.sh").exists()
    assert block["source"]["fields"]["E"]["path"] == "meshes/E" and block["train"]["model"] == "unet2d"
    fields = {
        **block["source"]["fields"],
        "E": {"path": "meshes/E@theta=0", "dtype": "float32", "shape": [48, 128, 3]},
    }
    source = {
        **block["source"],
        "path": str(FBPIC),
        "glob": "**/diags/hdf5/data00000040.h5",
        "fields": fields,
        "labels_table": {"path": "runs.csv", "key": "run", "match": "run_directory"},
    }
    config = {
        **block,
        "simulate": {"enabled": False},
        "source": source,
        "merge": {"format": "hdf5", "splits": {}},
    }
    meta = run_written_config(tmp_path, config)
    assert meta["counts"]["records"] == 2 and meta["feature_spec"]["E"]["shape"] == [48, 128, 3]
    assert meta["geometry"]["E"]["layout"] == {"kind": "plane", "theta": 0.0}
    assert meta["component_names"]["E"] == ["x", "y", "z"]

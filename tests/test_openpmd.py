"""openPMD series as particle-in-cell codes write them (openPMD-api's own writer, every backend and iteration
encoding), ADIOS2 BP files (adios2's own writer, BP4 and BP5), and particles deposited onto grids: read
one sample per iteration or step, in SI, through ingest, convert and merge on 2 ranks as the docs'
config blocks say, bad inputs rejected with their reasons."""

from __future__ import annotations

import csv
import json
import shutil
from itertools import product
from pathlib import Path

import h5py
import numpy as np
import pytest

from pipeline import Sim2dlError
from pipeline.data.deposit import deposit
from pipeline.formats.readers import READERS, SampleError

from .conftest import make_config, run_cli, write_config
from .helpers import docs_block, inspected, run_written_config

E_UNIT_SI = 2.5  # V/m per stored unit
POSITION_UNIT_SI = 1e-6  # stored positions in micrometres
CELLS = (16, 16)
BOX = 16e-6  # 16 cells of 1 um


def particles(iteration: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(positions in um inside their cell, cell offsets in um, weights) of an iteration: n varies."""
    rng = np.random.default_rng(iteration)
    n = 40 + iteration // 10
    cells = rng.integers(0, 16, (n, 2)).astype(np.float64)
    return rng.random((n, 2)), cells, rng.random(n) + 0.5


def mesh_values(iteration: int, component: str) -> np.ndarray:
    return (
        np.arange(np.prod(CELLS), dtype=np.float32).reshape(CELLS) + iteration + 1000 * ord(component)
    ) / 7


def write_series(name: str, iterations: list[int], encoding: str | None = None) -> None:
    """A 2-d PIC diagnostic as WarpX writes one: E (x, y, z) with unitSI and the electric field's
    unitDimension, a constant rho, electrons with position + positionOffset (constant-free), weighting."""
    import openpmd_api as io

    series = io.Series(name, io.Access.create)
    if encoding is not None:
        series.iteration_encoding = getattr(io.Iteration_Encoding, encoding)
    series.set_attribute("machine", "sim2dl-tests")
    for step in iterations:
        it = series.write_iterations()[step]
        it.time, it.dt, it.time_unit_SI = step * 0.5, 0.5, 1e-15
        e_field = it.meshes["E"]
        e_field.unit_dimension = {
            io.Unit_Dimension.M: 1,
            io.Unit_Dimension.L: 1,
            io.Unit_Dimension.I: -1,
            io.Unit_Dimension.T: -3,
        }
        e_field.axis_labels, e_field.grid_spacing = ["x", "y"], [1.0, 1.0]
        e_field.grid_global_offset, e_field.grid_unit_SI = [0.0, 0.0], POSITION_UNIT_SI
        for c in "zyx":  # written out of order: read back as x, y, z
            values = mesh_values(step, c)
            e_field[c].reset_dataset(io.Dataset(values.dtype, values.shape))
            e_field[c].store_chunk(values)
            e_field[c].unit_SI = E_UNIT_SI
        rho = it.meshes["rho"][io.Mesh_Record_Component.SCALAR]
        rho.reset_dataset(io.Dataset(np.dtype("float64"), list(CELLS)))
        rho.make_constant(3.0)
        inside, cells, weights = particles(step)
        electrons = it.particles["electrons"]
        for k, c in enumerate("xy"):
            for record, values in (("position", inside[:, k]), ("positionOffset", cells[:, k])):
                rc = electrons[record][c]
                rc.reset_dataset(io.Dataset(values.dtype, values.shape))
                rc.store_chunk(np.ascontiguousarray(values))
                rc.unit_SI = POSITION_UNIT_SI
        w = electrons["weighting"][io.Record_Component.SCALAR]
        w.reset_dataset(io.Dataset(weights.dtype, weights.shape))
        w.store_chunk(weights)
        it.close()
    series.close()


LAYOUTS = {
    # name: (what to pass openPMD-api, encoding, the inputs sim2dl lists)
    "file-based HDF5": ("openpmd_%06T.h5", None, "openpmd_*.h5"),
    "file-based BP5": ("openpmd_%T.bp5", None, "openpmd_*.bp5"),
    "group-based HDF5": ("series.h5", "group_based", "series.h5"),
    "group-based BP4": ("series.bp4", "group_based", "series.bp4"),
    "variable-based BP5": ("series.bp5", "variable_based", "series.bp5"),
}


@pytest.mark.parametrize("layout", LAYOUTS)
def test_every_encoding_reads_each_iteration_in_si_with_components_in_order(tmp_path, layout):
    name, encoding, glob = LAYOUTS[layout]
    iterations = [0, 100, 250]
    write_series(str(tmp_path / name), iterations, encoding)
    reader = READERS["openpmd"]
    inputs = sorted(tmp_path.glob(glob))
    assert len(inputs) == (3 if encoding is None else 1)
    seen = []
    for path in inputs:
        with reader.open(path) as f:
            count = f.shape("meshes/E")[0]
            e_field = f.read("meshes/E", (slice(0, count),))
            assert e_field.shape == (count, *CELLS, 3)
            attributes = dict(f.attributes("meshes/E"))
            geometry = attributes.pop("geometry")
            assert attributes == {"units": "kg m s^-3 A^-1", "component_names": ["x", "y", "z"]}
            assert geometry["geometry"] == "cartesian" and geometry["axes"] == ["x", "y"]
            assert geometry["grid_spacing_m"] == [POSITION_UNIT_SI] * 2 and geometry["data_order"] == "C"
            assert "layout" not in geometry and set(geometry["position"]) == {"x", "y", "z"}
            assert f.dims("meshes/E")[0] == "iteration"
            for k in range(count):
                step = int(f.read("iteration", (slice(k, k + 1),))[0])
                seen.append(step)
                for c, axis in zip("xyz", range(3), strict=True):
                    np.testing.assert_allclose(
                        e_field[k, ..., axis], mesh_values(step, c) * E_UNIT_SI, rtol=1e-6
                    )
                np.testing.assert_allclose(f.read("time", (slice(k, k + 1),)), [step * 0.5e-15])
                np.testing.assert_array_equal(
                    f.read("meshes/rho", (slice(k, k + 1),))[0], np.full(CELLS, 3.0)
                )
                inside, cells, weights = particles(step)
                position = f.read("particles/electrons/position", (slice(k, k + 1),))[0]
                np.testing.assert_allclose(position, (inside + cells) * POSITION_UNIT_SI, rtol=1e-12)
                np.testing.assert_array_equal(
                    f.read("particles/electrons/weighting", (slice(k, k + 1),))[0], weights
                )
            assert f.attribute("machine") == "sim2dl-tests"
            if count > 1:  # particle counts differ between iterations: ingest reads them one at a time
                with pytest.raises(SampleError, match="changes shape between iterations"):
                    f.read("particles/electrons/position", (slice(0, count),))
    assert sorted(seen) == iterations


def run_data_steps(tmp_path: Path, block: dict, data: Path) -> tuple[dict, list[dict]]:
    """ingest, convert and merge (HDF5 shards) on 2 ranks with the docs' block; (metadata.json, rejects)."""
    config = make_config(
        tmp_path,
        simulate={"enabled": False},
        source={**block["source"], "path": str(data)},
        convert={"log1p": [], "normalise": [], "per_channel": [], **block["convert"]},
        merge={"format": "hdf5"},
        search={"enabled": False},
        ingest={"max_reject_fraction": 0.5},
    )
    path = write_config(tmp_path, config)
    for step in ("ingest", "convert", "merge"):
        run_cli([step, "--config", str(path)], ranks=2)
    work = Path(config["workdir"])
    rejects = []
    for table in (work / "ingest" / "rejects.csv", work / "convert" / "rejects.csv"):
        with table.open() as f:
            rejects += list(csv.DictReader(f))
    return json.loads((work / "merged" / "metadata.json").read_text()), rejects


def merged_records(meta_path: Path, *fields: str) -> dict[str, list[np.ndarray]]:
    found: dict[str, list[np.ndarray]] = {f: [] for f in (*fields, "sample_id")}
    for shard in json.loads(meta_path.read_text())["shards"]:
        with h5py.File(meta_path.parent / "shards" / shard["file"], "r") as f:
            for name in found:
                found[name] += list(f[name][()])
    return found


def test_the_docs_openpmd_series_is_ingested_per_iteration_and_its_particles_deposited(tmp_path):
    """The docs' block as written (its path replaced): a file-based series of 6 iterations and one file that
    is not HDF5 at all; the deposited density keeps each iteration's total weight through log1p and
    normalisation, and the broken file is a reject with its reason."""
    data = tmp_path / "diags"
    iterations = [0, 10, 20, 30, 40, 50]
    write_series(str(data / "openpmd_%06T.h5"), iterations)
    (data / "openpmd_000060.h5").write_bytes(b"not an HDF5 file" * 64)
    block = docs_block("particles/electrons/position")
    meta, rejects = run_data_steps(tmp_path, block, data)
    assert meta["counts"]["records"] == 6, meta["counts"]
    assert [Path(r["path"]).name for r in rejects] == ["openpmd_000060.h5"], rejects
    assert "cannot open as an openPMD series" in rejects[0]["reason"]
    assert meta["units"] == {"time": "s"}
    records = merged_records(tmp_path / "work" / "merged" / "metadata.json", "density", "time")
    stats = meta["statistics"]
    by_time = {}
    for density, time in zip(records["density"], records["time"], strict=True):
        raw_time = time * stats["time"]["std"] + stats["time"]["mean"]
        grid = np.expm1(density * stats["density"]["std"] + stats["density"]["mean"])
        by_time[round(float(raw_time) / 0.5e-15)] = grid
    assert sorted(by_time) == iterations
    for step, grid in by_time.items():
        inside, cells, weights = particles(step)
        assert grid.shape == CELLS
        np.testing.assert_allclose(grid.sum(), weights.sum(), rtol=1e-4)
        reference = deposit(
            (inside + cells) * POSITION_UNIT_SI, CELLS, [BOX, BOX], scheme="cic", weights=weights
        )
        np.testing.assert_allclose(grid, reference, rtol=1e-3, atol=1e-4)


def write_gray_scott(path: Path, engine: str, steps: int, du: float) -> None:
    """A Gray-Scott run as the ADIOS2 tutorial writes it: U and V (16 x 16 global arrays) each step, Du as
    an attribute; U's units as a variable attribute."""
    import adios2

    adios = adios2.Adios()
    io = adios.declare_io(f"gs-{path.name}")
    io.set_engine(engine)
    with adios2.Stream(io, str(path), "w") as stream:
        for k, _ in enumerate(stream.steps(steps)):
            u, v = gray_scott_step(du, k)
            stream.write("U", u, list(u.shape), [0, 0], list(u.shape))
            stream.write("V", v, list(v.shape), [0, 0], list(v.shape))
            if k == 0:
                stream.write_attribute("Du", du)
                stream.write_attribute("units", "mol/m^3", "U")


def adios_profiles() -> set[Path]:
    """The profiles ADIOS2 readers write to /tmp unless told not to (NAME_PID_profiling.json)."""
    return set(Path("/tmp").glob("*_profiling.json"))


def gray_scott_step(du: float, k: int) -> tuple[np.ndarray, np.ndarray]:
    grid = np.add.outer(np.arange(16.0), np.arange(16.0))
    return grid * du + k, grid - k * du


def test_the_docs_bp_files_give_one_sample_per_step_and_a_truncated_directory_is_a_reject(tmp_path):
    """BP5 and BP4 directories as the docs' block reads them: every step of every file a sample with the
    values written; a BP5 directory without its index (a copy cut short) is rejected, not waited on."""
    data = tmp_path / "gray-scott"
    data.mkdir()
    runs = {"run-a.bp": ("BP5", 0.2, 4), "run-b.bp": ("BP4", 0.1, 3), "run-c.bp": ("BP5", 0.3, 2)}
    for name, (engine, du, steps) in runs.items():
        write_gray_scott(data / name, engine, steps, du)
    (data / "run-c.bp" / "md.idx").unlink()
    before = adios_profiles()
    meta, rejects = run_data_steps(tmp_path, docs_block("format: adios2"), data)
    assert adios_profiles() == before  # no reader left its profile in /tmp (ADIOS2's default per open)
    assert meta["counts"]["records"] == 7, meta["counts"]
    assert [Path(r["path"]).name for r in rejects] == ["run-c.bp"] and "no md.idx" in rejects[0]["reason"]
    records = merged_records(tmp_path / "work" / "merged" / "metadata.json", "UV", "Du")
    stats = meta["statistics"]
    got = set()
    for uv, du_norm, sample_id in zip(records["UV"], records["Du"], records["sample_id"], strict=True):
        du = float(du_norm * stats["Du"]["std"] + stats["Du"]["mean"])
        name, step = sample_id.decode().rsplit("#", 1)
        uv = uv * np.asarray(stats["UV"]["std"]) + np.asarray(stats["UV"]["mean"])
        u, v = gray_scott_step(runs[f"{name}.bp"][1], int(step))
        np.testing.assert_allclose(uv, np.stack([u, v], axis=-1), rtol=1e-5, atol=1e-6)
        assert du == pytest.approx(runs[f"{name}.bp"][1])
        got.add((name, int(step)))
    assert got == {("run-a", k) for k in range(4)} | {("run-b", k) for k in range(3)}


def test_bp_variables_that_change_shape_are_read_per_step_and_local_arrays_are_refused(tmp_path):
    import adios2

    path = tmp_path / "lammps.bp"
    with adios2.Stream(str(path), "w") as stream:
        for k, _ in enumerate(stream.steps(3)):
            atoms = np.arange(3 * (k + 2), dtype=np.float64).reshape(k + 2, 3)
            stream.write("atoms", atoms, list(atoms.shape), [0, 0], list(atoms.shape))
            stream.write("block", np.ones(4), [], [], [4])  # a local array: no global shape
    with READERS["adios2"].open(path) as f:
        assert f.shape("atoms") == (3, 2, 3) and f.dims("atoms")[0] == "step"
        for k in range(3):
            np.testing.assert_array_equal(
                f.read("atoms", (slice(k, k + 1),))[0], np.arange(3 * (k + 2)).reshape(-1, 3)
            )
        with pytest.raises(SampleError, match="changes shape between steps"):
            f.read("atoms", (slice(0, 3),))
        with pytest.raises(SampleError, match="variable 'block' is a local array"):
            f.shape("block")
        with pytest.raises(SampleError, match="no global attribute 'Du'"):
            f.attribute("Du")


SCHEMES = ("ngp", "cic", "tsc")


def brute_force(
    positions: np.ndarray, cells: tuple[int, ...], box: float, scheme: str, weights: np.ndarray
) -> np.ndarray:
    """Each particle against each cell, from the kernels' definitions (periodic distances in cell units)."""

    def kernel(d: np.ndarray) -> np.ndarray:
        d = np.abs(d)
        if scheme == "ngp":
            return (d < 0.5).astype(float)
        if scheme == "cic":
            return np.clip(1 - d, 0, None)
        return np.where(d < 0.5, 0.75 - d**2, np.where(d < 1.5, 0.5 * (1.5 - d) ** 2, 0.0))

    grid = np.zeros(cells)
    u = positions / box * np.asarray(cells)
    for index in product(*(range(c) for c in cells)):
        share = weights.copy()
        for k, i in enumerate(index):
            d = u[:, k] - (i + 0.5)
            d = (d + cells[k] / 2) % cells[k] - cells[k] / 2  # the nearest periodic image
            share = share * kernel(d)
        grid[index] = share.sum()
    return grid


@pytest.mark.parametrize("scheme", SCHEMES)
def test_deposit_agrees_with_a_brute_force_sum_and_keeps_the_total_weight(scheme):
    rng = np.random.default_rng(7)
    cells = (6, 5, 4)
    positions = rng.random((300, 3)) * 2.0 - 0.5  # some outside [0, 1): wrapped
    weights = rng.random(300)
    grid = deposit(positions, cells, 1.0, scheme=scheme, weights=weights)
    inside = np.mod(positions, 1.0)
    np.testing.assert_allclose(grid, brute_force(inside, cells, 1.0, scheme, weights), rtol=1e-10, atol=1e-12)
    assert grid.sum() == pytest.approx(weights.sum(), rel=1e-12)
    grid32 = deposit(positions, cells, 1.0, scheme=scheme, weights=weights, dtype=np.float32)
    assert grid32.dtype == np.float32 and grid32.sum() == pytest.approx(weights.sum(), rel=1e-6)


def test_ngp_at_cell_centres_counts_particles_and_a_non_periodic_box_refuses_outsiders():
    rng = np.random.default_rng(3)
    cells = rng.integers(0, 8, (500, 2))
    centres = (cells + 0.5) / 8 * 4.0  # a box of 4 over 8 cells, origin -2
    counts = np.histogram2d(cells[:, 0], cells[:, 1], bins=8, range=[[0, 8]] * 2)[0]
    for scheme, periodic in (("ngp", False), ("cic", True)):  # at its centre CIC gives a particle to its cell
        grid = deposit(centres - 2.0, (8, 8), 4.0, origin=-2.0, scheme=scheme, periodic=periodic)
        np.testing.assert_array_equal(grid, counts)
    edge = np.array([[0.01, 3.99]])  # near the edges: the kernel's reach past them stays in the edge cells
    assert deposit(edge, (8, 8), 4.0, scheme="tsc", periodic=False).sum() == pytest.approx(1.0)
    with pytest.raises(ValueError, match=r"1 of 2 particles outside the box \[\[0.0, 0.0\], \[4.0, 4.0\]\)"):
        deposit(np.array([[1.0, 1.0], [4.5, 1.0]]), (8, 8), 4.0, periodic=False)


def test_deposit_config_names_declared_fields_and_matching_lengths(tmp_path):
    source = {"fields": {"pos": {"path": "p", "shape": [None, 3]}, "box": {"attr": "BoxSize"}}}
    good = {"density": {"positions": "pos", "shape": [8, 8, 8], "box": "box"}}
    config = make_config(
        tmp_path,
        source=source,
        convert={
            "features": ["density"],
            "labels": ["box"],
            "log1p": ["density"],
            "normalise": ["density"],
            "per_channel": [],
            "deposit": good,
        },
    )
    assert config["convert"]["deposit"]["density"]["scheme"] == "cic"
    for bad, message in (
        (
            {"positions": "nope", "shape": [8, 8, 8], "box": 1.0},
            r"deposit.density.positions': 'nope' not declared",
        ),
        ({"positions": "pos", "shape": [8, 8, 8], "box": [1.0, 2.0]}, "2 values for a 3-d grid"),
        ({"positions": "pos", "shape": [8, 8, 8], "box": 1.0, "weights": "w"}, "weights': 'w' not declared"),
    ):
        with pytest.raises(Sim2dlError, match=message):
            make_config(
                tmp_path,
                source=source,
                convert={
                    "features": ["density"],
                    "labels": ["box"],
                    "log1p": [],
                    "normalise": [],
                    "per_channel": [],
                    "deposit": {"density": bad},
                },
            )


def test_h5py_netcdf4_and_openpmd_api_read_in_one_process(tmp_path):
    """The wheels bring their own HDF5 builds (h5py's, netCDF4's, openPMD-api's) and ADIOS2: reading
    through each in turn, in one process, gives every file's values (no symbol clash)."""
    import netCDF4

    with h5py.File(tmp_path / "a.h5", "w") as f:
        f["x"] = np.arange(5.0)
    with netCDF4.Dataset(tmp_path / "b.nc", "w") as nc:
        nc.createDimension("t", 3)
        nc.createVariable("y", "f8", ("t",))[:] = [1.0, 2.0, 3.0]
    write_series(str(tmp_path / "c.h5"), [7], "group_based")
    write_gray_scott(tmp_path / "d.bp", "BP5", 2, 0.5)
    for _ in range(2):
        with h5py.File(tmp_path / "a.h5", "r") as f:
            assert f["x"][()].sum() == 10.0
        with netCDF4.Dataset(tmp_path / "b.nc") as nc:
            assert float(nc["y"][:].sum()) == 6.0
        with READERS["openpmd"].open(tmp_path / "c.h5") as f:
            assert f.read("iteration", ()).tolist() == [7]
        with READERS["adios2"].open(tmp_path / "d.bp") as f:
            np.testing.assert_array_equal(f.read("U", (slice(1, 2),))[0], gray_scott_step(0.5, 1)[0])
    shutil.rmtree(tmp_path / "d.bp")


def test_inspect_recognises_a_variable_based_openpmd_series_and_its_config_runs(tmp_path):
    """A BP5 directory whose root attribute says openPMD: one sample per iteration, format openpmd, the mesh
    as the feature, time as the label, the electrons' deposit onto the mesh's grid offered; the written
    config ingests every iteration."""
    data = tmp_path / "diags"
    data.mkdir()
    write_series(str(data / "series.bp5"), [0, 10, 20, 30, 40], "variable_based")
    before = adios_profiles()
    config = inspected(tmp_path, data)
    source = config["source"]
    assert source["format"] == "openpmd" and source["samples_along"] == "iteration"
    assert source["fields"]["E"] == {"path": "meshes/E", "dtype": "float64", "shape": [16, 16, 3]}
    assert source["fields"]["position"]["shape"] == [None, 2]
    assert config["convert"]["features"] == ["E"] and config["convert"]["labels"] == ["time"]
    text = (tmp_path / "inspected.yaml").read_text()
    assert (
        "convert.deposit: {electrons_density: {positions: position, weights: weighting, shape: [16, 16]"
        in text
    )
    meta = run_written_config(tmp_path, config)
    assert meta["counts"]["records"] == 5 and meta["feature_spec"]["E"]["shape"] == [16, 16, 3]
    assert adios_profiles() == before  # openPMD-api's ADIOS2 engines told not to profile either


def write_gadget(path: Path, omega: float, seed: int, particles: int = 600) -> None:
    """A Gadget-4 style snapshot (as Gadget, AREPO and SWIFT write them): Header attributes, PartType1
    coordinates in a periodic box of 100 Mpc/h and their IDs."""
    rng = np.random.default_rng(seed)
    with h5py.File(path, "w") as f:
        header = f.create_group("Header")
        header.attrs.update(
            {
                "BoxSize": 100.0,
                "Omega0": omega,
                "OmegaLambda": 1 - omega,
                "HubbleParam": 0.7,
                "Redshift": 0.0,
                "NumPart_ThisFile": np.array([0, particles, 0, 0, 0, 0]),
            }
        )
        group = f.create_group("PartType1")
        group["Coordinates"] = (rng.random((particles, 3)) * 100.0).astype(np.float32)
        group["ParticleIDs"] = np.arange(particles, dtype=np.uint64)


def gadget_snapshots(data: Path) -> list[float]:
    data.mkdir()
    omegas = [0.25, 0.28, 0.31, 0.34]
    for k, omega in enumerate(omegas):
        write_gadget(data / f"snap_{k:03d}.hdf5", omega, k, particles=500 + 50 * k)
    return omegas


def test_inspect_grids_gadget_snapshots_as_the_docs_config_does(tmp_path):
    gadget_snapshots(tmp_path / "snapshots")
    config = inspected(tmp_path, tmp_path / "snapshots")
    convert = config["convert"]
    documented = docs_block("PartType1/Coordinates")
    assert convert["deposit"] == documented["convert"]["deposit"]
    assert convert["features"] == ["density"] and convert["log1p"] == ["density"]
    assert convert["labels"] == ["omega0", "omegalambda", "hubbleparam", "redshift"]
    assert config["source"]["samples_along"] is None  # a snapshot is one sample, whatever its particles
    for name in ("Coordinates", "box_size", "omega0"):
        assert config["source"]["fields"][name] == documented["source"]["fields"][name] | (
            {"shape": [None, 3], "dtype": "float32"} if name == "Coordinates" else {}
        )
    assert config["train"]["model"] == "cosmoflow"


def test_the_docs_gadget_config_keeps_every_particle_of_every_snapshot(tmp_path):
    omegas = gadget_snapshots(tmp_path / "snapshots")
    meta, rejects = run_data_steps(tmp_path, docs_block("PartType1/Coordinates"), tmp_path / "snapshots")
    assert meta["counts"]["records"] == 4 and not rejects
    records = merged_records(tmp_path / "work" / "merged" / "metadata.json", "density", "omega0")
    stats = meta["statistics"]
    found = {}
    for density, omega in zip(records["density"], records["omega0"], strict=True):
        grid = np.expm1(density * stats["density"]["std"] + stats["density"]["mean"])
        found[round(float(omega * stats["omega0"]["std"] + stats["omega0"]["mean"]), 2)] = grid.sum()
    assert sorted(found) == omegas
    for k, omega in enumerate(omegas):  # every particle on the grid (float32 grid after log1p and back)
        assert found[omega] == pytest.approx(500 + 50 * k, rel=1e-3)


def test_a_species_over_max_rows_is_refused_or_sampled_the_same_way_every_time(tmp_path):
    from pipeline.formats.readers.base import FieldSpec

    write_series(str(tmp_path / "series.h5"), [0, 100, 200], "group_based")  # 40, 50 and 60 particles
    spec = {"path": "particles/electrons/position", "shape": [None, 2], "max_rows": 45}
    refuse = FieldSpec.from_config("position", spec)
    draw = FieldSpec.from_config("position", {**spec, "over_max_rows": "sample"})
    with READERS["openpmd"].open(tmp_path / "series.h5") as f:
        assert f.samples(refuse, 0, 0, 1).shape == (1, 40, 2)  # under the limit: whole
        with pytest.raises(SampleError, match="50 rows, more than max_rows 45"):
            f.samples(refuse, 0, 1, 2)
        drawn = f.samples(draw, 0, 2, 3)[0]
        again = f.samples(draw, 0, 2, 3)[0]
        whole = f.read("particles/electrons/position", (slice(2, 3),))[0]
    assert drawn.shape == (45, 2)
    np.testing.assert_array_equal(drawn, again)  # the same rows every time
    rows = [int(np.flatnonzero((whole == row).all(axis=1))[0]) for row in drawn]
    assert rows == sorted(rows) and len(set(rows)) == 45  # rows of the species, in order, none twice


def test_an_unfinished_bp_file_is_read_without_waiting_and_disagreeing_components_are_a_reject(tmp_path):
    """A writer killed before it closed its BP5 file (as a crashed simulation leaves it): the steps it
    ended are read at once, no wait for a writer that will not come. An openPMD mesh whose components
    disagree in shape is left out by openPMD-api itself (with a warning): a reject for that iteration
    naming the record and why it may be missing."""
    import subprocess
    import sys

    import openpmd_api as io

    writer = (
        "import adios2, numpy as np, os, sys\ns = adios2.Stream(sys.argv[1], 'w')\nfor i in range(3):\n    "
        "s.begin_step(); s.write('U', np.full((4, 4), float(i)), [4, 4], [0, 0], [4, 4]); "
        "s.end_step()\nos._exit(0)\n"
    )
    subprocess.run([sys.executable, "-c", writer, str(tmp_path / "crashed.bp")], check=True, timeout=60)
    with READERS["adios2"].open(tmp_path / "crashed.bp") as f:
        np.testing.assert_array_equal(f.read("U", (slice(0, 3),))[:, 0, 0], [0.0, 1.0, 2.0])

    series = io.Series(str(tmp_path / "odd.h5"), io.Access.create)
    it = series.write_iterations()[5]
    for c, shape in (("x", (4, 4)), ("y", (4, 5))):
        values = np.zeros(shape)
        it.meshes["B"][c].reset_dataset(io.Dataset(values.dtype, values.shape))
        it.meshes["B"][c].store_chunk(values)
    it.close()
    series.close()
    with READERS["openpmd"].open(tmp_path / "odd.h5") as f, pytest.raises(SampleError) as refused:
        f.read("meshes/B", (slice(0, 1),))
    assert "no record 'meshes/B' in iteration 5" in str(refused.value)
    assert "components of different shapes" in str(refused.value)


def test_a_root_jagged_branch_over_max_rows_is_drawn_per_entry(tmp_path):
    """max_rows applies to every reader's samples: ROOT's jagged entries too (one draw per entry)."""
    import awkward as ak
    import uproot

    from pipeline.formats.readers.base import FieldSpec

    with uproot.recreate(tmp_path / "events.root") as f:
        tree = f.mktree("events", {"px": "var * float64"})
        tree.extend({"px": ak.Array([np.arange(n, dtype="f8") for n in (3, 9, 12)])})
    field = FieldSpec.from_config(
        "px", {"path": "events/px", "shape": [None], "max_rows": 5, "over_max_rows": "sample"}
    )
    with READERS["root"].open(tmp_path / "events.root") as f:
        entries = f.samples(field, 0, 0, 3)
        again = f.samples(field, 0, 1, 3)
    assert [len(e) for e in entries] == [3, 5, 5]
    np.testing.assert_array_equal(entries[0], [0.0, 1.0, 2.0])
    assert all(np.all(np.diff(e) > 0) for e in entries)  # rows kept in their order, none twice
    np.testing.assert_array_equal(entries[2], again[1])  # the entry's own draw, whatever range read it


def test_inspect_takes_a_series_numeric_attributes_as_its_labels_and_the_config_runs(tmp_path):
    """examples/laser/simulate.py records each run's parameters as series attributes (as simulators do
    beside their output): inspect maps them as {attr: NAME} fields and makes them the labels (not the
    series' bookkeeping attributes, nor time); the written config carries every run's values to the shards."""
    import subprocess
    import sys

    from .conftest import REPO

    data = tmp_path / "runs"
    runs = {0: (1.5, 5.0, 18.0), 1: (2.5, 6.0, 22.0), 2: (3.5, 7.0, 26.0)}
    for k, (a0, waist, duration) in runs.items():
        subprocess.run(
            [
                sys.executable,
                str(REPO / "examples" / "laser" / "simulate.py"),
                "--a0",
                str(a0),
                "--waist",
                str(waist),
                "--duration",
                str(duration),
                "--seed",
                str(k),
                "--out",
                str(data / f"run-{k}"),
            ],
            check=True,
            capture_output=True,
        )
    config = inspected(tmp_path, data)
    assert config["convert"]["labels"] == ["a0", "duration", "waist"]
    assert config["source"]["fields"]["a0"] == {"attr": "a0"} and "date" not in config["source"]["fields"]
    meta = run_written_config(
        tmp_path, {**config, "merge": {**config["merge"], "splits": {}, "format": "hdf5"}}
    )
    stats = meta["statistics"]
    found = merged_records(tmp_path / "work" / "merged" / "metadata.json", "a0")
    a0 = sorted({round(float(v) * stats["a0"]["std"] + stats["a0"]["mean"], 4) for v in found["a0"]})
    assert a0 == [1.5, 2.5, 3.5] and meta["counts"]["records"] == len(found["a0"]) > 3

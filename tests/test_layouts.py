"""Real output as it comes (source.samples_along, attributes, labels tables, path groups, categorical
labels, Zarr): files written with the real libraries, through ingest -> convert -> merge, with exact
counts and values read back from the shards."""

from __future__ import annotations

import json
import re
from pathlib import Path

import numpy as np
import pytest

from pipeline.data.tables import read_csv, read_rows
from pipeline.formats.readers import FieldSpec
from pipeline.formats.shards.shard_reader import ShardReader
from pipeline.steps.ingest.samples import FileOpener, SamplePlan
from pipeline.steps.ingest.step import ingest
from pipeline.steps.inspect import decide, inspect, survey

from .conftest import SLOW, run_cli, snakemake_configfile, write_config
from .helpers import CMIP_SOURCE, MODELS, data_half, layout_config, records_by_id, ta_values, write_cmip_like


def test_netcdf_one_sample_per_time_step_with_the_model_as_class(tmp_path, serial):
    root = tmp_path / "cmip"
    write_cmip_like(root)
    config = layout_config(tmp_path, {**CMIP_SOURCE, "path": str(root)}, ["ta"], ["model"])
    summary, meta = data_half(config, root, tmp_path, serial)
    total = sum(MODELS.values())
    assert (summary["inputs"], summary["samples"], summary["accepted"], summary["rejected"]) == (
        3,
        total,
        total,
        0,
    )
    assert meta["classes"] == {"model": ["MODEL-A", "MODEL-B", "MODEL-C"]}
    assert meta["feature_spec"]["model"]["dtype"] == "int64" and meta["feature_spec"]["model"]["shape"] == []
    records = records_by_id(tmp_path / "work" / "merged")
    assert len(records) == total
    for k, (model, steps) in enumerate(MODELS.items()):
        expected = ta_values(k, steps)
        for t in range(steps):
            record = records[f"ta_{model}#{t}"]
            np.testing.assert_array_equal(record["ta"], expected[t])
            assert int(record["model"]) == sorted(MODELS).index(model)
    provenance = read_rows(tmp_path / "work" / "merged" / "provenance")
    assert sorted((Path(r["source"]).name, r["index"]) for r in provenance) == sorted(
        (f"ta_{m}.nc", t) for m, n in MODELS.items() for t in range(n)
    )
    assert ShardReader(tmp_path / "work" / "merged").classes == meta["classes"]


@SLOW
def test_ranks_take_ranges_of_one_files_samples_and_the_shards_do_not_depend_on_them(tmp_path):
    """One file of 40 samples and one of 3, on 1 and 3 ranks (the large file spread over all three):
    byte-identical shards, the same classes, and every rank wrote part of the large file."""
    import netCDF4

    root = tmp_path / "two"
    root.mkdir()
    for name, steps, model in (("big", 40, "Z"), ("small", 3, "A")):
        with netCDF4.Dataset(root / f"{name}.nc", "w") as ds:
            ds.createDimension("time", steps)
            ds.createDimension("x", 5)
            ds.createVariable("v", "f4", ("time", "x"))[:] = np.arange(steps * 5, dtype="f4").reshape(
                steps, 5
            )
            ds.source_id = model
    fields = {
        "v": {"path": "v", "dtype": "float32", "shape": [5]},
        "model": {"attr": "source_id", "categorical": True},
    }
    source = {"path": str(root), "glob": "*.nc", "samples_along": "time", "fields": fields}
    shards = {}
    for ranks in (1, 3):
        run = tmp_path / f"r{ranks}"
        run.mkdir()
        config = layout_config(run, source, ["v"], ["model"], merge={"shard_size_mb": 0.0005})
        config_path = write_config(run, config)
        for step in ("ingest", "convert", "merge"):
            run_cli([step, "--config", str(config_path)], ranks=ranks)
        merged = Path(config["workdir"]) / "merged"
        shards[ranks] = [p.read_bytes() for p in sorted((merged / "shards").glob("*.tfrecord"))]
        assert json.loads((merged / "metadata.json").read_text())["classes"] == {"model": ["A", "Z"]}
        manifest = read_rows(Path(config["workdir"]) / "ingest" / "manifest")
        assert sorted(r["index"] for r in manifest if r["path"].endswith("big.nc")) == list(range(40))
    assert len(shards[1]) > 1 and shards[1] == shards[3]
    plan = SamplePlan.make(np.array([40, 3]), sample_bytes=20, shard_bytes=500, ranks=3)
    assert all(0 in plan.files_of(plan.rank_samples(r)) for r in range(3))  # every rank reads part of big.nc


def test_unit_plan_covers_every_unit_once():
    # 0: cannot happen (an empty file is one rejected number), kept as a guard
    numbers = np.array([5, 1, 250, 0, 7])
    for ranks in (1, 2, 3, 7):
        plan = SamplePlan.make(np.maximum(numbers, 1), sample_bytes=1000, shard_bytes=16_000, ranks=ranks)
        covered = [u for r in range(ranks) for u in plan.rank_samples(r)]
        assert covered == list(range(plan.total))
        for r in range(ranks):
            mine = plan.rank_samples(r)
            if len(mine):
                files = plan.files_of(mine)
                assert plan.starts[files.start] <= mine.start and mine.stop <= plan.starts[files.stop]


def write_jag_like(root: Path) -> None:
    """HDF5 bundles with a leading axis of ensemble members, a run per file (LLNL JAG style)."""
    import h5py

    root.mkdir()
    for run in range(4):
        with h5py.File(root / f"bundle_{run:03d}.h5", "w") as f:
            images = np.full((6, 8, 8, 2), run, "f4") + np.arange(6, dtype="f4")[:, None, None, None]
            if run == 1:
                images[4, 0, 0, 0] = np.nan  # one member whose values are not finite
            f.create_dataset("images", data=images, chunks=(1, 8, 8, 2))
            f.create_dataset("scalars", data=np.arange(6 * 3, dtype="f4").reshape(6, 3) + 100 * run)
            # per-file: repeated for each sample
            f.create_dataset("mesh", data=np.linspace(0, 1, 8, dtype="f4"))
            f.attrs["code"] = "hydra"
    with h5py.File(root / "bundle_004.h5", "w") as f:  # its fields disagree along the axis
        f.create_dataset("images", data=np.zeros((6, 8, 8, 2), "f4"))
        f.create_dataset("scalars", data=np.zeros((5, 3), "f4"))
        f.create_dataset("mesh", data=np.zeros(8, "f4"))
    (root / "runs.csv").write_text(
        # run 2 twice, run 3 missing
        "run,omega,process\n0,0.25,qcd\n1,0.30,ttbar\n2,0.35,qcd\n2,0.36,qcd\n4,0.5,zll\n"
    )


def test_hdf5_leading_axis_with_a_labels_table_and_path_groups(tmp_path, serial):
    root = tmp_path / "jag"
    write_jag_like(root)
    source = {
        "path": str(root),
        "glob": "*.h5",
        "samples_along": 0,
        "labels_table": {"path": "runs.csv", "key": "run", "match": "run"},
        "path_pattern": r"bundle_(?P<run>\d+)\.h5",
        "fields": {
            "images": {"path": "images", "dtype": "float32", "shape": [8, 8, 2]},
            "scalars": {"path": "scalars", "shape": [3]},
            "mesh": {"path": "mesh", "shape": [8]},
            "run": {"path_group": "run", "dtype": "int64"},
            "omega": {"column": "omega", "dtype": "float32"},
            "process": {"column": "process", "categorical": True},
        },
    }
    config = layout_config(
        tmp_path,
        source,
        ["images"],
        ["scalars", "mesh", "run", "omega", "process"],
        ingest={"max_reject_fraction": 0.9, "batch_mb": 0.001},
    )
    summary, meta = data_half(config, root, tmp_path, serial)
    # 4 bundles of 6 and one whose fields disagree (one number): 25 samples found
    assert summary["samples"] == 25 and summary["accepted"] + summary["rejected"] == 25
    # run 0, run 1 without its NaN member; run 2 (duplicated row), run 3 (no row)
    assert summary["accepted"] == 6 + 5
    assert meta["classes"] == {"process": ["qcd", "ttbar"]}
    reasons = {
        (Path(r["path"]).name, r["sample_id"]): r["reason"]
        for r in read_csv(tmp_path / "work/ingest/rejects.csv")
    }
    assert "non-finite" in reasons[("bundle_001.h5", "bundle_001#4")]
    assert "2 rows of runs.csv have run = '002'" in reasons[("bundle_002.h5", "bundle_002#0")]
    assert "no row of runs.csv has run = '003'" in reasons[("bundle_003.h5", "bundle_003#5")]
    assert "disagree in length along 0: images=6, scalars=5" in reasons[("bundle_004.h5", "")]
    assert len(reasons) == 14
    records = records_by_id(tmp_path / "work" / "merged")
    assert sorted(records) == sorted(
        [f"bundle_000#{i}" for i in range(6)] + [f"bundle_001#{i}" for i in (0, 1, 2, 3, 5)]
    )
    record = records["bundle_001#3"]
    np.testing.assert_array_equal(record["images"], np.full((8, 8, 2), 1 + 3, "f4"))
    np.testing.assert_array_equal(record["scalars"], np.arange(9, 12, dtype="f4") + 100)
    np.testing.assert_array_equal(record["mesh"], np.linspace(0, 1, 8, dtype="f4"))
    assert record["run"] == 1 and record["omega"] == np.float32(0.30) and record["process"] == 1
    # one value per sample
    assert record["run"].shape == record["omega"].shape == record["process"].shape == ()
    assert meta["feature_spec"]["omega"]["shape"] == meta["feature_spec"]["run"]["shape"] == []
    assert records["bundle_000#0"]["process"] == 0


def test_batches_read_hyperslabs_within_the_batch_size(tmp_path):
    """A file's samples are read a bounded range at a time (never the whole variable)."""
    root = tmp_path / "jag"
    write_jag_like(root)
    fields = [
        FieldSpec("images", "images", "float32", (8, 8, 2)),
        FieldSpec("scalars", "scalars", None, (3,)),
    ]
    source = {"samples_along": 0, "fields": {"images": {"path": "images"}, "scalars": {"path": "scalars"}}}
    source = layout_config(tmp_path, source, ["images"], ["scalars"])["source"]
    samples = FileOpener(root, source, fields).open(str(root / "bundle_000.h5"))
    sample_bytes = 8 * 8 * 2 * 4 + 3 * 4
    with samples.opened:
        read = [(start, count, batch) for start, count, batch in samples.batches(0, 6, 2 * sample_bytes)]
    assert [count for _, count, _ in read] == [1, 2, 2, 1]
    samples = FileOpener(root, source, fields).open(str(root / "bundle_000.h5"))
    with samples.opened:  # a large budget: the ranges still grow at most 16-fold (1, then the 5 left)
        assert [count for _, count, _ in samples.batches(0, 6, 10**9)] == [1, 5]
    for start, count, batch in read:
        assert batch["images"].shape == (count, 8, 8, 2)
        np.testing.assert_array_equal(
            batch["images"][:, 0, 0, 0], np.arange(start, start + count, dtype="f4")
        )


def test_root_one_sample_per_event_with_jagged_branches(tmp_path, serial):
    import awkward as ak
    import uproot

    root = tmp_path / "events"
    root.mkdir()
    lengths = {"qcd_0.root": [3, 0, 5, 2], "ttbar_0.root": [1, 4], "zll_7.root": [2, 2, 2]}
    for name, ns in lengths.items():
        with uproot.recreate(root / name) as f:
            tree = f.mktree("events", {"px": "var * float32", "nparticles": "int32", "met": "float32"})
            tree.extend(
                {
                    "px": ak.Array([np.arange(n, dtype="f4") * (k + 1) for k, n in enumerate(ns)]),
                    "nparticles": np.array(ns, "i4"),
                    "met": np.arange(len(ns), dtype="f4"),
                }
            )
    source = {
        "path": str(root),
        "glob": "*.root",
        "samples_along": "entries",
        "path_pattern": r"(?P<process>[a-z]+)_\d+",
        "fields": {
            "px": {"path": "events/px", "dtype": "float32", "shape": [None]},
            "nparticles": {"path": "events/nparticles"},
            "process": {"path_group": "process", "categorical": True},
        },
    }
    config = layout_config(tmp_path, source, ["px"], ["nparticles", "process"])
    summary, meta = data_half(config, root, tmp_path, serial)
    assert (summary["samples"], summary["accepted"], summary["rejected"]) == (9, 9, 0)
    assert meta["classes"] == {"process": ["qcd", "ttbar", "zll"]}
    assert meta["feature_spec"]["px"]["shape"] == [None]
    records = records_by_id(tmp_path / "work" / "merged")
    for name, ns in lengths.items():
        for k, n in enumerate(ns):
            record = records[f"{Path(name).stem}#{k}"]
            np.testing.assert_array_equal(record["px"], np.arange(n, dtype="f4") * (k + 1))
            assert record["nparticles"] == n
            assert meta["classes"]["process"][int(record["process"])] == name.split("_")[0]


def test_separate_momentum_branches_stacked_into_one_feature_per_particle(tmp_path, serial):
    """Muon_Px, Muon_Py, Muon_Pz, Muon_E as ROOT files store them (one jagged branch each) become one
    (n, 4) feature (convert.stack); an event whose branches disagree in length is a reject with the reason."""
    import awkward as ak
    import uproot

    root = tmp_path / "events"
    root.mkdir()
    lengths = [3, 0, 5, 2]
    rng = np.random.default_rng(4)
    momenta = [rng.standard_normal((n, 4)).astype("f4") for n in lengths]
    branches = {
        name: [m[:, k] for m in momenta] for k, name in enumerate(("Muon_Px", "Muon_Py", "Muon_Pz", "Muon_E"))
    }
    branches["Muon_E"][3] = branches["Muon_E"][3][:1]  # a damaged event: one energy for two muons
    with uproot.recreate(root / "dy.root") as f:
        f["Events"] = {name: ak.Array(values) for name, values in branches.items()} | {
            "n": np.array(lengths, "i4")
        }
    source = {
        "path": str(root),
        "glob": "*.root",
        "samples_along": "entries",
        "fields": {
            **{
                name.split("_")[1].lower(): {"path": f"Events/{name}", "dtype": "float32", "shape": [None]}
                for name in branches
            },
            "n": {"path": "Events/n", "dtype": "int32"},
        },
    }
    config = layout_config(
        tmp_path, source, ["momenta"], ["n"], convert_stack={"momenta": ["px", "py", "pz", "e"]}
    )
    summary, meta = data_half(config, root, tmp_path, serial)
    assert (summary["samples"], summary["accepted"]) == (4, 4)
    assert meta["feature_spec"]["momenta"]["shape"] == [None, 4] and "px" not in meta["feature_spec"]
    [reject] = read_csv(tmp_path / "work" / "convert" / "rejects.csv")
    assert reject["sample_id"] == "dy#3" and "stack 'momenta': its fields' shapes differ" in reject["reason"]
    records = records_by_id(tmp_path / "work" / "merged")
    assert sorted(records) == ["dy#0", "dy#1", "dy#2"]
    for k in range(3):
        np.testing.assert_array_equal(records[f"dy#{k}"]["momenta"].reshape(-1, 4), momenta[k])


@pytest.mark.parametrize("zarr_format", [2, 3])
def test_zarr_stores_along_a_named_dimension_reading_only_the_chunks_of_a_sample(
    tmp_path, serial, zarr_format
):
    import zarr

    root = tmp_path / "stores"
    for k, model in enumerate(("M2", "M1")):
        group = zarr.create_group(store=str(root / f"run{k}.zarr"), zarr_format=zarr_format)
        names = {"dimension_names": ["time", "x", "y"]} if zarr_format == 3 else {}
        tas = group.create_array("tas", shape=(6, 4, 3), chunks=(1, 4, 3), dtype="f4", **names)
        tas[:] = np.arange(6 * 12, dtype="f4").reshape(6, 4, 3) + 1000 * k
        time = group.create_array(
            "time",
            shape=(6,),
            chunks=(6,),
            dtype="f8",
            **({"dimension_names": ["time"]} if zarr_format == 3 else {}),
        )
        time[:] = np.arange(6)
        if zarr_format == 2:
            tas.attrs["_ARRAY_DIMENSIONS"], time.attrs["_ARRAY_DIMENSIONS"] = ["time", "x", "y"], ["time"]
        group.attrs["source_id"] = model
    # A damaged chunk holds time step 2 of run1 only: that sample alone is rejected, the others are read.
    chunk = root / "run1.zarr" / "tas" / ("2.0.0" if zarr_format == 2 else "c/2/0/0")
    chunk.write_bytes(b"not a chunk" * 3)
    source = {
        "path": str(root),
        "glob": "*.zarr",
        "samples_along": "time",
        "fields": {
            "tas": {"path": "tas", "dtype": "float32", "shape": [4, 3]},
            "model": {"attr": "source_id", "categorical": True},
        },
    }
    config = layout_config(tmp_path, source, ["tas"], ["model"], ingest={"max_reject_fraction": 0.5})
    summary, meta = data_half(config, root, tmp_path, serial)
    assert (summary["inputs"], summary["samples"], summary["accepted"], summary["rejected"]) == (2, 12, 11, 1)
    assert meta["classes"] == {"model": ["M1", "M2"]}
    [reject] = read_csv(tmp_path / "work" / "ingest" / "rejects.csv")
    assert reject["sample_id"] == "run1#2" and "cannot read Zarr array 'tas'" in reject["reason"]
    records = records_by_id(tmp_path / "work" / "merged")
    np.testing.assert_array_equal(
        records["run1#3"]["tas"], np.arange(36, 48, dtype="f4").reshape(4, 3) + 1000
    )
    assert records["run0#5"]["model"] == 1


def test_categorical_classes_given_in_the_config_and_values_missing(tmp_path, serial):
    root = tmp_path / "cmip"
    write_cmip_like(root)
    fields = {
        **CMIP_SOURCE["fields"],
        "model": {"attr": "source_id", "classes": ["MODEL-C", "MODEL-B"]},
        "experiment": {"attr": "no_such_attribute"},
    }
    config = layout_config(
        tmp_path,
        {**CMIP_SOURCE, "path": str(root), "fields": fields},
        ["ta"],
        ["model"],
        ingest={"max_reject_fraction": 1.0},
    )
    summary = ingest(config, root, tmp_path / "ingest", serial)
    assert summary["accepted"] == 0 and summary["rejected"] == sum(MODELS.values())
    reasons = {r["reason"] for r in read_csv(tmp_path / "ingest" / "rejects.csv")}
    assert any("no global attribute 'no_such_attribute'" in r for r in reasons)
    del fields["experiment"]
    config = layout_config(
        tmp_path,
        {**CMIP_SOURCE, "path": str(root), "fields": fields},
        ["ta"],
        ["model"],
        ingest={"max_reject_fraction": 1.0},
    )
    summary = ingest(config, root, tmp_path / "ingest2", serial)
    assert summary["classes"] == {"model": ["MODEL-C", "MODEL-B"]}
    assert (summary["accepted"], summary["rejected"]) == (12 + 7, 5)
    reasons = {r["reason"] for r in read_csv(tmp_path / "ingest2" / "rejects.csv")}
    assert reasons == {"field 'model': value 'MODEL-A' is not one of its classes ['MODEL-C', 'MODEL-B']"}


def test_inspect_understands_cmip_like_output_and_its_config_runs_the_data_half(tmp_path):
    """Coordinates left out, 'time' proposed as the sample axis, the model's name as a class, the path as
    file id (tracking_id repeats); the written config, unedited, runs ingest -> merge as Snakemake jobs."""
    root = tmp_path / "cmip"
    write_cmip_like(root)
    text, config = inspect(str(root), write=tmp_path / "cmip.yaml")
    assert "left out: time, time_bnds, plev, lat, lat_bnds, lon: coordinate variables" in text
    assert "samples_along: 'time', one sample per index: the first dimension of ta (lengths 5, 7, 12" in text
    assert "label candidates, global attributes that differ between files: source_id (3 values" in text
    assert "sample id: FILEID#INDEX, the file id its relative path" in text
    assert config["source"]["samples_along"] == "time" and config["source"]["sample_id"] is None
    assert config["source"]["fields"] == {
        "ta": {"path": "ta", "dtype": "float32", "shape": [2, 4, 6]},
        "source_id": {"attr": "source_id", "categorical": True},
    }
    assert config["convert"]["features"] == ["ta"] and config["convert"]["labels"] == ["source_id"]
    workdir = Path(config["workdir"])
    snakemake_configfile(tmp_path / "cmip.yaml", tmp_path, str(workdir / "merged" / "metadata.json"))
    meta = json.loads((workdir / "merged" / "metadata.json").read_text())
    total = sum(MODELS.values())
    assert meta["counts"]["records"] == total and meta["counts"]["samples_found"] == total
    assert meta["classes"] == {"source_id": sorted(MODELS)}
    summary = json.loads((workdir / "ingest" / "summary.json").read_text())
    assert summary["accepted"] + summary["rejected"] == summary["samples"] == total


def test_inspect_proposes_axis_0_only_where_every_array_shares_it_and_it_varies(tmp_path):
    import h5py

    bundles, traces = tmp_path / "bundles", tmp_path / "traces"
    bundles.mkdir()
    traces.mkdir()
    for i, n in enumerate((6, 9, 6)):
        with h5py.File(bundles / f"b{i}.h5", "w") as f:  # members along axis 0, labels too
            f["images"] = np.zeros((n, 8, 8), "f4")
            f["scalars"] = np.zeros((n, 3), "f4")
            f["mesh"] = np.zeros(8, "f4")
            f["mesh"].make_scale("x")
        with h5py.File(traces / f"t{i}.h5", "w") as f:  # one variable-length trace per file, a per-file label
            f["trace"] = np.zeros((n, 4), "f4")
            f["params"] = np.zeros(3, "f4")
    bundle = decide(survey(str(bundles)))
    assert (
        bundle.samples_along == 0
        and "length the same within a file and differing between files" in bundle.lines[1]
    )
    assert bundle.sample_shapes == {"images": (8, 8), "scalars": (3,)}  # mesh: a dimension scale, left out
    trace = decide(survey(str(traces)))
    assert trace.samples_along is None and trace.sample_shapes["trace"] == (None, 4)


def test_inspect_root_events_and_zarr_stores(tmp_path):
    import uproot
    import zarr

    events = tmp_path / "events"
    events.mkdir()
    import awkward as ak

    for name in ("qcd_0.root", "ttbar_0.root"):
        with uproot.recreate(events / name) as f:
            tree = f.mktree("events", {"met": "float32", "jets": ("float32", (4,)), "px": "var * float32"})
            px = ak.Array([np.arange(n, dtype="f4") for n in (3, 0, 2, 5, 1)])
            tree.extend({"met": np.zeros(5, "f4"), "jets": np.zeros((5, 4), "f4"), "px": px})
    result = survey(str(events))
    decided = decide(result)
    assert decided.samples_along == "entries"
    # a jagged branch is a variable-length field (it was listed as "object, not numeric")
    # npx: the counter
    shapes = {"events/met": (), "events/jets": (4,), "events/npx": (), "events/px": (None,)}
    assert decided.sample_shapes == shapes
    px = next(f for f in result.fields if f.path == "events/px")
    assert (px.kind, px.dtype) == ("jagged", "float32")

    stores = tmp_path / "stores"
    for k, steps in enumerate((4, 6)):
        group = zarr.create_group(store=str(stores / f"run{k}.zarr"), zarr_format=3)
        group.create_array("tas", shape=(steps, 3, 5), dtype="f4", dimension_names=["time", "y", "x"])
        group.create_array("time", shape=(steps,), dtype="f8", dimension_names=["time"])
        group.attrs["model"] = f"M{k}"
    result = survey(str(stores))
    assert result.source.pattern == "**/*.zarr" and len(result.files) == 2
    decided = decide(result)
    assert decided.samples_along == "time" and decided.sample_shapes == {"tas": (3, 5)}
    assert decided.class_label == "model"


def test_a_file_id_repeated_across_files_rejects_the_later_samples_by_name(tmp_path, serial):
    """CMIP6 repeats tracking_id across files: FILEID#INDEX collides, the first file in order keeps each id,
    and every later sample is a reject naming the file and sample that kept it."""
    root = tmp_path / "cmip"
    write_cmip_like(root)
    config = layout_config(
        tmp_path,
        {**CMIP_SOURCE, "path": str(root), "sample_id": {"attr": "tracking_id"}},
        ["ta"],
        ["model"],
        ingest={"max_reject_fraction": 1.0},
    )
    summary = ingest(config, root, tmp_path / "ingest", serial)
    # in name order: MODEL-A (5 steps) keeps #0-4, MODEL-B (12) adds #5-11, MODEL-C (7) adds nothing
    assert (summary["samples"], summary["accepted"], summary["rejected"]) == (24, 12, 12)
    rejects = {
        (Path(r["path"]).name, r["sample_id"]): r["reason"]
        for r in read_csv(tmp_path / "ingest" / "rejects.csv")
    }
    first_a = str(root / "ta_MODEL-A.nc")
    assert rejects[("ta_MODEL-C.nc", "hdl:21.14100/same-everywhere#6")] == (
        f"duplicate sample id 'hdl:21.14100/same-everywhere#6' (first seen in {root / 'ta_MODEL-B.nc'} "
        "(sample 6))"
    )
    assert rejects[("ta_MODEL-B.nc", "hdl:21.14100/same-everywhere#0")].endswith(
        f"(first seen in {first_a} (sample 0))"
    )
    manifest = read_rows(tmp_path / "ingest" / "manifest")
    assert sum(r["status"] == "accepted" for r in manifest) == 12 and len(manifest) == 24


def test_a_parquet_run_table_matched_by_file_id_under_snakemake_and_ingest_reruns_when_it_changes(tmp_path):
    """One sample per file, labels from a Parquet table beside the data matched by the file id (its relative
    path); the table is an input of the ingest rule: rewriting it reruns ingest."""
    import h5py
    import pyarrow as pa
    import pyarrow.parquet as pq

    root = tmp_path / "runs"
    root.mkdir()
    for name in ("run-a", "run-b", "run-c"):
        with h5py.File(root / f"{name}.h5", "w") as f:
            f["density"] = np.full((4, 4, 4), ord(name[-1]), "f4")
    pq.write_table(
        pa.table({"file": ["run-c", "run-a", "run-b"], "sigma8": [0.9, 0.7, 0.8]}), root / "runs.parquet"
    )
    fields = {"density": {"path": "density", "shape": [4, 4, 4]}, "sigma8": {"column": "sigma8"}}
    source = {
        "path": str(root),
        "glob": "*.h5",
        "labels_table": {"path": "runs.parquet", "key": "file"},
        "fields": fields,
    }
    config = layout_config(tmp_path, source, ["density"], ["sigma8"], simulate={"enabled": False})
    config_path = write_config(tmp_path, config)
    metadata = Path(config["workdir"]) / "merged" / "metadata.json"
    snakemake_configfile(config_path, tmp_path, str(metadata))
    records = records_by_id(metadata.parent)
    assert {k: round(float(r["sigma8"]), 6) for k, r in records.items()} == {
        "run-a": 0.7,
        "run-b": 0.8,
        "run-c": 0.9,
    }
    assert float(records["run-b"]["density"][0, 0, 0]) == ord("b")
    pq.write_table(pa.table({"file": ["run-a", "run-b"], "sigma8": [0.6, 0.7]}), root / "runs.parquet")
    dry = snakemake_configfile(config_path, tmp_path, "-n", str(metadata))
    assert re.search(r"\bingest\b", dry.stdout) and re.search(r"\bmerge\b", dry.stdout)


@pytest.mark.parametrize("split_by", ["sample", "file"])
def test_splits_by_file_keep_a_files_samples_together(tmp_path, serial, split_by):
    """merge.split_by file: every time step of one model lands in one split (no temporal leak between
    training and validation); by sample, the steps of a file are spread over both."""
    root = tmp_path / "cmip"
    write_cmip_like(root)
    config = layout_config(
        tmp_path,
        {**CMIP_SOURCE, "path": str(root)},
        ["ta"],
        ["model"],
        merge={"splits": {"train": 0.5, "validation": 0.5}, "split_by": split_by},
    )
    _, meta = data_half(config, root, tmp_path, serial)
    merged = tmp_path / "work" / "merged"
    files_in = {
        split: {name.split("#")[0] for name in (r["sample_id"] for r in ShardReader(merged, split))}
        for split in ("train", "validation")
    }
    assert sum(meta["splits"][s]["records"] for s in files_in) == sum(MODELS.values())
    shared = files_in["train"] & files_in["validation"]
    if split_by == "file":
        assert not shared and files_in["train"] and files_in["validation"]
        assert meta["split_assignment"].startswith("xxh3_64(file id")
    else:
        assert shared  # 24 samples of 3 files hashed one by one: some file is in both


def test_a_channels_first_field_is_stored_fields_last_from_every_read_path(tmp_path, serial):
    """source.fields.NAME.channel_axis: arrays written channels first, as PyTorch-world datasets and many
    solvers write them, (N, time, field, y, x) in one file read along axis 0 and (field, y, x) a file each,
    become records with the fields last, (time, y, x, field) and (y, x, field), value for value; a shape
    is declared as stored; a channel axis outside it, or on a value that is not an array, is refused by
    key."""
    import h5py

    from pipeline import Sim2dlError
    from pipeline.formats.readers.base import check_source_fields

    from .helpers import data_half, layout_config, records_by_id

    rng = np.random.default_rng(5)
    many = rng.normal(size=(3, 4, 2, 6, 5)).astype(np.float32)  # (N, time, field, y, x)
    root = tmp_path / "data"
    root.mkdir()
    with h5py.File(root / "trajectories.h5", "w") as f:
        f["fields"] = many
    source = {
        "glob": "*.h5",
        "samples_along": 0,
        "fields": {"state": {"path": "fields", "dtype": "float32", "shape": [4, 2, 6, 5], "channel_axis": 1}},
    }
    config = layout_config(tmp_path, source, ["state"], [], merge={"splits": {}})
    _, meta = data_half(config, root, tmp_path, serial)
    assert meta["feature_spec"]["state"]["shape"] == [4, 6, 5, 2]
    records = sorted(records_by_id(tmp_path / "work" / "merged").items())
    assert len(records) == 3
    for (_, record), stored in zip(records, many, strict=True):
        np.testing.assert_array_equal(np.asarray(record["state"]), np.moveaxis(stored, 1, -1))

    single = tmp_path / "single"
    single.mkdir()
    for i in range(2):
        np.save(single / f"s{i}.npy", many[i, 0])  # (field, y, x)
    source = {"glob": "*.npy", "fields": {"state": {"path": ".", "dtype": "float32", "channel_axis": 0}}}
    config = layout_config(tmp_path / "one", source, ["state"], [], merge={"splits": {}})
    (tmp_path / "one").mkdir()
    _, meta = data_half(config, single, tmp_path / "one", serial)
    assert meta["feature_spec"]["state"]["shape"] == [6, 5, 2]
    for name, record in records_by_id(tmp_path / "one" / "work" / "merged").items():
        i = int(str(name)[-1])
        np.testing.assert_array_equal(np.asarray(record["state"]), np.moveaxis(many[i, 0], 0, -1))

    # inspect proposes the move where a short axis stands before a grid's longer ones
    first = tmp_path / "fields-first"
    first.mkdir()
    for i in range(3):
        with h5py.File(first / f"s{i}.h5", "w") as f:
            f["fields"] = rng.normal(size=(3, 32, 24)).astype(np.float32)
            f["params"] = np.array([i, 2 * i], np.float32)
    _, proposed = inspect(str(first), write=tmp_path / "first.yaml")
    assert proposed["source"]["fields"]["fields"] == {
        "path": "fields",
        "dtype": "float32",
        "shape": [3, 32, 24],
        "channel_axis": 0,
    }
    assert proposed["train"]["model"] == "unet2d"  # chosen for (32, 24, 3): fields last

    bad = {"fields": {"state": {"path": "fields", "shape": [2, 6], "channel_axis": 2}}}
    with pytest.raises(Sim2dlError, match=r"source\.fields\.state\.channel_axis.*not an axis"):
        check_source_fields(bad, config["convert"])
    bad = {"labels_table": "runs.csv", "fields": {"state": {"column": "a", "channel_axis": 0}}}
    with pytest.raises(Sim2dlError, match=r"source\.fields\.state\.channel_axis.*only an array"):
        check_source_fields(bad, config["convert"])

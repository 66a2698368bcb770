"""ingest on good and bad input, every format, and the accounting: accepted + rejected = inputs."""

import os
import re
import shutil
import subprocess
import tempfile
from pathlib import Path

import h5py
import numpy as np
import pytest

from pipeline import Sim2dlError
from pipeline.data.tables import read_csv, read_rows
from pipeline.formats.parts import Part
from pipeline.formats.readers import SampleError
from pipeline.steps.ingest.step import ingest

from .conftest import BIN, env, make_config, run_cli, write_config


def cube_file(path, sample_id, density=None, params=None, dtype="f4"):
    path.parent.mkdir(parents=True, exist_ok=True)
    with h5py.File(path, "w") as f:
        f["density"] = np.ones((32, 32, 32), dtype) if density is None else density
        f["params"] = np.ones(3, "f4") if params is None else params
        f.attrs["sample_id"] = sample_id


@pytest.fixture
def bad_inputs(tmp_path):
    """Four good files and one of every kind of bad one; returns (root, expected reason per file)."""
    root = tmp_path / "src"
    for i in range(4):
        cube_file(root / f"good{i}.h5", f"id{i}")
    expected = {}
    cube_file(root / "full.h5", "trunc")
    data = (root / "full.h5").read_bytes()
    (root / "full.h5").unlink()
    (root / "truncated.h5").write_bytes(data[: len(data) // 3])
    expected["truncated.h5"] = "cannot open as HDF5"
    (root / "corrupt.h5").write_bytes(b"\x89HDF\r\n\x1a\n" + os.urandom(4000))
    expected["corrupt.h5"] = "cannot open as HDF5"
    with h5py.File(root / "nofield.h5", "w") as f:
        f["density"] = np.ones((32, 32, 32), "f4")
        f.attrs["sample_id"] = "nofield"
    expected["nofield.h5"] = "missing field 'params': no dataset 'params'"
    cube_file(root / "shape.h5", "shape", density=np.ones((16, 32, 32), "f4"))
    expected["shape.h5"] = "field 'density': shape (16, 32, 32), expected (32, 32, 32)"
    cube_file(root / "dtype.h5", "dtype", density=np.full((32, 32, 32), 1e300))  # float64, not castable
    expected["dtype.h5"] = (
        "field 'density': dtype float64 cannot be cast to float32 without changing values (32768 of"
    )
    cube_file(root / "castable.h5", "castable", dtype="f8")  # float64 ones: cast to float32, accepted
    nan = np.ones((32, 32, 32), "f4")
    nan[1, 2, 3] = np.nan
    nan[0, 0, 0] = np.inf
    cube_file(root / "nan.h5", "nan", density=nan)
    expected["nan.h5"] = "field 'density': 2 non-finite values (NaN/Inf)"
    (root / "empty.h5").touch()
    expected["empty.h5"] = "empty file (0 bytes)"
    (root / "dangling.h5").symlink_to(root / "does-not-exist.h5")
    expected["dangling.h5"] = "unreadable: No such file or directory"
    cube_file(root / "zz_duplicate.h5", "id1")
    expected["zz_duplicate.h5"] = "duplicate sample id 'id1' (first seen in"
    return root, expected


# Files read ahead by two threads with O_DIRECT (the default), and one at a time through the page cache.
@pytest.mark.parametrize(
    "reading",
    [
        {"direct_io": True, "prefetch": 32, "read_threads": 2},
        {"direct_io": False, "prefetch": 0, "read_threads": 1},
    ],
)
def test_every_bad_file_rejected_with_its_reason(tmp_path, serial, bad_inputs, reading):
    root, expected = bad_inputs
    config = make_config(tmp_path, ingest={"max_reject_fraction": 0.9, **reading})
    out = tmp_path / "ingest"
    summary = ingest(config, root, out, serial)
    rejects = {os.path.basename(r["path"]): r["reason"] for r in read_csv(out / "rejects.csv")}
    assert set(rejects) == set(expected)
    for name, reason in expected.items():
        assert reason in rejects[name], (name, rejects[name])
    manifest = read_rows(out / "manifest")
    inputs = len(list(root.iterdir()))
    assert summary["inputs"] == len(manifest) == inputs
    assert summary["accepted"] + summary["rejected"] == inputs
    accepted = [r for r in manifest if r["status"] == "accepted"]
    assert sorted(r["sample_id"] for r in accepted) == ["castable", "id0", "id1", "id2", "id3"]
    # The accepted samples' data is in the parts, bit for bit (the float64 file cast to the declared float32).
    for row in accepted:
        arrays = Part(out / "parts" / row["part"]).read(int(row["record"]))
        assert arrays["density"].dtype == np.float32
        assert arrays["density"].shape == (32, 32, 32) and np.all(arrays["density"] == 1)


def test_unreadable_file_without_permission(tmp_path, serial):
    # Root reads anything, so as root ingest runs as `nobody` (setpriv) in a world-readable directory.
    base = Path(tempfile.mkdtemp(prefix="sim2dl-perm-", dir="/tmp"))
    try:
        base.chmod(0o755)
        root = base / "src"
        cube_file(root / "a.h5", "a")
        cube_file(root / "locked.h5", "b")
        (root / "locked.h5").chmod(0)
        out = base / "ingest"
        out.mkdir()
        out.chmod(0o777)
        config = make_config(base, ingest={"max_reject_fraction": 0.9})
        if os.geteuid() == 0:
            config_path = write_config(base, config)
            config_path.chmod(0o644)
            assert shutil.which("setpriv"), "setpriv (util-linux) is needed to test as an unprivileged user"
            proc = subprocess.run(
                [
                    "setpriv",
                    "--reuid=nobody",
                    "--regid=nogroup",
                    "--clear-groups",
                    str(BIN / "sim2dl"),
                    "ingest",
                    "--config",
                    str(config_path),
                    "--source",
                    str(root),
                    "--out",
                    str(out),
                ],
                capture_output=True,
                text=True,
                env=env(),
            )
            assert proc.returncode == 0, proc.stderr
        else:
            ingest(config, root, out, serial)
        rejects = [(os.path.basename(r["path"]), r["reason"]) for r in read_csv(out / "rejects.csv")]
        assert rejects == [("locked.h5", "unreadable: permission denied")]
    finally:
        shutil.rmtree(base)


def test_too_many_rejects_fail_the_run_but_keep_the_lists(tmp_path, serial, bad_inputs):
    root, expected = bad_inputs
    config = make_config(tmp_path, ingest={"max_reject_fraction": 0.1})
    with pytest.raises(Sim2dlError) as err:
        ingest(config, root, tmp_path / "ingest", serial)
    message = str(err.value)
    assert f"{len(expected)} of {len(expected) + 5} input files rejected" in message
    assert ("rejects.csv" in message and "truncated.h5" in message) or "corrupt.h5" in message
    assert len(read_csv(tmp_path / "ingest" / "rejects.csv")) == len(expected)


def test_reject_limit_under_mpi_is_reported_once_and_every_rank_exits_2(tmp_path, bad_inputs):
    root, expected = bad_inputs
    config_path = write_config(tmp_path, make_config(tmp_path, ingest={"max_reject_fraction": 0.1}))
    proc = run_cli(["ingest", "--config", str(config_path), "--source", str(root)], ranks=2, check=False)
    assert proc.returncode == 2, proc.stderr
    assert proc.stderr.count(f"{len(expected)} of {len(expected) + 5} input files rejected") == 1, proc.stderr
    assert "Abort" not in proc.stderr


def test_no_matching_files_and_missing_directory(tmp_path, serial):
    (tmp_path / "empty").mkdir()
    (tmp_path / "empty" / "notes.txt").write_text("x")
    config = make_config(tmp_path)
    with pytest.raises(Sim2dlError, match=r"no files match '\*\*/\*.h5' under .*empty"):
        ingest(config, tmp_path / "empty", tmp_path / "out", serial)
    with pytest.raises(Sim2dlError, match=r"source directory .*nowhere does not exist"):
        ingest(config, tmp_path / "nowhere", tmp_path / "out", serial)


def test_cli_error_under_mpi_exits_nonzero_with_message(tmp_path):
    (tmp_path / "empty").mkdir()
    config_path = write_config(tmp_path, make_config(tmp_path))
    proc = run_cli(
        ["ingest", "--config", str(config_path), "--source", str(tmp_path / "empty")], ranks=2, check=False
    )
    assert proc.returncode != 0
    assert "sim2dl ingest: error: no files match" in proc.stderr


def test_two_ranks_give_the_same_manifest_and_parts_as_one(tmp_path, bad_inputs):
    """Parts are runs of consecutive files about a shard in size, so they do not depend on the rank count."""
    root, _ = bad_inputs
    config = make_config(tmp_path, ingest={"max_reject_fraction": 0.9}, merge={"shard_size_mb": 0.02})
    config_path = write_config(tmp_path, config)
    for ranks in (1, 3):  # one flat directory: 3 ranks walk it together, each keeping the names hashed to it
        run_cli(
            [
                "ingest",
                "--config",
                str(config_path),
                "--source",
                str(root),
                "--out",
                str(tmp_path / f"r{ranks}"),
            ],
            ranks=ranks,
        )
    assert read_rows(tmp_path / "r1" / "manifest") == read_rows(tmp_path / "r3" / "manifest")
    listed = (tmp_path / "r3" / "inputs.txt").read_text().splitlines()
    assert (
        listed
        == sorted(p.name for p in root.iterdir())
        == (tmp_path / "r1" / "inputs.txt").read_text().splitlines()
    )
    parts = sorted(p.name for p in (tmp_path / "r1" / "parts").iterdir())
    assert len(parts) > 4 and parts == sorted(p.name for p in (tmp_path / "r3" / "parts").iterdir())
    for name in parts:
        assert (tmp_path / "r1" / "parts" / name).read_bytes() == (
            tmp_path / "r3" / "parts" / name
        ).read_bytes()


@pytest.mark.parametrize(
    "pattern", ["**/*.h5", "*/*.h5", "run-*/out/*.h5", "data/**/*.h5", "*.h5", "**/*.zarr", "**/out/*", "**"]
)
def test_the_walk_cut_into_pieces_finds_what_glob_finds_each_once(tmp_path, pattern):
    """The pieces ranks walk apart (directories below the root, the pattern's rest below each) match
    together exactly what one glob over the tree matches, however far the walk was cut, and a piece
    walked by several ranks is split among them by name."""
    import glob

    from pipeline.steps.ingest.listing import piece_matches, walk_pieces

    tree = [
        "a.h5",
        ".hidden.h5",
        "run-1/out/x.h5",
        "run-1/out/y.txt",
        "run-2/out/z.h5",
        "run-2/deep/er/w.h5",
        "data/q.h5",
        "data/1/2/r.h5",
        ".dot/run-3/out/s.h5",
        "store.zarr/.zarray",
        "data/more.zarr/0",
    ]
    for name in tree:
        (tmp_path / name).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / name).write_text("x")
    expected = sorted(
        os.fsencode(n)
        for n in glob.iglob(pattern, root_dir=tmp_path, recursive=True, include_hidden=True)
        if (tmp_path / n).is_file() or n.endswith(".zarr")
    )
    assert expected
    for wanted in (1, 4, 100):
        pieces = walk_pieces(tmp_path, pattern, wanted)
        found = [m for prefix, rest in pieces for m in piece_matches(tmp_path, prefix, rest, 0, 1)]
        assert sorted(found) == expected, (wanted, pieces)
    shared = [m for share in range(3) for m in piece_matches(tmp_path, "", pattern, share, 3)]
    assert sorted(shared) == expected
    assert len(walk_pieces(tmp_path, "**/*.h5", 4)) >= 4  # cut one level down: the root's directories


def test_field_mapping_for_real_layouts(tmp_path, serial):
    """MLPerf CosmoFlow (`full`, `unitPar`) and DeepCAM (`climate/data`, `climate/labels`) without code
    changes."""
    root = tmp_path / "cosmo"
    root.mkdir()
    for i in range(3):
        with h5py.File(root / f"univ_{i}.hdf5", "w") as f:
            f["full"] = np.full((8, 8, 8, 4), i, "i2")
            f["unitPar"] = np.zeros(4, "f4")
    config = make_config(
        tmp_path,
        source={
            "glob": "*.hdf5",
            "sample_id": None,
            "fields": {
                "x": {"path": "full", "dtype": "int16", "shape": [None, None, None, 4]},
                "y": {"path": "unitPar", "dtype": "float32", "shape": [4]},
            },
        },
        convert={"features": ["x"], "labels": ["y"], "log1p": [], "normalise": [], "per_channel": []},
    )
    summary = ingest(config, root, tmp_path / "i1", serial)
    assert summary["accepted"] == 3
    ids = [r["sample_id"] for r in read_rows(tmp_path / "i1" / "manifest")]
    assert ids == ["univ_0", "univ_1", "univ_2"]

    root = tmp_path / "deepcam"
    root.mkdir()
    with h5py.File(root / "data-1.h5", "w") as f:
        f.create_group("climate")
        f["climate/data"] = np.ones((6, 9, 16), "f4")
        f["climate/labels"] = np.zeros((6, 9), "i4")
    config = make_config(
        tmp_path,
        source={
            "sample_id": None,
            "fields": {
                "data": {"path": "climate/data", "shape": [None, None, 16]},
                "labels": {"path": "climate/labels", "dtype": "int32"},
            },
        },
        convert={"features": ["data"], "labels": ["labels"], "log1p": [], "normalise": [], "per_channel": []},
    )
    assert ingest(config, root, tmp_path / "i2", serial)["accepted"] == 1


def test_hdf5_files_read_alike_from_their_bytes(tmp_path):
    """Contiguous data is taken from the file's bytes where HDF5 says it is; chunked, compressed and
    big-endian datasets must give the same values, and data cut off at the end of a file is rejected."""
    from pipeline.formats.readers import FieldSpec, SampleError
    from pipeline.formats.readers.hdf5 import HDF5Reader

    values = np.random.default_rng(5).random((8, 8, 8), np.float32)
    layouts = {
        "contiguous.h5": {},
        "chunked.h5": {"chunks": (4, 8, 8), "compression": "gzip"},
        "big_endian.h5": {"dtype": ">f4"},
    }
    field = FieldSpec("density", "density", None, (8, 8, 8))
    reader = HDF5Reader()
    for name, options in layouts.items():
        with h5py.File(tmp_path / name, "w") as f:
            f.create_dataset("density", data=values, **options)
            f.attrs["sample_id"] = name
        image = np.fromfile(tmp_path / name, np.uint8)
        arrays, sample_id = reader.read_contents(image, tmp_path / name, [field], "sample_id")
        assert sample_id == name and np.array_equal(arrays["density"], values), name
        assert arrays["density"].dtype == np.dtype(options.get("dtype", "<f4"))
    with h5py.File(tmp_path / "data_last.h5", "w", libver="latest") as f:
        f.attrs["sample_id"] = "x"
        f.create_dataset("density", data=values)  # allocated last: its bytes end the file
    image = np.fromfile(tmp_path / "data_last.h5", np.uint8)
    with pytest.raises(SampleError, match="truncated"):
        reader.read_contents(image[:-64], tmp_path / "data_last.h5", [field], "sample_id")


def test_files_alike_are_read_from_their_remembered_layout_and_others_through_hdf5(tmp_path, monkeypatch):
    """After HDF5 has opened a file (and checked two more), files whose structure bytes equal it are read
    without HDF5, to the same arrays and ids; a changed structure byte, fixed-length ids and a layout
    that HDF5 contradicts all give what HDF5 gives."""
    from pipeline.formats.readers import FieldSpec, SampleError
    from pipeline.formats.readers.hdf5 import ByteTemplate, HDF5Reader

    opens = []
    real_open = h5py.h5f.open
    monkeypatch.setattr(h5py.h5f, "open", lambda *a, **k: opens.append(1) or real_open(*a, **k))
    fields = [FieldSpec("density", "density", "float32", (32, 32, 32)), FieldSpec("params", "params")]
    rng = np.random.default_rng(7)
    reader = HDF5Reader()
    for i in range(6):
        density, params = rng.random((32, 32, 32), np.float32), rng.random(3, np.float32)
        cube_file(tmp_path / f"{i}.h5", f"cube-{i:04d}", density, params)
        arrays, sample_id = reader.read_contents(
            np.fromfile(tmp_path / f"{i}.h5", np.uint8), tmp_path, fields, "sample_id"
        )
        assert sample_id == f"cube-{i:04d}"
        assert np.array_equal(arrays["density"], density) and np.array_equal(arrays["params"], params)
    assert len(opens) == 3  # the first file, then two checks; the last three were not opened by HDF5

    image = np.fromfile(tmp_path / "5.h5", np.uint8)
    name_at = image.tobytes().find(b"density")
    image[name_at + 6] = ord("x")  # the dataset is now called 'densitx': same size, other structure
    with pytest.raises(SampleError, match="missing field 'density'"):
        reader.read_contents(image, tmp_path, fields, "sample_id")

    fixed = HDF5Reader()  # ids in fixed-length strings: a shorter id is padded with NULs
    for name, sample_id in [("a.h5", b"abcdefgh"), ("b.h5", b"abcdefgh"), ("c.h5", b"ij"), ("d.h5", b"klm")]:
        with h5py.File(tmp_path / name, "w") as f:
            f["density"] = np.zeros((32, 32, 32), "f4")
            f["params"] = np.zeros(3, "f4")
            f.attrs["sample_id"] = np.array(sample_id, "S8")
        image = np.fromfile(tmp_path / name, np.uint8)
        assert fixed.read_contents(image, tmp_path, fields, "sample_id")[1] == sample_id.decode()

    liar = HDF5Reader()
    image = np.fromfile(tmp_path / "0.h5", np.uint8)
    liar.read_contents(image, tmp_path, fields, "sample_id")
    key, template = next(iter(liar._templates.items()))
    assert isinstance(template, ByteTemplate)
    assert sum(len(kept) for _, _, kept in template.structure) < 8192  # the structure is kept, not the data
    wrong = [(name, offset + 4, dtype, shape) for name, offset, dtype, shape in template.fields]
    liar._templates[key] = ByteTemplate(template.size, template.structure, tuple(wrong), template.id_range)
    image = np.fromfile(tmp_path / "1.h5", np.uint8)
    arrays, _ = liar.read_contents(image, tmp_path, fields, "sample_id")
    with h5py.File(tmp_path / "1.h5") as f:
        assert np.array_equal(arrays["density"], f["density"][()])  # HDF5's reading, not the layout's
    assert liar._templates[key] is None  # and the template is never used again


def test_parts_are_a_shard_each_unless_ranks_would_go_without_work(tmp_path):
    from pipeline.steps.ingest.step import PARTS_PER_RANK, part_files

    files = []
    for i in range(200):
        files.append(tmp_path / f"f{i:03d}.h5")
        files[-1].write_bytes(b"x" * 1000)
    assert part_files(files, 10_000, ranks=1) == 10  # a shard's worth: 10 files of 1000 bytes
    assert part_files(files, 10_000, ranks=4) == 10  # 20 parts: 5 per rank
    many = part_files(files, 10_000, ranks=16)  # 20 parts would leave ranks with 1 or 2
    # the largest parts that give enough
    assert -(-200 // many) >= PARTS_PER_RANK * 16 > -(-200 // (many + 1))
    assert part_files(files[:3], 10_000, ranks=64) == 1


@pytest.mark.parametrize(
    ("values", "dtype", "lossy"),
    [
        (np.array([1, 2, 3], "i4"), "float32", None),
        (np.array([1.0, -2.0, 3.0], "f8"), "int16", None),
        (np.array([0, 1, 1], "i8"), "bool", None),
        (np.array([1.0, 2.5], "f4"), "int32", "2.5"),
        (np.array([1, 70000], "i4"), "int16", "70000"),
        (np.array([-1, 3], "i2"), "uint8", "-1"),
        (np.array([0, 2], "u1"), "bool", "2"),
        (np.array([1.0, np.nan], "f8"), "int64", "nan"),
        (np.array([1.0, 1e39], "f8"), "float32", "1e+39"),
    ],
)
def test_dtype_casts_arrays_when_no_value_changes(values, dtype, lossy):
    """Declared dtypes cast arrays as they cast table columns; a cast that would change a value is a
    reject."""
    from pipeline.data.records import cast_to

    if lossy is None:
        cast = cast_to(values, np.dtype(dtype), "x")
        assert cast.dtype == np.dtype(dtype) and np.array_equal(cast, values.astype(dtype))
    else:
        told = rf"field 'x': dtype {values.dtype} cannot be cast to {dtype} .*{re.escape(lossy)}"
        with pytest.raises(SampleError, match=told):
            cast_to(values, np.dtype(dtype), "x")


@pytest.mark.parametrize("reading", ["files", "samples"])
def test_a_grown_listing_reads_only_its_new_files_and_ends_as_a_fresh_ingest_would(tmp_path, reading):
    """A rerun over inputs that grew (an adaptive design continued) keeps the earlier parts as they are,
    reads only the new files (generation 1, parts of its own), rejects a new file whose id an earlier file
    holds, and ends with the manifest, rejects and counts that a fresh ingest of every file gives. An
    earlier file changed, or other settings, start afresh. Either way ingest reads: a file per record, or
    samples (a field from a file's attribute takes that path, as the adaptive preset's runs-table columns
    do)."""
    import json

    root = tmp_path / "src"

    def cube(path: Path, sample_id: str, **arrays) -> None:
        cube_file(path, sample_id, **arrays)
        with h5py.File(path, "a") as f:
            f.attrs["level"] = float(len(sample_id))

    for i in range(10):
        cube(root / f"a{i:02d}.h5", f"id{i}")
    (root / "a99.h5").write_bytes(b"not hdf5")
    fields = {"level": {"attr": "level", "dtype": "float32"}} if reading == "samples" else {}
    source = make_config(tmp_path)["source"]
    config = make_config(
        tmp_path, merge={"shard_size_mb": 0.3}, source={"fields": {**source["fields"], **fields}}
    )
    path = write_config(tmp_path, config)

    def ingested(out: Path, config_path: Path = path) -> dict:
        run_cli(["ingest", "--config", str(config_path), "--source", str(root), "--out", str(out)], ranks=2)
        return json.loads((out / "summary.json").read_text())

    def parts(out: Path) -> dict[str, tuple[int, int]]:
        return {p.name: (p.stat().st_ino, p.stat().st_mtime_ns) for p in (out / "parts").iterdir()}

    out = tmp_path / "grown"
    assert ingested(out)["generations"] == 1
    before = parts(out)
    for i in range(6):
        cube(root / f"b{i:02d}.h5", "id3" if i == 2 else f"new{i}")
    (root / "b04.h5").write_bytes(b"\x89HDF\r\n\x1a\n" + os.urandom(100))
    # what a run killed in its generation 1 left: removed before anything is written
    (out / "parts" / "part-g0001-00007-of-00099.jsonl").write_text("{}\n")
    (out / "manifest" / "part-g0001-00007-of-00099.parquet").write_bytes(b"partial")
    grown = ingested(out)
    assert (
        grown["generations"] == 2
        and grown["inputs_read"] == 6
        and ("samples" in grown) == (reading == "samples")
    )
    after = parts(out)
    assert {name: after[name] for name in before} == before  # the earlier parts, untouched
    new = set(after) - set(before)
    assert new and all(name.startswith("part-g0001-") and "of-00099" not in name for name in new)
    assert not (out / "manifest" / "part-g0001-00007-of-00099.parquet").exists()

    fresh = ingested(tmp_path / "fresh")
    counts = ("inputs", "accepted", "rejected")
    assert (
        {k: grown[k] for k in counts}
        == {k: fresh[k] for k in counts}
        == {"inputs": 17, "accepted": 14, "rejected": 3}
    )

    def rows(out: Path) -> list[tuple]:
        keys = ("path", "sample_id", "status", "reason", "shape", "length", "bytes")
        return sorted(tuple(r[k] for k in keys) for r in read_rows(out / "manifest"))

    assert rows(out) == rows(tmp_path / "fresh")
    assert sorted(map(tuple, (r.values() for r in read_csv(out / "rejects.csv")))) == sorted(
        map(tuple, (r.values() for r in read_csv(tmp_path / "fresh" / "rejects.csv")))
    )
    duplicate = next(r for r in read_rows(out / "manifest") if r["path"].endswith("b02.h5"))
    first_copy = f"{root / 'a03.h5'} (sample 0)" if reading == "samples" else str(root / "a03.h5")
    assert duplicate["reason"] == f"duplicate sample id 'id3' (first seen in {first_copy})"
    records = {
        Part(stem.with_suffix("")).meta(i)["sample_id"]
        for stem in (out / "parts").glob("*.jsonl")
        for i in range(len(Part(stem.with_suffix(""))))
    }
    assert records == {f"id{i}" for i in range(10)} | {f"new{i}" for i in (0, 1, 3, 5)} | {"id3"}

    assert ingested(out)["inputs_read"] == 0  # nothing new: the same generations, nothing read
    assert (
        parts(out) == after
        and json.loads((out / "generations.json").read_text())["generations"][1]["stop"] == 17
    )
    cube(root / "a05.h5", "id5", density=np.zeros((32, 32, 32), "f4"))  # an earlier input changed
    again = ingested(out)
    assert (
        again["generations"] == 1
        and again["inputs_read"] == 17
        and not any(n.startswith("part-g") for n in parts(out))
    )
    other = write_config(tmp_path, {**config, "ingest": {**config["ingest"], "check_finite": False}})
    assert ingested(out, other)["inputs_read"] == 17  # other settings: afresh
    assert ingested(out, other)["inputs_read"] == 0  # the same listing and settings: kept

import json

import numpy as np
import pytest

from pipeline.data.statistics import RunningStats
from pipeline.data.tables import read_rows
from pipeline.data.transforms import central_crop, normalise, split_volumes, transform
from pipeline.formats.readers import SampleError
from pipeline.steps.ingest.step import ingest
from pipeline.steps.simulate import simulate

from .conftest import make_config, run_cli, write_config


@pytest.mark.parametrize("per_channel", [False, True])
def test_running_stats_match_numpy_and_merge_in_any_grouping(per_channel):
    rng = np.random.default_rng(0)
    chunks = [rng.normal(5, 3, size=(n, 4, 3)).astype("f4") for n in (1, 7, 30)]
    whole = RunningStats(per_channel)
    for c in chunks:
        whole.update(c)
    split_a, split_b = RunningStats(per_channel), RunningStats(per_channel)
    split_a.update(chunks[0])
    split_b.update(chunks[1])
    split_b.update(chunks[2])
    split_a.merge(split_b)
    flat = np.concatenate([c.reshape(-1, 3) if per_channel else c.reshape(-1) for c in chunks]).astype("f8")
    for s in (whole, split_a):
        d = s.as_dict()
        np.testing.assert_allclose(d["mean"], flat.mean(axis=0), rtol=1e-10)
        np.testing.assert_allclose(d["std"], flat.std(axis=0), rtol=1e-10)
        np.testing.assert_allclose(d["min"], flat.min(axis=0))
        assert d["count"] == flat.shape[0]


def test_crop_split_and_log1p():
    x = np.arange(8**3, dtype="f4").reshape(8, 8, 8)
    np.testing.assert_array_equal(central_crop(x, [4, 4, 4]), x[2:6, 2:6, 2:6])
    pieces = split_volumes(x, [4, 4, 4])
    assert len(pieces) == 8
    np.testing.assert_array_equal(pieces[1], x[0:4, 0:4, 4:8])
    with pytest.raises(SampleError, match="must divide"):
        split_volumes(x, [3, 3, 3])
    settings = {
        "features": ["d"],
        "labels": ["p"],
        "dtype": "float32",
        "log1p": ["d"],
        "normalise": [],
        "crop": [6, 6, 6],
        "subvolume": [3, 3, 3],
    }
    out = transform({"d": x, "p": np.arange(3, dtype="f8"), "unused": x}, settings)
    assert len(out) == 8 and set(out[0]) == {"d", "p"}
    # integer labels (class ids, masks) keep their type unless transformed
    assert transform({"d": x, "p": np.arange(3, dtype="u1")}, settings)[0]["p"].dtype == np.uint8
    normalised = transform({"d": x, "p": np.arange(3, dtype="u1")}, {**settings, "normalise": ["p"]})
    assert normalised[0]["p"].dtype == np.float32
    np.testing.assert_allclose(out[0]["d"], np.log1p(x[1:4, 1:4, 1:4]))
    assert out[0]["p"].dtype == np.float32
    with pytest.raises(SampleError, match="log1p of values <= -1"):
        transform({"d": -np.ones((8, 8, 8)), "p": np.zeros(3)}, settings)


def test_normalise_uses_the_statistics():
    stats = {"d": {"mean": 2.0, "std": 4.0}}
    out = normalise({"d": np.array([2.0, 6.0], "f4"), "p": np.array([1.0])}, stats)
    np.testing.assert_allclose(out["d"], [0.0, 1.0])
    assert out["d"].dtype == np.float32 and out["p"][0] == 1.0


def test_global_statistics_same_for_one_and_two_ranks(tmp_path, serial):
    config = make_config(tmp_path, simulate={"runs": 10}, convert={"normalise": ["density", "params"]})
    simulate(config["simulate"], tmp_path / "raw", serial)
    ingest(config, tmp_path / "raw", tmp_path / "ingest", serial)
    config_path = write_config(tmp_path, config)
    stats = {}
    for ranks in (1, 2):
        out = tmp_path / f"convert{ranks}"
        run_cli(
            [
                "convert",
                "--config",
                str(config_path),
                "--ingest",
                str(tmp_path / "ingest"),
                "--out",
                str(out),
            ],
            ranks=ranks,
        )
        stats[ranks] = json.loads((out / "stats.json").read_text())["statistics"]
    for name in ("density", "params"):
        for key in ("mean", "std", "min", "max", "count"):
            np.testing.assert_allclose(stats[1][name][key], stats[2][name][key], rtol=1e-12)
    # The statistics describe the transformed (log1p) data.
    assert 0 < stats[1]["density"]["mean"] < np.log1p(8.0) + 0.5


def test_unchanged_fields_are_referenced_not_copied(tmp_path, serial):
    from pipeline.formats.parts import Part, list_parts
    from pipeline.steps.convert import convert

    config = make_config(tmp_path, simulate={"runs": 4}, convert={"log1p": ["density"], "normalise": []})
    simulate(config["simulate"], tmp_path / "raw", serial)
    ingest(config, tmp_path / "raw", tmp_path / "ingest", serial)
    convert(config, tmp_path / "ingest", tmp_path / "c", serial)
    stems = list_parts(tmp_path / "c" / "parts")
    # one converted part per ingest part, of the same name
    assert [s.name for s in stems] == [s.name for s in list_parts(tmp_path / "ingest" / "parts")]
    # density changed (log1p): stored; params unchanged: a reference into the ingest part.
    assert sum(s.with_suffix(".bin").stat().st_size for s in stems) == 4 * 32**3 * 4
    rows = [r for r in read_rows(tmp_path / "ingest" / "manifest") if r["status"] == "accepted"]
    converted = [(Part(stem), i) for stem in stems for i in range(len(Part(stem)))]
    assert len(converted) == len(rows) == 4
    for (part, i), row in zip(converted, rows, strict=True):  # convert keeps the manifest's order
        ingest_stem = tmp_path / "ingest" / "parts" / row["part"]
        source = Part(ingest_stem).read(int(row["record"]))
        assert part.location(i, "params")[0].resolve() == ingest_stem.with_suffix(".bin").resolve()
        np.testing.assert_array_equal(part.read(i)["params"], source["params"])
        np.testing.assert_allclose(part.read(i)["density"], np.log1p(source["density"]))


def test_statistics_come_from_the_training_split_alone(tmp_path, serial):
    """With merge.splits, the normalisation statistics are the training records' (recorded with their
    split in metadata.json): changing only validation samples leaves them unchanged, changing a training
    sample does not."""
    import netCDF4

    from pipeline.formats.shards.shard_reader import ShardReader

    from .helpers import CMIP_SOURCE, MODELS, data_half, layout_config, ta_values, write_cmip_like

    root = tmp_path / "cmip"
    write_cmip_like(root)
    config = layout_config(
        tmp_path,
        {**CMIP_SOURCE, "path": str(root)},
        ["ta"],
        ["model"],
        merge={"splits": {"train": 0.5, "validation": 0.5}, "split_by": "file"},
    )
    config["convert"]["normalise"] = ["ta"]

    def statistics(run: str) -> tuple[dict, set[str]]:
        _, meta = data_half(config, root, tmp_path / run, serial)
        merged = tmp_path / run / "work" / "merged"
        train_files = {r["sample_id"].split("#")[0] for r in ShardReader(merged, "train")}
        return meta, train_files

    meta, train_files = statistics("first")
    assert meta["statistics_from"] == {"split": "train", "split_by": "file"}
    assert train_files and train_files != {f"ta_{m}" for m in MODELS}  # both splits hold files
    expected = np.concatenate(
        [ta_values(k, n).ravel() for k, (m, n) in enumerate(MODELS.items()) if f"ta_{m}" in train_files]
    ).astype(np.float64)
    ta = meta["statistics"]["ta"]
    assert ta["count"] == expected.size
    np.testing.assert_allclose([ta["mean"], ta["std"]], [expected.mean(), expected.std()], rtol=1e-9)

    def rewrite(model: str) -> None:
        with netCDF4.Dataset(root / f"ta_{model}.nc", "a") as ds:
            ds["ta"][:] = ds["ta"][:] + 5000.0

    validation_model = next(m for m in MODELS if f"ta_{m}" not in train_files)
    rewrite(validation_model)
    assert statistics("validation-changed")[0]["statistics"] == meta["statistics"]
    rewrite(next(m for m in MODELS if f"ta_{m}" in train_files))
    assert statistics("train-changed")[0]["statistics"]["ta"]["mean"] != ta["mean"]


def test_convert_holds_out_the_records_train_holds_out_without_tensorflow():
    """convert's hold-out (cityhash's Fingerprint64) is train's (TensorFlow's to_hash_bucket_fast in the
    tf.data graph) on every kind of id: paths, sub-volumes, file#index, non-ASCII, empty, bytes."""
    from pipeline.data.splits import holdout_validation, holdout_validation_of_ids

    rng = np.random.default_rng(0)
    ids = [f"run-{i:05d}/cube_{i % 7:03d}#{i % 3}" for i in range(5000)]
    ids += ["".join(map(chr, rng.integers(32, 0x3000, rng.integers(0, 40)))) for _ in range(5000)]
    ids += ["", "é∂ü", "a" * 1000]
    for fraction in (0.1, 0.3, 0.5):
        expected = holdout_validation(np.array(ids, dtype=object), fraction).numpy()
        assert 0 < expected.sum() < len(ids)
        np.testing.assert_array_equal(holdout_validation_of_ids(ids, fraction), expected)
    as_bytes = [i.encode() for i in ids[:100]]
    np.testing.assert_array_equal(
        holdout_validation_of_ids(as_bytes, 0.3), holdout_validation(np.array(ids[:100], dtype=object), 0.3)
    )


def test_without_splits_statistics_skip_the_records_train_holds_out(tmp_path, serial):
    """No merge.splits: train holds out train.validation_fraction by a hash of the sample id; convert's
    statistics are those of the other records (the same hash), and integer labels are counted per split."""
    from pipeline.data.splits import holdout_validation
    from pipeline.formats.parts import Part, list_parts
    from pipeline.steps.convert import convert

    config = make_config(
        tmp_path,
        simulate={"family": "climate", "runs": 24, "climate": {"size": 16}},
        source={
            "fields": {
                "fields": {"path": "fields", "dtype": "float32", "shape": [16, 16, 4]},
                "mask": {"path": "mask", "dtype": "uint8", "shape": [16, 16]},
            }
        },
        convert={
            "features": ["fields"],
            "labels": ["mask"],
            "log1p": [],
            "normalise": ["fields"],
            "per_channel": ["fields"],
        },
        train={"validation_fraction": 0.3},
    )
    simulate(config["simulate"], tmp_path / "raw", serial)
    ingest(config, tmp_path / "raw", tmp_path / "ingest", serial)
    convert(config, tmp_path / "ingest", tmp_path / "convert", serial)
    doc = json.loads((tmp_path / "convert" / "stats.json").read_text())
    assert doc["statistics_from"]["split"] == "train" and doc["statistics_from"]["validation_fraction"] == 0.3
    records = [Part(stem) for stem in list_parts(tmp_path / "convert" / "parts")]
    ids = [part.meta(i)["sample_id"] for part in records for i in range(len(part))]
    arrays = [part.read(i) for part in records for i in range(len(part))]
    held = holdout_validation(np.array(ids, dtype=object), 0.3).numpy()
    assert 0 < held.sum() < len(ids)
    kept = np.stack([a["fields"] for a, h in zip(arrays, held, strict=True) if not h]).reshape(-1, 4)
    stats = doc["statistics"]["fields"]
    assert stats["count"] == len(kept)
    np.testing.assert_allclose(stats["mean"], kept.astype(np.float64).mean(axis=0), rtol=1e-9)
    np.testing.assert_allclose(stats["std"], kept.astype(np.float64).std(axis=0), rtol=1e-9)
    masks = {
        split: np.stack(
            [a["mask"] for a, h in zip(arrays, held, strict=True) if h == (split == "validation")]
        )
        for split in ("train", "validation")
    }
    assert arrays[0]["mask"].dtype == np.uint8  # class ids keep their integer type
    counts = doc["class_counts"]["mask"]
    assert counts["min"] == 0 and counts["max"] == max(int(m.max()) for m in masks.values())
    for split, m in masks.items():
        assert counts["counts"][split] == np.bincount(m.ravel(), minlength=counts["max"] + 1).tolist()

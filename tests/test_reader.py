"""Per-field encodings and the framework-neutral reader (pipeline.reader, no TensorFlow), held to what
tf.data reads from the same shards."""

import json
import subprocess
import sys
from collections import Counter
from pathlib import Path

import numpy as np
import pytest

from pipeline import Sim2dlError
from pipeline.formats.shards.shard_reader import ReaderSlot, ShardReader, plan_units, slot_units
from pipeline.formats.shards.tfrecord.decode import decode_example, decode_varints
from pipeline.formats.shards.tfrecord.encode import encode_varints, example_pieces

from .conftest import REPO, SLOW, make_config, run_cli, unavailable, write_config
from .helpers import TRACE_CONVERT, TRACE_SOURCE, merge_cli, prepare, prepare_cubes, tfrecord_dataset


def test_varints_round_trip_as_protobuf_encodes_them():
    import tensorflow as tf

    edge = np.array([0, 1, 127, 128, 300, 16_383, 16_384, -1, -(2**63), 2**63 - 1])
    for values in (edge, np.random.default_rng(1).integers(-(2**40), 2**40, 1000), edge[:3]):
        packed = encode_varints(values)
        message = tf.train.Int64List(value=values.tolist()).SerializeToString()
        assert message.endswith(packed) and len(message) - len(packed) <= 3  # tag and length before it
        np.testing.assert_array_equal(decode_varints(np.frombuffer(packed, np.uint8)), values)


def test_encodings_are_the_examples_tensorflow_builds_and_decode_back():
    import tensorflow as tf

    from pipeline.training.tfdata import parse_example

    rng = np.random.default_rng(0)
    arrays = {
        "x": rng.random((3, 4), np.float32),
        "y": np.float32([1.5, -2, 3, 4]),
        "n": np.int16([-5, 7, 300]),
        "empty": np.zeros(0, np.float32),
        "counts": rng.integers(0, 1000, (5, 2)).astype(np.int32),
    }
    encodings = {"y": "float_list", "n": "int64_list", "empty": "float_list", "counts": "int64_list"}
    pieces, _ = example_pieces("id-ü", arrays, encodings)
    data = b"".join(bytes(p) for p in pieces)
    feature = {
        "sample_id": tf.train.Feature(bytes_list=tf.train.BytesList(value=["id-ü".encode()])),
        "x": tf.train.Feature(bytes_list=tf.train.BytesList(value=[arrays["x"].tobytes()])),
    }
    for name in ("y", "empty"):
        feature[name] = tf.train.Feature(float_list=tf.train.FloatList(value=arrays[name].ravel().tolist()))
    for name in ("n", "counts"):
        feature[name] = tf.train.Feature(int64_list=tf.train.Int64List(value=arrays[name].ravel().tolist()))
    for name, a in arrays.items():
        feature[f"{name}_shape"] = tf.train.Feature(int64_list=tf.train.Int64List(value=a.shape))
    expected = tf.train.Example(features=tf.train.Features(feature=feature))
    assert tf.train.Example.FromString(data) == expected
    assert len(data) == len(expected.SerializeToString(deterministic=True))

    spec = {name: {"dtype": a.dtype.name, "shape": list(a.shape)} for name, a in arrays.items()}
    spec["x"]["shape"] = [None, 4]
    spec["counts"]["shape"] = [None, 2]
    for name, encoding in encodings.items():
        spec[name]["encoding"] = encoding
    ours = decode_example(memoryview(data), 0, len(data), spec)
    theirs = parse_example(tf.constant(data), spec)
    assert ours["sample_id"] == "id-ü" == theirs["sample_id"].numpy().decode()
    for name, a in arrays.items():
        assert ours[name].dtype == a.dtype and theirs[name].dtype.as_numpy_dtype == a.dtype
        np.testing.assert_array_equal(ours[name], a)
        np.testing.assert_array_equal(theirs[name].numpy(), a)


def test_plan_gives_every_record_to_exactly_one_slot():
    for records in ([5, 0, 7, 3], [100], [2, 2], []):
        for slots in (1, 2, 3, 8):
            taken = Counter()
            for slot in range(slots):
                for unit in slot_units(plan_units(records, slots), slot, slots):
                    taken.update((unit.shard, r) for r in range(unit.first, unit.stop))
            assert taken == Counter((k, r) for k, n in enumerate(records) for r in range(n)), (records, slots)
    # fewer shards than slots: the shards are cut so that every slot has records
    assert all(slot_units(plan_units([40, 40], 8), s, 8) for s in range(8))
    assert (ReaderSlot(rank=1, world_size=2, worker=2, workers=3).index, ReaderSlot(1, 2, 2, 3).count) == (
        5,
        6,
    )
    with pytest.raises(Sim2dlError, match="rank 2 of 2, worker 0 of 1: out of range"):
        ReaderSlot(rank=2, world_size=2)


def every_record(reader_args, slots):
    """Records read by all (rank, worker) slots, by sample id; asserts each is read exactly once."""
    ranks, workers = slots
    seen = {}
    for rank in range(ranks):
        for worker in range(workers):
            slot = ReaderSlot(rank=rank, world_size=ranks, worker=worker, workers=workers)
            reader = ShardReader(*reader_args[:1], slot=slot)
            got = list(reader)
            assert len(got) == len(reader)
            for record in got:
                assert record["sample_id"] not in seen
                seen[record["sample_id"]] = record
    return seen


@pytest.mark.parametrize("fmt", ["tfrecord", "hdf5"])
def test_reader_reads_every_record_once_across_ranks_and_workers_as_tf_data(tmp_path, fmt):
    encoding = {"params": "float_list"} if fmt == "tfrecord" else {}
    config_path, work = prepare_cubes(
        tmp_path,
        30,
        merge={"shard_size_mb": 0.02, "format": fmt, "encoding": encoding},
    )
    merged = work / "merged"
    merge_cli(config_path, merged, ranks=2)
    meta = json.loads((merged / "metadata.json").read_text())
    assert meta["counts"]["shards"] >= 3
    assert meta["feature_spec"]["params"]["encoding"] == ("float_list" if fmt == "tfrecord" else "bytes")
    reference = every_record([merged], (1, 1))
    assert len(reference) == 30
    if fmt == "tfrecord":  # the same values as tf.data reads, with the params stored as a float list
        for r in tfrecord_dataset(merged).as_numpy_iterator():
            ours = reference[r["sample_id"].decode()]
            np.testing.assert_array_equal(ours["density"], r["density"])
            np.testing.assert_array_equal(ours["params"], r["params"])
            assert ours["density"].shape == (8, 8, 8) and ours["params"].dtype == np.float32
    for slots in ((2, 1), (2, 3), (3, 4)):  # 12 slots: more than shards, so shards are cut into ranges
        got = every_record([merged], slots)
        assert got.keys() == reference.keys()
        for sid, record in got.items():
            np.testing.assert_array_equal(record["density"], reference[sid]["density"])

    # a shuffle buffer reorders (differently per epoch and seed) without losing or repeating records
    reader = ShardReader(merged, shuffle_buffer=8, seed=1)
    first = [r["sample_id"] for r in reader]
    reader.set_epoch(1)
    second = [r["sample_id"] for r in reader]
    in_order = [r["sample_id"] for r in ShardReader(merged)]
    assert sorted(first) == sorted(second) == sorted(in_order)
    assert first != in_order and second != first
    assert [r["sample_id"] for r in ShardReader(merged, shuffle_buffer=8, seed=1)] == first  # reproducible

    batches = list(ShardReader(merged, fields=["params"]).batches(8))
    assert [len(b["sample_id"]) for b in batches] == [8, 8, 8, 6]
    assert batches[0]["params"].shape == (8, 3) and set(batches[0]) == {"sample_id", "params"}


@SLOW
def test_reader_variable_length_records_and_gzip(tmp_path):
    config_path, work = prepare(
        tmp_path,
        simulate={"family": "trace", "runs": 25},
        source=TRACE_SOURCE,
        convert=TRACE_CONVERT,
        merge={"shard_size_mb": 0.01, "compression": "gzip", "sort_by": "length"},
    )
    merge_cli(config_path, work / "merged", ranks=2)
    reference = {r["sample_id"].decode(): r for r in tfrecord_dataset(work / "merged").as_numpy_iterator()}
    got = every_record([work / "merged"], (2, 2))
    assert got.keys() == reference.keys() and len(got) == 25
    for sid, record in got.items():
        np.testing.assert_array_equal(record["trace"], reference[sid]["trace"])
        assert record["trace"].shape[1] == 4
    lengths = [r["trace"].shape[0] for r in ShardReader(work / "merged")]
    assert lengths == sorted(lengths)  # one slot, no shuffle: shard order, as merge sorted them


def test_reader_names_a_damaged_record(tmp_path):
    config_path, work = prepare_cubes(
        tmp_path,
        4,
    )
    merge_cli(config_path, work / "merged", ranks=1)
    shard = next((work / "merged" / "shards").glob("*.tfrecord"))
    data = bytearray(shard.read_bytes())
    data[100] ^= 0xFF
    shard.write_bytes(bytes(data))
    with pytest.raises(Sim2dlError, match=rf"{shard.name}: the record at byte 0 fails its CRC check"):
        list(ShardReader(work / "merged"))
    assert len(list(ShardReader(work / "merged", verify=False))) == 4


def test_encoding_config_errors_name_the_key(tmp_path):
    cases = [
        ({"merge": {"encoding": {"nope": "float_list"}}}, r"merge\.encoding.*\['nope'\]"),
        ({"merge": {"format": "hdf5", "encoding": {"params": "float_list"}}}, r"merge\.encoding.*'hdf5'"),
        (
            {"merge": {"encoding": {"params": "int64_list"}}},
            r"merge\.encoding.*'params' is float32: int64_list",
        ),
        (
            {"convert": {"dtype": "float64"}, "merge": {"encoding": {"params": "float_list"}}},
            r"float_list holds only",
        ),
    ]
    for sections, message in cases:
        with pytest.raises(Sim2dlError, match=message):
            make_config(tmp_path, **sections)


def python_block(doc: str, marker: str) -> str:
    return next(block.split("```", 1)[0] for block in doc.split("```python\n")[1:] if marker in block)


def test_reading_docs_code_runs_as_written_numpy_and_pytorch(tmp_path):
    """The numpy loop and the PyTorch IterableDataset docs/reading.md gives, run as written on a merged
    dataset (`make test` installs the CPU build of torch where this machine class keeps one; under
    CI=true a missing torch fails the test). The reader's old slot keywords still work, with a warning."""
    config_path, work = prepare_cubes(tmp_path, 12)
    merged = work / "merged"
    merge_cli(config_path, merged, ranks=1)
    doc = (REPO / "docs" / "reading.md").read_text()
    numpy_loop = python_block(doc, "reader.batches(32)").replace("results/demo/merged", str(merged))
    scope: dict = {}
    exec(numpy_loop, scope)
    assert scope["x"].shape[1:] == (8, 8, 8) and scope["y"].shape[1:] == (3,)
    with pytest.warns(DeprecationWarning, match="slot=ReaderSlot"):
        old = ShardReader(merged, rank=1, world_size=2, worker=0, workers=1)
    assert (old.slot, old.slots) == (1, 2) and len(old) == len(ShardReader(merged, slot=ReaderSlot(1, 2)))
    with pytest.raises(Sim2dlError, match="not both"):
        ShardReader(merged, slot=ReaderSlot(), rank=0)
    try:
        import torch  # noqa: F401
    except ImportError:
        unavailable("torch is not installed (make test installs its CPU build where /opt/wheels has it)")
    assert ReaderSlot.from_torch() == ReaderSlot()  # no process group, not in a loader worker
    script = python_block(doc, "ReaderSlot.from_torch()")
    script += f"\nloader = make_loader({str(merged)!r}, batch_size=4, workers=2)\n"
    script += "print(sum(len(b['sample_id']) for b in loader))\n"
    out = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, check=True)
    assert out.stdout.split()[-1] == "12"


@pytest.mark.parametrize("compression", ["none", "gzip"])
def test_mlperf_cosmoflow_preset_gives_the_layout_the_reference_trains_from(tmp_path, compression):
    """config/presets/mlperf-cosmoflow.yaml on cosmoUniverse-style files (only the paths, the sub-volume
    size and the compression changed), read with the MLPerf HPC CosmoFlow reference's parser (written out
    here): `x` FixedLenFeature([], string) decoded as raw int16 and reshaped to the sample shape, `y`
    FixedLenFeature([4], float32), from DATA/train/*.tfrecord and DATA/validation/*.tfrecord."""
    import tensorflow as tf
    import yaml

    from pipeline import config as cfg

    from .helpers import write_cosmoflow

    counts, labels = write_cosmoflow(tmp_path / "cosmoUniverse", 10)
    config = yaml.safe_load((REPO / "config" / "presets" / "mlperf-cosmoflow.yaml").read_text())
    config["workdir"] = str(tmp_path / "work")
    config["source"]["path"] = str(tmp_path / "cosmoUniverse")
    config["convert"]["subvolume"] = [8, 8, 8]  # 16^3 test universes; the preset's 128^3 is the reference's
    config["merge"].update(compression=compression, shard_size_mb=0.2)
    config_path = write_config(tmp_path, cfg.validate(config))
    for step in ("ingest", "convert", "merge"):
        run_cli([step, "--config", str(config_path)], ranks=2)
    data_dir = tmp_path / "work" / "merged" / "shards"
    meta = json.loads((data_dir.parent / "metadata.json").read_text())
    assert (
        meta["feature_spec"]["x"]["dtype"] == "int16"
        and meta["feature_spec"]["y"]["encoding"] == "float_list"
    )

    def parse_reference(record):  # as the reference's data pipeline
        features = tf.io.parse_single_example(
            record, {"x": tf.io.FixedLenFeature([], tf.string), "y": tf.io.FixedLenFeature([4], tf.float32)}
        )
        x = tf.reshape(tf.io.decode_raw(features["x"], tf.int16), [8, 8, 8, 4])
        return x, features["y"]

    total, label_sum, per_split = 0, np.zeros(4), {}
    assert set(meta["splits"]) == {"train", "validation", "test"}  # the preset's three
    for split in meta["splits"]:
        files = sorted(str(p) for p in (data_dir / split).glob("*.tfrecord"))
        assert (files or not meta["splits"][split]["records"]) and all(
            Path(f + ".idx").exists() for f in files
        )
        dataset = tf.data.TFRecordDataset(files, compression_type="GZIP" if compression == "gzip" else "")
        for x, y in dataset.map(parse_reference):
            total += int(tf.reduce_sum(tf.cast(x, tf.int64)))
            label_sum += y.numpy()
            per_split[split] = per_split.get(split, 0) + 1
    assert per_split == {name: s["records"] for name, s in meta["splits"].items() if s["records"]}
    assert sum(per_split.values()) == 10 * 8 and total == counts  # every count of every file once, as int16
    np.testing.assert_allclose(label_sum, 8 * labels, rtol=1e-5)


def test_reader_reads_one_split(tmp_path):
    config_path, work = prepare_cubes(
        tmp_path,
        20,
        merge={"splits": {"train": 0.7, "validation": 0.3}},
    )
    merge_cli(config_path, work / "merged", ranks=2)
    meta = json.loads((work / "merged" / "metadata.json").read_text())
    ids = {
        name: {r["sample_id"] for r in ShardReader(work / "merged", name)} for name in ("train", "validation")
    }
    assert {name: len(got) for name, got in ids.items()} == {
        n: s["records"] for n, s in meta["splits"].items()
    }
    assert not ids["train"] & ids["validation"]
    assert ids["train"] | ids["validation"] == {r["sample_id"] for r in ShardReader(work / "merged")}
    with pytest.raises(Sim2dlError, match=r"has no split 'test' \(its splits: \['train', 'validation'\]\)"):
        ShardReader(work / "merged", "test")

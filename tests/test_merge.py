"""merge end to end with real MPI ranks: sorted shards, nothing lost, readable, deterministic, resumable."""

import itertools
import json
import time

import numpy as np
import pytest

from pipeline.data.tables import read_rows
from pipeline.storage.fsutil import file_checksum

from .conftest import SLOW, kill_tree, make_config, run_cli, start_cli, write_config
from .helpers import (
    TRACE_CONVERT,
    TRACE_SOURCE,
    hdf5_records,
    merge_cli,
    prepare,
    prepare_cubes,
    tfrecord_dataset,
)


def provenance(merged):
    """(shard, record, sample id, source) of every record, in shard order, from the Parquet tables."""
    return sorted(
        (r["shard"], r["record"], r["sample_id"], r["source"]) for r in read_rows(merged / "provenance")
    )


def shard_bytes(out):
    return {p.name: p.read_bytes() for p in sorted((out / "shards").iterdir())}


def prepare_traces(tmp_path, samples, **merge_settings):
    return prepare(
        tmp_path,
        simulate={"family": "trace", "runs": samples},
        source=TRACE_SOURCE,
        convert=TRACE_CONVERT,
        merge=merge_settings,
    )


def test_tfrecord_shards_sorted_complete_and_readable(tmp_path):
    config_path, work = prepare_traces(tmp_path, 60, shard_size_mb=0.02)
    summary = merge_cli(config_path, work / "merged", ranks=2)
    meta = json.loads((work / "merged" / "metadata.json").read_text())
    assert summary["shards"] == meta["counts"]["shards"] > 3
    assert meta["feature_spec"]["trace"] == {
        "dtype": "float32",
        "shape": [None, 4],
        "role": "feature",
        "encoding": "bytes",
    }

    # Read back with a plain TFRecordDataset: every accepted sample exactly once, sorted by length.
    records = list(tfrecord_dataset(work / "merged").as_numpy_iterator())
    accepted = {r["sample_id"] for r in read_rows(work / "ingest" / "manifest") if r["status"] == "accepted"}
    ids = [r["sample_id"].decode() for r in records]
    assert sorted(ids) == sorted(accepted) and len(ids) == 60
    lengths = [r["trace"].shape[0] for r in records]
    assert lengths == sorted(lengths) and lengths[0] < lengths[-1]

    # Normalised with the statistics of the records training does not hold out: mean 0, std 1 over those.
    from pipeline.data.splits import holdout_validation

    held = holdout_validation(np.array(ids, dtype=object), 0.1).numpy()
    values = np.concatenate([r["trace"].ravel() for r, h in zip(records, held, strict=True) if not h]).astype(
        "f8"
    )
    assert abs(values.mean()) < 1e-3 and abs(values.std() - 1) < 1e-3

    # Checksums, counts, index offsets and provenance agree with the files.
    prov = provenance(work / "merged")
    assert [row[2] for row in prov] == ids
    for i, shard in enumerate(meta["shards"]):
        path = work / "merged" / "shards" / shard["file"]
        assert file_checksum(path) == shard["checksum"]
        index = np.loadtxt(work / "merged" / "shards" / shard["index"], dtype=np.int64, ndmin=2)
        assert len(index) == shard["records"] == sum(1 for row in prov if row[0] == i)
        assert index[0, 0] == 0 and index[-1].sum() == path.stat().st_size
        np.testing.assert_array_equal(index[1:, 0], np.cumsum(index[:-1, 1]))


@SLOW
def test_deterministic_for_any_rank_count_and_hdf5_format(tmp_path):
    config_path, work = prepare(tmp_path, simulate={"runs": 24}, merge={"shard_size_mb": 0.5})
    merge_cli(config_path, work / "m1", ranks=1)
    merge_cli(config_path, work / "m2", ranks=2)
    merge_cli(config_path, work / "m3", ranks=2)
    assert shard_bytes(work / "m1") == shard_bytes(work / "m2") == shard_bytes(work / "m3")
    assert (work / "m1" / "metadata.json").read_bytes() == (work / "m2" / "metadata.json").read_bytes()

    config = make_config(
        tmp_path,
        simulate={"runs": 24},
        merge={"format": "hdf5", "compression": "gzip", "shard_size_mb": 0.5},
    )
    h5_config = write_config(tmp_path, config)
    merge_cli(h5_config, work / "h1", ranks=1)
    merge_cli(h5_config, work / "h2", ranks=2)
    assert shard_bytes(work / "h1") == shard_bytes(work / "h2")
    meta = json.loads((work / "h2" / "metadata.json").read_text())
    got = [
        r
        for s in meta["shards"]
        for r in hdf5_records(work / "h2" / "shards" / s["file"], meta["feature_spec"])
    ]
    assert len(got) == 24 and got[0]["density"].shape == (32, 32, 32)
    # Same records in both formats (TFRecord m1 vs HDF5 h2).
    tf_records = {r["sample_id"].decode(): r for r in tfrecord_dataset(work / "m1").as_numpy_iterator()}
    for r in got:
        np.testing.assert_array_equal(r["density"], tf_records[r["sample_id"]]["density"])
        np.testing.assert_array_equal(r["params"], tf_records[r["sample_id"]]["params"])


def test_gzip_tfrecord_and_split_into_subvolumes(tmp_path):
    config_path, work = prepare(
        tmp_path,
        simulate={"runs": 6},
        convert={"subvolume": [16, 16, 16]},
        merge={"compression": "gzip", "shard_size_mb": 0.2},
    )
    merge_cli(config_path, work / "merged", ranks=2)
    records = list(tfrecord_dataset(work / "merged").as_numpy_iterator())
    assert len(records) == 48 and records[0]["density"].shape == (16, 16, 16)
    parents = {r["sample_id"].decode().split("#")[0] for r in records}
    assert len(parents) == 6


def test_killed_merge_leaves_no_partial_shard_and_rerun_completes(tmp_path):
    # many small shards: the kill comes while most are still to be written
    config_path, work = prepare(tmp_path, simulate={"runs": 120}, merge={"shard_size_mb": 0.1})
    out = work / "merged"
    reference = tmp_path / "reference"
    merge_cli(config_path, reference, ranks=1)

    proc = start_cli(["merge", "--config", str(config_path), "--out", str(out)], 2)
    deadline = time.monotonic() + 120
    shards_dir = out / "shards"
    while time.monotonic() < deadline and not (shards_dir.exists() and any(shards_dir.glob("*.idx"))):
        time.sleep(0.05)
    kill_tree(proc)
    assert not (out / "metadata.json").exists()
    shards = [
        p for p in (out / "shards").iterdir() if p.name.startswith("shard-") and not p.name.endswith(".idx")
    ]
    for shard in shards:  # every shard that exists under its final name is complete
        assert (out / "shards" / (shard.name + ".idx")).exists()
        assert shard.read_bytes() == (reference / "shards" / shard.name).read_bytes()
    n_total = json.loads((reference / "metadata.json").read_text())["counts"]["shards"]
    if len(shards) == n_total:
        pytest.fail("merge finished before it could be interrupted; make the test data larger")

    summary = merge_cli(config_path, out, ranks=2)
    assert summary["reused_shards"] == len(shards)
    assert shard_bytes(out) == shard_bytes(reference)
    assert not [p for p in (out / "shards").iterdir() if ".tmp-" in p.name]


def test_hdf5_variable_length_records(tmp_path):
    config_path, work = prepare_traces(tmp_path, 20, format="hdf5", shard_size_mb=0.01)
    merge_cli(config_path, work / "merged", ranks=2)
    meta = json.loads((work / "merged" / "metadata.json").read_text())
    records = [
        r
        for s in meta["shards"]
        for r in hdf5_records(work / "merged" / "shards" / s["file"], meta["feature_spec"])
    ]
    lengths = [r["trace"].shape[0] for r in records]
    assert len(records) == 20 and lengths == sorted(lengths) and records[0]["trace"].shape[1] == 4
    first = meta["shards"][0]
    index = np.loadtxt(work / "merged" / "shards" / first["index"], dtype=np.int64, ndmin=2)
    assert index[:, 1].tolist() == lengths[: first["records"]]  # row ranges in trace/values


def test_tfrecord_encoding_reads_back_as_tensorflows_examples(tmp_path):
    """Uncompressed shards are encoded and framed by sim2dl (direct I/O, checksummed as written): TensorFlow
    must read every record back (its reader checks both CRCs) as the Example TensorFlow itself builds for
    the same record, the same size as TensorFlow's encoding; framed_example must say where each array's
    bytes are; the checksum must be the file's."""
    import tensorflow as tf

    from pipeline.formats.shards.tfrecord.encode import TFRecordShardWriter, framed_example

    rng = np.random.default_rng(3)
    spec = {
        "x": {"dtype": "float32", "shape": [None, 4], "role": "feature"},
        "y": {"dtype": "int64", "shape": [2], "role": "label"},
    }
    # Lengths across buffer and varint boundaries (one empty), names whose keys sort around "_shape",
    # a scalar, a big-endian array and a non-ASCII id: the Example is encoded by hand (example_pieces).
    records = [
        (
            f"id-{i}-ü",
            {"x": rng.random((n, 4), np.float32), "y": rng.integers(0, 9, 2), "x0": np.float64(n), "b": big},
        )
        for i, n in enumerate([1, 300, 0, 70_000, 5])
        for big in [np.arange(n % 7, dtype=">i4")]
    ]
    ours = TFRecordShardWriter(tmp_path / "ours.tfrecord", spec, "none")
    offsets = [ours.write(sample_id, arrays) for sample_id, arrays in records]
    ours.close()
    data = (tmp_path / "ours.tfrecord").read_bytes()
    read_back = list(tf.data.TFRecordDataset(str(tmp_path / "ours.tfrecord")).as_numpy_iterator())
    assert len(read_back) == len(records)
    for (sample_id, arrays), raw, (offset, length) in zip(records, read_back, offsets, strict=True):
        feature = {"sample_id": tf.train.Feature(bytes_list=tf.train.BytesList(value=[sample_id.encode()]))}
        for name, a in arrays.items():
            little = np.asarray(a).astype(np.asarray(a).dtype.newbyteorder("<")).tobytes()
            feature[name] = tf.train.Feature(bytes_list=tf.train.BytesList(value=[little]))
            feature[f"{name}_shape"] = tf.train.Feature(int64_list=tf.train.Int64List(value=np.shape(a)))
        expected = tf.train.Example(features=tf.train.Features(feature=feature))
        assert tf.train.Example.FromString(raw) == expected
        assert len(raw) == len(expected.SerializeToString(deterministic=True)) == length - 16
        pieces, at = framed_example(sample_id, arrays)
        assert b"".join(bytes(p) for p in pieces) == data[offset : offset + length]
        for name, a in arrays.items():
            little = np.asarray(a).astype(np.asarray(a).dtype.newbyteorder("<")).tobytes()
            assert data[offset + at[name] : offset + at[name] + len(little)] == little
    assert ours.checksum == file_checksum(tmp_path / "ours.tfrecord")
    assert offsets[0][0] == 0 and sum(length for _, length in offsets) == len(data)
    assert all(a + n == b for (a, n), (b, _) in itertools.pairwise(offsets))


def test_parts_ingested_in_order_become_shards_without_a_copy(tmp_path):
    """Cubes sorted by length (all equal, then sample id) are ingested in their final order, and convert
    leaves them unchanged: each framed ingest part is a shard as it is (a hard link, no byte read or
    written), with the same records in the same order as shards written record by record."""
    import os

    config_path, work = prepare(tmp_path, convert={"log1p": [], "normalise": []}, merge={"shard_size_mb": 1})
    summary = merge_cli(config_path, work / "merged", ranks=2)
    parts = {os.stat(p).st_ino: p for p in (work / "ingest" / "parts").glob("*.bin")}
    meta = json.loads((work / "merged" / "metadata.json").read_text())
    shards = [work / "merged" / "shards" / s["file"] for s in meta["shards"]]
    assert summary["shards"] == len(shards) == len(parts) > 3
    assert all(os.stat(s).st_ino in parts for s in shards)  # hard links to the ingest parts
    assert [s["checksum"] for s in meta["shards"]] == [file_checksum(s) for s in shards]
    for info, shard in zip(meta["shards"], shards, strict=True):
        index = np.loadtxt(shard.parent / info["index"], dtype=np.int64, ndmin=2)
        assert index[0, 0] == 0 and index[:, 1].sum() == shard.stat().st_size == info["bytes"]
    records = list(tfrecord_dataset(work / "merged").as_numpy_iterator())
    ids = [r["sample_id"].decode() for r in records]
    assert ids == sorted(ids) and len(ids) == 48
    assert [row[2] for row in provenance(work / "merged")] == ids

    # Another shard size than ingest cut the parts for: shards written record by record, same stream.
    slow_config = write_config(
        tmp_path,
        make_config(tmp_path, convert={"log1p": [], "normalise": []}, merge={"shard_size_mb": 0.7}),
    )
    merge_cli(slow_config, work / "slow", ranks=2)
    slow_meta = json.loads((work / "slow" / "metadata.json").read_text())
    slow = [work / "slow" / "shards" / s["file"] for s in slow_meta["shards"]]
    assert len(slow) != len(shards) and not any(os.stat(s).st_ino in parts for s in slow)
    assert b"".join(s.read_bytes() for s in slow) == b"".join(s.read_bytes() for s in shards)


def test_split_records_framed_by_ingest_are_linked_or_copied_as_they_are(tmp_path):
    """With splits ingest writes each split's records of a chunk to a part of its own, and convert left
    them unchanged: merge links the training split's parts as its shards (they hold about half a shard or
    more) and copies the smaller splits' framed records as ingest wrote them (runs of them, no decode or
    encode) into shards of full size. Each split's stream must be byte for byte what writing the records
    one by one gives (another shard size, for which ingest framed nothing), with indexes that frame every
    record and checksums of the files."""
    import os

    splits = {"train": 0.8, "validation": 0.1, "test": 0.1}
    unchanged = {"log1p": [], "normalise": []}
    config_path, work = prepare(tmp_path, convert=unchanged, merge={"shard_size_mb": 0.6, "splits": splits})
    parts = {
        split: {os.stat(p).st_ino for p in (work / "ingest" / "parts").glob(f"*-{split}.bin")}
        for split in splits
    }
    assert all(parts.values()) and not list((work / "ingest" / "parts").glob("part-?????-of-?????.bin"))
    summary = merge_cli(config_path, work / "merged", ranks=2)
    meta = json.loads((work / "merged" / "metadata.json").read_text())
    shards = [work / "merged" / "shards" / s["file"] for s in meta["shards"]]
    by_split = {
        split: [s for s, info in zip(shards, meta["shards"], strict=True) if info["split"] == split]
        for split in splits
    }
    assert {os.stat(s).st_ino for s in by_split["train"]} == parts["train"]
    assert not any(
        os.stat(s).st_ino in parts[split] for split in ("validation", "test") for s in by_split[split]
    )
    assert len(by_split["validation"]) < len(parts["validation"]) and len(by_split["test"]) < len(
        parts["test"]
    )
    copied = len(by_split["validation"]) + len(by_split["test"])
    assert summary["shards_made"] == {"linked": len(parts["train"]), "copied": copied, "encoded": 0}
    assert [s["checksum"] for s in meta["shards"]] == [file_checksum(s) for s in shards]
    for info, shard in zip(meta["shards"], shards, strict=True):
        index = np.loadtxt(work / "merged" / "shards" / info["index"], dtype=np.int64, ndmin=2)
        assert (index[1:, 0] == index[:-1].sum(axis=1)).all() and index[:, 1].sum() == shard.stat().st_size
    # the same shards, linked and copied alike, from one rank
    merge_cli(config_path, work / "one_rank", ranks=1)
    one_rank = json.loads((work / "one_rank" / "metadata.json").read_text())["shards"]
    assert [(s["file"], s["checksum"]) for s in one_rank] == [
        (s["file"], s["checksum"]) for s in meta["shards"]
    ]

    encoded_config = write_config(
        tmp_path, make_config(tmp_path, convert=unchanged, merge={"shard_size_mb": 0.7, "splits": splits})
    )
    encoded = merge_cli(encoded_config, work / "encoded", ranks=1)
    assert encoded["shards_made"]["copied"] == 0 and encoded["shards_made"]["encoded"] == encoded["shards"]
    encoded_meta = json.loads((work / "encoded" / "metadata.json").read_text())
    for split in splits:
        theirs = [
            work / "encoded" / "shards" / s["file"] for s in encoded_meta["shards"] if s["split"] == split
        ]
        assert b"".join(s.read_bytes() for s in by_split[split]) == b"".join(s.read_bytes() for s in theirs)
    ids = [r["sample_id"].decode() for r in tfrecord_dataset(work / "merged").as_numpy_iterator()]
    assert len(ids) == len(set(ids)) == 48


def test_splits_by_parent_hash_in_their_own_directories_same_for_any_rank_count(tmp_path):
    from pipeline.data.splits import split_numbers

    config_path, work = prepare_cubes(
        tmp_path,
        40,
        convert={"subvolume": [4, 4, 4]},
        merge={"shard_size_mb": 0.05, "splits": {"validation": 0.25, "train": 0.75}},
    )
    merge_cli(config_path, work / "m1", ranks=1)
    merge_cli(config_path, work / "m2", ranks=2)
    assert sorted(p.name for p in (work / "m1" / "shards").iterdir()) == [
        "plan.digest",
        "train",
        "validation",
    ]
    files = {p.relative_to(work / "m1").as_posix(): p.read_bytes() for p in (work / "m1").rglob("shards/*/*")}
    assert files == {
        p.relative_to(work / "m2").as_posix(): p.read_bytes() for p in (work / "m2").rglob("shards/*/*")
    }
    meta = json.loads((work / "m2" / "metadata.json").read_text())
    splits = meta["splits"]
    assert set(splits) == {"train", "validation"} and splits["train"]["directory"] == "shards/train"
    assert splits["train"]["records"] + splits["validation"]["records"] == meta["counts"]["records"] == 320
    assert splits["train"]["shards"] >= 2 and splits["validation"]["shards"] >= 1
    by_split = {}
    for shard in meta["shards"]:
        assert shard["file"].startswith(f"{shard['split']}/")
        path = work / "m2" / "shards" / shard["file"]
        assert shard["index"] == shard["file"] + ".idx" and (work / "m2" / "shards" / shard["index"]).exists()
        for r in tfrecord_dataset_files([path], meta["feature_spec"]):
            by_split.setdefault(shard["split"], []).append(r)
    parents = {name: {sid.split("#")[0] for sid in ids} for name, ids in by_split.items()}
    assert not parents["train"] & parents["validation"]  # sub-volumes of one cube stay in one split
    assert all(len(ids) == 8 * len(parents[name]) for name, ids in by_split.items())
    for name, expected in (("train", 0), ("validation", 1)):  # the documented assignment, in name order
        assert set(split_numbers(sorted(parents[name]), [0.75, 0.25])) == {expected}
    assert 0.5 < splits["train"]["records"] / 320 < 0.95
    assert len(provenance(work / "m2")) == 320


def tfrecord_dataset_files(paths, spec):
    """The sample ids of TFRecord files, read with tf.data."""
    import tensorflow as tf

    from pipeline.training.tfdata import parse_example

    ds = tf.data.TFRecordDataset([str(p) for p in paths]).map(lambda s: parse_example(s, spec)["sample_id"])
    return [s.decode() for s in ds.as_numpy_iterator()]


def test_a_grown_ingest_is_converted_and_merged_for_its_new_parts_alone(tmp_path, serial):
    """A continued design's new runs, ingested as a generation of their own, are converted and merged
    alone (2 ranks): the earlier converted parts and shards stay as they are (same inode, same time);
    convert's statistics are those a convert of every part gives; the new shards hold the new records,
    normalised with the statistics the first shards were written with; every record is in exactly one
    shard. A rerun with nothing new reads nothing; a kept part written again, or merge.grow false, merges
    afresh."""
    import shutil

    from pipeline.formats.parts import Part
    from pipeline.steps.convert import convert
    from pipeline.steps.ingest.step import ingest
    from pipeline.steps.merge import merge
    from pipeline.steps.simulate import simulate

    sections = {
        "merge": {"shard_size_mb": 0.01, "splits": {"train": 0.7, "test": 0.3}},
        "stage": {"target": str(tmp_path / "local")},
    }
    config = make_config(
        tmp_path,
        simulate={"family": "trace", "runs": 24},
        source=TRACE_SOURCE,
        convert=TRACE_CONVERT,
        **sections,
    )
    config_path = write_config(tmp_path, config)
    simulate(config["simulate"], tmp_path / "all", serial)
    runs = sorted(p for p in (tmp_path / "all").rglob("*.h5"))
    raw, work = tmp_path / "raw", tmp_path / "work"

    def grow(files):
        for p in files:
            (raw / p.relative_to(tmp_path / "all")).parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(p, raw / p.relative_to(tmp_path / "all"))
        ingest(config, raw, work / "ingest", serial)

    def cli(step, ranks=2):  # into the config's workdir, `work`
        return json.loads(
            run_cli([step, "--config", str(config_path)], ranks=ranks).stdout.strip().splitlines()[-1]
        )

    def files(directory):
        return {
            p.relative_to(directory).as_posix(): (p.stat().st_ino, p.stat().st_mtime_ns)
            for p in directory.rglob("*")
            if p.is_file() and not p.name.endswith(".json")
        }

    grow(runs[:16])
    assert cli("convert")["inputs_read"] == 16
    first = merge(config, work / "ingest", work / "convert", work / "merged", serial)
    assert first["generations"] == 1 and first["kept_shards"] == 0
    meta0 = json.loads((work / "merged" / "metadata.json").read_text())
    converted0, shards0 = files(work / "convert" / "parts"), files(work / "merged" / "shards")
    shards0.pop("plan.digest")
    assert cli("stage")["skipped_already_staged"] == 0

    grow(runs[16:])
    converted = cli("convert")
    assert converted["inputs_read"] == 8 and converted["inputs"] == converted["samples"] == 24
    now = files(work / "convert" / "parts")
    assert {k: now[k] for k in converted0} == converted0 and len(now) > len(converted0)
    everything = convert(config, work / "ingest", tmp_path / "convert-all", serial)
    assert everything["inputs_read"] == 24
    stats = json.loads((work / "convert" / "stats.json").read_text())
    assert (
        stats["statistics"] == json.loads((tmp_path / "convert-all" / "stats.json").read_text())["statistics"]
    )
    assert stats["statistics"] != meta0["statistics"]

    grown = cli("merge")
    assert grown["kept_shards"] == first["shards"] and grown["generations"] == 2 and "afresh" not in grown
    now = files(work / "merged" / "shards")
    assert {k: now[k] for k in shards0} == shards0
    new = sorted(set(now) - set(shards0) - {"plan.digest"})
    assert new and all("/shard-g0001-" in name for name in new)
    meta = json.loads((work / "merged" / "metadata.json").read_text())
    assert meta["statistics"] == meta0["statistics"] and meta["statistics_from"]["generation"] == 0
    assert [g["records"] for g in meta["generations"]] == [16, 8] and meta["counts"]["records"] == 24
    records = list(tfrecord_dataset(work / "merged").as_numpy_iterator())
    ids = [r["sample_id"].decode() for r in records]
    accepted = {r["sample_id"] for r in read_rows(work / "ingest" / "manifest") if r["status"] == "accepted"}
    assert sorted(ids) == sorted(accepted) and len(ids) == 24
    assert sorted(row[2] for row in provenance(work / "merged")) == sorted(ids)
    # Staged again into the same directory: only the new shards are read from the shared file system.
    staged = cli("stage")
    assert meta["first_plan_digest"] == meta0["plan_digest"] != meta["plan_digest"]
    assert staged["skipped_already_staged"] == len(meta0["shards"])
    assert staged["bytes_read_shared_fs"] == sum(s["bytes"] for s in meta["shards"][len(meta0["shards"]) :])
    # A new record, as the grown shards hold it: its converted values with the first statistics.
    added = sorted(set(files(work / "convert" / "parts")) - set(converted0))
    part = Part(work / "convert" / "parts" / added[0].removesuffix(".bin").removesuffix(".jsonl"))
    record = next(r for r in records if r["sample_id"].decode() == part.meta(0)["sample_id"])
    first_stats = meta0["statistics"]["trace"]
    expected = (part.read(0)["trace"] - first_stats["mean"]) / first_stats["std"]
    np.testing.assert_allclose(record["trace"], expected, rtol=1e-6)

    assert cli("convert", ranks=1)["inputs_read"] == 0
    again = merge(config, work / "ingest", work / "convert", work / "merged", serial)
    assert again["shards_made"] == {"linked": 0, "copied": 0, "encoded": 0} and again["generations"] == 2
    assert json.loads((work / "merged" / "metadata.json").read_text()) == meta

    rewritten = sorted(converted0)[0].removesuffix(".bin").removesuffix(".jsonl")
    (work / "convert" / "parts" / f"{rewritten}.jsonl").unlink()  # the part is converted again
    assert cli("convert", ranks=1)["inputs_read"] == len(Part(work / "convert" / "parts" / rewritten)) > 0
    afresh = merge(config, work / "ingest", work / "convert", work / "merged", serial)
    assert afresh["afresh"] == f"converted part {rewritten} was written again" and afresh["generations"] == 1

    config["merge"]["grow"] = False
    afresh = merge(config, work / "ingest", work / "convert", work / "merged", serial)
    assert afresh["afresh"] == "merge.grow is false" and afresh["generations"] == 1
    meta = json.loads((work / "merged" / "metadata.json").read_text())
    assert meta["statistics"] == stats["statistics"] and "generations" not in meta
    assert not any("shard-g" in name for name in files(work / "merged" / "shards"))

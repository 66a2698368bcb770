"""stage with real MPI ranks (2 and 4), emulated nodes, every placement mode, and the faults."""

import json
import os
import shutil
import subprocess
import time

import numpy as np
import pytest
import tensorflow as tf

from pipeline.staging.copier import SourceFiles
from pipeline.storage.directio import aligned_buffer
from pipeline.storage.fsutil import file_checksum

from .conftest import kill_tree, make_config, run_cli, start_cli, write_config


@pytest.fixture(scope="module")
def dataset(tmp_path_factory):
    """A merged dataset of 64 cubes in 8 shards, made once for this module."""
    tmp = tmp_path_factory.mktemp("stage-data")
    config = make_config(tmp, simulate={"runs": 64}, merge={"shard_size_mb": 1.1})
    path = write_config(tmp, config)
    for step in ("simulate", "ingest", "convert", "merge"):
        run_cli([step, "--config", str(path)], ranks=2)
    meta = json.loads((tmp / "work" / "merged" / "metadata.json").read_text())
    assert meta["counts"]["shards"] >= 6
    return tmp, config, meta


def stage_args(tmp_path, dataset, **settings):
    """`sim2dl stage` arguments staging the dataset below tmp_path/local with these settings."""
    data_dir, config, _ = dataset
    tmp_path.mkdir(parents=True, exist_ok=True)
    config = {**config, "stage": {**config["stage"], "target": str(tmp_path / "local"), **settings}}
    path = write_config(tmp_path, config)
    return [
        "stage",
        "--config",
        str(path),
        "--merged",
        str(data_dir / "work" / "merged"),
        "--summary",
        str(tmp_path / "summary.json"),
    ]


def stage(tmp_path, dataset, ranks, check=True, **settings):
    proc = run_cli(stage_args(tmp_path, dataset, **settings), ranks=ranks, check=check)
    summary = json.loads((tmp_path / "summary.json").read_text()) if proc.returncode == 0 else None
    return proc, summary


def node_files(summary):
    out = []
    for d in summary["node_dirs"]:
        with open(os.path.join(d, "staged.json")) as f:
            listing = json.load(f)
        out.append({name: os.path.join(d, name) for name in listing["files"]})
    return out


def no_temporaries(root):
    return not [p for p in root.rglob("*") if ".tmp-" in p.name]


@pytest.mark.parametrize(("ranks", "nodes", "direct_io"), [(2, 2, False), (4, 2, True), (4, 4, False)])
def test_replica_reads_each_byte_once_and_every_node_gets_everything(
    tmp_path, dataset, ranks, nodes, direct_io
):
    _, _, meta = dataset
    _, summary = stage(
        tmp_path, dataset, ranks, mode="replica", emulate_nodes=nodes, chunk_mb=0.3, direct_io=direct_io
    )
    total = sum(s["bytes"] for s in meta["shards"])
    assert summary["nodes"] == nodes and summary["bytes_read_shared_fs"] == total
    assert summary["bytes_written_per_node"] == [total] * nodes
    for files in node_files(summary):
        assert sorted(files) == sorted(s["file"] for s in meta["shards"])
        for s in meta["shards"]:
            assert file_checksum(files[s["file"]]) == s["checksum"]
    # Rerun: everything is there and verified, nothing is read again.
    _, again = stage(tmp_path, dataset, ranks, mode="replica", emulate_nodes=nodes, chunk_mb=0.3)
    assert (
        again["skipped_already_staged"] == nodes * len(meta["shards"]) and again["bytes_read_shared_fs"] == 0
    )


@pytest.mark.parametrize("where", ["disk", "ramfs"])
def test_direct_reads_return_the_file_bytes_at_any_offset(tmp_path, where):
    """O_DIRECT reads of unaligned ranges, a range past the end, and a file system without O_DIRECT
    (ramfs: buffered reads instead) all give exactly the file's bytes."""
    directory = tmp_path
    if where == "ramfs":
        directory = tmp_path / "ramfs"
        directory.mkdir()
        subprocess.run(["mount", "-t", "ramfs", "ramfs", str(directory)], check=True)
    try:
        data = np.random.default_rng(0).integers(0, 256, 3 * 4096 + 123, dtype=np.uint8)
        path = directory / "source"
        path.write_bytes(data.tobytes())
        errors: list[str] = []
        files = SourceFiles(direct=True, errors=errors)
        for offset, length in [
            (0, 4096),
            (0, 8192),
            (4096, 100),
            (5, 4096),
            (4000, 200),
            (12000, 1000),
            (0, 20000),
        ]:
            for view in (aligned_buffer(length), aligned_buffer(length + 1)[1:]):  # page-aligned or not
                n = files.read(path, offset, view)
                expected = data[offset : offset + length]
                assert n == len(expected) and np.array_equal(view[:n], expected), (offset, length)
        assert files._open[path][1] is (where == "disk")  # opened with O_DIRECT where there is one
        files.close()
        assert not errors and files.bytes_read > 0
    finally:
        if where == "ramfs":
            subprocess.run(["umount", str(directory)], check=True)


def test_partition_writes_every_shard_once_overall(tmp_path, dataset):
    _, _, meta = dataset
    _, summary = stage(tmp_path, dataset, 4, mode="partition", emulate_nodes=4)
    per_node = node_files(summary)
    names = [n for files in per_node for n in files]
    assert sorted(names) == sorted(s["file"] for s in meta["shards"])  # disjoint and complete
    total = sum(s["bytes"] for s in meta["shards"])
    assert sum(summary["bytes_written_per_node"]) == summary["bytes_read_shared_fs"] == total
    assert max(summary["bytes_written_per_node"]) < total / 2  # balanced across 4 nodes


@pytest.mark.parametrize("replacement", [True, False])
def test_sample_mode_gives_each_rank_its_records(tmp_path, dataset, replacement):
    # Without replacement, with direct I/O: the sampled records are unaligned byte ranges.
    _, summary = stage(
        tmp_path,
        dataset,
        4,
        mode="sample",
        emulate_nodes=2,
        samples_per_rank=20,
        replacement=replacement,
        direct_io=not replacement,
    )
    per_node = node_files(summary)
    assert [sorted(f) for f in per_node] == [
        ["rank-00000.tfrecord", "rank-00001.tfrecord"],
        ["rank-00002.tfrecord", "rank-00003.tfrecord"],
    ]
    for files in per_node:
        for path in files.values():
            records = list(tf.data.TFRecordDataset(path))  # valid framing and CRCs
            assert len(records) == 20
            if not replacement:
                assert len(set(r.numpy() for r in records)) == 20
    proc, _ = stage(
        tmp_path / "x", dataset, 2, check=False, mode="sample", samples_per_rank=1000, replacement=False
    )
    assert (
        proc.returncode != 0 and "'stage.samples_per_rank': 1000 samples without replacement" in proc.stderr
    )


def test_corrupt_source_is_named_and_nothing_kept_then_rerun_completes(tmp_path, dataset):
    data_dir, _, meta = dataset
    victim = data_dir / "work" / "merged" / "shards" / meta["shards"][2]["file"]
    original = victim.read_bytes()
    try:
        damaged = bytearray(original)
        damaged[len(damaged) // 2] ^= 0xFF
        victim.write_bytes(bytes(damaged))
        proc, _ = stage(tmp_path, dataset, 4, check=False, mode="replica", emulate_nodes=2)
        assert proc.returncode != 0
        assert f"shard {victim.name} on node" in proc.stderr and "checksum mismatch" in proc.stderr
        for node in (tmp_path / "local").rglob("node-*"):
            assert not (node / victim.name).exists()
        assert no_temporaries(tmp_path / "local")
    finally:
        victim.write_bytes(original)
    _, summary = stage(tmp_path, dataset, 4, mode="replica", emulate_nodes=2)
    assert summary["skipped_already_staged"] > 0  # the good shards of the failed run were kept
    for files in node_files(summary):
        assert file_checksum(files[victim.name]) == meta["shards"][2]["checksum"]


def test_missing_source_shard_fails_before_writing(tmp_path, dataset):
    data_dir, _, meta = dataset
    victim = data_dir / "work" / "merged" / "shards" / meta["shards"][0]["file"]
    moved = victim.with_name("away")
    victim.rename(moved)
    try:
        proc, _ = stage(tmp_path, dataset, 2, check=False, emulate_nodes=2)
    finally:
        moved.rename(victim)
    assert proc.returncode != 0 and f"source shard {victim}: missing" in proc.stderr
    assert not (tmp_path / "local").exists() or not [p for p in (tmp_path / "local").rglob("*.tfrecord")]


def test_target_without_enough_space(tmp_path, dataset):
    small = tmp_path / "small"
    small.mkdir()
    subprocess.run(["mount", "-t", "tmpfs", "-o", "size=2m", "tmpfs", str(small)], check=True)
    try:
        proc, _ = stage(tmp_path, dataset, 2, check=False, target=str(small), emulate_nodes=2)
        assert proc.returncode != 0
        assert "node 0" in proc.stderr and "GB free, staging needs" in proc.stderr
        assert not [p for p in small.rglob("*") if p.is_file()]
    finally:
        subprocess.run(["umount", str(small)], check=True)


def test_killed_rank_leaves_no_partial_file_and_rerun_completes(tmp_path, dataset):
    _, _, meta = dataset
    for _attempt in range(5):
        proc = start_cli(stage_args(tmp_path, dataset, emulate_nodes=2, chunk_mb=0.05), 4)
        deadline = time.monotonic() + 60
        # Kill as soon as the first copy has started (its temporary file appears): waiting for a finished
        # shard let the whole small job finish first now and then.
        while time.monotonic() < deadline and not any((tmp_path / "local").rglob(".shard-*")):
            time.sleep(0.005)
        kill_tree(proc)
        if not (tmp_path / "summary.json").exists():
            break
        # The small job won the race (a loaded machine polls late): start afresh, and kill again.
        shutil.rmtree(tmp_path / "local")
        (tmp_path / "summary.json").unlink()
    assert not (tmp_path / "summary.json").exists(), "the job finished before every kill"
    for f in (tmp_path / "local").rglob("shard-*"):  # whatever exists under a final name is complete
        shard = next(s for s in meta["shards"] if s["file"] == f.name)
        assert file_checksum(f) == shard["checksum"]
    _, summary = stage(tmp_path, dataset, 4, emulate_nodes=2, chunk_mb=0.05)
    assert no_temporaries(tmp_path / "local")
    for files in node_files(summary):
        assert len(files) == len(meta["shards"])
        assert all(
            np.isclose(os.path.getsize(p), s["bytes"])
            for p, s in zip([files[s["file"]] for s in meta["shards"]], meta["shards"], strict=True)
        )

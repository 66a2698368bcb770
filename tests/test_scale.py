"""Bookkeeping at scale, correct at a size CI can afford: 20,000 tiny files in 20 directories through ingest,
convert and merge with 1 and 2 real MPI ranks (memory and speed targets, to 10^6 files, live in
bench/scale.py)."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import numpy as np
import pandas as pd
import pyarrow.parquet as pq
import yaml

from pipeline.steps.simulate import sample_path

from .conftest import run_cli

FILES = 20_000  # (40,000 until 2026-11-27: the same code paths, half the suite's time)


def tiny_config(tmp_path: Path, workdir: Path, **source: object) -> Path:
    config = {
        "workdir": str(workdir),
        "simulate": {"runs": FILES, "cube": {"size": 4}},
        "source": {
            "path": str(tmp_path / "raw"),
            "sample_id": {"attr": "sample_id"},  # the simulator's ids: a copied file is a duplicate
            "fields": {
                "density": {"path": "density", "dtype": "float32", "shape": [4, 4, 4]},
                "params": {"path": "params", "dtype": "float32", "shape": [3]},
            },
            **source,
        },
        "ingest": {"max_reject_fraction": 0.01},
        "convert": {"features": ["density"], "labels": ["params"], "normalise": ["density", "params"]},
        "merge": {"shard_size_mb": 1},  # 7 shards
    }
    path = workdir.with_suffix(".yaml")
    path.write_text(yaml.safe_dump(config))
    return path


def steps(config: Path, ranks: int) -> dict[str, dict]:
    out = {}
    for step in ("ingest", "convert", "merge"):
        proc = run_cli([step, "--config", str(config)], ranks=ranks, timeout=900)
        out[step] = json.loads(proc.stdout.strip().splitlines()[-1])
    return out


def test_twenty_thousand_files_same_shards_for_one_and_two_ranks_provenance_complete(tmp_path):
    simulate = tiny_config(tmp_path, tmp_path / "sim")
    run_cli(["simulate", "--config", str(simulate), "--out", str(tmp_path / "raw")], ranks=2, timeout=900)
    # One duplicate id, in the last directory: held by the other rank than its first copy when 2 run.
    first = sample_path(tmp_path / "raw", 0, 1000)
    duplicate = tmp_path / "raw" / "zz" / "copy.h5"
    duplicate.parent.mkdir()
    shutil.copy(first, duplicate)

    results = {}
    for ranks in (1, 2):
        config = tiny_config(tmp_path, tmp_path / f"r{ranks}")
        results[ranks] = steps(config, ranks)
        assert results[ranks]["ingest"]["accepted"] == FILES and results[ranks]["ingest"]["rejected"] == 1
        assert results[ranks]["merge"]["records"] == FILES
    one, two = tmp_path / "r1", tmp_path / "r2"

    # The same shards, byte for byte, and the same metadata.json, whatever the rank count.
    meta = json.loads((two / "merged" / "metadata.json").read_text())
    assert (one / "merged" / "metadata.json").read_bytes() == (two / "merged" / "metadata.json").read_bytes()
    assert meta["counts"]["shards"] > 4 and meta["counts"]["records"] == FILES
    for shard in meta["shards"]:
        a, b = (d / "merged" / "shards" / shard["file"] for d in (one, two))
        assert a.read_bytes() == b.read_bytes()
    assert len(json.dumps(meta)) < 20_000  # about the dataset, not its records

    # The manifest: a Parquet table pyarrow and pandas read, every input once, the duplicate rejected.
    manifest = pd.read_parquet(two / "ingest" / "manifest")
    assert len(manifest) == FILES + 1 and manifest["path"].is_unique
    rejected = manifest[manifest["status"] == "rejected"]
    assert rejected["path"].tolist() == [str(duplicate)]
    assert rejected["reason"].iloc[0] == f"duplicate sample id 'cube-2026-00000000' (first seen in {first})"
    assert pq.read_table(one / "ingest" / "manifest").num_rows == FILES + 1
    rejects = (two / "ingest" / "rejects.csv").read_text().splitlines()
    assert len(rejects) == 2 and str(duplicate) in rejects[1]

    # Provenance: every accepted sample id exactly once, at a distinct place of the shard it is in.
    accepted = set(manifest.loc[manifest["status"] == "accepted", "sample_id"])
    for d in (one, two):
        provenance = pd.read_parquet(d / "merged" / "provenance")
        assert len(provenance) == FILES and provenance["sample_id"].is_unique
        assert set(provenance["sample_id"]) == accepted
        assert not provenance.duplicated(["shard", "record"]).any()
        per_shard = provenance.groupby("shard")["record"].agg(["count", "max"])
        assert per_shard["count"].tolist() == [s["records"] for s in meta["shards"]]
        assert (per_shard["max"] + 1 == per_shard["count"]).all()
        row = provenance[provenance["sample_id"] == "cube-2026-00000000"].iloc[0]
        assert row["source"] == str(first)


def test_an_input_list_names_the_files_in_its_order(tmp_path):
    """source.list: one path per line (relative to source.path or absolute), comments and blank lines
    skipped, the list's order kept, a listed file that does not exist rejected with its reason."""
    simulate = tiny_config(tmp_path, tmp_path / "sim")
    config = yaml.safe_load(simulate.read_text())
    config["simulate"]["runs"] = 30
    simulate.write_text(yaml.safe_dump(config))
    run_cli(["simulate", "--config", str(simulate), "--out", str(tmp_path / "raw")], ranks=2)
    chosen = [sample_path(Path("."), i, 1000) for i in (7, 3, 21, 0, 12)]
    listing = tmp_path / "inputs.txt"
    lines = ["# chosen samples", str(chosen[0]), "", str(tmp_path / "raw" / chosen[1]), *map(str, chosen[2:])]
    listing.write_text("\n".join([*lines, "missing.h5"]) + "\n")
    listed = tiny_config(tmp_path, tmp_path / "listed", list=str(listing))
    config = yaml.safe_load(listed.read_text())
    config["ingest"]["max_reject_fraction"] = 0.5
    listed.write_text(yaml.safe_dump(config))
    proc = run_cli(["ingest", "--config", str(listed)], ranks=3)  # the list's bytes in three blocks
    assert json.loads(proc.stdout.splitlines()[-1])["accepted"] == 5
    manifest = pd.read_parquet(tmp_path / "listed" / "ingest" / "manifest")
    expected = [str(tmp_path / "raw" / c) for c in chosen]
    assert manifest["path"].tolist() == [*expected, str(tmp_path / "raw" / "missing.h5")]
    assert manifest["reason"].iloc[-1] == "unreadable: No such file or directory"
    assert (tmp_path / "listed" / "ingest" / "inputs.txt").read_text().splitlines()[1] == str(
        tmp_path / "raw" / chosen[1]
    )
    np.testing.assert_array_equal(manifest["status"].iloc[:5], ["accepted"] * 5)

"""The Snakemake workflow end to end (local executor, real MPI launches per rule)."""

import json
from pathlib import Path

import yaml

from pipeline.tables import read_csv

from .conftest import run_snakemake


def snakemake(*args, timeout=600):
    return run_snakemake(["--cores", "2", *args], timeout)


def test_demo_workflow_small_then_rerun_only_what_changed(tmp_path):
    overrides = tmp_path / "small.yaml"
    overrides.write_text(
        yaml.safe_dump(
            {
                "workdir": str(tmp_path / "w"),
                "simulate": {"samples": 40},
                "merge": {"shard_size_mb": 1},
                "stage": {"target": str(tmp_path / "local")},  # not the shared default below /tmp
                "search": {"enabled": False},  # search then train runs in test_slurm
            }
        )
    )
    proc = snakemake("--configfile", str(overrides))
    assert proc.returncode == 0, proc.stdout + proc.stderr
    log = proc.stdout + proc.stderr
    for rule in ("simulate", "ingest", "convert", "merge", "stage", "train"):
        assert f"rule {rule}:" in log
    meta = json.loads((tmp_path / "w" / "merged" / "metadata.json").read_text())
    assert meta["counts"]["records"] == 40 and meta["counts"]["rejected_files"] == 0
    manifest = read_csv(tmp_path / "w" / "ingest" / "manifest.csv")
    assert len(manifest) == 40
    staged = json.loads((tmp_path / "w" / "staged" / "summary.json").read_text())
    assert staged["mode"] == "replica" and staged["bytes_read_shared_fs"] == sum(s["bytes"] for s in meta["shards"])
    listing = json.loads((Path(staged["node_dirs"][0]) / "staged.json").read_text())
    assert listing["files"] == [s["file"] for s in meta["shards"]]
    trained = json.loads((tmp_path / "w" / "train" / "summary.json").read_text())
    assert trained["ranks"] == 2 and trained["weights_identical_across_ranks"]

    # Nothing to do the second time; a merge setting change reruns merge only.
    proc = snakemake("--configfile", str(overrides))
    assert proc.returncode == 0 and "Nothing to be done" in proc.stdout + proc.stderr
    proc = snakemake("--configfile", str(overrides), "--config", "merge={shard_size_mb: 0.5}")
    log = proc.stdout + proc.stderr
    assert proc.returncode == 0, log
    assert "rule merge:" in log and "rule stage:" in log and "rule train:" in log
    assert "rule ingest:" not in log and "rule simulate:" not in log
    meta2 = json.loads((tmp_path / "w" / "merged" / "metadata.json").read_text())
    assert meta2["counts"]["shards"] > meta["counts"]["shards"]

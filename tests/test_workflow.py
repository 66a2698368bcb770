"""The Snakemake workflow end to end (local executor, real MPI launches per rule)."""

import json
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import yaml

from pipeline import config as cfg
from pipeline.data.tables import read_rows

from .conftest import run_snakemake
from .helpers import assert_report_holds


def snakemake(*args, timeout=600):
    return run_snakemake(["--cores", "2", *args], timeout)


def test_demo_workflow_small_then_rerun_only_what_changed(tmp_path):
    # No --configfile: the demo config, with these values on top (as a user shrinks the demo).
    overrides = [
        "--config",
        f"workdir={tmp_path / 'w'}",
        "simulate={runs: 40}",
        # 40 cubes in the demo's three splits: about 16 training records a rank, for 2 epochs (the demo's 8
        # learn σ8: bench/train.py; this test asks what each step writes, and what a change reruns)
        "train={batch_size: 8, epochs: 2}",
        "merge={shard_size_mb: 1}",
        f"stage={{target: {tmp_path / 'local'}}}",  # not the shared default below /tmp
        "search={enabled: false}",  # search, and train on its best configuration: test_search
    ]
    proc = snakemake(*overrides)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    log = proc.stdout + proc.stderr
    for rule in ("simulate", "ingest", "convert", "merge", "stage", "train"):
        assert f"rule {rule}:" in log
        # each step's output is in its log, ending with its JSON summary
        step_log = (tmp_path / "w" / "logs" / f"{rule}.log").read_text().splitlines()
        assert json.loads(step_log[-1])["step"] == rule
    meta = json.loads((tmp_path / "w" / "merged" / "metadata.json").read_text())
    assert meta["counts"]["records"] == 40 and meta["counts"]["rejected_files"] == 0
    manifest = read_rows(tmp_path / "w" / "ingest" / "manifest")
    assert len(manifest) == 40
    staged = json.loads((tmp_path / "w" / "staged" / "summary.json").read_text())
    assert staged["mode"] == "replica" and staged["bytes_read_shared_fs"] == sum(
        s["bytes"] for s in meta["shards"]
    )
    listing = json.loads((Path(staged["node_dirs"][0]) / "staged.json").read_text())
    assert listing["files"] == [s["file"] for s in meta["shards"]]
    trained = json.loads((tmp_path / "w" / "train" / "summary.json").read_text())
    assert trained["ranks"] == 2 and trained["weights_identical_across_ranks"]
    # the run ends saying what it gave: each score beside its baseline, where the results are
    said = log[log.index(f"sim2dl: regression of {tmp_path / 'w'}, scored on test") :]
    for name, value in trained["r2"].items():
        assert f"r2 {name}: {value:.3g}  (baseline {trained['baseline']['r2'][name]:.3g})" in said, said
    assert f"summary: {tmp_path / 'w' / 'train' / 'summary.json'}" in said and "scores.png" in said

    assert_report_holds(tmp_path, overrides, ["learning_curves.png", "scores.png", "throughput.png"])
    resolved = yaml.safe_load((tmp_path / "w" / "config.resolved.yaml").read_text())
    assert resolved["source"]["fields"]["density"]["shape"] == [32, 32, 32]  # the demo's own settings
    assert resolved["search"]["space"]["batch_size"] == {"type": "choice", "values": [8, 16]}
    # Nothing to do the second time. The shard size is read by ingest (parts are about a shard each) and
    # merge: they and the steps below them rerun, the simulator does not.
    proc = snakemake(*overrides)
    assert proc.returncode == 0 and "Nothing to be done" in proc.stdout + proc.stderr
    changed = [*overrides[:-3], "merge={shard_size_mb: 0.5}", *overrides[-2:]]
    proc = snakemake("--dry-run", *changed)  # what would run: asked, not trained again
    log = proc.stdout + proc.stderr
    assert proc.returncode == 0, log
    assert "rule ingest:" in log and "rule merge:" in log and "rule stage:" in log and "rule train:" in log
    assert "rule simulate:" not in log
    # and run as far as the merge (a target before --config, which would read it as a value)
    proc = snakemake(str(tmp_path / "w" / "merged" / "metadata.json"), *changed)
    assert proc.returncode == 0 and "rule simulate:" not in proc.stdout + proc.stderr, proc.stderr
    meta2 = json.loads((tmp_path / "w" / "merged" / "metadata.json").read_text())
    assert meta2["counts"]["shards"] > meta["counts"]["shards"]


# One valid change to each key of STEP_SETTINGS (a leaf inside it, for sections), in the config below.
CHANGES = {
    "simulate": ("simulate.seed", 7),
    "source.path": ("source.path", "elsewhere"),
    "source": ("source.glob", "**/*.hdf5"),
    "ingest": ("ingest.check_finite", False),
    "convert.features": ("convert.features", ["extra"]),
    "convert.stack": ("convert.stack", {"both": ["density", "extra"]}),
    "convert.deposit": ("convert.deposit", {"grid": {"positions": "extra", "shape": [4, 4, 4], "box": 1.0}}),
    "merge.format": ("merge.format", "hdf5"),
    "merge.compression": ("merge.compression", "gzip"),
    "merge.shard_size_mb": ("merge.shard_size_mb", 4),
    "convert": ("convert.dtype", "float64"),
    "merge": ("merge.sort_by", "length"),
    "merge.splits": ("merge.splits", {"train": 0.8, "validation": 0.2}),
    "merge.split_by": ("merge.split_by", "file"),
    "train.validation_fraction": ("train.validation_fraction", 0.2),
    "stage": ("stage.mode", "partition"),
    "train": ("train.epochs", 3),
    "simulate.enabled": ("simulate.enabled", False),
    "search": ("search.seed", 5),
}
# Keys whose change Snakemake itself is asked about: one read by each rule with settings, and the one
# that takes a rule away.
SNAKEMAKE_SAMPLE = ["simulate", "ingest", "convert", "merge", "stage", "search", "train", "simulate.enabled"]
# The workflow's edges: a rule's output is read by these rules.
DOWNSTREAM = {
    "simulate": {"ingest"},
    "ingest": {"convert", "merge"},
    "convert": {"merge"},
    "merge": {"stage", "search", "train", "throughput"},
    "stage": {"search", "train", "throughput"},
    "search": {"train"},
    "train": set(),
    "throughput": set(),
}


def closure(rules: set[str]) -> set[str]:
    out, todo = set(rules), list(rules)
    while todo:
        for rule in DOWNSTREAM[todo.pop()] - out:
            out.add(rule)
            todo.append(rule)
    return out


def test_each_setting_reruns_exactly_the_steps_that_read_it(tmp_path):
    """For every key of the one table of what each step reads (pipeline.config.STEP_SETTINGS): changing
    it marks exactly the rules whose step reads it as 'params changed', and only those and the rules
    below them would run."""
    keys = {key for keys in cfg.STEP_SETTINGS.values() if keys for key in keys}
    assert keys == set(CHANGES)  # a key added to the table needs a change here
    workdir = tmp_path / "w"
    base = {
        "workdir": str(workdir),
        "source": {
            "fields": {
                "density": {"path": "density"},
                "params": {"path": "params"},
                "extra": {"path": "extra"},
            }
        },
        "convert": {"features": ["density"], "labels": ["params"]},
        "search": {"enabled": True},
    }
    layout = cfg.Layout(workdir)
    outputs = [
        layout.simulate_summary,
        layout.ingest_summary,
        layout.stats,
        layout.metadata,
        layout.stage_summary,
        layout.search_best,
        layout.search_plot,
        layout.train_summary,
        layout.learning_curves,
        layout.scores_figure,
        layout.throughput_plot,
    ]
    for path in outputs:  # in the workflow's order, so that their times are too
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text("{}")
    base_file = tmp_path / "base.yaml"
    base_file.write_text(yaml.safe_dump(base))
    # --touch records each job's provenance (its params) as if it had run, without running anything.
    proc = snakemake("--configfile", str(base_file), "--touch", "--forceall")
    assert proc.returncode == 0, proc.stdout + proc.stderr

    def summary(config_file: Path) -> dict[str, tuple[str, str]]:
        # --nolock: read-only, so that two summaries run at once (each is mostly Snakemake's start-up)
        proc = snakemake("--configfile", str(config_file), "--summary", "--nolock")
        assert proc.returncode == 0, proc.stdout + proc.stderr
        rows = [line.split("\t") for line in proc.stdout.splitlines()[1:] if "\t" in line]
        return {row[2]: (row[4], row[5]) for row in rows}  # rule -> (status, plan)

    assert set(summary(base_file).values()) == {("ok", "no update")}
    base_rules = set(summary(base_file))

    def changed_config(leaf: str, value: Any) -> dict[str, Any]:
        changed = json.loads(json.dumps(base))
        section, _, name = leaf.partition(".")
        changed.setdefault(section, {})[name] = str(tmp_path / value) if leaf == "source.path" else value
        return changed

    def readers_of(leaf: str, rules: set[str]) -> set[str]:
        return {
            step
            for step, step_keys in cfg.STEP_SETTINGS.items()
            if step_keys and step in rules and any(leaf == k or leaf.startswith(k + ".") for k in step_keys)
        }

    # Every key: exactly its readers' params (what each rule's `params.settings` holds) change.
    base_params = rule_params(base)
    for key, (leaf, value) in CHANGES.items():
        params = rule_params(changed_config(leaf, value))
        rules = base_rules - ({"simulate"} if leaf == "simulate.enabled" else set())
        changed = {step for step in rules if step in params and params[step] != base_params[step]}
        assert readers_of(leaf, rules) and changed == readers_of(leaf, rules), (key, changed)

    # Snakemake sees those params: for one key read by each rule that has settings, exactly that rule's
    # params changed, and only it and the rules below it would run (a summary is a Snakemake start-up).
    changed_files = []
    for i, key in enumerate(SNAKEMAKE_SAMPLE):
        changed_files.append(tmp_path / f"changed-{i}.yaml")
        changed_files[-1].write_text(yaml.safe_dump(changed_config(*CHANGES[key])))
    with ThreadPoolExecutor(2) as pool:
        summaries = list(pool.map(summary, changed_files))
    for key, rules in zip(SNAKEMAKE_SAMPLE, summaries, strict=True):
        leaf = CHANGES[key][0]
        readers = readers_of(leaf, set(rules))
        params_changed = {rule for rule, (status, _) in rules.items() if status == "params changed"}
        assert params_changed == readers, (key, rules)
        # simulate.enabled: false also takes the simulator's output away from ingest's inputs
        moved = {"ingest"} if leaf == "simulate.enabled" else set()
        pending = {rule for rule, (_, plan) in rules.items() if plan == "update pending"}
        assert pending == closure(readers | moved) & set(rules), (key, rules)


def rule_params(config: dict[str, Any]) -> dict[str, str]:
    """Each step's settings as its rule's `params.settings` holds them (rules/common.smk: Run.settings)."""
    resolved = cfg.validate(json.loads(json.dumps(config)))
    return {step: json.dumps(cfg.step_settings(resolved, step), sort_keys=True) for step in cfg.STEP_SETTINGS}

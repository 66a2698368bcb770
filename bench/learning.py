"""Benchmark: what the built-in network learns beside the classical baseline, with and without symmetry
augmentation (issue #44: models to trust from few simulations).

Two datasets, each trained twice by `sim2dl train` on the same staged shards and split (2 ranks):
- demo: the workflow's demo (config/config.yaml: 1,024 cubes of sim2dl's own log-normal family, the
  demo's 8 epochs, search off);
- nbody: 160 boxes of a real particle-mesh N-body code (JaxPM via examples/nbody, config/presets/
  nbody-few.yaml: 128 to train, 32 to validate, 40 epochs of batch 8), the scarce-data case.
Per label: the network's validation R² without augmentation (the reference of the same run), with
`train.augment: {symmetries: true}`, and the ridge baseline's (summary.json's `baseline`, computed by the
train step on the same split), and network / baseline. Goals: network >= baseline on every label of the
demo; >= 0.9 of it on the N-body set. Also the baseline's share of the training step's time (goal <= 0.1).
`--quick`: 256 demo cubes and 48 boxes, fewer epochs (the figures then say little about learning).

Its own file, not bench/train.py: that one measures throughput; this one measures what is learnt and
takes its own ten minutes.
"""

from __future__ import annotations

import argparse
import json
import shutil
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))

import yaml
from common import OUT, REPO, emit, prepared, sim2dl

NBODY = REPO / "examples" / "nbody"


def train(path: Path, name: str, augment: bool) -> dict[str, Any]:
    """One training run of the prepared data: the summary's R² and baseline per label, and its time."""
    config = yaml.safe_load(path.read_text())
    config["train"] = {**config["train"], "augment": {"symmetries": augment}}
    variant = path.with_name(f"{name}.yaml")
    variant.write_text(yaml.safe_dump(config, sort_keys=False))
    out = path.parent / name
    shutil.rmtree(out, ignore_errors=True)
    start = time.perf_counter()
    sim2dl("train", "--config", str(variant), "--out", str(out))
    summary = json.loads((out / "summary.json").read_text())
    return {"r2": summary["r2"], "baseline_r2": summary["baseline"]["r2"], "kept_epoch": summary["kept"]["epoch"],
            "seconds": round(time.perf_counter() - start, 1),
            "baseline_seconds": summary["baseline"]["seconds"]}  # fmt: skip


def ratio(network: float, baseline: float) -> float | None:
    return round(network / baseline, 3) if baseline > 0 else None


def compare(work: Path, config: dict[str, Any]) -> dict[str, Any]:
    path = prepared(work, config)
    plain, augmented = train(path, "plain", False), train(path, "augmented", True)
    baseline = plain["baseline_r2"]
    labels = sorted(baseline)
    return {
        "labels": labels,
        "network_r2": {n: round(plain["r2"][n], 3) for n in labels},
        "network_augmented_r2": {n: round(augmented["r2"][n], 3) for n in labels},
        "baseline_r2": {n: round(baseline[n], 3) for n in labels},
        "augmented_vs_baseline": {n: ratio(augmented["r2"][n], baseline[n]) for n in labels},
        "kept_epoch": {"plain": plain["kept_epoch"], "augmented": augmented["kept_epoch"]},
        "train_seconds": {"plain": plain["seconds"], "augmented": augmented["seconds"]},
        "baseline_share_of_train_time": round(plain["baseline_seconds"] / plain["seconds"], 3),
    }


def demo_config(samples: int, epochs: int) -> dict[str, Any]:
    config = yaml.safe_load((REPO / "config" / "config.yaml").read_text())
    config["simulate"]["samples"] = samples
    config["search"] = {"enabled": False}
    config["train"].update({"epochs": epochs})
    return config


def nbody_config(runs: int, epochs: int) -> dict[str, Any]:
    python = subprocess.run([str(NBODY / "setup.sh")], check=True, capture_output=True, text=True)
    config = yaml.safe_load((REPO / "config" / "presets" / "nbody-few.yaml").read_text())
    command = config["simulate"]["command"]
    command[:2] = [python.stdout.strip().splitlines()[-1], str(NBODY / "simulate.py")]
    config["simulate"]["runs"] = runs
    config["train"]["epochs"] = epochs
    return config


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--quick", action="store_true")
    parser.add_argument("--only", choices=("demo", "nbody"), help="one dataset")
    args = parser.parse_args()
    work = OUT / "learning"
    shutil.rmtree(work, ignore_errors=True)
    result: dict[str, Any] = {"benchmark": "learning", "quick": args.quick}
    if args.only in (None, "demo"):
        result["demo"] = compare(work / "demo", demo_config(256 if args.quick else 1024, 2 if args.quick else 8))
    if args.only in (None, "nbody"):
        result["nbody"] = compare(work / "nbody", nbody_config(48 if args.quick else 160, 4 if args.quick else 40))
    shutil.rmtree(work, ignore_errors=True)
    emit(result)


if __name__ == "__main__":
    main()

"""Benchmark: what the built-in network learns beside the classical baseline, scored on a test split no
choice has seen (issue #55: networks that earn their place).

Regression datasets, each trained by `sim2dl train` on the same staged shards and splits (2 ranks), in
variants:
- `old_default`: train.hybrid none (the built-in alone, as before #55);
- `residual` (the default): the baseline's statistics computed in the model and joined into the head, its
  fitted prediction the offset the network learns the residual of;
- `offset`: the baseline's prediction as the offset, the head on the trunk alone;
- `statistics`: the statistics in the head, no offset;
- `residual_augmented`: residual with `train.augment: {symmetries: true}`;
- `residual_augmented_tta`: and `train.augment_eval` (validation and test average the outputs over the
  48 symmetries of a cube);
- `residual_bf16`: residual with `train.mixed_precision` (bfloat16 compute on the CPU): whether it keeps
  the scores (parity) and what it saves (`train_seconds`).
Datasets: demo (config/config.yaml: 1,024 cubes of sim2dl's own log-normal family, 8 epochs, search off,
merge.splits 0.8 / 0.1 / 0.1); nbody (160 boxes of a real particle-mesh N-body code, JaxPM via
examples/nbody, config/presets/nbody-few.yaml: splits 0.7 / 0.15 / 0.15, 40 epochs of batch 8); and by
name only (`--only nbody_small_cells`) 400 of the same code's boxes of 32³ cells over 64 Mpc/h (2 Mpc/h
cells, deep in the non-linear regime, where the field holds more than its power spectrum), 30 epochs;
laser (an openPMD field set: examples/laser's E field of a laser pulse as a PIC diagnostic holds it, 300
runs x 4 snapshots of 64 x 96 x 3, labels a0, waist and duration, `unet2d`, 30 epochs: the isotropic
spectrum cannot tell the pulse's waist from its length, a convolution can). `classes`: classification
(the Pythia preset) and segmentation (the climate preset) against their discriminant baselines, trained
once each as configured (accuracy, mean IoU; goal: the network >= the baseline).
Per variant and label: the network's test R² and the ridge baseline's on the same test records
(summary.json's `baseline`, fitted on the training split). Goals: the default network >= baseline - 0.02
on every label (`default_vs_baseline`: the smallest difference); the fit's and the statistics' cost:
`baseline_fit_share` (the pass that fits the baseline before training, over the run's time) and
`step_cost` (a training step's time per sample, the epochs' median, residual / old_default), and the
same measured in one process on fixed batches (`step_cost.*.ratio`, steady where the epochs' medians move
by 10-20 % between runs on a shared VM; goal <= 1.1).
`--quick`: 256 demo cubes, 48 boxes, 48 laser runs, 12 Pythia runs and 192 climate fields, fewer epochs
(the figures then say little about learning).

Its own file, not bench/train.py: that one measures throughput; this one measures what is learnt and
takes its own half hour.
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

import numpy as np
import yaml
from common import OUT, REPO, emit, prepared, sim2dl

NBODY = REPO / "examples" / "nbody"


DATASETS = ("step_cost", "demo", "nbody", "laser", "classes", "nbody_small_cells")
VARIANTS = {
    "old_default": {"hybrid": "none"},
    "residual": {"hybrid": "residual"},
    "offset": {"hybrid": "offset"},
    "statistics": {"hybrid": "statistics"},
    "residual_augmented": {"hybrid": "residual", "augment": {"symmetries": True}},
    "residual_augmented_tta": {"hybrid": "residual", "augment": {"symmetries": True}, "augment_eval": True},
    "residual_bf16": {"hybrid": "residual", "mixed_precision": True},
}


def train(path: Path, name: str, settings: dict[str, Any]) -> dict[str, Any]:
    """One training run of the prepared data: the summary's test R² and baseline per label, and its times."""
    config = yaml.safe_load(path.read_text())
    config["train"] = {**config["train"], **settings}
    variant = path.with_name(f"{name}.yaml")
    variant.write_text(yaml.safe_dump(config, sort_keys=False))
    out = path.parent / name
    shutil.rmtree(out, ignore_errors=True)
    start = time.perf_counter()
    sim2dl("train", "--config", str(variant), "--out", str(out))
    summary = json.loads((out / "summary.json").read_text())
    history = json.loads((out / "metrics.json").read_text())
    step_seconds = 1.0 / float(np.median([row["samples_per_s"] for row in history]))  # per sample, all ranks
    return {
        "r2": summary["r2"],
        "baseline_r2": summary["baseline"]["r2"],
        "scored_on": summary["scored_on"],
        "kept_epoch": summary["kept"]["epoch"],
        "seconds": round(time.perf_counter() - start, 1),
        "fit_seconds": summary["hybrid"].get("fit_seconds", 0.0),
        "step_seconds": step_seconds,
    }


def compare(work: Path, config: dict[str, Any], variants: list[str]) -> dict[str, Any]:
    path = work / "config.yaml" if (work / "staged").exists() else prepared(work, config)  # --keep: again
    runs = {name: train(path, name, VARIANTS[name]) for name in ["old_default", "residual", *variants]}
    baseline = runs["old_default"]["baseline_r2"]
    labels = sorted(baseline)
    return {
        "scored_on": runs["residual"]["scored_on"],
        "baseline_r2": {n: round(baseline[n], 3) for n in labels},
        **{f"{name}_r2": {n: round(run["r2"][n], 3) for n in labels} for name, run in runs.items()},
        "default_vs_baseline": round(min(runs["residual"]["r2"][n] - baseline[n] for n in labels), 3),
        "old_default_vs_baseline": round(min(runs["old_default"]["r2"][n] - baseline[n] for n in labels), 3),
        "kept_epoch": {name: run["kept_epoch"] for name, run in runs.items()},
        "train_seconds": {name: run["seconds"] for name, run in runs.items()},
        "baseline_fit_share": round(runs["residual"]["fit_seconds"] / runs["residual"]["seconds"], 3),
        "step_cost": round(runs["residual"]["step_seconds"] / runs["old_default"]["step_seconds"], 3),
    }


def demo_config(samples: int, epochs: int) -> dict[str, Any]:
    config = yaml.safe_load((REPO / "config" / "config.yaml").read_text())
    config["simulate"]["runs"] = samples
    config["search"] = {"enabled": False}
    config["train"].update({"epochs": epochs})
    return config


def nbody_config(runs: int, epochs: int, box: float | None = None) -> dict[str, Any]:
    """The N-body preset at `runs` boxes; box: their side in Mpc/h (the preset's 256 where None)."""
    python = subprocess.run([str(NBODY / "setup.sh")], check=True, capture_output=True, text=True)
    config = yaml.safe_load((REPO / "config" / "presets" / "nbody-few.yaml").read_text())
    command = config["simulate"]["command"]
    command[:2] = [python.stdout.strip().splitlines()[-1], str(NBODY / "simulate.py")]
    if box is not None:
        command += ["--box", str(box)]
    config["simulate"]["runs"] = runs
    config["train"]["epochs"] = epochs
    return config


def laser_config(runs: int, epochs: int) -> dict[str, Any]:
    """An openPMD field set (examples/laser: a laser pulse's E field as a PIC code's diagnostic holds it, 4
    snapshots per run) over a Sobol design of (a0, waist, duration), the labels the series' attributes."""
    return {
        "workdir": "unused",
        "simulate": {
            "enabled": True,
            "command": [
                sys.executable,
                str(REPO / "examples" / "laser" / "simulate.py"),
                "--a0",
                "{a0}",
                "--waist",
                "{waist}",
                "--duration",
                "{duration}",
                "--seed",
                "{seed}",
                "--out",
                "{out}",
            ],
            "runs": runs,
            "design": "sobol",
            "seed": 55,
            "space": {
                "a0": {"type": "uniform", "low": 0.5, "high": 4.0},
                "waist": {"type": "uniform", "low": 3.0, "high": 8.0},
                "duration": {"type": "uniform", "low": 8.0, "high": 20.0},
            },
        },
        "source": {
            "glob": "**/openpmd.h5",
            "format": "openpmd",
            "samples_along": "iteration",
            "sample_id": None,
            "fields": {
                "E": {"path": "meshes/E", "dtype": "float32", "shape": [64, 96, 3]},
                **{name: {"attr": name} for name in ("a0", "waist", "duration")},
            },
        },
        "convert": {
            "features": ["E"],
            "labels": ["a0", "waist", "duration"],
            "dtype": "float32",
            "normalise": ["E", "a0", "waist", "duration"],
        },
        "merge": {
            "format": "tfrecord",
            "shard_size_mb": 8,
            "split_by": "file",
            "splits": {"train": 0.7, "validation": 0.15, "test": 0.15},
        },
        "train": {
            "model": "unet2d",
            "epochs": epochs,
            "batch_size": 16,
            "learning_rate": 0.001,
            "keep": "best",
        },
        "search": {"enabled": False},
    }


def compare_classes(work: Path, quick: bool) -> dict[str, Any]:
    """Classification and segmentation against their discriminant baselines: the Pythia preset (a real
    event generator, 24 runs of 100 events, the process from the particle lists) and the climate preset
    (768 fields, a class per pixel), each trained once as configured (the default hybrid), on test."""
    result = {}
    for name, preset in (("pythia", "pythia-events.yaml"), ("climate", "climate-segmentation.yaml")):
        config = yaml.safe_load((REPO / "config" / "presets" / preset).read_text())
        if name == "pythia":
            config["simulate"]["command"][0] = sys.executable
            config["simulate"]["runs"] = 12 if quick else 24
        else:
            config["simulate"]["runs"] = 192 if quick else 768
        config["train"]["epochs"] = 2 if quick else config["train"]["epochs"]
        path = (
            work / name / "config.yaml"
            if (work / name / "staged").exists()
            else prepared(work / name, config)
        )
        out = path.parent / "default"
        shutil.rmtree(out, ignore_errors=True)
        sim2dl("train", "--config", str(path), "--out", str(out))
        summary = json.loads((out / "summary.json").read_text())
        key = "accuracy" if summary["task"] == "classification" else "mean_iou"
        baseline = summary["baseline"].get(key)  # None where no baseline applies (its `why` says so)
        result[name] = {
            "scored_on": summary["scored_on"],
            key: round(summary[key], 3),
            f"baseline_{key}": None if baseline is None else round(baseline, 3),
            "vs_baseline": None if baseline is None else round(summary[key] - baseline, 3),
            "baseline_method": summary["baseline"].get("method") or summary["baseline"].get("why"),
            "hybrid": summary["hybrid"],
        }
    return result


def step_costs(steps: int = 40, repetitions: int = 5) -> dict[str, Any]:
    """A training step's time in milliseconds with the hybrid residual model against its built-in alone, in
    this process (no MPI), interleaved repetitions and their medians: the demo's cube (cosmoflow, a batch
    of 16 of 32³) and the laser set's field (unet2d, 16 of 64 x 96 x 3). The statistics (moments and an FFT
    per sample) and the offset are the difference; goal: ratio <= 1.1."""
    import tensorflow as tf

    from pipeline.training.baseline import summary_statistics
    from pipeline.training.models import cosmoflow, unet2d
    from pipeline.training.models.base import joined_head
    from pipeline.training.models.hybrid import FittedBaseline, build_hybrid

    def step_function(model: Any) -> Any:
        optimizer = tf.keras.optimizers.Adam(1e-3)

        @tf.function
        def step(x: Any, y: Any) -> Any:
            with tf.GradientTape() as tape:
                loss = tf.reduce_mean((model(x, training=True) - y) ** 2)
            weights = model.trainable_variables
            optimizer.apply_gradients(zip(tape.gradient(loss, weights), weights, strict=True))
            return loss

        return step

    args = {"depth": 3, "width": 8, "dense": 64, "dropout": 0.0}
    result = {}
    for name, module, shape, dims in (
        ("cube_32", cosmoflow, (32, 32, 32, 1), 3),
        ("laser_64x96x3", unet2d, (64, 96, 3), 2),
    ):
        rng = np.random.default_rng(0)
        x = rng.lognormal(size=(16, *shape)).astype(np.float32)
        y = rng.normal(size=(16, 3)).astype(np.float32)
        features = summary_statistics(x[:1], dims).shape[1]
        fitted = FittedBaseline(
            dims, np.zeros(features), np.ones(features), np.zeros((features, 3)), np.zeros(3)
        )
        inputs = tf.keras.layers.Input(shape=shape)
        plain = tf.keras.Model(inputs, joined_head(module.trunk(inputs, args), 3, args))
        functions = {
            "none": step_function(plain),
            "residual": step_function(build_hybrid(module, shape, 3, args, "residual", fitted)),
        }
        times: dict[str, list[float]] = {k: [] for k in functions}
        for function in functions.values():
            for _ in range(5):  # traced and warm
                function(x, y)
        for _ in range(repetitions):
            for key, function in functions.items():
                start = time.perf_counter()
                for _ in range(steps):
                    function(x, y)
                times[key].append((time.perf_counter() - start) / steps)
        medians = {k: float(np.median(v)) for k, v in times.items()}
        result[name] = {
            "none_ms": round(medians["none"] * 1e3, 2),
            "residual_ms": round(medians["residual"] * 1e3, 2),
            "ratio": round(medians["residual"] / medians["none"], 3),
        }
    return result


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--quick", action="store_true")
    parser.add_argument("--only", choices=DATASETS, help="one dataset")
    parser.add_argument(
        "--variants",
        nargs="*",
        choices=list(VARIANTS),
        default=list(VARIANTS),
        help="beside old_default and residual (default: all)",
    )
    parser.add_argument(
        "--keep", action="store_true", help="keep the prepared data (and train from it again)"
    )
    args = parser.parse_args()
    work = OUT / "learning"
    if not args.keep:
        shutil.rmtree(work, ignore_errors=True)
    variants = [v for v in args.variants if v not in ("old_default", "residual")]
    result: dict[str, Any] = {"benchmark": "learning", "quick": args.quick}
    if args.only in (None, "step_cost"):
        result["step_cost"] = step_costs(10 if args.quick else 40, 3 if args.quick else 5)
    if args.only in (None, "demo"):
        result["demo"] = compare(
            work / "demo", demo_config(256 if args.quick else 1024, 2 if args.quick else 8), variants
        )
    if args.only in (None, "nbody"):
        result["nbody"] = compare(
            work / "nbody", nbody_config(48 if args.quick else 160, 4 if args.quick else 40), variants
        )
    if args.only in (None, "laser"):
        result["laser"] = compare(
            work / "laser", laser_config(48 if args.quick else 300, 4 if args.quick else 30), variants
        )
    if args.only in (None, "classes"):
        result["classes"] = compare_classes(work / "classes", args.quick)
    if args.only == "nbody_small_cells":  # by name only: 400 boxes of simulation
        small = nbody_config(48 if args.quick else 400, 4 if args.quick else 30, box=64.0)
        result["nbody_small_cells"] = compare(work / "small", small, variants)
    if not args.keep:
        shutil.rmtree(work, ignore_errors=True)
    emit(result)


if __name__ == "__main__":
    main()

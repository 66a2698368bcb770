"""Benchmark: online training (train.online, issue #46) against the offline chain, on the demo's cube
simulator run as an ensemble (pipeline/simulators/cube_run.py: one run = one parameter set, S cubes).

1. Fixed budget of runs (R runs x S cubes, 2 ranks each way): offline = simulate (the ensemble), ingest,
   convert, merge, stage, train; online = `sim2dl online` (1 rank simulating, 1 training) from completed
   runs, and from SST streams. Per variant: seconds from the start to the first training step and to a
   target validation loss (the higher of the two variants' best, so both reach it), and the bytes written
   to the file system besides the simulator's own output and the training outputs (model, figures,
   checkpoints). Goals: online / offline time to the target <= 0.5; bytes of training data written: none.
2. Fixed disk budget: offline may keep N runs' output (N x S cubes on disk, trained for as many steps as
   online takes); online streams 10 N runs through a buffer of the same N x S samples. The validation loss
   each reaches (each on its own held-out samples of the same distribution: offline its hash split,
   online every 5th run). Melissa's claim: more unique samples generalise better.
3. The input-wait share of online training: above, where one simulating rank cannot keep up with the
   small network, and where it does (4 times the cubes per run, a network 4 times as wide; goal <= 0.05).

Validation holds out whole runs both ways (a run's cubes share its parameters: a split by cube would
validate on parameters seen in training, and did: 0.58 against 1.14): offline by merge.splits over files
(cube_run --per-run-file: one file per run, cubes along axis 0), online every 5th run. Losses are mean
squared errors of the standardised labels (offline: convert's statistics over the training split; online:
those of the samples before the first step): comparable, not identical.
`--quick`: fewer runs and steps.
"""

from __future__ import annotations

import argparse
import json
import shutil
import sys
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))

import yaml
from common import OUT, REPO, emit, sim2dl

SIZE = 16
SPACE = {
    "sigma_8": {"type": "uniform", "low": 0.6, "high": 1.0},
    "n_s": {"type": "uniform", "low": 0.9, "high": 1.05},
    "omega_m": {"type": "uniform", "low": 0.2, "high": 0.4},
}


def config(
    work: Path, runs: int, samples: int, source: str | None, steps: int, epochs: int, capacity: int
) -> dict:
    base = yaml.safe_load((REPO / "config" / "config.yaml").read_text())
    command = [
        sys.executable,
        "-m",
        "pipeline.simulators.cube_run",
        "--out",
        "{out}",
        "--seed",
        "{seed}",
        "--sigma-8",
        "{sigma_8}",
        "--n-s",
        "{n_s}",
        "--omega-m",
        "{omega_m}",
        "--samples",
        str(samples),
        "--size",
        str(SIZE),
        *(["--write", "sst"] if source == "stream" else ["--per-run-file"]),
    ]
    base.update(
        {
            "workdir": str(work),
            "simulate": {
                "enabled": True,
                "command": command,
                "runs": runs,
                "design": "lhs",
                "space": SPACE,
                "retries": 0,
                "run_timeout_s": 120,
            },
            # a file per run, its cubes along axis 0; offline splits by file (= by run), as online holds out
            # runs
            "source": {
                "glob": "**/*.h5",
                "format": "auto",
                "sample_id": None,
                "samples_along": 0,
                "fields": {
                    "density": {"path": "density", "dtype": "float32", "shape": [SIZE] * 3},
                    "params": {"path": "params", "dtype": "float32", "shape": [3]},
                },
            },
            "search": {"enabled": False},
            "stage": {"target": str(work / "local")},
        }
    )
    base["ingest"]["max_reject_fraction"] = 0.5
    base["merge"].update({"splits": {"train": 0.8, "validation": 0.2}, "split_by": "file"})
    base["train"].update(
        {
            "batch_size": 8,
            "epochs": max(epochs, 1),
            "validation_fraction": 0.2,
            "warmup_epochs": 0,
            "decay": "none",
            "depth": 2,
            "width": 8,
            "dense": 32,
        }
    )
    if source:
        base["train"]["online"] = {
            "enabled": True,
            "source": source,
            "optimizer_steps": steps,
            "statistics_runs": 4,
            "validate_every_steps": max(1, steps // 10),
            "validation_every_run": 5,
            "buffer": {"capacity": capacity, "watermark": 16, "max_reuse": max(epochs, 1)},
            "validation_capacity": 512,
        }
    work.mkdir(parents=True, exist_ok=True)
    return base


def write(work: Path, settings: dict) -> Path:
    work.mkdir(parents=True, exist_ok=True)
    path = work / "config.yaml"
    path.write_text(yaml.safe_dump(settings, sort_keys=False))
    return path


def bytes_under(path: Path) -> int:
    return sum(p.stat().st_size for p in path.rglob("*") if p.is_file()) if path.exists() else 0


def written_besides_simulation(work: Path) -> int:
    """Bytes under the workdir except the ensemble's (raw: the runs' output, logs and runs table), the
    training outputs (train: model, figures, checkpoints), the step logs and the config: the training
    data sim2dl wrote between simulation and training."""
    kept = {"raw", "train", "logs"}
    return sum(
        bytes_under(p) if p.is_dir() else p.stat().st_size
        for p in work.iterdir()
        if p.name not in kept and p.name != "config.yaml"
    )


def best(rows: list[dict[str, Any]]) -> float:
    """The lowest finite validation loss (online rows before the first held-out run arrived have none)."""
    finite = [r["val_loss"] for r in rows if r["val_loss"] == r["val_loss"]]
    return min(finite) if finite else float("inf")


def first_below(rows: list[dict[str, Any]], target: float, start: float) -> float | None:
    """Seconds from `start` to the first row whose validation loss is at most `target`."""
    hits = [row["time"] - start for row in rows if row["val_loss"] <= target]
    return round(min(hits), 2) if hits else None


def offline(work: Path, settings: dict) -> dict[str, Any]:
    shutil.rmtree(work, ignore_errors=True)
    path = write(work, settings)
    start = time.time()
    for step in ("simulate", "ingest", "convert", "merge", "stage", "train"):
        sim2dl(step, "--config", str(path))
    train = work / "train"
    first = json.loads((train / "attempts.jsonl").read_text().splitlines()[0])["time"]
    rows = json.loads((train / "metrics.json").read_text())
    return {
        "start": start,
        "first_step_s": round(first - start, 2),
        "rows": rows,
        "bytes_written": written_besides_simulation(work),
        "best_val_loss": best(rows),
        "seconds": round(time.time() - start, 2),
    }


def online(work: Path, settings: dict, ranks: int = 2) -> dict[str, Any]:
    shutil.rmtree(work, ignore_errors=True)
    path = write(work, settings)
    start = time.time()
    summary = json.loads(sim2dl("online", "--config", str(path), ranks=ranks).strip().splitlines()[-1])
    train = work / "train"
    rows = json.loads((train / "metrics.json").read_text())
    simulator_output = sum(bytes_under(p) for p in (work / "raw").glob("[0-9]*"))  # the runs' own directories
    written = written_besides_simulation(work)
    return {
        "start": start,
        "first_step_s": round(summary["online"]["first_step_at"] - start, 2),
        "rows": rows,
        "bytes_written": written,
        "simulator_output_bytes": simulator_output,
        "best_val_loss": best(rows),
        "seconds": round(time.time() - start, 2),
        "input_wait_fraction": round(summary["online"]["input_wait_fraction"], 4),
        "arrived": summary["online"]["samples"]["arrived"],
        "ensemble": summary["ensemble"],
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--quick", action="store_true")
    args = parser.parse_args()
    runs, samples, epochs = (10, 8, 4) if args.quick else (30, 8, 8)
    root = OUT / "online"
    # 1. a fixed budget of runs
    # the same sample visits each way: offline's epochs over 80 % of the cubes (validation_fraction 0.2) on
    # 2 ranks, online's one trainer (every 5th run held out) with each sample drawn at most `epochs` times
    steps = int(epochs * runs * samples * 0.8 / 8)
    off = offline(root / "offline", config(root / "offline", runs, samples, None, 0, epochs, 0))
    on = online(root / "runs", config(root / "runs", runs, samples, "runs", steps, epochs, runs * samples))
    sst = online(
        root / "stream", config(root / "stream", runs, samples, "stream", steps, epochs, runs * samples)
    )
    target = max(off["best_val_loss"], on["best_val_loss"], sst["best_val_loss"])
    to_target = {
        name: first_below(v["rows"], target, v["start"])
        for name, v in (("offline", off), ("online_runs", on), ("online_stream", sst))
    }
    # 2. a fixed disk budget: N runs on disk offline, 10 N streamed online through N runs' worth of buffer
    n = 6 if args.quick else 8
    budget_steps = steps
    small = offline(
        root / "disk-offline",
        config(root / "disk-offline", n, samples, None, 0, max(1, budget_steps * 8 // (n * samples)), 0),
    )
    many = online(
        root / "disk-online",
        config(root / "disk-online", 10 * n, samples, "stream", budget_steps, epochs, n * samples),
    )
    # 3. when the simulations keep up: more cubes per run (a process start per run amortised) and a
    # network whose steps take longer than the cubes take to arrive
    cubes = 4 * samples
    keeps_up = config(
        root / "keeps-up", runs, cubes, "runs", int(epochs * runs * cubes * 0.8 / 8), epochs, runs * cubes
    )
    keeps_up["train"].update({"width": 32, "depth": 3, "dense": 64})
    keeps = online(root / "keeps-up", keeps_up)
    result = {
        "runs": runs,
        "cubes_per_run": samples,
        "cube": SIZE,
        "ranks": 2,
        "target_val_loss": round(target, 4),
        "seconds_to_first_step": {
            "offline": off["first_step_s"],
            "online_runs": on["first_step_s"],
            "online_stream": sst["first_step_s"],
        },
        "seconds_to_target": to_target,
        "online_vs_offline_to_target": {
            k: (
                round(to_target[k] / to_target["offline"], 3)
                if to_target[k] and to_target["offline"]
                else None
            )
            for k in ("online_runs", "online_stream")
        },
        "bytes_written_besides_simulator_output": {
            "offline": off["bytes_written"],
            "online_runs": on["bytes_written"],
            "online_stream": sst["bytes_written"],
        },
        "simulator_output_bytes": {
            "online_runs": on["simulator_output_bytes"],
            "online_stream": sst["simulator_output_bytes"],
        },
        "best_val_loss": {
            "offline": round(off["best_val_loss"], 4),
            "online_runs": round(on["best_val_loss"], 4),
            "online_stream": round(sst["best_val_loss"], 4),
        },
        "input_wait_fraction": {
            "online_runs": on["input_wait_fraction"],
            "online_stream": sst["input_wait_fraction"],
            "simulations_keep_up": keeps["input_wait_fraction"],
        },
        "fixed_disk": {
            "runs_on_disk": n,
            "offline_best_val_loss": round(small["best_val_loss"], 4),
            "online_runs_streamed": 10 * n,
            "online_best_val_loss": round(many["best_val_loss"], 4),
            "online_samples_arrived": many["arrived"],
        },
        "seconds": {"offline": off["seconds"], "online_runs": on["seconds"], "online_stream": sst["seconds"]},
    }
    shutil.rmtree(root, ignore_errors=True)
    emit(result)


if __name__ == "__main__":
    main()

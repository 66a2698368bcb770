"""Benchmark: a forward surrogate's learning curve beside the classical emulator's (issue #65).

The `reaction` family of config/presets/surrogate-forward.yaml (Fisher-KPP advection-diffusion-reaction
from fixed blobs; parameters vx, vy, kappa, r; outputs the final 32 x 32 state and the mass at 10 times).
For each number of training runs (32 ... 512; the same 256 test runs for every size, drawn apart), in
one process and on the same normalised data:
- the network: the preset's `decoder` (depth 3, width 16, dense 128), Adam at the preset's rate with a
  cosine decay, the task's loss (each output's mean squared error, weighted alike), a fixed number of
  steps whatever the size (so a small set is seen for many epochs, as a user would train it);
- the emulator: sim2dl's classical baseline for surrogates (baseline.EmulatorSums: PCA of the outputs and
  kernel ridge on random Fourier features of the parameters, penalty by 5-fold cross-validation).
Both scored by the task's VRMSE per output in physical units (tasks/surrogate.py) on the test runs.
Figures: `vrmse.<output>.<model>.<runs>`; `network_over_emulator.<output>` at the largest size (below 1:
the network is better); `crossing.<output>`: the smallest size from which the network is below the
emulator (None: never). Without --quick, also the preset's demo end to end (`snakemake --configfile
config/presets/surrogate-forward.yaml`, 2 cores): `demo_seconds` (goal <= 180 after set-up).
`--quick`: 32 and 128 runs, fewer steps; the workflow is not run.
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

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from bench.common import BIN, OUT, REPO, bench_env

SIZES, QUICK_SIZES = (32, 64, 128, 256, 512), (32, 128)
TEST_RUNS = 256
STEPS, QUICK_STEPS = 3000, 600
BATCH = 16


def dataset(count: int, offset: int) -> dict[str, np.ndarray]:
    """`count` runs of the preset's simulator, seeded offset + i (the test runs live far from the training
    runs' seeds)."""
    import yaml

    from pipeline.simulators import reaction
    from pipeline.steps import validated

    preset = yaml.safe_load((REPO / "config" / "presets" / "surrogate-forward.yaml").read_text())
    settings = validated(preset)["simulate"]
    runs = [reaction.make(settings, np.random.default_rng(offset + i)) for i in range(count)]
    return {name: np.stack([r[name] for r in runs]) for name in ("params", "state", "mass")}


def statistics(values: np.ndarray, per_channel: bool) -> dict[str, np.ndarray]:
    axes = tuple(range(values.ndim - 1)) if per_channel else None
    return {"mean": values.mean(axis=axes), "std": values.std(axis=axes)}


def surrogate_task(train: dict[str, np.ndarray]) -> Any:
    """The task as the train step builds it, with the training runs' statistics (as convert computes them)."""
    from pipeline.training.tasks.base import DataSpec, LabelField
    from pipeline.training.tasks.surrogate import Surrogate

    labels = (LabelField("state", (32, 32), "float32", statistics(train["state"], False)),
              LabelField("mass", (10,), "float32", statistics(train["mass"], True)))  # fmt: skip
    params = statistics(train["params"], True)
    return Surrogate({}, DataSpec("params", (4,), labels, ("state", "mass"), feature_statistics={"params": params}))


def normalised(task: Any, data: dict[str, np.ndarray]) -> tuple[np.ndarray, np.ndarray]:
    """(x, flat y) in the task's normalised units."""
    stats = task.data.feature_statistics["params"]
    x = (data["params"] - stats["mean"]) / stats["std"]
    ys = [((data[f.name] - f.statistics["mean"]) / f.statistics["std"]).reshape(len(x), -1) for f in task.data.labels]
    return x.astype(np.float32), np.concatenate(ys, axis=1).astype(np.float32)


def scores(task: Any, predicted: np.ndarray, y: np.ndarray) -> dict[str, float]:
    evaluation = task.evaluation()
    task.update(evaluation, predicted, y, np.zeros((len(y), 4)))
    return task.metrics(evaluation)["vrmse"]


def network(task: Any, x: np.ndarray, y: np.ndarray, steps: int, seed: int) -> Any:
    import tensorflow as tf

    from pipeline.training.models import decoder

    tf.keras.utils.set_random_seed(seed)
    model = decoder.build((4,), y.shape[1], task, {"depth": 3, "width": 16, "dense": 128, "dropout": 0.0})
    rate = tf.keras.optimizers.schedules.CosineDecay(0.002, steps)
    model.compile(tf.keras.optimizers.Adam(rate), task.loss())
    data = tf.data.Dataset.from_tensor_slices((x, y)).shuffle(len(x), seed=seed).repeat().batch(BATCH)
    model.fit(data, steps_per_epoch=steps, epochs=1, verbose=0)
    return model


def emulator(task: Any, x: np.ndarray, y: np.ndarray) -> Any:
    from pipeline.training.baseline import EmulatorSums

    features = task.baseline_features(x, 0)
    sums = EmulatorSums(features.shape[1], y.shape[1])
    sums.add(features, y.astype(np.float64))
    fitted = sums.fitted(sums.arrays())
    weights, bias = fitted.linear
    return lambda z: task.baseline_features(z, 0) @ weights + bias, fitted.settings


def demo_seconds(work: Path) -> float:
    """The preset's workflow end to end (snakemake, 2 cores), in a fresh workdir."""
    import yaml

    preset = yaml.safe_load((REPO / "config" / "presets" / "surrogate-forward.yaml").read_text())
    preset["workdir"] = str(work / "demo")
    config = work / "surrogate-forward.yaml"
    config.write_text(yaml.safe_dump(preset))
    start = time.perf_counter()
    subprocess.run([str(BIN / "snakemake"), "--cores", "2", "--configfile", str(config)], cwd=REPO, env=bench_env(),
                   check=True, capture_output=True)  # fmt: skip
    return time.perf_counter() - start


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--quick", action="store_true", help="32 and 128 runs, fewer steps, no workflow run")
    args = parser.parse_args()
    sizes, steps = (QUICK_SIZES, QUICK_STEPS) if args.quick else (SIZES, STEPS)
    work = OUT / "surrogate"
    shutil.rmtree(work, ignore_errors=True)
    work.mkdir(parents=True)
    pool, test = dataset(max(sizes), 0), dataset(TEST_RUNS, 10**6)
    figures: dict[str, Any] = {"sizes": list(sizes), "test_runs": TEST_RUNS, "steps": steps}
    curves: dict[str, dict[str, list[float]]] = {}
    for n in sizes:
        train = {k: v[:n] for k, v in pool.items()}
        task = surrogate_task(train)
        x, y = normalised(task, train)
        x_test, y_test = normalised(task, test)
        start = time.perf_counter()
        model = network(task, x, y, steps, seed=n)
        trained = time.perf_counter() - start
        start = time.perf_counter()
        predict, settings = emulator(task, x, y)
        fitted = time.perf_counter() - start
        for name, predicted in (("network", model.predict(x_test, verbose=0)), ("emulator", predict(x_test))):
            for output, value in scores(task, predicted, y_test).items():
                figures[f"vrmse.{output}.{name}.{n}"] = round(value, 4)
                curves.setdefault(f"{output}.{name}", []).append(value)
        figures[f"seconds.network.{n}"] = round(trained, 2)
        figures[f"seconds.emulator.{n}"] = round(fitted, 3)
        figures[f"emulator_components.{n}"] = settings["components"]
        print(json.dumps({k: v for k, v in figures.items() if k.endswith(f".{n}")}), file=sys.stderr, flush=True)
    for output in ("state", "mass"):
        net, emu = curves[f"{output}.network"], curves[f"{output}.emulator"]
        figures[f"network_over_emulator.{output}"] = round(net[-1] / emu[-1], 3)
        # the smallest size from which the network stays below the emulator (None: it never does)
        from_here = [n for k, n in enumerate(sizes) if all(a < b for a, b in zip(net[k:], emu[k:], strict=True))]
        figures[f"crossing.{output}"] = from_here[0] if from_here else None
    if not args.quick:
        figures["demo_seconds"] = round(demo_seconds(work), 1)
    shutil.rmtree(work, ignore_errors=True)
    print(json.dumps(figures))


if __name__ == "__main__":
    main()

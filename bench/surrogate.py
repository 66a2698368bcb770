"""Benchmark: a forward surrogate's learning curve beside the classical emulator's (issue #65).

The `reaction` family of config/presets/surrogate-forward.yaml (Fisher-KPP advection-diffusion-reaction
from fixed blobs; parameters vx, vy, kappa, r; outputs the final 32 x 32 state and the mass at 10 times).
For each number of training runs (32 ... 512; the same 256 test runs for every size, drawn apart), in
one process and on the same normalised data:
- the network: the preset's `decoder` (depth 3, width 16, dense 128), trained by the product's training
  kernel (the train step's optimizer, compiled Horovod step and cosine schedule: `fitted`) on the task's
  loss (each output's mean squared error, weighted alike), a fixed number of steps whatever the size (so
  a small set is seen for many epochs, as a user would train it);
- the emulator: sim2dl's classical baseline for surrogates (baseline.EmulatorSums: PCA of the outputs and
  kernel ridge on random Fourier features of the parameters, penalty by 5-fold cross-validation).
Both scored by the task's NRMSE per output in physical units (tasks/surrogate.py) on the test runs.
Figures: `nrmse.<output>.<model>.<runs>`; `network_over_emulator.<output>` at the largest size (below 1:
the network is better); `crossing.<output>`: the smallest size from which the network is below the
emulator (None: never). Without --quick, also the preset's demo end to end (`snakemake --configfile
config/presets/surrogate-forward.yaml`, 2 cores): `demo_seconds` (goal <= 180 after set-up).
Next state (config/presets/surrogate-next-state.yaml's data, in one process): `next.nrmse.<model>` one step
ahead for fno2d and unet2d (periodic) beside `next.nrmse.persistence` and `next.nrmse.linear` (the task's
classical baseline); `next.rollout.<model>` the NRMSE per step of a rollout over the test trajectories,
`next.rollout.persistence` beside it; goals: one step <= 0.5 x persistence's and below the linear model's
(`next.network_over_persistence`, `next.network_over_linear`), below persistence at every rollout step.
Runs of different physics (the growth rate drawn per run): `conditioned.nrmse.<none|channels|vector>` and
`conditioned.rollout_last.<...>`, fno2d given no parameters, the parameters as channels, or as FiLM's vector.
`--quick`: 32 and 128 runs, fewer steps; the workflow is not run.
"""

from __future__ import annotations

import argparse
import json
import shutil
import sys
import time
from pathlib import Path
from typing import Any

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from bench.common import OUT, REPO, workflow

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

    labels = (
        LabelField("state", (32, 32), "float32", statistics(train["state"], False)),
        LabelField("mass", (10,), "float32", statistics(train["mass"], True)),
    )
    params = statistics(train["params"], True)
    return Surrogate(
        {}, DataSpec("params", (4,), labels, ("state", "mass"), feature_statistics={"params": params})
    )


def normalised(task: Any, data: dict[str, np.ndarray]) -> tuple[np.ndarray, np.ndarray]:
    """(x, flat y) in the task's normalised units."""
    stats = task.data.feature_statistics["params"]
    x = (data["params"] - stats["mean"]) / stats["std"]
    ys = [
        ((data[f.name] - f.statistics["mean"]) / f.statistics["std"]).reshape(len(x), -1)
        for f in task.data.labels
    ]
    return x.astype(np.float32), np.concatenate(ys, axis=1).astype(np.float32)


def scores(task: Any, predicted: np.ndarray, y: np.ndarray) -> dict[str, float]:
    evaluation = task.evaluation()
    task.update(evaluation, predicted, y, np.zeros((len(y), 4)))
    return task.metrics(evaluation)["nrmse"]


def fitted(model: Any, loss: Any, x: np.ndarray, y: np.ndarray, steps: int, seed: int = 0) -> Any:
    """Every network here is trained alike, by the product's training kernel as the train step drives it:
    the train step's optimizer (pipeline.training.optimizer: Adam at the presets' 0.002), its compiled
    data-parallel step (pipeline.training.steps: Horovod, here one rank) and its learning-rate schedule
    (pipeline.training.kernel: train.decay cosine over the run, no warm-up), `steps` steps of BATCH
    samples shuffled by `seed`. Only where the batches come from differs: arrays in memory, the same for
    every model and size, instead of staged shards."""
    import horovod.tensorflow as hvd
    import tensorflow as tf

    from pipeline.steps import validated
    from pipeline.training.kernel import run_steps, schedule
    from pipeline.training.optimizer import make_optimizer
    from pipeline.training.steps import step_functions

    hvd.init()
    settings = validated(
        {"train": {"learning_rate": 0.002, "batch_size": BATCH, "decay": "cosine", "warmup_epochs": 0}}
    )["train"]
    optimizer = make_optimizer(settings, "float32")
    train_step, _ = step_functions(model, optimizer, loss, autograph=False)
    data = tf.data.Dataset.from_tensor_slices((x, y)).shuffle(len(x), seed=seed).repeat().batch(BATCH)
    rate = schedule(settings, 1, 1, steps)  # the run is one unit of `steps` steps
    run_steps(train_step, optimizer, iter(data), steps, lambda step: rate(0, step), first=True)
    return model


def network(task: Any, x: np.ndarray, y: np.ndarray, steps: int, seed: int) -> Any:
    import tensorflow as tf

    from pipeline.training.models import decoder

    tf.keras.utils.set_random_seed(seed)
    model = decoder.build((4,), y.shape[1], task, {"depth": 3, "width": 16, "dense": 128, "dropout": 0.0})
    return fitted(model, task.loss(), x, y, steps, seed)


def emulator(task: Any, x: np.ndarray, y: np.ndarray) -> Any:
    from pipeline.training.baseline import EmulatorSums

    features = task.classical_baseline().features(x, 0)
    sums = EmulatorSums(features.shape[1], y.shape[1])
    sums.add(features, y.astype(np.float64))
    fitted = sums.fitted(sums.arrays())
    weights, bias = fitted.linear
    return lambda z: task.classical_baseline().features(z, 0) @ weights + bias, fitted.settings


NEXT_RUNS, NEXT_TEST_RUNS, NEXT_STEPS, QUICK_NEXT_STEPS = 256, 64, 2000, 400


def cut(
    task: Any, states: np.ndarray, given: np.ndarray | None = None, chunks: int = 1
) -> tuple[np.ndarray, ...]:
    """Every window (inputs, targets) of normalised trajectories, with their runs' normalised parameters
    where the task is given them, cut `chunks` trajectories' worth at a time (TensorFlow's copies bounded)."""
    import tensorflow as tf

    pieces = []
    for part in np.array_split(np.arange(len(states)), chunks):
        labels = None if given is None else task.label_tensor([tf.constant(given[part])], True)
        pieces.append([w.numpy() for w in task.samples(tf.constant(states[part]), labels)])
    return tuple(np.concatenate(p) for p in zip(*pieces, strict=True))


def one_step(task: Any, predicted: np.ndarray, y: np.ndarray, x: np.ndarray) -> dict[str, Any]:
    """The task's scores of one step ahead (NRMSE, persistence's) on these windows."""
    evaluation = task.evaluation()
    task.update(evaluation, predicted, y, x)
    return task.metrics(evaluation)


def next_state(steps: int) -> dict[str, Any]:
    """config/presets/surrogate-next-state.yaml's data in one process: trajectories of 10 states with fixed
    physics from random blobs; one state in, the next out (the task's windows). fno2d and unet2d (periodic)
    trained alike; one-step NRMSE beside persistence and the linear baseline; a rollout over each test
    trajectory's 9 steps from its first state, beside persistence's."""
    import tensorflow as tf
    import yaml

    from pipeline.simulators import reaction
    from pipeline.steps import validated
    from pipeline.training.baseline import EmulatorSums
    from pipeline.training.models import fno, unet2d
    from pipeline.training.tasks.base import DataSpec
    from pipeline.training.tasks.next_state import NextState

    preset = yaml.safe_load((REPO / "config" / "presets" / "surrogate-next-state.yaml").read_text())
    settings = validated(preset)["simulate"]

    def trajectories(count: int, offset: int) -> np.ndarray:
        return np.stack(
            [reaction.make(settings, np.random.default_rng(offset + i))["trajectory"] for i in range(count)]
        )

    train, test = trajectories(NEXT_RUNS, 0), trajectories(NEXT_TEST_RUNS, 10**6)
    mean, std = float(train.mean()), float(train.std())
    data = DataSpec(
        "trajectory", train.shape[1:], (), (), feature_statistics={"trajectory": {"mean": mean, "std": std}}
    )
    task = NextState({"next_state": {"states_in": 1, "states_out": 1}}, data)
    x, y = cut(task, (train - mean) / std, chunks=8)
    x_test, y_test = cut(task, (test - mean) / std)
    figures: dict[str, Any] = {"next.train_runs": NEXT_RUNS, "next.test_runs": NEXT_TEST_RUNS}

    features = task.classical_baseline().features(x, 2)
    sums = EmulatorSums(features.shape[1], y.shape[1])
    sums.add(features, y.astype(np.float64))
    weights, bias = sums.fitted(sums.arrays()).linear
    linear = one_step(task, task.classical_baseline().features(x_test, 2) @ weights + bias, y_test, x_test)
    figures["next.nrmse.linear"] = round(linear["nrmse"]["trajectory"], 4)
    figures["next.nrmse.persistence"] = round(linear["persistence_nrmse"]["trajectory"], 4)
    args = {"depth": 3, "width": 16, "dense": 64, "dropout": 0.0}
    for name, module, options in (("fno2d", fno, {"modes": 8}), ("unet2d", unet2d, {"periodic": True})):
        tf.keras.utils.set_random_seed(0)
        model = module.build(task.model_feature_shape, task.outputs(), task, {**args, **options})
        start = time.perf_counter()
        fitted(model, task.loss(), x, y, steps)
        figures[f"next.seconds.{name}"] = round(time.perf_counter() - start, 1)
        scored = one_step(task, model.predict(x_test, verbose=0), y_test, x_test)
        figures[f"next.nrmse.{name}"] = round(scored["nrmse"]["trajectory"], 4)
        runs = [((test - mean) / std, np.zeros((len(test), 0)))]  # whole trajectories, no parameters given
        rolled = task.rollout_summary([task.rollout(lambda z, m=model: m.predict(z, verbose=0), runs)])
        figures[f"next.rollout.{name}"] = [round(v, 3) for v in rolled["nrmse_per_step"]]
        figures[f"next.rollout.{name}.below_persistence_at_every_step"] = rolled[
            "below_persistence_at_every_step"
        ]
        figures[f"next.spectrum_relative_error.{name}"] = [
            round(v, 3) for v in rolled["spectrum_relative_error"]
        ]
        figures["next.rollout.persistence"] = [round(v, 3) for v in rolled["persistence_nrmse_per_step"]]
    best = min(figures["next.nrmse.fno2d"], figures["next.nrmse.unet2d"])
    figures["next.network_over_persistence"] = round(best / figures["next.nrmse.persistence"], 3)
    figures["next.network_over_linear"] = round(best / figures["next.nrmse.linear"], 3)
    return figures


def conditioned(steps: int) -> dict[str, Any]:
    """Runs of different physics: the next-state preset's simulator with the growth rate drawn per run (0.5
    to 6), so that the states alone do not say how fast the next one grows. fno2d (as in next_state) trained
    alike without the parameters, with them as constant channels, and as FiLM's conditioning vector
    (train.next_state.condition: false / channels / vector); one-step NRMSE on the test windows and the
    rollout's NRMSE at its last step, beside persistence's."""
    import tensorflow as tf
    import yaml

    from pipeline.simulators import reaction
    from pipeline.steps import validated
    from pipeline.training.models import fno
    from pipeline.training.tasks.base import DataSpec, LabelField
    from pipeline.training.tasks.next_state import NextState

    preset = yaml.safe_load((REPO / "config" / "presets" / "surrogate-next-state.yaml").read_text())
    preset["simulate"]["reaction"]["growth"] = [0.5, 6.0]
    settings = validated(preset)["simulate"]

    def runs(count: int, offset: int) -> tuple[np.ndarray, np.ndarray]:
        made = [reaction.make(settings, np.random.default_rng(offset + i)) for i in range(count)]
        return np.stack([r["trajectory"] for r in made]), np.stack([r["params"] for r in made])

    (train, params), (test, test_params) = runs(NEXT_RUNS, 0), runs(NEXT_TEST_RUNS, 10**6)
    mean, std = float(train.mean()), float(train.std())
    p_mean, p_std = params.mean(axis=0), np.where(params.std(axis=0) > 0, params.std(axis=0), 1.0)
    label = LabelField("params", (4,), "float32", {"mean": p_mean.tolist(), "std": p_std.tolist()})
    data = DataSpec(
        "trajectory",
        train.shape[1:],
        (label,),
        ("params",),
        feature_statistics={"trajectory": {"mean": mean, "std": std}},
    )
    states, test_states = (train - mean) / std, (test - mean) / std
    given, test_given = (((p - p_mean) / p_std).astype(np.float32) for p in (params, test_params))
    figures: dict[str, Any] = {}
    for condition in (False, "channels", "vector"):
        name = condition or "none"
        task = NextState({"next_state": {"states_in": 1, "states_out": 1, "condition": condition}}, data)
        x, y = cut(task, states, given, chunks=8)
        x_test, y_test = cut(task, test_states, test_given)
        tf.keras.utils.set_random_seed(0)
        model = fno.build(
            task.model_feature_shape,
            task.outputs(),
            task,
            {"depth": 3, "width": 16, "dense": 64, "dropout": 0.0, "modes": 8},
        )
        fitted(model, task.loss(), x, y, steps)
        scored = one_step(task, model.predict(x_test, verbose=0), y_test, x_test)
        figures[f"conditioned.nrmse.{name}"] = round(scored["nrmse"]["trajectory"], 4)
        figures["conditioned.nrmse.persistence"] = round(scored["persistence_nrmse"]["trajectory"], 4)
        rolled = task.rollout_summary(
            [task.rollout(lambda z, m=model: m.predict(z, verbose=0), [(test_states, test_given)])]
        )
        figures[f"conditioned.rollout_last.{name}"] = round(rolled["nrmse_per_step"][-1], 3)
        figures["conditioned.rollout_last.persistence"] = round(rolled["persistence_nrmse_per_step"][-1], 3)
    return figures


def demo_seconds(work: Path) -> float:
    """The preset's workflow end to end (snakemake, 2 cores), in a fresh workdir."""
    import yaml

    preset = yaml.safe_load((REPO / "config" / "presets" / "surrogate-forward.yaml").read_text())
    return workflow({**preset, "workdir": str(work / "demo")}, work / "surrogate-forward.yaml")


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
                figures[f"nrmse.{output}.{name}.{n}"] = round(value, 4)
                curves.setdefault(f"{output}.{name}", []).append(value)
        figures[f"seconds.network.{n}"] = round(trained, 2)
        figures[f"seconds.emulator.{n}"] = round(fitted, 3)
        figures[f"emulator_components.{n}"] = settings["components"]
        print(
            json.dumps({k: v for k, v in figures.items() if k.endswith(f".{n}")}), file=sys.stderr, flush=True
        )
    for output in ("state", "mass"):
        net, emu = curves[f"{output}.network"], curves[f"{output}.emulator"]
        figures[f"network_over_emulator.{output}"] = round(net[-1] / emu[-1], 3)
        # the smallest size from which the network stays below the emulator (None: it never does)
        from_here = [
            n for k, n in enumerate(sizes) if all(a < b for a, b in zip(net[k:], emu[k:], strict=True))
        ]
        figures[f"crossing.{output}"] = from_here[0] if from_here else None
    figures.update(next_state(QUICK_NEXT_STEPS if args.quick else NEXT_STEPS))
    figures.update(conditioned(QUICK_NEXT_STEPS if args.quick else NEXT_STEPS))
    if not args.quick:
        figures["demo_seconds"] = round(demo_seconds(work), 1)
    shutil.rmtree(work, ignore_errors=True)
    print(json.dumps(figures))


if __name__ == "__main__":
    main()

"""A task is a plug-in in fact: a Task subclass defined only in this file (LabelSum: the sum of the
labels, one number per sample), named by train.task as 'path/to/file.py:Class', trains on staged shards,
as a population and online, and writes its summary beside the classical baseline; no pipeline module
names it. The hooks it defines are the few every task needs (outputs, label_tensor, loss, evaluation,
update, metrics, figure) and the baseline's (ridge regression, as regression's); the rest are Task's
defaults."""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from pipeline.training.baseline import RidgeSums
from pipeline.training.tasks import ClassicalBaseline, Evaluation, Task

NAME = "label_sum"


class LabelSum(Task):
    """The sum of a sample's labels (in their normalised units): MSE, and R² of the sum."""

    name = NAME
    loss_name = "mean squared error of the labels' sum"
    scores = ("sum_r2",)
    built_in_models = ("cosmoflow",)

    def outputs(self) -> int:
        return 1

    def label_tensor(self, values: Sequence[Any], batched: bool) -> Any:
        import tensorflow as tf

        flat = [
            tf.reshape(tf.cast(v, tf.float32), [-1, f.size] if batched else [f.size])
            for v, f in zip(values, self.data.labels, strict=True)
        ]
        return tf.reduce_sum(tf.concat(flat, -1), -1, keepdims=True)

    def loss(self) -> Any:
        import tensorflow as tf

        return tf.keras.losses.MeanSquaredError()

    def evaluation(self) -> Evaluation:
        return Evaluation({k: np.zeros(1) for k in ("n", "y", "yy", "residual")}, {})

    def update(self, evaluation: Evaluation, outputs: np.ndarray, labels: np.ndarray, features: Any) -> None:
        p, y, s = outputs.astype(np.float64)[:, :1], labels.astype(np.float64)[:, :1], evaluation.sums
        s["n"] += len(y)
        s["y"] += y.sum()
        s["yy"] += (y**2).sum()
        s["residual"] += ((p - y) ** 2).sum()

    def metrics(self, evaluation: Evaluation) -> dict[str, Any]:
        s = {k: float(v[0]) for k, v in evaluation.sums.items()}
        spread = s["yy"] - s["y"] ** 2 / max(s["n"], 1)
        return {"sum_r2": 1 - s["residual"] / spread if spread > 0 else None}

    def evaluated_records(self, evaluation: Evaluation) -> int:
        return int(evaluation.sums["n"][0])

    def figure(self, evaluation: Evaluation, path: Path, baseline: Mapping[str, Any] | None = None) -> None:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt

        figure, axes = plt.subplots()
        axes.bar(
            ["network", "baseline"],
            [self.metrics(evaluation)["sum_r2"] or 0, (baseline or {}).get("sum_r2") or 0],
        )
        figure.savefig(path)
        plt.close(figure)

    def classical_baseline(self) -> ClassicalBaseline:
        return SumRidge(self)


class SumRidge(ClassicalBaseline):
    """The plug-in's classical baseline: ridge regression of the sum on per-sample statistics."""

    def method(self, statistics: str) -> str:
        return f"ridge regression on {statistics}"

    def sums(self, features: int) -> RidgeSums:
        return RidgeSums(features, 1, ["sum"])


def plugged(config: Mapping[str, Any]) -> dict[str, Any]:
    return {**config, "train": {**config["train"], "task": f"{Path(__file__).resolve()}:LabelSum"}}


def checked(summary: Mapping[str, Any]) -> None:
    """The plug-in's summary: its name, its score (the network's R² of the sum above zero: it learnt), the
    ridge baseline beside it scored by the same hooks."""
    print("PLUGIN", summary["sum_r2"], summary["baseline"].get("sum_r2"), summary["validation_records"])
    assert summary["task"] == NAME and summary["score_names"] == ["sum_r2"]
    assert summary["sum_r2"] > 0.0 and summary["validation_records"] > 0
    assert summary["baseline"]["method"].startswith("ridge regression") and "sum_r2" in summary["baseline"]


@pytest.mark.unit
def test_no_pipeline_module_names_the_plugin_and_a_wrong_one_is_refused_by_key(tmp_path):
    from pipeline import Sim2dlError
    from pipeline.training.tasks import DataSpec, make_task

    package = Path(__file__).resolve().parents[1] / "pipeline"
    assert not [p for p in package.rglob("*.py") if NAME in p.read_text() or "LabelSum" in p.read_text()]
    data = DataSpec("field", (4,), (), (), feature_shapes={"field": (4,)})
    with pytest.raises(Sim2dlError, match=r"config key 'train\.task': unknown task 'sum'"):
        make_task({"task": "sum"}, data)
    with pytest.raises(Sim2dlError, match=r"config key 'train\.task': task file nowhere\.py not found"):
        make_task({"task": "nowhere.py:LabelSum"}, data)
    with pytest.raises(Sim2dlError, match=r"train\.task.*has no class 'Missing'"):
        make_task({"task": f"{__file__}:Missing"}, data)
    with pytest.raises(
        Sim2dlError, match=r"train\.task.*is not a subclass of pipeline\.training\.tasks\.Task"
    ):
        make_task({"task": f"{__file__}:plugged"}, data)


# SLOW (conftest): this file is loaded as a plug-in by its path, so it imports nothing of the tests
@pytest.mark.workflow
def test_a_task_of_a_test_file_trains_on_shards_and_as_a_population(tmp_path, staged):
    from .conftest import run_cli, write_config

    _, config = staged
    config = plugged(config)
    out = tmp_path / "epochs"
    run_cli(
        ["train", "--config", str(write_config(tmp_path, config)), "--out", str(out)], ranks=2, timeout=600
    )
    checked(json.loads((out / "summary.json").read_text()))
    population = {
        "enabled": True,
        "trainers": 2,
        "rounds": 2,
        "steps_per_round": 3,
        "tournament_fraction": 0.2,
    }
    config = {**config, "train": {**config["train"], "population": population}}
    out = tmp_path / "population"
    run_cli(
        ["train", "--config", str(write_config(tmp_path, config)), "--out", str(out)], ranks=2, timeout=600
    )
    summary = json.loads((out / "summary.json").read_text())
    checked(summary)
    assert summary["population"]["rounds_trained"] == 2


@pytest.mark.mpi
def test_a_task_of_a_test_file_trains_online(tmp_path):
    from .conftest import run_cli, write_config
    from .helpers import online_config

    config = plugged(
        online_config(tmp_path, runs=10, samples=4, optimizer_steps=150, validate_every_steps=50)
    )
    proc = run_cli(["online", "--config", str(write_config(tmp_path, config))], ranks=2, timeout=300)
    summary = json.loads(proc.stdout.strip().splitlines()[-1])
    checked(summary)
    assert summary["online"]["samples"]["arrived"] > 0

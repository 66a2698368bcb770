"""The classical baseline of a run that reads staged shards (pipeline.training.baseline): fitted on the
training records in one streamed pass before the network trains (`fit_classical`: a network that starts
from the baseline, train.hybrid, is built from the fit), scored after it on the validation records and,
where there is a test split, on the test records (`score_classical`). Each rank streams its own share;
the sums are allreduced, so every rank holds the same fit.

Memory: the baseline's sums ((F + 1)² x folds, or per class F) and the task's evaluation sums; time: one
pass over the rank's training records to fit, one over its validation and test records to score.
"""

from __future__ import annotations

import time
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import numpy as np

from pipeline.training.baseline import StreamingFit
from pipeline.training.inputs import RankData, Read, Records, input_pipeline
from pipeline.training.models import built_in_args, spatial_dims
from pipeline.training.models.hybrid import FittedBaseline, build_hybrid, hybrid_mode
from pipeline.training.session import Model
from pipeline.training.tasks import Evaluation, Task

LOGIT_FLOOR = -1e4  # a class the training split never had: a finite logit far below the others


@dataclass
class Classical:
    """The fitted baseline: its sums and predictor, what it chose (the ridge penalty), how long it took."""

    fitting: StreamingFit
    predict: Any
    settings: dict[str, Any]
    seconds: float

    def for_model(self) -> FittedBaseline:
        """What a network that starts from the baseline takes of it (models/hybrid.py)."""
        assert self.fitting.linear is not None and self.fitting.moments is not None
        weights, bias = self.fitting.linear
        mean, scale = self.fitting.moments
        return FittedBaseline(
            self.fitting.spatial_dims,
            mean,
            np.where(scale > 0, scale, 1.0),
            weights,
            np.maximum(bias, LOGIT_FLOOR),
        )


def baseline_start(
    config: Mapping[str, Any],
    meta: Mapping[str, Any],
    task: Task,
    model: Model,
    data: RankData,
    comm: Any,
    split: int,
) -> tuple[Model, Classical | None, dict[str, Any]]:
    """Where train.hybrid applies: the baseline fitted now and the model rebuilt to start from it (every
    rank alike). Returns the model to train, the fit (None: fitted after training, if asked for) and the
    summary's record of what was done."""
    mode, why = hybrid_mode(config["train"]["hybrid"], model.source.built_in, task, split)
    if mode == "none":
        return model, None, {"mode": "none", **({"why": why} if why else {})}
    classical = fit_classical(config, meta, task, model, data, comm)
    started = start_from_baseline(config["train"], task, model, classical, mode)
    statistics = int(classical.for_model().mean.size)
    return (
        started,
        classical,
        {"mode": mode, "statistics": statistics, "fit_seconds": round(classical.seconds, 3)},
    )


def start_from_baseline(
    settings: Mapping[str, Any], task: Task, model: Model, classical: Classical, mode: str
) -> Model:
    """The built-in model rebuilt to start where the fitted baseline ends (train.hybrid: models/hybrid.py)."""
    source = model.source
    keras = build_hybrid(
        source.built_in,
        model.input_shape,
        task.outputs(),
        built_in_args(source, settings),
        mode,
        classical.for_model(),
    )
    return Model(keras, source, model.input_shape, model.transforms, model.eval_transforms)


def arrays(pipeline: Any, feature: str) -> Any:
    """The numpy batches (x of the first feature, y) of a tf.data pipeline."""
    for x, y in pipeline:
        yield (x[feature] if isinstance(x, dict) else x).numpy(), y.numpy()


def fit_classical(
    config: Mapping[str, Any], meta: Mapping[str, Any], task: Task, model: Model, data: RankData, comm: Any
) -> Classical:
    """The baseline fitted on every rank's training records (its penalty chosen by cross-validation within
    them: nothing of validation or test is read)."""
    start = time.perf_counter()
    shape = [1 if n is None else n for n in model.input_shape]
    fitting = StreamingFit(task, shape, spatial_dims(model.source, model.input_shape))
    records = Records(meta, config["train"], task, model.input_shape)
    read = Read(False, data.shard, 0, data.fraction, pieces=data.pieces, holdout=False)
    training = input_pipeline(data.files, records, read)
    for x, y in arrays(training, task.data.feature):
        fitting.add(x, y)
    predict, fitted = fitting.fit(lambda sums: [comm.allreduce(a) for a in sums])
    return Classical(fitting, predict, fitted, time.perf_counter() - start)


def score_classical(
    classical: Classical,
    config: Mapping[str, Any],
    meta: Mapping[str, Any],
    task: Task,
    model: Model,
    data: RankData,
    comm: Any,
) -> dict[str, Any]:
    """The fitted baseline's scores by the task's metrics: on the test records where there is a test split
    (its validation scores beside), else on the validation records."""
    start = time.perf_counter()

    def combine(evaluation: Evaluation) -> Evaluation:
        return Evaluation.combine(comm.allgather(evaluation), task.max_examples)

    def records(split: str) -> Any:
        pipeline = data.evaluation_input(split, Records(meta, config["train"], task, model.input_shape))
        return arrays(pipeline, task.data.feature)

    splits = ["test", "validation"] if data.test_files is not None else ["validation"]
    return classical.fitting.record(
        classical.predict,
        classical.settings,
        {s: records(s) for s in splits},
        combine,
        classical.seconds + time.perf_counter() - start,
    )

"""After training, a task that rolls out (a next state: tasks/next_state.py) runs the kept model on its own
outputs from each trajectory of the test split (else the validation split; online training: its validation
runs) to its horizon; every rank rolls out its share, the curves are joined over all ranks, and the task's
figure (train/scores.png) shows them. Memory: a batch of trajectories; time: the model once per step of the
horizon per trajectory.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any

import numpy as np

from pipeline.training.inputs import RankData
from pipeline.training.session import Model
from pipeline.training.tasks import Task


def rollout_record(task: Task, model: Model, data: RankData, meta: Mapping[str, Any], settings: Mapping[str, Any],
                   comm: Any) -> dict[str, Any]:  # fmt: skip
    """summary.json's `rollout` (the curves, per step; {} where the task does not roll out)."""
    if not task.rolls_out:
        return {}
    split = "test" if data.test_files is not None else "validation"
    batches = data.evaluation_input(split, meta, settings, task, model.input_shape, windowed=False)

    return rolled_out(task, model.keras, ((x.numpy(), y.numpy()) for x, y in batches), comm, split)


def rolled_out(task: Task, keras: Any, batches: Iterable[tuple[np.ndarray, np.ndarray]], comm: Any,
               split: str) -> dict[str, Any]:  # fmt: skip
    """The rollout of `keras` from this rank's whole trajectories (normalised, with their records' labels),
    joined over every rank of `comm`: summary.json's `rollout`; the task keeps it for its figure."""
    mine = task.rollout(lambda x: keras(x, training=False).numpy(), batches)
    joined = task.rollout_summary(comm.allgather(mine))
    if not joined:
        return {}
    task.rolled_out = joined  # the task's figure (train/scores.png, in the report) shows it
    return {"split": split, **{k: v for k, v in joined.items() if k != "examples"}}

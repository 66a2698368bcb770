"""After training, the task's own use of the kept model (Task.after_training: a next state's rollout on its
own outputs), on the test split's whole records, else the validation split's: the offline modes' call
(the train step, a population), which reads the records only if the task asks for them. Memory and time:
the task's (a batch of records at a time).
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import Any

import numpy as np

from pipeline.training.inputs import RankData, Records
from pipeline.training.session import Model
from pipeline.training.tasks import Task, TrainedModel


def after_training(
    task: Task,
    model: Model,
    data: RankData,
    meta: Mapping[str, Any],
    settings: Mapping[str, Any],
    comm: Any,
    out: Path,
) -> dict[str, Any]:
    """The task's entries for summary.json from the kept model ({} for most tasks); `out`: the run's
    directory, where the task may write its own files."""
    split = "test" if data.test_files is not None else "validation"

    def records() -> Iterator[tuple[np.ndarray, np.ndarray, np.ndarray]]:
        batches = data.evaluation_input(split, Records(meta, settings, task, model.input_shape), whole=True)
        return ((x.numpy(), y.numpy(), ids.numpy()) for x, y, ids in batches)

    return task.after_training(TrainedModel(model.keras, records, comm, split, out))

"""Training tasks, one small file each behind `Task` (base.py): the labels' shape and checks, the output
layer's size, the loss on the model's raw outputs, and the validation metrics and figure.

    class_ids.py       what the tasks on class ids share: the label field, classes, names, weights
    regression.py      the labels' values: MSE, R² per label, predicted vs true in the labels' units
    classification.py  one class id per sample: cross-entropy, accuracy, macro-F1, confusion matrix
    segmentation.py    a class id per pixel: per-pixel cross-entropy, IoU per class, mean IoU, masks
    surrogate.py       the simulator's outputs from its inputs: weighted MSE, NRMSE per output, the
                       emulator (PCA + kernel ridge) beside it, a saved model in physical units
    next_state.py      k states of a trajectory to the next m (windows within a record), persistence
                       and a linear baseline beside it, an autoregressive rollout
    autoencoder.py     fields in, the same fields out through a latent: reconstruction NRMSE per field,
                       PCA beside it, latents as Parquet, k-means and anomaly scores after training

A task owns everything that depends on which task it is: its headline score names (`scores`, which
summary.json lists as `score_names` for `sim2dl status`, a search, a sweep's table and TensorBoard), its
classical baseline as one object (`classical_baseline`, a `ClassicalBaseline`: the baseline's sums,
method, inputs and outputs, and the network judged against it: `below`, `compared`), and how many records
an evaluation counts. What the pipeline needs of a task is a hook every task answers (Task's
defaults: a record is one sample, a label per sample), not a flag one task sets and others test:
- `samples`, `samples_per_record`: cutting a record into training samples (a trajectory's windows);
- `augmented`: a batch under train.augment's symmetries (a mask moves with its field);
- `after_training`: the task's own use of the kept model (a next state's rollout), entries of summary.json;
- `test_time_augmentation_refused`, `outputs_in_words` (and the baseline's `hybrid_refused`): what a
  setting cannot do here;
- `proposed_for`: the kinds of data `sim2dl inspect` proposes the task for (`task_for`; readers say the
  kind, `trajectory`, never a task's name).
No module outside this folder branches on a task's name or its scores, nor reads an attribute only one task
has (tests/test_architecture.py holds both; the reads left: its FLAG_READS_LEFT).

Adding a task: a module with a Task subclass, registered in TASKS, and its name in the TASKS of each
built-in model that does it. Your own task needs no change here: train.task 'path/to/file.py:Class' or
'package.module:Class' names a Task subclass (its `name`, its `built_in_models`), loaded at run time
(`task_class`; tests/test_plugin_task.py trains one offline, as a population and online).
"""

from __future__ import annotations

from collections.abc import Mapping
from functools import cache
from typing import Any

from pipeline import Sim2dlError
from pipeline.training.tasks.autoencoder import Autoencoder
from pipeline.training.tasks.base import (
    ClassicalBaseline,
    DataSpec,
    Evaluation,
    Task,
    TrainedModel,
    data_spec,
)
from pipeline.training.tasks.classification import Classification
from pipeline.training.tasks.next_state import NextState
from pipeline.training.tasks.regression import Regression
from pipeline.training.tasks.segmentation import Segmentation
from pipeline.training.tasks.surrogate import Surrogate

TASKS: dict[str, type[Task]] = {
    t.name: t for t in (Regression, Classification, Segmentation, Surrogate, NextState, Autoencoder)
}

__all__ = [
    "TASKS",
    "ClassicalBaseline",
    "DataSpec",
    "Evaluation",
    "Task",
    "TrainedModel",
    "built_in",
    "data_spec",
    "make_task",
    "task_class",
    "task_for",
]


def task_for(kind: str) -> str:
    """The task `sim2dl inspect` proposes for a kind of data (Task.proposed_for): the one task that takes
    it."""
    takers = [name for name, task in TASKS.items() if kind in task.proposed_for]
    if len(takers) != 1:
        raise ValueError(f"data of kind {kind!r} is proposed to {len(takers)} tasks ({takers}), not one")
    return takers[0]


def built_in(task: Task) -> bool:
    """Whether the task is one of these (TASKS), not your own class (train.task 'file.py:Class')."""
    return TASKS.get(task.name) is type(task)


@cache
def task_class(name: str) -> type[Task]:
    """train.task resolved: a built-in's class, or your own Task subclass ('path/to/file.py:Class',
    'package.module:Class'), its module imported once per process."""
    from pipeline.training.user_code import locate

    if name in TASKS:
        return TASKS[name]
    unknown = (
        f"unknown task '{name}' (choose one of {sorted(TASKS)}, or your own Task subclass as "
        "'path/to/file.py:Class' or 'package.module:Class')"
    )
    found = locate(name, "train.task", unknown).load("sim2dl_user_task", "class")
    if not (isinstance(found, type) and issubclass(found, Task)) or not found.name:
        raise Sim2dlError(
            f"config key 'train.task': {name} is not a subclass of pipeline.training.tasks.Task with a name"
        )
    return found


def make_task(settings: Mapping[str, Any], data: DataSpec) -> Task:
    chosen = task_class(settings.get("task", "regression"))
    if chosen.needs_labels and not data.labels:
        raise Sim2dlError(
            f"config key 'convert.labels': task '{chosen.name}' needs at least one label field (have none)"
        )
    return chosen(settings, data)

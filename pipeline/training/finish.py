"""The parts of a training run's end (pipeline.training.run puts them together for every mode): the
classical baseline's scores set beside the network's, with a warning where the network is below them
(`add_baseline`), the kept model's scores on validation and test (`Scores`), where this rank stands
(`Ranks`), the configured length in the run's unit, and the model to save (`whole_model`: unsplit, as the
task exports it). Memory: the task's evaluation sums; time: the unsplit model's build.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from pipeline.training.models import build_model
from pipeline.training.session import Model
from pipeline.training.spatial.layout import SpatialLayout
from pipeline.training.tasks import Evaluation, Task

log = logging.getLogger(__name__)


# How far below the baseline a score must be to be called below it: R², accuracy and IoU on a held-out split
# of about a hundred samples move by about this much from one split to another.
BELOW_MARGIN = 0.02


def below_baseline(task: Task, summary: Mapping[str, Any], baseline: Mapping[str, Any]) -> list[str]:
    """The scores (regression: the labels' R²) on which the network is below the baseline by more than
    BELOW_MARGIN."""
    return task.below_baseline(summary, baseline, BELOW_MARGIN) if baseline.get("method") is not None else []


def add_baseline(summary: dict[str, Any], task: Task, baseline: Mapping[str, Any], warn: bool) -> None:
    """summary's `baseline` and `below_baseline`; warn: log the labels where the network is below it."""
    summary["baseline"] = dict(baseline)
    summary["below_baseline"] = below_baseline(task, summary, baseline)
    if summary["below_baseline"] and warn:
        log.warning(
            "sim2dl train: warning: the network scores below the classical baseline (%s) on %s: %s",
            baseline["method"],
            ", ".join(summary["below_baseline"]),
            task.compared(summary["below_baseline"], summary, baseline),
        )


def whole_model(config: Mapping[str, Any], task: Task, model: Model) -> Any:
    """The model to save: the trained one, or under spatial parallelism the unsplit model with its
    weights (same variables, same order), which takes whole samples; as the task exports it (a surrogate's
    in physical units)."""
    settings = config["train"]
    if settings["spatial"]["split"] == 1:
        return task.exported(model.keras)
    whole, _ = build_model(settings, task.model_feature_shape, task)
    whole.set_weights(model.keras.get_weights())
    return task.exported(whole)


SELECTED_ON_VALIDATION = (
    "scored on the validation split, which also chose the kept epoch or round (train.keep, train.patience) "
    "and a search's trials: optimistic; a test split (merge.splits: {train, validation, test}) gives scores "
    "that no choice has seen"
)


@dataclass
class Scores:
    """The kept model's evaluations: on the validation split (what chose it) and on the test split (what
    nothing chose; None without one). The headline scores are the test's where there is one."""

    validation: tuple[float, Evaluation]
    test: tuple[float, Evaluation] | None = None

    @property
    def headline(self) -> tuple[str, Evaluation]:
        return ("test", self.test[1]) if self.test is not None else ("validation", self.validation[1])

    def summary(self, task: Task) -> dict[str, Any]:
        """summary.json's scores: val_loss (what a search reads), the headline metrics, which split they are
        on, and the other split's beside them."""
        split, headline = self.headline
        doc: dict[str, Any] = {
            "val_loss": self.validation[0],
            "scored_on": split,
            "score_names": list(task.scores),
            **task.metrics(headline),
        }
        doc["validation_records"] = task.evaluated_records(self.validation[1])
        if self.test is not None:
            doc["test_loss"] = self.test[0]
            doc["test_records"] = task.evaluated_records(self.test[1])
            doc["validation"] = task.metrics(self.validation[1])
        else:
            doc["scores_note"] = SELECTED_ON_VALIDATION
        return doc


def configured_length(settings: Mapping[str, Any], unit: str) -> int:
    """How many units train's settings ask for."""
    return {"round": settings["population"]["rounds"], "step": settings["online"]["steps"]}.get(
        unit, settings["epochs"]
    )


@dataclass
class Ranks:
    """Where this process stands: Horovod, its rank among `size`, and the device it computes on."""

    hvd: Any
    rank: int
    size: int
    device: dict[str, Any]
    layout: SpatialLayout
    comm: Any  # the job's ranks (a population's trainers each run Horovod on their own)

"""How training ends: the classical baseline's scores (pipeline.training.classical; online training fits
its own from its arrivals) set beside the network's, with a warning where the network is below them
(`add_baseline`, every way of training), the kept model's scores on validation and test (`Scores`), and
`finish`: the summary, the saved model, the figures and summary.json. Memory: the task's evaluation sums;
time: the model's save.
"""

from __future__ import annotations

import logging
import socket
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from pipeline.paths import TrainPaths
from pipeline.reporting.board import Board
from pipeline.storage.fsutil import write_json_atomic
from pipeline.training.checkpoints import save_model_weights
from pipeline.training.checksum import weights_checksum
from pipeline.training.kernel import Kept
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


def finish(
    config: Mapping[str, Any],
    task: Task,
    model: Model,
    history: Sequence[Mapping[str, Any]],
    scores: Scores,
    paths: TrainPaths,
    ranks: Ranks,
    kept: Kept,
    baseline: Mapping[str, Any],
    extra: Mapping[str, Any] | None = None,
    curves: Callable[[Path], None] | None = None,
    board: Board | None = None,
) -> dict[str, Any]:
    """The summary of the final evaluation (the task's metrics, with a check that every rank holds the same
    weights, the device each rank used and where the model's code came from), and on rank 0 the model, the
    figures and summary.json. extra: more of the summary; curves: draws the learning curves' figure
    (default: the history's); board: the run's TensorBoard writer, given the test scores and the baseline's
    lines over the run (Board.finished) and closed."""
    settings = config["train"]
    hvd, rank, size = ranks.hvd, ranks.rank, ranks.size
    _, result = scores.headline
    summary = {
        "task": task.name,
        # the configured length, in the kept record's unit (a population's rounds, online steps; epochs are
        # then spread over them or unused)
        f"{kept.unit}s": configured_length(settings, kept.unit),
        "ranks": size,
        "spatial": {"split": ranks.layout.split, "groups": ranks.layout.groups},
        "kept": kept.summary(history),
        **scores.summary(task),
        "model": model.source.provenance(),
        "weights_checksum": weights_checksum(model.keras),
        "settings": dict(settings),  # what was trained (with search.enabled: the search's best merged in)
    }
    # what a classical estimator learns from the same split (pipeline.training.baseline), and where the
    # network does worse
    summary.update(extra or {})
    add_baseline(summary, task, baseline, warn=rank == 0)
    all_checksums = ranks.comm.allgather(summary["weights_checksum"])
    summary["weights_identical_across_ranks"] = len(set(all_checksums)) == 1
    summary["hosts"] = ranks.comm.allgather(socket.gethostname())  # per rank: where it trained
    summary["devices"] = ranks.comm.allgather(ranks.device)  # per rank: on what
    if rank == 0:
        whole_model(config, task, model).save(str(paths.model))
        save_model_weights(paths.kept_weights, model.keras)  # what a later run warm-starts from
        from pipeline.reporting.plots import learning_curves

        if curves is None:
            learning_curves(history, task.loss_name, paths.learning_curves)
        else:
            curves(paths.learning_curves)
        task.figure(result, paths.scores_figure, baseline)
        write_json_atomic(paths.summary, summary)
    if board is not None:
        test = task.metrics(scores.test[1]) if scores.test else None
        board.finished(history, kept.unit, test, baseline, task.scores, summary["val_loss"])
    hvd.join()
    return summary

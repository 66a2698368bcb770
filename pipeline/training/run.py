"""One training run, whatever its mode: the ends every mode shares, written once.

A mode trains a model in its own windows: epochs over staged shards (pipeline.training.epochs), a
population's rounds (pipeline.training.population_run) or online steps as the runs arrive
(pipeline.online.training_rank). Around that loop, every run does the same things:
- `TrainingRun.announce`: the start, in the log and in train/attempts.jsonl (its unit and length, which
  `sim2dl status` reads);
- `TrainingRun.scores`: the kept model's scores (train.keep's weights restored, validation and test);
- `TrainingRun.end`: the classical baseline and the task's after-training on the mode's data (an `Ending`:
  staged shards, or online's buffers), then the summary, the saved model, the figures, summary.json and
  TensorBoard's last lines.

A mode gives the end what it trained (`Trained`): its history, scores (`Scores`: validation and test),
train.keep's record, its own part of the summary and its learning curves. The baseline's scores are set
beside the network's with a warning where the network is below them (`add_baseline`); the model saved is
the unsplit one, as the task exports it (`whole_model`). Memory: the task's evaluation sums; time: the
model's save and the baseline's pass.
"""

from __future__ import annotations

import json
import logging
import os
import socket
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Protocol

from pipeline.paths import TrainPaths
from pipeline.reporting.board import Board
from pipeline.storage.fsutil import write_json_atomic
from pipeline.training.after_training import after_training
from pipeline.training.checkpoints import kept_evaluation, save_model_weights
from pipeline.training.checksum import weights_checksum
from pipeline.training.classical import Classical, fit_classical, score_classical
from pipeline.training.inputs import RankData
from pipeline.training.kernel import Kept
from pipeline.training.levels import for_costliest_level, level_offset
from pipeline.training.models import build_model
from pipeline.training.session import Model, record_start
from pipeline.training.spatial.layout import SpatialLayout
from pipeline.training.tasks import Evaluation, Task

log = logging.getLogger(__name__)

# How far below the baseline a score must be to be called below it: R², accuracy and IoU on a held-out split
# of about a hundred samples move by about this much from one split to another.
BELOW_MARGIN = 0.02


def below_baseline(task: Task, summary: Mapping[str, Any], baseline: Mapping[str, Any]) -> list[str]:
    """The scores (regression: the labels' R²) on which the network is below the baseline by more than
    BELOW_MARGIN."""
    if baseline.get("method") is None:
        return []
    return task.classical_baseline().below(summary, baseline, BELOW_MARGIN)


def add_baseline(summary: dict[str, Any], task: Task, baseline: Mapping[str, Any], warn: bool) -> None:
    """summary's `baseline` and `below_baseline`; warn: log the labels where the network is below it."""
    summary["baseline"] = dict(baseline)
    summary["below_baseline"] = below_baseline(task, summary, baseline)
    if summary["below_baseline"] and warn:
        log.warning(
            "sim2dl train: warning: the network scores below the classical baseline (%s) on %s: %s",
            baseline["method"],
            ", ".join(summary["below_baseline"]),
            task.classical_baseline().compared(summary["below_baseline"], summary, baseline),
        )


def whole_model(config: Mapping[str, Any], task: Task, model: Model) -> Any:
    """The model to save: the trained one, or under spatial parallelism the unsplit model with its
    weights (same variables, same order), which takes whole samples; as the task exports it (a surrogate's
    in physical units)."""
    settings = config["train"]
    if settings["spatial"]["ranks_per_sample"] == 1:
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
    return {"round": settings["population"]["rounds"], "step": settings["online"]["optimizer_steps"]}.get(
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


@dataclass
class Trained:
    """What a mode's loop gives the run's end: the history (a row per window), the kept model's scores,
    train.keep's record, whether it started from another run's weights, the mode's own part of the summary,
    and its learning curves' figure (None: the history's, by epoch)."""

    history: Sequence[Mapping[str, Any]]
    scores: Scores
    kept: Kept
    warm_start: Any
    extra: Mapping[str, Any] = field(default_factory=dict)
    curves: Callable[[Path], None] | None = None


class Ending(Protocol):
    """The data a run ends on: the classical baseline's record and the task's after-training entries."""

    def baseline(self, run: TrainingRun) -> dict[str, Any]: ...

    def after_training(self, run: TrainingRun) -> dict[str, Any]: ...


@dataclass
class TrainingRun:
    """One training run: its config, task and model, where it writes, where this rank stands, the unit of
    its windows (epoch, round, step), its TensorBoard writer and how its model meets the physics
    (train.hybrid's record)."""

    config: Mapping[str, Any]
    task: Task
    model: Model
    paths: TrainPaths
    ranks: Ranks
    unit: str
    board: Board
    hybrid: Any = None
    # a search trial: scored by its validation loss, its best configuration trained again by the workflow,
    # so it exports no model and draws no figures (seconds of each trial's rank 0, and the model's bytes)
    trial: bool = False

    @property
    def settings(self) -> Mapping[str, Any]:
        return self.config["train"]

    def announce(self, length: int, **record: Any) -> None:
        """The start of training (with its Slurm job) in the log and in train/attempts.jsonl, on rank 0: the
        unit, the length (how many), the ranks and the mode's own record."""
        if self.ranks.rank != 0:
            return
        start = {"unit": self.unit, "length": length, "ranks": self.ranks.size, **record}
        start["slurm_job"] = os.environ.get("SLURM_JOB_ID")
        log.info(json.dumps({"train": start}))
        record_start(self.paths, start)

    def scores(
        self,
        kept: Kept,
        history: Sequence[Mapping[str, Any]],
        last: tuple[float, Evaluation] | None,
        validate: Callable[[str], tuple[float, Evaluation]],
        test: bool = False,
        again: bool = False,
    ) -> Scores:
        """The kept model's scores: train.keep's weights restored (its evaluation, else the last one, else
        a fresh validation) and, with a test split, the test's. again: validate the kept model afresh
        (online training: its validation runs arrive as it trains, so an evaluation saw those arrived by
        then, and the baseline is scored on all of them)."""
        final = kept_evaluation(kept, self.model.keras, self.paths, history, last)
        return Scores(
            validate("validation") if again or final is None else final, validate("test") if test else None
        )

    def end(self, trained: Trained, ending: Ending) -> dict[str, Any]:
        """The classical baseline and the task's after-training on the ending's data, the summary (with a
        check that every rank holds the same weights, each rank's host and device), and on rank 0 the
        model, its weights (what a later run warm-starts from), the figures and summary.json; TensorBoard
        gets the test scores and the baseline's lines over the run."""
        baseline = ending.baseline(self)
        extra = {**trained.extra, "hybrid": self.hybrid, "warm_start": trained.warm_start}
        extra.update(ending.after_training(self))  # a next state's rollout
        summary = self.summary(trained, extra, baseline)
        if self.ranks.rank == 0:
            self.save(trained, summary, baseline)
        test = self.task.metrics(trained.scores.test[1]) if trained.scores.test else None
        self.board.finished(trained.history, self.unit, test, baseline, self.task.scores, summary["val_loss"])
        self.ranks.hvd.join()
        return summary

    def summary(
        self, trained: Trained, extra: Mapping[str, Any], baseline: Mapping[str, Any]
    ) -> dict[str, Any]:
        """summary.json: the task's metrics on the kept model, the run's shape and provenance, the mode's
        extras and the baseline beside them (a warning where the network is below it)."""
        summary = {
            "task": self.task.name,
            # the configured length, in the kept record's unit (a population's rounds, online steps; epochs
            # are then spread over them or unused)
            f"{trained.kept.unit}s": configured_length(self.settings, trained.kept.unit),
            "ranks": self.ranks.size,
            "spatial": {"ranks_per_sample": self.ranks.layout.split, "groups": self.ranks.layout.groups},
            "kept": trained.kept.summary(trained.history),
            **trained.scores.summary(self.task),
            "model": self.model.source.provenance(),
            "weights_checksum": weights_checksum(self.model.keras),
            "settings": dict(self.settings),  # what was trained (a search's best merged in)
            **extra,
        }
        add_baseline(summary, self.task, baseline, warn=self.ranks.rank == 0)
        comm = self.ranks.comm
        summary["weights_identical_across_ranks"] = len(set(comm.allgather(summary["weights_checksum"]))) == 1
        summary["hosts"] = comm.allgather(socket.gethostname())  # per rank: where it trained
        summary["devices"] = comm.allgather(self.ranks.device)  # per rank: on what
        return summary

    def save(self, trained: Trained, summary: Mapping[str, Any], baseline: Mapping[str, Any]) -> None:
        """Rank 0: the model (whole, as the task exports it) and the figures (not for a search trial), the
        kept weights and summary.json (last: its presence says the run is done)."""
        if not self.trial:
            self.export(trained, baseline)
        save_model_weights(self.paths.kept_weights, self.model.keras)
        write_json_atomic(self.paths.summary, summary)

    def export(self, trained: Trained, baseline: Mapping[str, Any]) -> None:
        """The model, whole, as the task exports it; the learning curves and the task's figure."""
        from pipeline.reporting.plots import learning_curves

        exported = whole_model(self.config, self.task, self.model)
        offset = level_offset(self.config, self.task.data.feature) if len(exported.inputs) == 1 else None
        if offset is None:
            exported.save(str(self.paths.model))
        else:  # levels of one simulator: the model answers for the costliest, model_levels for any
            costliest = len(self.config["simulate"]["fidelities"]) - 1
            for_costliest_level(exported, offset, costliest).save(str(self.paths.model))
            exported.save(str(self.paths.model_levels))
        if trained.curves is None:
            learning_curves(trained.history, self.task.loss_name, self.paths.learning_curves)
        else:
            trained.curves(self.paths.learning_curves)
        self.task.figure(trained.scores.headline[1], self.paths.scores_figure, baseline)


@dataclass
class StagedEnding:
    """The end of a run on staged shards (the epochs, a population): the classical baseline scored from its
    fit before training (`classical`), else fitted now (none when not `asked`: a search trial); the task's
    after-training on the test split, else the validation split."""

    meta: Mapping[str, Any]
    data: RankData
    classical: Classical | None
    asked: bool = True

    def baseline(self, run: TrainingRun) -> dict[str, Any]:
        """Scored from the fit before training, else fitted now. Not under a spatial split, where no rank
        holds whole samples; not when a search trial did not ask for it."""
        if not self.asked:
            return {"method": None, "skipped": "not asked for (sim2dl train --no-baseline: a search trial)"}
        if run.ranks.layout.split > 1:
            return {"method": None, "skipped": "train.spatial.ranks_per_sample: no rank holds whole samples"}
        parts = (run.config, self.meta, run.task, run.model, self.data, run.ranks.comm)
        return score_classical(self.classical or fit_classical(*parts), *parts)

    def after_training(self, run: TrainingRun) -> dict[str, Any]:
        return after_training(
            run.task, run.model, self.data, self.meta, run.settings, run.ranks.comm, run.paths.root
        )

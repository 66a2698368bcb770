"""The training kernel that every way of training drives: offline epochs (pipeline.training.epochs),
population rounds (pipeline.training.tournament) and online steps (pipeline.online.training_rank). Each of
them is a sequence of *windows* of steps (an epoch, a round, the steps between two validations) separated by a
validation, and this module holds what a window is:

- `schedule`: the learning rate of every step from train's schedule (warm-up, then constant or a half
  cosine; pipeline.training.optimizer.learning_rate), with the run's units (epochs, rounds, or online
  steps spread over train.epochs) as the schedule's epochs;
- `run_steps`: the step loop (the rate set, the time blocked in `next()` measured as input wait, the step);
- `average_unlearned_state`: batch-norm moving statistics averaged over a data-parallel group's ranks, so
  every rank validates and saves the same model;
- `history_row`: a row of the history, every mode's (a population's from its round's record), and
  `window_row`: a window's, its columns reduced over the ranks;
- `Kept`: train.keep's record (every mode's, in its unit) of the lowest validation loss so far and the
  weights at it.

What a run leaves on disk to resume from (checkpoints, the history files, the kept weights) is
pipeline.training.checkpoints, every mode's too.

Memory: one copy of the model's weights in `Kept` (train.keep: best); time: the steps, plus one allreduce
per non-trained variable and a few scalars per window.
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from pipeline.training.optimizer import learning_rate

Rate = Callable[[int, int], float]  # (unit, step within the unit) -> learning rate


def schedule(settings: Mapping[str, Any], groups: int, units: int, steps_per_unit: float) -> Rate:
    """train's learning-rate schedule over `units` units of `steps_per_unit` steps each: the rate at step s
    of unit u is the schedule's at u + s / steps_per_unit epochs of `units` (groups: the data-parallel
    groups, by which the base rate is scaled after the warm-up)."""
    plan = {**settings, "epochs": units}
    return lambda unit, step: learning_rate(plan, groups, unit + step / steps_per_unit)


@dataclass
class Window:
    """What a window of steps left: each step's loss, the seconds blocked waiting for input, the seconds
    the window took."""

    losses: list[float] = field(default_factory=list)
    waited: float = 0.0
    seconds: float = 0.0

    @property
    def steps(self) -> int:
        return len(self.losses)


def run_steps(
    train_step: Any,
    optimizer: Any,
    batches: Iterator[Any],
    count: int,
    rate: Callable[[int], float],
    first: bool,
) -> Window:
    """Up to `count` steps on `batches` (fewer if it ends), the learning rate of step i set to rate(i)
    before it; first: the window's first step is the run's first (it broadcasts rank 0's state)."""
    window = Window()
    started = time.perf_counter()
    for step in range(count):
        optimizer.learning_rate.assign(rate(step))
        t0 = time.perf_counter()
        batch = next(batches, None)
        window.waited += time.perf_counter() - t0
        if batch is None:
            break
        x, y = batch
        window.losses.append(float(train_step(x, y, first and step == 0)))
    window.seconds = time.perf_counter() - started
    return window


def average_unlearned_state(model: Any) -> None:
    """State that is not trained (batch-norm moving statistics) follows each rank's own batches: set to
    the mean over Horovod's ranks, so that every rank validates and saves the same model."""
    import horovod.tensorflow as hvd

    for variable in model.non_trainable_variables:
        if variable.dtype.is_floating:
            variable.assign(hvd.allreduce(variable, op=hvd.Average))


def history_row(
    unit: str,
    at: int,
    loss: float,
    val_loss: float,
    samples_per_s: float,
    input_wait_fraction: float,
    seconds: float,
    at_time: float | None = None,
    **extra: Any,
) -> dict[str, Any]:
    """A row of the history (metrics.json, the learning curves, TensorBoard), every mode's: the unit done,
    the mean training loss, the validation loss, samples/s of the whole job, the share of the window spent
    waiting for input, the mode's own columns (`extra`), the window's seconds and the wall clock at its end
    (validation included; at_time: when it was, else now)."""
    return {
        unit: at,
        "loss": loss,
        "val_loss": val_loss,
        "samples_per_s": samples_per_s,
        "input_wait_fraction": input_wait_fraction,
        **extra,
        "seconds": seconds,
        "time": time.time() if at_time is None else at_time,
    }


def window_row(
    unit: str,
    at: int,
    window: Window,
    val_loss: float,
    batch_size: int,
    split: int,
    mean: Callable[[float], float],
    total: Callable[[float], float],
    **extra: Any,
) -> dict[str, Any]:
    """A window's history row, its columns reduced over the ranks (mean and total reduce a rank's value
    over them): the mean step loss, samples/s of the whole job (ranks sharing a sample under a spatial
    split count once), the share of the window spent waiting for input, the rank's seconds."""
    seconds = max(window.seconds, 1e-9)
    own_loss = float(np.mean(window.losses)) if window.losses else math.nan
    return history_row(
        unit,
        at,
        mean(own_loss),
        val_loss,
        total(window.steps * batch_size / seconds / split),
        mean(window.waited / seconds),
        window.seconds,
        **extra,
    )


def comparable(loss: float) -> float:
    """A loss for comparisons: one that is not finite (a diverged model) is worse than any finite one."""
    return loss if math.isfinite(loss) else math.inf


def best_unit(history: Sequence[Mapping[str, Any]], unit: str) -> tuple[int, float] | None:
    """(unit, validation loss) of the history's first row with the lowest finite validation loss (None:
    no finite one): a resumed run's Kept."""
    finite = [(row[unit], row["val_loss"]) for row in history if math.isfinite(row["val_loss"])]
    return min(finite, key=lambda e: (e[1], e[0])) if finite else None


@dataclass
class Kept:
    """train.keep's record, one for every mode: in its `unit` (epoch offline, round in a population, step
    online) the one of the lowest finite validation loss so far (`best`), with keep: best the weights and
    evaluation at it when this run made them, where train.patience stopped, and `details`: what else
    names the kept model (a population's trainer, lineage and hyperparameters)."""

    keep: str
    best: tuple[int, float] | None = None  # (unit, validation loss)
    unit: str = "epoch"
    weights: Any = None
    evaluation: Any = None
    stopped_after: int | None = None
    details: dict[str, Any] = field(default_factory=dict)

    @classmethod
    def resumed(cls, keep: str, history: Sequence[Mapping[str, Any]], unit: str) -> Kept:
        """The record a resumed run continues: the best of the history's rows (weights on disk, if any)."""
        return cls(keep, best_unit(history, unit), unit)

    @property
    def at(self) -> int | None:
        return self.best[0] if self.best else None

    @property
    def val_loss(self) -> float | None:
        return self.best[1] if self.best else None

    def improves(self, val_loss: float) -> bool:
        return math.isfinite(val_loss) and (self.best is None or val_loss < self.best[1])

    def consider(self, at: int, val_loss: float, weights: Callable[[], Any], evaluation: Any = None) -> bool:
        """Whether unit `at` is the best so far (then, with keep: best, weights() and the evaluation are
        kept in memory)."""
        if not self.improves(val_loss):
            return False
        self.best = (at, val_loss)
        if self.keep == "best":
            self.weights, self.evaluation = weights(), evaluation
        return True

    def patience_over(self, at: int, patience: int) -> bool:
        """train.patience: `patience` units have passed since the best one (0: never stop); records the
        stop."""
        if patience and self.best is not None and at - self.best[0] >= patience:
            self.stopped_after = at
            return True
        return False

    def is_last(self, history: Sequence[Mapping[str, Any]]) -> bool:
        return bool(history) and self.at == history[-1][self.unit]

    def summary(self, history: Sequence[Mapping[str, Any]]) -> dict[str, Any]:
        """summary.json's `kept`, named in the unit: the kept one (best: the lowest validation loss; last: the
        last one trained), the best one, how many were trained and where train.patience stopped."""
        unit = self.unit
        last = history[-1][unit] if history else None
        return {
            "keep": self.keep,
            "unit": unit,
            unit: self.at if self.keep == "best" else last,
            f"best_{unit}": self.at,
            "best_val_loss": self.val_loss,
            f"{unit}s_trained": len(history),
            f"stopped_early_after_{unit}": self.stopped_after,
        }

"""TensorBoard event files of a training run (train.tensorboard), written as it runs so that
`tensorboard --logdir results/` shows a run while it runs: one writer per run directory (a trainer, a
search trial), on the rank that writes the run's files.

What goes in: every window's history row as scalars (loss, val_loss, the learning rate, samples/s, the
input-wait share, and what else the loop counts), the validation metrics per label flattened to tags
(`validation/r2/sigma_8`), the classical baseline as a constant line per label (its value at the first
and the last step), text events (a population's adoptions), and a search trial's hyperparameters and
final loss for the HParams plugin. Each row is flushed, so a reader sees every finished window; an event
file is a sequence of length- and CRC-framed records, which TensorBoard's reader reads up to the last whole
record (a partial one at the end is waited for, not an error).

`ScalarLog` writes scalars alone without TensorFlow (TensorBoard's own event file writer, as PyTorch's
SummaryWriter does): for steps that do not train, such as an adaptive design's rounds.

Memory: TensorFlow's writer queue (flushed per row); time: microseconds per scalar.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any


def flat_scalars(values: Mapping[str, Any], prefix: str = "") -> dict[str, float]:
    """Nested metrics as TensorBoard tags: {'r2': {'sigma_8': 0.9}} -> {'PREFIX/r2/sigma_8': 0.9}; numbers
    only (None, text and lists are left out; a non-finite value is kept: TensorBoard shows it)."""
    flat: dict[str, float] = {}
    for key, value in values.items():
        tag = f"{prefix}/{key}" if prefix else str(key)
        if isinstance(value, Mapping):
            flat.update(flat_scalars(value, tag))
        elif isinstance(value, bool) or value is None:
            continue
        elif isinstance(value, int | float):
            flat[tag] = float(value)
    return flat


class ScalarLog:
    """Scalars into a TensorBoard run directory without TensorFlow: one event file per writer, each call
    flushed (a reader sees every finished step)."""

    def __init__(self, directory: Path) -> None:
        from tensorboard.summary.writer.event_file_writer import EventFileWriter

        directory.mkdir(parents=True, exist_ok=True)
        self.writer = EventFileWriter(str(directory))

    def scalars(self, step: int, values: Mapping[str, Any], prefix: str = "") -> None:
        import time

        from tensorboard.compat.proto.event_pb2 import Event
        from tensorboard.compat.proto.summary_pb2 import Summary

        summary = Summary(
            value=[Summary.Value(tag=t, simple_value=v) for t, v in flat_scalars(values, prefix).items()]
        )
        self.writer.add_event(Event(wall_time=time.time(), step=step, summary=summary))
        self.writer.flush()

    def close(self) -> None:
        self.writer.close()


class Board:
    """One run directory's event writer; a no-op where `directory` is None (train.tensorboard off, or a
    rank that does not write)."""

    def __init__(self, directory: Path | None) -> None:
        self.directory = directory
        self.writer = None
        self.trial = False  # a search trial's run: its final loss goes to the HParams plugin
        if directory is not None:
            import tensorflow as tf

            directory.mkdir(parents=True, exist_ok=True)
            self.writer = tf.summary.create_file_writer(str(directory), max_queue=1000, flush_millis=60_000)

    @classmethod
    def of(
        cls,
        settings: Mapping[str, Any],
        directory: Path,
        writes: bool,
        trial: Mapping[str, Any] | None = None,
    ) -> Board:
        """The run's board where train.tensorboard is on and this rank writes the run's files; trial: a
        search trial's {id, hyperparameters}, written first (the HParams dashboard's row)."""
        board = cls(directory if settings.get("tensorboard", True) and writes else None)
        board.trial = trial is not None
        if trial is not None:
            board.hparams(trial["hyperparameters"], str(trial["id"]))
        return board

    def scalars(self, step: int, values: Mapping[str, Any], prefix: str = "") -> None:
        if self.writer is None:
            return
        import tensorflow as tf

        with self.writer.as_default():
            for tag, value in flat_scalars(values, prefix).items():
                tf.summary.scalar(tag, value, step=step)

    def row(
        self,
        step: int,
        row: Mapping[str, Any],
        validation: Mapping[str, Any] | None = None,
        skip: tuple[str, ...] = ("epoch", "round", "step", "time", "seconds"),
    ) -> None:
        """A window's history row (its unit and wall clock left out) and its validation metrics, flushed."""
        self.scalars(step, {k: v for k, v in row.items() if k not in skip})
        if validation:
            self.scalars(step, validation, "validation")
        self.flush()

    def constant(self, first: int, last: int, values: Mapping[str, Any], prefix: str) -> None:
        """values as horizontal lines from step `first` to `last` (the baseline beside the curves)."""
        for step in sorted({first, last}):
            self.scalars(step, values, prefix)
        self.flush()

    def text(self, step: int, tag: str, text: str) -> None:
        if self.writer is None:
            return
        import tensorflow as tf

        with self.writer.as_default():
            tf.summary.text(tag, text, step=step)
        self.flush()

    def hparams(self, values: Mapping[str, Any], trial_id: str) -> None:
        """A search trial's hyperparameters (HParams plugin: the run's row in its table, beside the metric
        tags the run writes)."""
        if self.writer is None:
            return
        from tensorboard.plugins.hparams import api as hp

        with self.writer.as_default():
            hp.hparams(
                {k: v for k, v in values.items() if isinstance(v, bool | int | float | str)},
                trial_id=trial_id,
            )
        self.flush()

    def finished(
        self,
        history: Sequence[Mapping[str, Any]],
        unit: str,
        test: Mapping[str, Any] | None,
        baseline: Mapping[str, Any],
        score_names: Sequence[str],
        val_loss: float,
    ) -> None:
        """The end of a run (any mode: `unit` names its history's epoch, round or step): the test split's
        scores at its last unit, and a search trial's final `val_loss` (the HParams plugin's metric), the
        classical baseline's validation scores (`score_names`: the task's; its record's other keys are
        settings) as constant lines over the run (`baseline/...`), and the file closed."""
        if self.trial:
            self.scalars(history[-1][unit] if history else 0, {"hparams/val_loss": val_loss})
        if history:
            first, last = history[0][unit], history[-1][unit]
            if test:
                self.scalars(last, test, "test")
            scores = baseline.get("validation", baseline) if baseline.get("method") else {}
            self.constant(first, last, {k: v for k, v in scores.items() if k in score_names}, "baseline")
        self.close()

    def flush(self) -> None:
        if self.writer is not None:
            self.writer.flush()

    def close(self) -> None:
        if self.writer is not None:
            self.writer.close()
            self.writer = None

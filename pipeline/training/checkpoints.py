"""What a training run leaves on disk to resume from: one set of functions for every mode (offline epochs,
population rounds, online steps), which differ only in their unit (epoch, round, step).

- `resume_key`: what a checkpoint must match to be continued (the data, the model's code and every setting
  except the run's length and what does not change the weights), and `claim`: a checkpoint directory
  carries the key of what wrote it (`settings.json`); one written for another key is removed, so that
  training starts afresh instead of resuming the weights of another model or data.
- `CounterCheckpoint`: a TF checkpoint of the model, its optimizer and a counter of the units done.
- `restore`: the claim, the latest checkpoint and the history up to it (offline and online; a population
  restores each trainer at the round its state names, `CounterCheckpoint.restore(number)`).
- Weights in one format, written one way: `save_packed` / `load_packed`, the variables' raw bytes in one
  buffer (pipeline.training.exchange.pack: exact, any dtype) as .npy, written beside and renamed into place:
  the best unit's weights (train.keep: best) and a population's kept model alike.
- `save_window`: the end of a window (history, best weights, checkpoint) in the order that survives a kill
  at any point, and `restore_kept`: the kept weights back into the model.
- `save_model_weights` / `warm_start`: the finished run's kept model as its variables (`train/weights.npz`,
  one array each, so a mismatch names the variable), and a later run of other data or settings started
  from them instead of a fresh initialisation (train.warm_start: a continued design's next training).
- The history files: metrics.json and metrics.csv.

Memory: one packed copy of the weights where one is written or read; time: one write of them per window
that improved, and a TF checkpoint per window.
"""

from __future__ import annotations

import json
import logging
import math
import shutil
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from pipeline import Sim2dlError
from pipeline.paths import TrainPaths
from pipeline.storage.fsutil import atomic_path, write_json_atomic, write_text_atomic
from pipeline.training import exchange
from pipeline.training.checksum import weights_checksum

log = logging.getLogger(__name__)

# settings that do not change what is learnt, or only how long: a run that differs in them continues
UNLEARNT = ("epochs", "threads", "device", "keep", "patience", "tensorboard")
# a mode's own length, by its unit (a longer run continues a shorter one)
RUN_LENGTH = {"epoch": None, "round": ("population", "rounds"), "step": ("online", "optimizer_steps")}


def resume_key(settings: Mapping[str, Any], data_digest: str, source: Any, unit: str) -> str:
    """What a checkpoint must match to be resumed: the data (its digest), the model's code (source:
    its ModelSource) and every train setting but UNLEARNT and the mode's length (RUN_LENGTH[unit]): a
    longer run continues a shorter one, also on a GPU, but a new learning rate or model starts afresh."""
    kept = {k: v for k, v in settings.items() if k not in UNLEARNT}
    if RUN_LENGTH[unit] is not None:
        section, length = RUN_LENGTH[unit]
        kept[section] = {k: v for k, v in kept[section].items() if k != length}
    return json.dumps({"data": data_digest, "train": kept, "model": source.provenance()}, sort_keys=True)


def discard_foreign_checkpoints(ckpt_dir: Path, key: str) -> bool:
    """Remove checkpoints written for other data or settings (`key`), so training starts afresh; call on
    one rank. Returns whether no checkpoint of this key was there (state kept beside the checkpoints
    belongs to other settings too)."""
    key_file = ckpt_dir / "settings.json"
    fresh = not key_file.exists() or key_file.read_text() != key
    if ckpt_dir.exists() and fresh:
        log.info("sim2dl: settings or data changed since %s was written: starting afresh", ckpt_dir)
        shutil.rmtree(ckpt_dir)
    if not key_file.exists():
        write_text_atomic(key_file, key)
    return fresh


def claim(ckpt_dir: Path, key: str, comm: Any, writes: bool) -> bool:
    """The checkpoints under ckpt_dir made this key's (those of another removed by the rank that writes),
    every rank of comm waiting for it; returns (on every rank) whether training starts afresh."""
    fresh = discard_foreign_checkpoints(ckpt_dir, key) if writes else False
    return bool(comm.allreduce(int(fresh)))


class CounterCheckpoint:
    """A TF checkpoint of the model, its optimizer and a counter of the units done (`name`: epoch, round
    or step), the last two kept. TF writes the data first and its `checkpoint` state file last, so an
    interrupted save leaves the previous checkpoint valid."""

    def __init__(self, directory: Path, model: Any, optimizer: Any, name: str) -> None:
        import tensorflow as tf

        self.directory = directory
        self.counter = tf.Variable(0, dtype=tf.int64, trainable=False)
        self.checkpoint = tf.train.Checkpoint(model=model, optimizer=optimizer, **{name: self.counter})
        self.manager = tf.train.CheckpointManager(self.checkpoint, str(directory), max_to_keep=2)

    def restore(self, number: int | None = None) -> int:
        """The latest checkpoint restored, or the one saved as `number` (a population's round; an error
        if it is not there): the units it had done (0 without one). The optimizer's slots are restored as
        the first step creates them."""
        if number is None:
            if self.manager.latest_checkpoint:
                self.checkpoint.restore(self.manager.latest_checkpoint)
            return int(self.counter.numpy())
        if number:
            wanted = [c for c in self.manager.checkpoints if c.endswith(f"ckpt-{number}")]
            if not wanted:
                raise Sim2dlError(
                    f"{self.directory}: no checkpoint numbered {number}, which the run's state names: "
                    f"rerun train afresh (remove {self.directory.parent})"
                )
            self.checkpoint.restore(wanted[0])
        return number

    def save(self, done: int, numbered: bool = False) -> None:
        """Saved with the counter at `done` (call on one rank); numbered: the checkpoint's number is
        `done`."""
        self.counter.assign(done)
        self.manager.save(checkpoint_number=done if numbered else None)


@dataclass
class Restored:
    checkpoint: CounterCheckpoint  # its counter: the units done
    done: int  # units done: the run continues after them
    history: list[dict[str, Any]]  # the history's rows up to them
    warm_start: dict[str, str] | None = None  # where a fresh run's weights came from (train.warm_start)


def restore(
    key: str, paths: TrainPaths, model: Any, optimizer: Any, comm: Any, unit: str, warm: bool | str = False
) -> Restored:
    """The latest checkpoint written under the same key (resume_key), if any, and the history up to it:
    where an offline or online run continues (rank 0 of comm claims the directory). Without one, the
    weights `warm` names (train.warm_start), if any."""
    claim(paths.checkpoints, key, comm, comm.Get_rank() == 0)
    checkpoint = CounterCheckpoint(paths.checkpoints, model, optimizer, unit)
    done = checkpoint.restore()
    history = [row for row in load_history(paths.root) if row[unit] <= done] if done else []
    return Restored(checkpoint, done, history, None if done else warm_start(warm, paths, model))


def save_model_weights(path: Path, model: Any) -> None:
    """The model's variables (trained and not, in the model's order) as .npz, an array each, written
    beside and renamed into place: what a later run warm-starts from."""
    with atomic_path(path) as tmp, open(tmp, "wb") as f:
        np.savez(f, *[np.asarray(v.numpy()) for v in model.weights])


def warm_start_file(setting: bool | str, paths: TrainPaths) -> Path | None:
    """The weights train.warm_start names: true, this train directory's (what its last finished run kept;
    None before any has finished); a path, that train directory's or that file."""
    if setting is False or setting is None:
        return None
    if setting is True:
        return paths.kept_weights if paths.kept_weights.exists() else None
    path = Path(setting)
    path = TrainPaths(path).kept_weights if path.is_dir() else path
    if not path.is_file():
        raise Sim2dlError(
            f"config key 'train.warm_start': {setting}: no kept weights ({path} is missing: a train "
            f"directory has them once a training in it has finished)"
        )
    return path


def warm_start(setting: bool | str, paths: TrainPaths, model: Any) -> dict[str, str] | None:
    """The model's weights set from those train.warm_start names (`setting`), each variable checked
    against its shape and dtype; returns where they came from and their checksum, or None (none named,
    or `true` before any run finished: the initialisation stays). The optimizer and the schedule start
    afresh."""
    path = warm_start_file(setting, paths)
    if path is None:
        return None
    with np.load(path) as stored:
        arrays = [stored[f"arr_{i}"] for i in range(len(stored.files))]
    variables = model.weights
    if len(arrays) != len(variables):
        raise Sim2dlError(
            f"config key 'train.warm_start': {path} holds {len(arrays)} variables, this model has "
            f"{len(variables)}: another model"
        )
    for i, (variable, array) in enumerate(zip(variables, arrays, strict=True)):
        dtype = exchange.numpy_dtype(variable)
        if tuple(variable.shape) != array.shape or dtype != array.dtype:
            raise Sim2dlError(
                f"config key 'train.warm_start': {path}: variable {i} ({variable.name}) is "
                f"{dtype}{list(variable.shape)} in this model, {array.dtype}{list(array.shape)} there: "
                "another model"
            )
    for variable, array in zip(variables, arrays, strict=True):
        variable.assign(array)
    log.info("sim2dl train: starting from the weights in %s (train.warm_start)", path)
    return {"from": str(path), "checksum": weights_checksum(model)}


def save_packed(path: Path, packed: np.ndarray) -> None:
    """Weights (a packed buffer: exchange.pack) as .npy, written beside and renamed into place."""
    with atomic_path(path) as tmp, open(tmp, "wb") as f:
        np.save(f, packed)


def load_packed(path: Path) -> np.ndarray:
    return np.load(path)


def packed_weights(model: Any) -> np.ndarray:
    """The model's weights (trained and not: Keras's get_weights) as one buffer."""
    return exchange.pack(model.weights)


def save_window(
    paths: TrainPaths,
    history: Sequence[Mapping[str, Any]],
    checkpoint: CounterCheckpoint,
    kept: Any,
    improved: bool,
) -> None:
    """The end of a window on the rank that writes (offline and online): the history, the best weights
    where this window improved them (train.keep: best; kept: the kernel's Kept, which holds them packed),
    the checkpoint, older best weights removed. History first: a kill between the two leaves the older
    checkpoint, whose resume truncates the history back to it (the other order would lose this window's
    row for good). The best weights before the checkpoint, and older best weights removed only after it: a
    resume finds the file of the best unit its history names."""
    at = history[-1][kept.unit]
    write_history(paths.root, history)
    if improved and kept.keep == "best":
        save_packed(paths.best_weights(at, kept.unit), kept.weights)
    checkpoint.save(at)
    if improved:
        for old in paths.checkpoints.glob(f"best-{kept.unit}-*.npy"):
            if old != paths.best_weights(at, kept.unit):
                old.unlink(missing_ok=True)


def restore_kept(kept: Any, model: Any, paths: TrainPaths, history: Sequence[Mapping[str, Any]]) -> Any:
    """Put the best unit's weights back into the model (from memory, else the file save_window wrote);
    returns its evaluation when this run made it (None: validate again). Nothing to load when the best unit
    is the model's last (a resumed run with nothing left to train)."""
    if kept.weights is None and kept.is_last(history):
        return None
    if kept.weights is not None:
        exchange.unpack(model.weights, kept.weights)
        return kept.evaluation
    path = paths.best_weights(kept.at, kept.unit)
    if not path.exists():
        raise Sim2dlError(
            f"{path} is missing: the best {kept.unit}'s weights (train.keep: best); rerun train afresh "
            f"(remove {paths.checkpoints})"
        )
    exchange.unpack(model.weights, load_packed(path))
    return None


def kept_evaluation(
    kept: Any, model: Any, paths: TrainPaths, history: Sequence[Mapping[str, Any]], last: Any
) -> Any:
    """The final evaluation (offline and online): the kept unit's (train.keep: best; its weights put back
    into the model), else the last unit's `last`. None: validate the model as it is again (a resumed run
    with nothing left to train)."""
    if kept.keep == "best" and kept.at is not None:
        return restore_kept(kept, model, paths, history)
    return last


def load_history(out_dir: Path) -> list[dict[str, Any]]:
    path = TrainPaths(out_dir).metrics
    return json.loads(path.read_text()) if path.exists() else []


def write_history(out_dir: Path, history: Sequence[Mapping[str, Any]]) -> None:
    paths = TrainPaths(out_dir)
    write_json_atomic(paths.metrics, list(history))
    columns = list(history[0])
    lines = [",".join(columns)] + [",".join(_fmt(row[c]) for c in columns) for row in history]
    write_text_atomic(paths.metrics_table, "\n".join(lines) + "\n")


def _fmt(value: Any) -> str:
    return f"{value:.6g}" if isinstance(value, float) and not math.isnan(value) else str(value)

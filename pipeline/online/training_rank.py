"""The training side of online training: data-parallel TensorFlow + Horovod (on the training ranks' own
communicator) over replay buffers that the producers fill while the simulations run.

Each training rank receives the samples it owns (pipeline.ensemble.messages) between steps, without waiting,
into its training buffer (pipeline.online.buffer) or, for held-out runs, its validation buffer. While the
simulations run, a step happens when every training rank's buffer holds max(watermark, batch_size) samples
(the training ranks agree by one small allreduce per step, so Horovod's collective steps stay in lockstep);
until then the training ranks wait for arrivals, and that wait (after the first step) is the input wait the
history reports. Once the simulations are over, the training ranks go on with what arrived: a step draws up to
batch_size of the samples held (a short batch is counted: `short_batches`), so a small campaign trains too.
Training ends after `train.online.steps` steps, or when the simulations are over and a buffer has nothing left
to draw (every sample used `max_reuse` times, or none arrived: then the job fails, as no model was trained).

The steps run in windows of the training kernel (pipeline.training.kernel) between validations, at train's
learning-rate schedule with train.epochs spread evenly over train.online.steps (warm-up over the first
warmup_epochs / epochs of the steps, then the cosine to zero at the last step).

A next state's samples are whole trajectories (a run's file): a step draws batch_size of them and trains
on one window of each (so batch_size counts windows, as on staged shards), validation and the baseline
take every window, and after training the kept model is rolled out on the validation runs.

Normalisation: the statistics of convert.normalise's fields (per channel where convert.per_channel says)
come from the samples that arrived before the first step (every training rank's, merged), are frozen there,
saved in the summary and applied to every batch; or `train.online.statistics` names a convert stats.json
of earlier offline data to use instead.

Validation every `validate_every_steps` steps: the loss over every training rank's validation buffer (runs the
ensemble held out: never trained on); the model of the lowest validation loss is kept (train.keep: best).
A checkpoint (weights, optimizer, step) is written at each validation; a rerun resumes from it (the
buffers fill again from the runs still to come, and with source: runs also from the completed runs' files).

Memory per training rank: the model, the two buffers (capacity x sample bytes each, fixed), the per-run counts
(12 bytes per run). Time: steps x step time, plus waits for arrivals.
"""

from __future__ import annotations

import json
import logging
import time
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

import numpy as np

from pipeline import Sim2dlError
from pipeline.data.statistics import RunningStats
from pipeline.data.transforms import normalise, stack_component_names
from pipeline.design.loop.online import Chooser
from pipeline.ensemble import messages
from pipeline.online.buffer import BufferField, ReplayBuffer
from pipeline.online.producer import ProducerCounts
from pipeline.paths import TrainPaths
from pipeline.reporting.board import Board
from pipeline.training.baseline import StreamingFit
from pipeline.training.checkpoints import (
    CounterCheckpoint,
    packed_weights,
    restore,
    resume_key,
    save_window,
)
from pipeline.training.kernel import (
    Kept,
    Window,
    average_unlearned_state,
    run_steps,
    schedule,
    window_row,
)
from pipeline.training.models import input_shape, spatial_dims
from pipeline.training.optimizer import make_optimizer
from pipeline.training.run import Ranks, Scores, Trained, TrainingRun
from pipeline.training.session import Model, prepare, start_horovod
from pipeline.training.spatial.layout import SpatialLayout
from pipeline.training.steps import evaluate, step_functions
from pipeline.training.tasks import Evaluation, Task, TrainedModel, data_spec, make_task

log = logging.getLogger(__name__)
WAIT_POLL_S = 0.002
# summary.json's hybrid: online training builds the model before any sample arrives, and the baseline is
# fitted from the arrivals as they come
ONLINE_HYBRID = {
    "mode": "none",
    "why": "online training: the model is built before the baseline's samples arrive",
}


# ---------------------------------------------------------------- statistics from the first arrivals


def frozen_statistics(moments: Mapping[str, RunningStats], comm: Any) -> dict:
    """Every training rank's statistics merged (in rank order, so every one gets the same), as convert's."""
    out = {}
    for name, mine in moments.items():
        merged = RunningStats(mine.per_channel)
        for part in comm.allgather(mine):
            merged.merge(part)
        out[name] = merged.as_dict()
    return out


# ---------------------------------------------------------------- the training rank


@dataclass
class RankState:
    step: int = 0
    waited: float = 0.0
    done_producers: int = 0
    producer_counts: list[ProducerCounts] = field(default_factory=list)
    history: list[dict[str, Any]] = field(default_factory=list)
    arrivals_at_first_step: int = 0
    first_step_time: float | None = None
    resumed_from: int = 0  # the checkpoint's step this run continued from
    warm_start: dict[str, str] | None = None  # where a fresh run's weights came from (train.warm_start)
    first_step_at: float | None = None  # wall-clock time (time.time()): comparable across processes
    before_first_step: float = 0.0  # seconds the first window waited for its first step
    short_batches: int = 0  # steps on fewer than batch_size samples (after the simulations ended)
    stopped: str = "train.online.steps reached"


@dataclass
class Started:
    """What a training rank trains with: Horovod, the task, the model and where its code came from, the
    optimizer, the checkpoint, the compiled step and prediction, whether the model's input adds a
    channel axis, the device record."""

    hvd: Any
    task: Task
    model: Any
    source: Any
    optimizer: Any
    checkpoint: CounterCheckpoint
    train_step: Any
    predict: Any
    add_channel: bool
    device: dict[str, Any]


def meta_for(
    config: Mapping[str, Any], held_fields: Mapping[str, BufferField], stats: Mapping[str, Any]
) -> dict:
    """What the tasks and models read of a dataset's metadata, for the converted fields' shapes and dtypes."""
    convert = config["convert"]
    spec = {
        n: {"role": "feature", "shape": list(held_fields[n].shape), "dtype": held_fields[n].dtype.name}
        for n in convert["features"]
    }
    spec |= {
        n: {"role": "label", "shape": list(held_fields[n].shape), "dtype": held_fields[n].dtype.name}
        for n in convert["labels"]
    }
    classes = {}
    for name, f in config["source"]["fields"].items():
        if f.get("categorical") and "column" in f:
            classes[name] = [str(v) for v in config["simulate"]["space"][f["column"]]["values"]]
    return {
        "feature_spec": spec,
        "statistics": dict(stats),
        "classes": classes,
        "log1p": list(convert["log1p"]),
        "component_names": stack_component_names(convert, spec),
    }


@dataclass
class Campaign:
    """The ensemble a training rank learns from: its runs, sent by `producers` ranks (the job's first),
    the runs table they write, and the trainers' part in choosing its runs (None: a fixed design)."""

    runs: int
    producers: int
    table: Path  # written by the producers before they are done
    chooser: Chooser | None = None


class TrainingRank:
    """A training rank of an online job: `world` is the job's ranks, `comm` the training ranks'."""

    def __init__(
        self,
        config: Mapping[str, Any],
        held_fields: Mapping[str, BufferField],
        world: Any,
        comm: Any,
        campaign: Campaign,
        out_dir: Path,
    ) -> None:
        self.config, self.held_fields, self.world, self.comm = config, dict(held_fields), world, comm
        # online choosing: the losses at arrival, and on the first training rank the choice
        self.chooser = campaign.chooser
        # sample -> the model's loss on it (from the first step, when choosing)
        self.score_arrival: Any = None
        self.settings = config["train"]
        self.online = self.settings["online"]
        self.producers, self.runs = campaign.producers, campaign.runs
        self.rank, self.size = comm.Get_rank(), comm.Get_size()
        self.paths = TrainPaths(out_dir)
        self.runs_table = campaign.table
        buffer = self.online["buffer"]
        seed = self.settings["seed"]
        self.train_buffer = ReplayBuffer(
            held_fields, buffer["capacity"], buffer["policy"], buffer["max_reuse"], seed, self.rank
        )
        self.validation_buffer = ReplayBuffer(
            held_fields, self.online["validation_capacity"], "reservoir", 0, seed + 1, self.rank
        )
        convert = config["convert"]
        self.moments = {n: RunningStats(n in convert["per_channel"]) for n in convert["normalise"]}
        self.stats: dict[str, Any] | None = self.prior_statistics()
        self.state = RankState()
        # the job's start, near enough: time to the first step counts from here
        self.began = time.perf_counter()
        self.record = bool(self.settings["deterministic"])
        self.baseline: StreamingFit | None = None
        self.add_channel = False
        self.board = Board(None)  # opened in start(), once TensorFlow may be imported

    def prior_statistics(self) -> dict[str, Any] | None:
        source = self.online["statistics"]
        if source == "first_arrivals":
            return None
        path = Path(source)
        try:
            stats = json.loads(path.read_text())["statistics"]
        except (OSError, KeyError, json.JSONDecodeError) as e:
            raise Sim2dlError(
                f"config key 'train.online.statistics': cannot read statistics from {path}: {e}"
            ) from None
        missing = sorted(set(self.config["convert"]["normalise"]) - set(stats))
        if missing:
            raise Sim2dlError(f"config key 'train.online.statistics': {path} has no statistics of {missing}")
        return stats

    def pending_statistics(self) -> dict[str, Any]:
        """convert.normalise's fields before their statistics are frozen (at the first step): mean 0 and
        std 1 for the task's checks and the model's building, and the baseline's fit in the arrays' own units
        (the task is made again with the frozen ones to score and save the model; the batches are normalised
        with those): two builds, as the statistics are part of what a task is built from."""
        return {name: {"mean": 0.0, "std": 1.0} for name in self.config["convert"]["normalise"]}

    def fields_digest(self) -> str:
        """What stands for the merged data's plan digest in resume_key: the fields as they arrive."""
        held = {n: [list(f.shape), f.dtype.name] for n, f in self.held_fields.items()}
        return json.dumps(held, sort_keys=True)

    # ---- arrivals
    def receive(self, block_s: float = 0.0) -> int:
        """Take every message waiting (waiting up to block_s for the first); how many samples arrived."""
        from mpi4py import MPI

        status, arrived = MPI.Status(), 0
        deadline = time.perf_counter() + block_s
        while True:
            if not self.world.Iprobe(source=MPI.ANY_SOURCE, tag=MPI.ANY_TAG, status=status):
                if time.perf_counter() >= deadline:
                    return arrived
                time.sleep(WAIT_POLL_S)
                continue
            tag, source = status.Get_tag(), status.Get_source()
            payload = self.world.recv(source=source, tag=tag)
            if tag == messages.HANDED:
                self.chooser.handed(*payload)
                continue
            if tag == messages.DONE:
                self.state.done_producers += 1
                if payload is not None:
                    self.state.producer_counts.append(payload)
                if source == 0 and self.chooser is not None:  # the design queue's rank takes no more choices
                    self.chooser.close()
                continue
            run, number, validation, sample = payload
            if validation:
                self.validation_buffer.add(sample, run, number)
            else:
                if self.score_arrival is not None:
                    self.chooser.arrived(run, self.score_arrival(sample))
                if self.stats is None:
                    for name, m in self.moments.items():
                        m.update(sample[name])
                self.train_buffer.add(sample, run, number, record=self.record)
                if self.baseline is not None:
                    self.baseline.add(*self.raw_arrays({n: a[np.newaxis] for n, a in sample.items()}))
            arrived += 1
            block_s = 0.0
            deadline = time.perf_counter()

    def ready(self, watermark: int) -> bool:
        """This training rank can step: its buffer holds the watermark and, before the first step, samples of
        `statistics_runs` training runs arrived (statistics from fewer runs would know few label values:
        a run's samples share its parameters), unless the simulations are over."""
        if not self.train_buffer.ready(watermark):
            return False
        if self.stats is not None or not self.producing:
            return True
        return int(np.count_nonzero(self.train_buffer.added)) >= self.online["statistics_runs"]

    @property
    def producing(self) -> bool:
        return self.state.done_producers < self.producers

    def agree(self, ready: bool, exhausted: bool) -> tuple[bool, bool, bool]:
        """(every training rank ready, every producer done everywhere, any training rank exhausted)."""
        flags = np.array([int(ready), int(not self.producing), int(exhausted)], np.int64)
        low, high = np.empty_like(flags), np.empty_like(flags)
        self.comm.Allreduce(flags, low, op=_mpi("MIN"))
        self.comm.Allreduce(flags, high, op=_mpi("MAX"))
        return bool(low[0]), bool(low[1]), bool(high[2])

    def batch_tensors(
        self,
        batch: Mapping[str, np.ndarray],
        task: Task,
        add_channel: bool,
        whole: bool = False,
        normalised: bool = True,
    ) -> tuple[Any, Any]:
        """A batch of samples as the model takes it: normalised with the frozen statistics; a next state's
        trajectories cut into their windows (whole: not cut, a rollout's)."""
        import tensorflow as tf

        if normalised:
            batch = normalise(batch, self.stats or {})
        feature = task.data.feature
        x = batch[feature].astype(np.float32)
        if add_channel:
            x = x[..., np.newaxis]
        y = task.label_tensor([batch[name] for name in task.record_labels()], True)
        return (tf.constant(x), y) if whole else task.samples(tf.constant(x), y)

    def raw_arrays(self, batch: Mapping[str, np.ndarray]) -> tuple[np.ndarray, np.ndarray]:
        """A batch as the classical baseline takes it: not normalised (statistics are frozen only at the
        first step, and the baseline's fit and R² do not change under convert's per-channel affine
        normalisation: its features are standardised and its labels fitted linearly)."""
        assert self.baseline is not None
        x, y = self.batch_tensors(batch, self.baseline.task, self.add_channel, normalised=False)
        return np.asarray(x), np.asarray(y)

    def score_baseline(self) -> dict[str, Any]:
        """The classical baseline fitted from the sums over every training rank's training arrivals, scored on
        their validation buffers."""
        if self.baseline is None:
            return {"method": None, "skipped": "the model takes several features"}
        from pipeline.training.tasks import Evaluation

        started = time.perf_counter()
        parts = (self.raw_arrays(p) for p in self.validation_batches())
        max_examples = self.baseline.task.max_examples
        predict, settings = self.baseline.fit(lambda arrays: [self.comm.allreduce(a) for a in arrays])
        record = self.baseline.record(
            predict,
            settings,
            {"validation": parts},
            lambda e: Evaluation.combine(self.comm.allgather(e), max_examples),
            time.perf_counter() - started,
        )
        return {**record, "fitted_on": "the training arrivals of every training rank"}

    # ---- the loop
    def start(self) -> Started:
        """Horovod on the training ranks' communicator, the device, the task, the model and its optimizer, and
        the latest checkpoint of the same key restored."""
        settings = self.settings
        start_horovod(settings, self.comm)  # first: no GPU visible with train.device cpu
        import horovod.tensorflow as hvd

        self.board = Board.of(settings, self.paths.tensorboard / "online", self.rank == 0)
        meta = meta_for(self.config, self.held_fields, self.stats or self.pending_statistics())
        layout = (SpatialLayout(1, self.size, self.rank), None)
        task, built, device = prepare(self.config, meta, self.comm, hvd, layout, staged=False)
        model, source, shape = built.keras, built.source, built.input_shape
        self.add_channel = add_channel = len(shape) == len(task.model_feature_shape) + 1
        if not task.data.several:  # the baseline's sums, added to as the training samples arrive
            # the task as built here, its statistics still the identity (pending_statistics): the arrays' own
            # units, which the baseline takes
            self.baseline = StreamingFit(
                task, [1 if n is None else n for n in shape], spatial_dims(source, shape)
            )
        optimizer = make_optimizer(settings, device["precision"])
        restored = restore(
            resume_key(settings, self.fields_digest(), source, "step"),
            self.paths,
            model,
            optimizer,
            self.comm,
            "step",
            settings["warm_start"],
        )
        self.state.step = self.state.resumed_from = restored.done
        self.state.warm_start = restored.warm_start
        self.state.history = restored.history
        train_step, predict = step_functions(model, optimizer, task.loss(), source.built_in is None)
        checkpoint = restored.checkpoint
        ranks = Ranks(hvd, self.rank, self.size, device, layout[0], self.comm)
        self.training_run = TrainingRun(
            self.config, task, built, self.paths, ranks, "step", self.board, ONLINE_HYBRID
        )
        return Started(
            hvd, task, model, source, optimizer, checkpoint, train_step, predict, add_channel, device
        )

    def run(self) -> dict[str, Any]:
        """Windows of steps between validations (the training kernel's: train's learning-rate schedule
        with train.epochs spread over train.online.steps) as the samples arrive, until train.online.steps
        or the end of the samples; then the kept model (train.keep) finished. A run that could take no
        step at all returns an error for every rank to raise."""
        session = self.start()
        steps, every = self.online["optimizer_steps"], self.online["validate_every_steps"]
        # what `sim2dl status` reads the run's length from
        self.training_run.announce(steps, online_steps=steps, resume_from_step=self.state.step)
        epochs = self.settings["epochs"]
        rate = schedule(self.settings, self.size, epochs, steps / epochs)
        # train.keep's record continues a resumed run's history; train.patience counts validations
        batches, kept = self.batches(session), Kept.resumed(self.settings["keep"], self.state.history, "step")
        final = None
        while self.state.step < steps:
            begin = self.state.step
            count = min(every - begin % every, steps - begin)
            window = run_steps(
                session.train_step,
                session.optimizer,
                batches,
                count,
                lambda i, b=begin: rate(0, b + i),
                first=begin == self.state.resumed_from,
            )
            self.state.step += window.steps
            if window.steps:
                final = self.end_window(session, window, kept)
            if window.steps < count:  # the samples ended (self.state.stopped says why)
                break
            if kept.patience_over(self.state.step, self.settings["patience"] * every):
                self.state.stopped = (
                    f"no lower validation loss for {self.settings['patience']} validations (train.patience)"
                )
                break
        while self.producing:  # every producer must be heard from before the job ends (their final counts)
            self.receive(block_s=0.05)
        if self.state.step == 0:
            return {"error": f"online training took no step: {self.state.stopped}"}
        # online training has validation runs and no test runs: its scores are on what chose the step, all
        # of them (the last validation runs may arrive after the last validation, or the kept one)
        scores = self.training_run.scores(
            kept, self.state.history, final, lambda split: self.validate(session), again=True
        )
        return self.finish(session, scores, kept, time.perf_counter() - self.began)

    def batches(self, session: Started) -> Iterator[tuple[Any, Any]]:
        """Batches as the arrivals allow, every training rank in lockstep. While the simulations run, a step
        waits until every training rank holds max(watermark, batch_size) samples (and, before the first,
        samples of statistics_runs runs); once they are over, a step draws what is held, a short batch counted
        in the history, until a training rank has nothing left (max_reuse) or none arrived."""
        batch_size, drawn = self.settings["batch_size"], self.state.step
        watermark = max(self.online["buffer"]["watermark"], batch_size)
        entered = time.perf_counter()
        while True:
            self.receive()
            ready, finished, exhausted = self.agree(self.ready(watermark), self.train_buffer.exhausted())
            if finished and exhausted:
                self.state.stopped = (
                    "the simulations ended and a training rank's buffer has nothing left to draw"
                    + (
                        " (max_reuse)"
                        if self.comm.allreduce(self.train_buffer.arrivals)
                        else ": no training sample arrived"
                    )
                )
                return
            if not (ready or finished):
                self.receive(block_s=0.05)
                continue
            if self.stats is None:  # the first step: statistics of what arrived so far, frozen
                self.stats = frozen_statistics(self.moments, self.comm)
                self.state.arrivals_at_first_step = int(self.comm.allreduce(self.train_buffer.arrivals))
            if self.chooser is not None and self.score_arrival is None:
                self.score_arrival = lambda sample: self.loss_on(session, sample)
            if self.state.first_step_time is None:  # waiting until here is the time to the first step
                self.state.first_step_time = time.perf_counter() - self.began
                self.state.first_step_at = time.time()
                self.state.before_first_step = time.perf_counter() - entered
            batch = self.train_buffer.draw(batch_size, drawn, record=self.record)
            self.state.short_batches += len(next(iter(batch.values()))) < batch_size
            drawn += 1
            x, y = self.batch_tensors(batch, session.task, session.add_channel, whole=True)
            yield self.one_sample_each(x, y, session.task, drawn)

    def one_sample_each(self, x: Any, y: Any, task: Task, step: int) -> tuple[Any, Any]:
        """Of each drawn record, one of the task's samples (only that one cut: a trajectory's window), at a
        start drawn from a generator seeded by (train.seed, rank, step): a step trains on batch_size
        samples, as on staged shards, each of a different run (a resumed step draws the same)."""
        rng = np.random.default_rng([self.settings["seed"], self.rank, step])
        return task.samples(x, y, rng.integers(0, task.samples_per_record(), int(x.shape[0])))

    def loss_on(self, session: Started, sample: Mapping[str, np.ndarray]) -> float:
        """The model's loss on one sample as it is now (a next state's: over the sample's windows)."""
        x, y = self.batch_tensors(
            {n: a[np.newaxis] for n, a in sample.items()}, session.task, session.add_channel
        )
        return float(session.predict(x, y)[1])

    def validation_batches(self) -> Iterator[dict[str, np.ndarray]]:
        """This rank's validation buffer in batches of batch_size samples, in order."""
        buffer, batch = self.validation_buffer, self.settings["batch_size"]
        for k in range(0, len(buffer), batch):
            yield {n: a[k : min(len(buffer), k + batch)] for n, a in buffer.data.items()}

    def validate(self, session: Started) -> tuple[float, Evaluation]:
        """The loss and evaluation over every training rank's validation buffer."""
        tensors = (
            self.batch_tensors(p, session.task, session.add_channel) for p in self.validation_batches()
        )
        return evaluate(tensors, session.task, session.predict, self.comm)

    def after_training(self, session: Started, task: Task) -> dict[str, Any]:
        """The task's use of the kept model (Task.after_training: a next state's rollout) on every training
        rank's validation runs, whole (online training has no test runs; a sample's id is its run's)."""
        batch = self.settings["batch_size"]

        def records() -> Iterator[tuple[np.ndarray, np.ndarray, np.ndarray]]:
            for k, part in enumerate(self.validation_batches()):
                x, y = self.batch_tensors(part, task, session.add_channel, whole=True)
                runs = self.validation_buffer.run[k * batch : k * batch + len(x)]
                yield x.numpy(), np.asarray(y), np.array([f"run-{r:06d}".encode() for r in runs])

        return task.after_training(
            TrainedModel(session.model, records, self.comm, "validation", self.paths.root)
        )

    def end_window(self, session: Started, window: Window, kept: Kept) -> tuple[float, Evaluation]:
        """Validation, the window's history row, train.keep's record and a checkpoint (the history first, then
        the best weights, as the train step writes them); returns the validation. The wait for the first step
        is not input wait (it is the time to the first step)."""
        if self.state.before_first_step:
            window.waited -= self.state.before_first_step
            window.seconds -= self.state.before_first_step
            self.state.before_first_step = 0.0
        average_unlearned_state(session.model)
        evaluation = self.validate(session)
        row = window_row(
            "step",
            self.state.step,
            window,
            evaluation[0],
            self.settings["batch_size"],
            1,
            lambda v: float(np.mean(self.comm.allgather(v))),
            lambda v: float(sum(self.comm.allgather(v))),
            learning_rate=float(session.optimizer.learning_rate.numpy()),
            short_batches=int(self.comm.allreduce(self.state.short_batches)),
            arrived=int(self.comm.allreduce(self.train_buffer.arrivals)),
            validation_samples=int(self.comm.allreduce(len(self.validation_buffer))),
        )
        self.state.history.append(row)
        self.state.waited += window.waited
        improved = kept.consider(
            self.state.step, evaluation[0], lambda: packed_weights(session.model), evaluation
        )
        choice = (self.chooser.choose() if self.chooser is not None else None) or {}
        if self.rank == 0:
            save_window(self.paths, self.state.history, session.checkpoint, kept, improved)
            log.info(json.dumps(row))
            self.board.row(
                row["step"], {**row, **self.buffer_state(), **choice}, session.task.metrics(evaluation[1])
            )
        return evaluation

    def buffer_state(self) -> dict[str, Any]:
        """This rank's replay buffer as TensorBoard shows it: how full, the runs heard from, and the draws
        per sample that arrived (reuse)."""
        buffer = self.train_buffer
        return {
            "buffer/fill": len(buffer) / buffer.capacity,
            "buffer/runs_arrived": int((buffer.added > 0).sum()),
            "buffer/reuse": float(buffer.drawn.sum()) / max(buffer.arrivals, 1),
        }

    def counts(self) -> dict[str, np.ndarray]:
        """Per run, over every training rank: samples added, dropped by a buffer, draws; validation
        samples."""
        mine = self.train_buffer.counts(self.runs)
        mine["validation"] = self.validation_buffer.counts(self.runs)["added"]
        return {k: self.comm.allreduce(v) for k, v in mine.items()}

    def finish(self, session: Started, scores: Scores, kept: Kept, seconds: float) -> dict[str, Any]:
        """The run's end (pipeline.training.run, as every mode's), with online's extras: its record of the
        arrivals and buffers, the per-run table, and the arrival logs."""
        from pipeline.reporting.plots import learning_curves

        counts = self.counts()
        # the task again, with the frozen statistics: metrics and the figure in the labels' own units
        task = make_task(self.settings, data_spec(meta_for(self.config, self.held_fields, self.stats or {})))
        extra: dict[str, Any] = {"online": self.online_record(counts, seconds)}
        if self.record:  # the order samples arrived in between draws: replaying it gives the same batches
            write_arrivals(self.paths.root / f"arrivals-rank-{self.rank:05d}.npy", self.train_buffer.log)
        if self.rank == 0:
            from pipeline.online.tables import write_online_runs

            produced = self.state.producer_counts
            extra["online"]["refused"] = sum(len(p.reasons) for p in produced)
            extra["online"]["stream_dropped_steps"] = int(sum(int(p.dropped.sum()) for p in produced))
            extra["online"]["errors"] = [e for p in produced for e in p.errors]
            self.paths.root.mkdir(parents=True, exist_ok=True)
            extra["online"]["runs_table"] = str(
                write_online_runs(self.runs_table, self.paths.root, counts, produced)
            )
        model = Model(session.model, session.source, input_shape(session.source, task.model_feature_shape))
        history = self.state.history

        def curves(path: Path) -> None:
            if history:
                learning_curves(history, task.loss_name, path, x="step")

        trained = Trained(history, scores, kept, self.state.warm_start, extra, curves)
        return replace(self.training_run, task=task, model=model).end(trained, OnlineEnding(self, session))

    def online_record(self, counts: Mapping[str, np.ndarray], seconds: float) -> dict[str, Any]:
        """summary.json's `online`: how training went (steps, why it stopped, waits, statistics, the
        buffers) and the samples' totals over every training rank."""
        return {
            "source": self.online["source"],
            "steps": self.state.step,
            "resumed_from_step": self.state.resumed_from,
            "stopped": self.state.stopped,
            "short_batches": int(self.comm.allreduce(self.state.short_batches)),
            "seconds": round(seconds, 3),
            "seconds_to_first_step": self.state.first_step_time,
            "first_step_at": self.state.first_step_at,
            "input_wait_fraction": self.state.waited
            / max(seconds - (self.state.first_step_time or 0.0), 1e-9),
            "arrivals_before_first_step": self.state.arrivals_at_first_step,
            "statistics": self.stats,
            "statistics_from": self.online["statistics"],
            "buffer": {
                **self.online["buffer"],
                "bytes_per_training_rank": self.train_buffer.nbytes,
                "validation_bytes_per_training_rank": self.validation_buffer.nbytes,
            },
            "samples": {
                "arrived": int(counts["added"].sum()),
                "dropped_by_buffer": int(counts["dropped"].sum()),
                "draws": int(counts["drawn"].sum()),
                "validation": int(counts["validation"].sum()),
            },
        }


def write_arrivals(path: Path, log: Any) -> None:
    """The buffer's log as an (entries, 3) int64 array: kind (buffer.ADD, buffer.DRAW), run or step, number or
    batch size."""
    from pipeline.storage.fsutil import atomic_path

    path.parent.mkdir(parents=True, exist_ok=True)
    with atomic_path(path) as tmp, open(tmp, "wb") as f:
        np.save(f, np.frombuffer(log, np.int64).reshape(-1, 3))


def _mpi(op: str) -> Any:
    from mpi4py import MPI

    return getattr(MPI, op)


@dataclass
class OnlineEnding:
    """The end of an online run: the classical baseline fitted from the sums over every training rank's
    training arrivals, scored on their validation buffers; the task's after-training on the validation
    runs, whole."""

    rank: TrainingRank
    session: Started

    def baseline(self, run: TrainingRun) -> dict[str, Any]:
        return self.rank.score_baseline()

    def after_training(self, run: TrainingRun) -> dict[str, Any]:
        return self.rank.after_training(self.session, run.task)

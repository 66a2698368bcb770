"""The producer side of online training: the ensemble (pipeline.ensemble) run on the producer
ranks, with a hook that sends each run's samples to the training ranks as soon as the run completes
(source: runs, read from the run's directory after the farm's rename marks it complete), or as each step
of its SST stream arrives (source: stream: a thread per running run reads the stream while the simulator
writes it). Runs are handed out one at a time, so a run's samples go out when it ends, not when a chunk
of runs does.

A run whose simulator fails is the ensemble's failed run (retried as today); with a stream, the steps it
delivered before it died are kept and the retry's steps of the same numbers are skipped (a seeded
simulator repeats them). Counts per run (samples sent, refused, steps the writer dropped) and the reasons
of refused samples go to the first training rank at the end (DONE).

Memory: per producer a run's samples one at a time, and 12 bytes per run of the design. Time: the
ensemble's, plus one read of each sample, overlapped with the next run.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from pipeline.ensemble import messages
from pipeline.online.arrivals import Refused, RunReader, fields_of, step_samples
from pipeline.online.stream import StreamBroken, StreamCounts, stream_steps

log = logging.getLogger(__name__)


@dataclass
class ProducerCounts:
    """Per run of the design: samples sent, samples refused, stream steps the writer dropped."""

    runs: int
    sent: np.ndarray = field(init=False)
    refused: np.ndarray = field(init=False)
    dropped: np.ndarray = field(init=False)
    reasons: list[tuple[int, str, str]] = field(default_factory=list)  # (run, where, why): refused ones only
    errors: list[str] = field(default_factory=list)  # stream errors (time-outs), reported at the end

    def __post_init__(self) -> None:
        self.sent, self.refused, self.dropped = (np.zeros(self.runs, np.int32) for _ in range(3))


class Producer:
    """Sends samples of runs to the training ranks (world ranks first..first+training_ranks-1)."""

    def __init__(
        self,
        config: Mapping[str, Any],
        world: Any,
        first_training_rank: int,
        training_ranks: int,
        runs: int,
        rows: Any,
    ) -> None:
        self.config, self.world = config, world
        self.first_training_rank, self.training_ranks = first_training_rank, training_ranks
        self.online = config["train"]["online"]
        self.reader = RunReader(config)
        self.rows = rows  # run index -> its design row (dict)
        self.counts = ProducerCounts(runs)
        self.lock = threading.Lock()  # sends from a stream thread and the main thread
        self.streams: dict[int, tuple[threading.Thread, threading.Event]] = {}
        self.delivered: dict[int, int] = {}  # stream: run -> steps delivered (a retry skips them)

    def send(self, run: int, number: int, sample: Mapping[str, np.ndarray]) -> None:
        owner = self.first_training_rank + messages.owner(run, number, self.training_ranks)
        validation = messages.is_validation(run, self.online["validation_every_run"])
        with self.lock:
            self.world.send((run, number, validation, dict(sample)), dest=owner, tag=messages.SAMPLE)
        self.counts.sent[run] += 1

    def refuse(self, run: int, refused: Refused) -> None:
        self.counts.refused[run] += 1
        self.counts.reasons.append((run, refused.source, refused.reason))

    # ---- source: runs
    def after_runs(self, start: int, tasks: list[dict[str, Any]], outcomes: list[dict[str, Any]]) -> None:
        for run, (task, outcome) in enumerate(zip(tasks, outcomes, strict=True), start):
            if outcome["status"] != 0:  # failed or timed out: the runs table says why
                continue
            number = 0
            for item in self.reader.run_samples(Path(task["final"]), self.rows(run)):
                if isinstance(item, Refused):
                    self.refuse(run, item)
                    continue
                self.send(run, number, item)
                number += 1

    # ---- source: stream
    def before_stream(self, start: int, tasks: list[dict[str, Any]]) -> None:
        for run, task in enumerate(tasks, start):
            done = threading.Event()
            thread = threading.Thread(
                target=self.read_stream,
                args=(run, Path(task["partial"]), Path(task["final"]), done),
                daemon=True,
            )
            self.streams[run] = (thread, done)
            thread.start()

    def after_stream(self, start: int, tasks: list[dict[str, Any]], outcomes: list[dict[str, Any]]) -> None:
        for run in range(start, start + len(tasks)):
            thread, done = self.streams.pop(run)
            done.set()
            thread.join()

    def read_stream(self, run: int, directory: Path, final: Path, done: threading.Event) -> None:
        """The run's stream, opened again for every attempt of the run until the run is over (`done`): a
        writer that ends its stream cleanly (a `with adios2.Stream` left by an exception) and then exits
        non-zero is retried by the ensemble, and the retry writes the stream again; a writer that dies
        breaks it. After the first attempt the reader waits for the next writer until the run is over
        (the ensemble's run_timeout_s bounds each attempt), not only open_timeout_s. Refusals name the
        stream in the run's final directory (the attempt's `.partial` one is renamed once the run is ok)."""
        name = directory / self.online["stream"]["name"]
        named = final / self.online["stream"]["name"]
        fields = [f for f in fields_of(self.config["source"]) if f.kind == "path"]
        row = self.rows(run)
        attempts = 0
        while not done.is_set():
            counts = StreamCounts()
            try:
                for step, arrays in stream_steps(
                    name, fields, self.online["stream"], done.is_set, counts, patient=attempts > 0
                ):
                    self.deliver(run, step, arrays, row, f"{named} step {step}", fields)
            except StreamBroken:
                pass  # the ensemble retries the run; its next attempt writes the stream again
            except Exception as e:  # the run's stream is lost: recorded (refused.csv, the log), never silent
                self.counts.errors.append(f"run {run}: {e}")
                self.refuse(run, Refused(str(named), f"the stream ended in an error: {e}"))
                log.warning("sim2dl online: run %d: %s", run, e)
                return
            finally:
                self.counts.dropped[run] += counts.dropped
            attempts += 1

    def deliver(
        self,
        run: int,
        step: int,
        arrays: Mapping[str, np.ndarray] | str,
        row: Mapping[str, Any],
        where: str,
        fields: list[Any],
    ) -> None:
        """A stream step's samples sent (or refused with the reason); a step an earlier attempt of the run
        delivered already is skipped (a seeded simulator repeats it)."""
        if step < self.delivered.get(run, 0):
            return
        self.delivered[run] = step + 1
        result = (
            Refused(where, arrays)
            if isinstance(arrays, str)
            else step_samples(self.reader, arrays, row, where, fields)
        )
        if isinstance(result, Refused):
            self.refuse(run, result)
            return
        for k, sample in enumerate(result):
            self.send(run, step * len(result) + k, sample)

    def finish(self) -> None:
        """Tell every training rank this producer is done, with its counts (to the first one)."""
        for t in range(self.training_ranks):
            payload = self.counts if t == 0 else None
            with self.lock:
                self.world.send(payload, dest=self.first_training_rank + t, tag=messages.DONE)

"""Online choosing (simulate.adaptive with train.online): the trainers choose where the simulator runs next,
as the runs complete, instead of rounds.

- **Loss at arrival.** Each training rank scores every training sample as it arrives, with the model as it
  is then (before it trains on the sample): the loss per run is what the model has yet to learn there.
  Scoring starts at the first step (before it, the model is untrained and the statistics unknown).
- **Choosing.** At every validation the first training rank gathers the new losses and breeds `queue`
  children, as Melissa's Breed does (pipeline/design/acquisitions/breed.py: parents in proportion to their
  loss, Gaussian children of simulate.adaptive.sigma, none within min_spacing of a run handed out or of
  each other), and sends them to the producers' first rank.
- **The design queue** there is bounded: `queue` points, replaced whole by each new choice (older choices
  knew less). As it hands out run i, the run takes the queue's best point still min_spacing away from
  every run handed out when: i is past the space-filling start (`initial` runs), i is not a validation
  run (those stay space-filling, so that the validation loss measures the whole space), and a draw seeded
  by (simulate.seed, i) falls below the chosen share, which rises linearly from 0.15 to 0.75 over the
  runs after the start (Breed's schedule, per run rather than per round). Otherwise, or with the queue
  empty, the run takes the design's own point: the Sobol continuation.
- **Resume.** Each chosen point is journaled ({raw}/online_choices.jsonl, flushed to disk) before its run is
  handed out: a rerun hands the same runs the same points. Which later runs are chosen depends on when
  the trainers' choices arrive (timing), as any online training's order of arrivals does.

The runs table says, per run, `acquisition` (space_filling or breed) and `acquisition_value` (the parent's
loss at arrival).

Memory: the producers' first rank, the points handed out (8 bytes per run and parameter) and the queue; the
first training rank, the runs' points and their losses (8 bytes per run and parameter, 12 per run); other
training ranks, the losses of one validation window's arrivals. Time: a forward pass per arriving sample,
and per validation one gather and `queue` x 8 draws against the runs handed out.
"""

from __future__ import annotations

import collections
import json
import os
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import numpy as np

from pipeline.design.acquisitions.breed import bred_children, bred_share
from pipeline.design.space import distances, min_spacing
from pipeline.ensemble import messages


def chosen_share(index: int, initial: int, runs: int) -> float:
    """The share of runs that take a chosen point at run `index`: 0 in the space-filling start, then
    Breed's schedule (bred_share, from 0.15 to 0.75) with each later run as a round."""
    return bred_share(index - initial + 1, runs - initial) if index >= initial else 0.0


def takes_choice(seed: int, index: int, share: float) -> bool:
    """Whether run `index` takes a chosen point, drawn from (seed, index) alone."""
    return share > 0 and float(np.random.default_rng([seed, index, 11]).random()) < share


class DesignQueue:
    """The producers' first rank: the farm's `choose` hook (pipeline.ensemble.farm.FarmHooks) over the
    trainers' choices."""

    def __init__(
        self, settings: Mapping[str, Any], world: Any, chooser: int, journal: Path, validation_every: int
    ) -> None:
        self.adaptive = settings["adaptive"]
        self.seed, self.runs = settings["seed"], settings["runs"]
        self.world, self.chooser, self.journal = world, chooser, journal
        self.validation_every = validation_every
        self.queue: collections.deque[tuple[np.ndarray, float]] = collections.deque(
            maxlen=self.adaptive["queue"]
        )
        self.spacing = min_spacing(self.adaptive, self.runs, len(settings["space"]))
        # runs x dims: the unit points of the runs handed out (NaN: not yet)
        self.handed: np.ndarray | None = None

    def restore(self, plan: Any) -> None:
        """The choices journaled by an earlier attempt of this design, into the plan."""
        self.handed = np.full((self.runs, len(plan.settings["space"])), np.nan)
        for other in self.journal.parent.glob("online_choices-*.jsonl"):  # another design's
            if other != self.journal:
                other.unlink()
        if not self.journal.exists():
            return
        for line in self.journal.read_text().splitlines():
            try:
                entry = json.loads(line)
            except json.JSONDecodeError:  # a line cut by a kill: its run was never handed out
                continue
            plan.choose(entry["run"], np.array(entry["point"]), entry["value"])

    def receive(self) -> None:
        """The trainers' latest choices, each replacing the queue (without waiting)."""
        while self.world.Iprobe(source=self.chooser, tag=messages.CHOICES):
            choices = self.world.recv(source=self.chooser, tag=messages.CHOICES)
            if choices is not None:
                self.queue.clear()
                self.queue.extend(zip(*choices, strict=True))

    def take(self) -> tuple[np.ndarray, float] | None:
        """The queue's first point at least min_spacing away from every run handed out."""
        assert self.handed is not None
        others = self.handed[~np.isnan(self.handed[:, 0])]
        while self.queue:
            point, value = self.queue.popleft()
            if distances(point[None], others).min(initial=np.inf) >= self.spacing:
                return point, value
        return None

    def __call__(self, plan: Any, start: int, stop: int) -> None:
        assert self.handed is not None
        self.receive()
        for index in range(start, stop):
            if np.isnan(plan.chosen[index, 0]) and not messages.is_validation(index, self.validation_every):
                share = chosen_share(index, self.adaptive["initial"], self.runs)
                picked = self.take() if takes_choice(self.seed, index, share) else None
                if picked is not None:
                    self.record(index, *picked)
                    plan.choose(index, *picked)
            point = plan.unit_points(index, index + 1)[0]
            self.handed[index] = point
            self.world.send((index, point), dest=self.chooser, tag=messages.HANDED)

    def record(self, index: int, point: np.ndarray, value: float) -> None:
        """Journal a choice before its run is handed out (a rerun hands out the same point)."""
        self.journal.parent.mkdir(parents=True, exist_ok=True)
        with open(self.journal, "a") as f:
            f.write(json.dumps({"run": index, "point": point.tolist(), "value": value}) + "\n")
            f.flush()
            os.fsync(f.fileno())

    def close(self) -> None:
        """After this producer's DONE: the chooser's last word (None), the choices before it discarded, so
        that no message is left unreceived."""
        while self.world.recv(source=self.chooser, tag=messages.CHOICES) is not None:
            pass


class Chooser:
    """The training ranks' side: losses at arrival on every training rank, choices on the first."""

    def __init__(self, simulate: Mapping[str, Any], comm: Any, world: Any, producer: int) -> None:
        self.adaptive = simulate["adaptive"]
        self.seed, self.runs = simulate["seed"], simulate["runs"]
        self.comm, self.world, self.producer = comm, world, producer
        self.first = comm.Get_rank() == 0
        self.new_losses: list[tuple[int, float]] = []  # this window's arrivals scored (run, loss)
        dims = len(simulate["space"])
        self.spacing = min_spacing(self.adaptive, self.runs, dims)
        self.points = np.full((self.runs, dims), np.nan) if self.first else None  # the runs handed out
        self.loss_sum = np.zeros(self.runs) if self.first else None
        self.scored = np.zeros(self.runs, np.int32) if self.first else None
        self.rounds = 0
        self.closed = False
        self.sending: Any = None  # the last choices' send, until the producers' first rank takes them

    def handed(self, run: int, point: np.ndarray) -> None:
        assert self.points is not None
        self.points[run] = point

    def arrived(self, run: int, loss: float) -> None:
        self.new_losses.append((run, loss))

    def choose(self) -> dict[str, Any] | None:
        """Every training rank: this window's losses to the first, which breeds the queue's next points and
        sends them to the producers (unless they are done). Returns the choice's statistics on the first."""
        gathered = self.comm.gather(self.new_losses, root=0)
        self.new_losses = []
        if not self.first or self.closed:
            return None
        if self.sending is not None and not self.sending.Test():  # not taken yet (no hand-out since): skip
            return None
        assert self.points is not None and self.loss_sum is not None and self.scored is not None
        for run, loss in (pair for part in gathered for pair in part):
            self.loss_sum[run] += loss
            self.scored[run] += 1
        parents = np.flatnonzero(self.scored)
        if not len(parents):
            return None
        losses = self.loss_sum[parents] / self.scored[parents]
        handed = self.points[~np.isnan(self.points[:, 0])]
        rng = np.random.default_rng([self.seed, self.rounds, 13])
        self.rounds += 1
        points, values, _ = bred_children(
            self.points[parents],
            losses,
            handed,
            self.spacing,
            self.adaptive["sigma"],
            self.adaptive["queue"],
            rng,
        )
        order = np.argsort(values)[::-1]  # the children of the worst-learned runs first
        # not waiting: a large message is delivered only when the producers' first rank hands out its next run
        self.sending = self.world.isend(
            ([points[i] for i in order], [values[i] for i in order]), dest=self.producer, tag=messages.CHOICES
        )
        return {
            "choice/queue": len(points),
            "choice/parents": len(parents),
            "choice/loss_at_arrival_mean": float(losses.mean()),
            "choice/loss_at_arrival_max": float(losses.max()),
        }

    def close(self) -> None:
        """The first training rank, once the producers' first rank is done: its queue takes no more."""
        if self.first and not self.closed:
            self.closed = True
            self.world.send(None, dest=self.producer, tag=messages.CHOICES)  # it is receiving until this
            if self.sending is not None:
                self.sending.wait()

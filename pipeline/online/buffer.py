"""The replay buffer of online training: per training rank, a bounded store of the samples that arrived,
from which batches are drawn (train.online.buffer).

- `capacity` samples at most, in preallocated arrays (one per field, capacity x the field's shape), so the
  buffer's memory is fixed when it is made: capacity x the bytes of one sample (`nbytes`), plus 32 bytes per
  slot of bookkeeping (the sample's run, its number in the run, how often it was drawn);
- `reservoir`: once full, the k-th arrival replaces a uniformly drawn slot with probability capacity / k
  (Vitter's algorithm R), so the buffer stays a uniform sample of everything that arrived (older runs are
  not forgotten); `fifo`: the oldest sample leaves (Melissa's FIFO: the newest data only);
- a sample drawn `max_reuse` times leaves the buffer (0: no limit), so no sample is seen more often than
  that however slow the simulations are;
- `watermark`: batches are drawn only once this many samples are held;
- seeded: every random choice (which slot an arrival replaces, which samples a batch takes) comes from one
  generator seeded by (seed, rank), so the same arrivals in the same order, between the same draws, give
  the same batches. `log` records that order (arrival: run, sample; draw: the step), so a run can be
  checked against a replay of it (`replay`).

Counts kept for the "nothing lost" record: per run, samples added, evicted before any draw (dropped), and
draws (times trained). They are numpy arrays indexed by run number, grown as runs arrive (4 bytes x 3 per
run of the design, not an object per sample).

Memory: capacity x sample bytes + 12 bytes per run of the design. Time: an arrival O(sample bytes), a batch
O(batch x sample bytes) (one gather per field).
"""

from __future__ import annotations

from array import array
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any

import numpy as np

from pipeline import Sim2dlError

POLICIES = ("reservoir", "fifo")
ADD, DRAW = 0, 1  # the kinds of entries in a buffer's log


@dataclass(frozen=True)
class BufferField:
    """A field's shape and dtype in the buffer."""

    shape: tuple[int, ...]
    dtype: np.dtype


class ReplayBuffer:
    """A bounded, seeded store of samples (dicts of arrays of the fields' shapes)."""

    def __init__(
        self,
        fields: Mapping[str, BufferField],
        capacity: int,
        policy: str = "reservoir",
        max_reuse: int = 0,
        seed: int = 0,
        rank: int = 0,
    ) -> None:
        if capacity < 1:
            raise Sim2dlError(
                f"config key 'train.online.buffer.capacity': {capacity} (needs at least 1 sample)"
            )
        if policy not in POLICIES:
            raise Sim2dlError(
                f"config key 'train.online.buffer.policy': '{policy}' is not one of {list(POLICIES)}"
            )
        self.fields = dict(fields)
        self.capacity, self.policy, self.max_reuse = capacity, policy, max_reuse
        self.rng = np.random.default_rng([seed, rank])
        self.data = {n: np.zeros((capacity, *f.shape), f.dtype) for n, f in self.fields.items()}
        self.run = np.full(capacity, -1, np.int64)  # the run of the sample in each slot (-1: empty)
        self.number = np.zeros(capacity, np.int64)  # its number within its run
        self.uses = np.zeros(capacity, np.int64)  # times drawn
        self.size = 0  # slots filled: 0..size-1 (kept dense: a removed slot is filled from the end)
        self.arrivals = 0  # every sample offered, the k of algorithm R
        # the arrival number of each slot's sample (fifo: the oldest leaves)
        self.order = np.zeros(capacity, np.int64)
        self.added = np.zeros(0, np.int32)  # per run: samples offered
        self.dropped = np.zeros(0, np.int32)  # per run: samples that left (or never entered) without a draw
        self.drawn = np.zeros(0, np.int32)  # per run: draws (a sample drawn twice counts twice)
        self.retired = 0  # samples that left after max_reuse draws
        # when recording, triples: (ADD, run, number) / (DRAW, step, batch): 24 bytes each
        self.log = array("q")

    @property
    def nbytes(self) -> int:
        """Bytes of the arrays: fixed at creation."""
        return sum(a.nbytes for a in self.data.values()) + 4 * self.run.nbytes

    def __len__(self) -> int:
        return self.size

    def _count(self, counts: np.ndarray, run: int) -> np.ndarray:
        if run >= len(counts):
            counts = np.concatenate([counts, np.zeros(max(run + 1 - len(counts), len(counts)), np.int32)])
        return counts

    def _tally(self, name: str, run: int, k: int = 1) -> None:
        counts = self._count(getattr(self, name), run)
        counts[run] += k
        setattr(self, name, counts)

    def add(self, sample: Mapping[str, np.ndarray], run: int, number: int, record: bool = False) -> bool:
        """Offer one sample; whether it entered the buffer."""
        for name, field in self.fields.items():
            if sample[name].shape != field.shape:
                raise Sim2dlError(
                    f"run {run} sample {number}: field '{name}' has shape {sample[name].shape}, "
                    f"the buffer holds {field.shape}"
                )
        self.arrivals += 1
        self._tally("added", run)
        if record:
            self.log.extend((ADD, run, number))
        if self.size < self.capacity:
            slot = self.size
            self.size += 1
        elif self.policy == "fifo":
            slot = int(np.argmin(self.order))
            self._leave(slot)
        else:
            j = int(self.rng.integers(self.arrivals))
            if j >= self.capacity:
                self._tally("dropped", run)
                return False
            slot = j
            self._leave(slot)
        for name in self.fields:
            self.data[name][slot] = sample[name]
        self.run[slot], self.number[slot], self.uses[slot], self.order[slot] = run, number, 0, self.arrivals
        return True

    def _leave(self, slot: int) -> None:
        """The sample in `slot` is replaced: counted as dropped if it was never drawn."""
        if self.uses[slot] == 0:
            self._tally("dropped", int(self.run[slot]))

    def ready(self, watermark: int) -> bool:
        return self.size >= watermark

    def draw(self, batch: int, step: int, record: bool = False) -> dict[str, np.ndarray]:
        """A batch of distinct samples (of the held ones, uniformly; all of them when fewer are held), in
        slot order of the draw. Samples reaching max_reuse leave afterwards."""
        if self.size == 0:
            raise Sim2dlError("the replay buffer is empty: nothing to draw a batch from")
        take = min(batch, self.size)
        slots = np.sort(self.rng.choice(self.size, size=take, replace=False))
        out = {n: a[slots] for n, a in self.data.items()}  # fancy indexing: a copy
        if record:
            self.log.extend((DRAW, step, take))
        self.uses[slots] += 1
        runs, counts = np.unique(self.run[slots], return_counts=True)
        for run, k in zip(runs.tolist(), counts.tolist(), strict=True):
            self._tally("drawn", run, k)
        if self.max_reuse:
            worn = slots[self.uses[slots] >= self.max_reuse]
            for slot in sorted(worn.tolist(), reverse=True):  # from the end: moving the last slot is safe
                self._remove(slot)
                self.retired += 1
        return out

    def _remove(self, slot: int) -> None:
        """Empty a slot, keeping slots 0..size-1 dense (the last one moves into it)."""
        last = self.size - 1
        if slot != last:
            for a in self.data.values():
                a[slot] = a[last]
            for a in (self.run, self.number, self.uses, self.order):
                a[slot] = a[last]
        self.run[last] = -1
        self.size -= 1

    def exhausted(self) -> bool:
        """Nothing left to draw (every sample held reached max_reuse, or none arrived)."""
        return self.size == 0

    def held(self) -> list[tuple[int, int]]:
        """(run, number) of the samples held, in slot order (for tests and the summary's sample)."""
        return list(zip(self.run[: self.size].tolist(), self.number[: self.size].tolist(), strict=True))

    def counts(self, runs: int) -> dict[str, np.ndarray]:
        """Per run of `runs`: added, dropped, drawn (zeros for runs that sent nothing here)."""

        def sized(a: np.ndarray) -> np.ndarray:
            out = np.zeros(runs, np.int64)
            out[: min(runs, len(a))] = a[:runs]
            return out

        return {"added": sized(self.added), "dropped": sized(self.dropped), "drawn": sized(self.drawn)}


def replay(
    log: Iterable[int],
    samples: Mapping[tuple[int, int], Mapping[str, np.ndarray]],
    fields: Mapping[str, BufferField],
    settings: Mapping[str, Any],
    batch: int,
    seed: int,
    rank: int,
) -> list[dict[str, np.ndarray]]:
    """The batches a buffer of `settings` draws when fed a recorded log again: the same arrivals in the
    same order between the same draws give the same batches (train.deterministic's promise for online
    training)."""
    buffer = ReplayBuffer(fields, settings["capacity"], settings["policy"], settings["max_reuse"], seed, rank)
    batches = []
    entries = list(log)
    for kind, a, b in zip(entries[0::3], entries[1::3], entries[2::3], strict=True):
        if kind == ADD:
            buffer.add(samples[(a, b)], a, b)
        else:
            batches.append(buffer.draw(batch, a))
    return batches

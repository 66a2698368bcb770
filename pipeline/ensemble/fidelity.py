"""Levels of one simulator (simulate.fidelities, pure): a cheap code beside an expensive one.

The levels are listed cheapest first; the last is the code a surrogate is wanted of (the target). Each has
its own command (its `command`, or simulate.command with its `args` appended; `{fidelity}` is a placeholder
too), its number of runs, and a cost per run: declared, or measured from its runs (`measured_costs`). The
design is nested: level k runs the first `runs_k` points of the one design drawn from simulate.design and
simulate.seed, so every costlier level's points are also run by each cheaper level (Sobol prefixes: each
prefix is itself a balanced design). A point's runs share its seed at every level (common random numbers:
a stochastic code's levels then differ by their fidelity, not by their noise). Runs are numbered level by
level: level 0's runs first, then level 1's, and so on.

A level's cost per run, measured, is the mean seconds of its runs that succeeded, less those that started a
persistent simulator (their seconds hold its start-up, paid once per rank: with py-pde 16 s against 0.04 s
a run on a 32 x 32 grid) where it has others.

Memory: a few numbers per level. Time: a level's segment of a block of runs per level; `measured_costs`
reads four columns of the runs table a row group at a time.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

# The runs table's columns of a run's level: its name, and its place among the levels (0: the cheapest),
# the number a surrogate conditioned on the level takes as an input
NAME_COLUMN, INDEX_COLUMN = "fidelity", "fidelity_index"
PLACEHOLDER = "fidelity"


@dataclass(frozen=True)
class Level:
    name: str
    index: int  # 0: the cheapest
    command: tuple[str, ...]  # placeholders not filled in
    runs: int
    cost: float | None  # declared; None: measured from its runs
    first: int  # its first run's number among all runs


@dataclass(frozen=True)
class Fidelities:
    levels: tuple[Level, ...]

    @staticmethod
    def of(settings: Mapping[str, Any]) -> Fidelities | None:
        """The levels of simulate.fidelities (None: one level, simulate.command); config.check_fidelities
        has checked them."""
        specs = settings.get("fidelities") or []
        if not specs:
            return None
        levels, first = [], 0
        for index, spec in enumerate(specs):
            command = spec.get("command") or [*(settings.get("command") or []), *spec.get("args", [])]
            levels.append(Level(spec["name"], index, tuple(command), spec["runs"], spec.get("cost"), first))
            first += spec["runs"]
        return Fidelities(tuple(levels))

    @property
    def runs(self) -> int:
        return sum(level.runs for level in self.levels)

    @property
    def points(self) -> int:
        """The design's points: the cheapest level runs them all."""
        return self.levels[0].runs

    def segments(self, start: int, stop: int) -> list[tuple[Level, int, int]]:
        """Runs [start, stop) as (level, first point, point after the last), a level at a time."""
        pieces = []
        for level in self.levels:
            low, high = max(start, level.first), min(stop, level.first + level.runs)
            if low < high:
                pieces.append((level, low - level.first, high - level.first))
        return pieces

    def columns(self, start: int, stop: int) -> tuple[list[str], np.ndarray, np.ndarray]:
        """Runs [start, stop)'s level names, level indices and design points."""
        names: list[str] = []
        indices, points = [], []
        for level, low, high in self.segments(start, stop):
            names += [level.name] * (high - low)
            indices.append(np.full(high - low, level.index, np.int64))
            points.append(np.arange(low, high, dtype=np.int64))
        empty = np.empty(0, np.int64)
        return names, np.concatenate(indices or [empty]), np.concatenate(points or [empty])


STARTED_COLUMN = "started_simulator"  # the runs table's: the run started a persistent simulator


@dataclass
class LevelTally:
    """Per level, of runs table rows: its runs, those that succeeded and their seconds summed, and of those
    the steady runs (that did not start a persistent simulator, whose start-up the starting run's seconds
    hold) and their seconds."""

    runs: np.ndarray
    ok: np.ndarray
    seconds: np.ndarray
    steady: np.ndarray
    steady_seconds: np.ndarray

    @classmethod
    def empty(cls, levels: int) -> LevelTally:
        return cls(*(np.zeros(levels) for _ in range(5)))

    def __add__(self, other: LevelTally) -> LevelTally:
        return LevelTally(*(getattr(self, f) + getattr(other, f) for f in self.__dataclass_fields__))

    def mean_seconds(self, level: int) -> float | None:
        """A run's seconds at `level`: the mean over its steady runs that succeeded (a persistent
        simulator starts once per rank, not once per run: its start-up is no run's cost), else over every
        run of it that succeeded; None where none did."""
        if self.steady[level]:
            return float(self.steady_seconds[level] / self.steady[level])
        return float(self.seconds[level] / self.ok[level]) if self.ok[level] else None


def level_tallies(table: Any, levels: int) -> LevelTally:
    """The LevelTally of runs table rows (a table or a row group with INDEX_COLUMN, status and seconds, and
    STARTED_COLUMN where it has it: a table written before it counts every run as steady)."""
    import pyarrow as pa
    import pyarrow.compute as pc

    index = table[INDEX_COLUMN].to_numpy(zero_copy_only=False).astype(np.int64)
    status = table["status"].cast(pa.string())
    succeeded = pc.equal(status, "ok").to_numpy(zero_copy_only=False)
    taken = np.nan_to_num(table["seconds"].to_numpy(zero_copy_only=False).astype(float))
    started = np.zeros(len(index), bool)
    if STARTED_COLUMN in table.column_names:
        started = table[STARTED_COLUMN].fill_null(False).to_numpy(zero_copy_only=False).astype(bool)
    steady = succeeded & ~started

    def per_level(rows: np.ndarray, weights: np.ndarray | None = None) -> np.ndarray:
        return np.bincount(index[rows], weights=None if weights is None else weights[rows], minlength=levels)

    every = np.ones(len(index), bool)
    return LevelTally(
        per_level(every).astype(float),
        per_level(succeeded).astype(float),
        per_level(succeeded, taken),
        per_level(steady).astype(float),
        per_level(steady, taken),
    )


def measured_costs(runs_table: Path, fidelities: Fidelities) -> list[dict[str, Any]]:
    """Each level's runs, those that succeeded, the mean seconds of a run (LevelTally.mean_seconds), and its
    cost per run (declared, else that mean) and that cost over the cheapest level's: what the levels cost,
    from the runs so far."""
    import pyarrow.parquet as pq

    tally = LevelTally.empty(len(fidelities.levels))
    table = pq.ParquetFile(runs_table)
    names = set(table.schema_arrow.names)
    for group in range(table.num_row_groups):
        wanted = [INDEX_COLUMN, "status", "seconds", *({STARTED_COLUMN} & names)]
        tally = tally + level_tallies(table.read_row_group(group, columns=wanted), len(fidelities.levels))
    levels = []
    for level in fidelities.levels:
        mean = tally.mean_seconds(level.index)
        levels.append(
            {
                "name": level.name,
                "runs": int(tally.runs[level.index]),
                "ok": int(tally.ok[level.index]),
                "mean_seconds": None if mean is None else round(float(mean), 4),
                "cost": level.cost if level.cost is not None else mean,
                "cost_declared": level.cost is not None,
            }
        )
    cheapest = levels[0]["cost"]
    for level in levels:
        ratio = level["cost"] / cheapest if level["cost"] is not None and cheapest else None
        level["cost_over_cheapest"] = None if ratio is None else round(ratio, 3)
        if level["cost"] is not None:
            level["cost"] = round(float(level["cost"]), 6)
    return levels


def level_commands(fidelities: Fidelities | None, command: Sequence[str]) -> dict[str, list[str]]:
    """Each level's command ({"": simulate.command} for one level)."""
    if fidelities is None:
        return {"": list(command)}
    return {level.name: list(level.command) for level in fidelities.levels}

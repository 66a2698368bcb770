"""What the rounds of an adaptive design know and write (pipeline/design/loop/rounds.py): each round's runs
table, the history of every round's points, which runs succeeded, their outputs and levels, read back from
the runs' files and from a previous run of the step.

Memory: the history holds the runs' points and outputs (runs x output entries) and their runs tables
(Arrow columns); time: reading each run's output file once.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq

from pipeline import Sim2dlError
from pipeline.design.emulator import Outputs
from pipeline.design.loop.levels import level_of
from pipeline.design.multifidelity import joined
from pipeline.design.share import SPACE_FILLING
from pipeline.design.space import parameter_columns, unit_points
from pipeline.ensemble.farm import run_paths
from pipeline.ensemble.plan import column_type, run_name, run_seeds
from pipeline.formats.fields.column import DESIGN_METADATA
from pipeline.formats.readers import reader_for
from pipeline.formats.readers.base import SampleError
from pipeline.paths import AdaptivePaths


def round_table(
    settings: Mapping[str, Any],
    unit: np.ndarray,
    first: int,
    round_index: int,
    acquisition: str | Sequence[str],
    values: np.ndarray,
    uncertainty: np.ndarray,
    digest: str,
) -> pa.Table:
    """A round's design: run names and seeds continuing the earlier rounds', each parameter, the round and
    what chose it (one name for the round, or one per run)."""
    space, budget = settings["space"], settings["runs"]
    indices = np.arange(first, first + len(unit), dtype=np.int64)
    columns = parameter_columns(unit, space) if len(unit) else {n: np.zeros(0) for n in space}
    fields = [pa.field("run", pa.string())]
    fields += [pa.field(n, column_type(spec, None)) for n, spec in space.items()]
    fields += [
        pa.field("seed", pa.int64()),
        pa.field("round", pa.int32()),
        pa.field("acquisition", pa.string()),
        pa.field("acquisition_value", pa.float64()),
        pa.field("uncertainty", pa.float64()),
    ]
    schema = pa.schema(fields, metadata={DESIGN_METADATA: digest})
    seeds = run_seeds(settings["seed"], indices)
    arrays = [pa.array([run_name(int(i), budget) for i in indices], pa.string())]
    arrays += [pa.array(columns[f.name], f.type) for f in fields[1 : 1 + len(space)]]
    arrays += [
        pa.array(seeds),
        pa.array(np.full(len(unit), round_index, np.int32)),
        pa.array(
            [acquisition] * len(unit) if isinstance(acquisition, str) else list(acquisition), pa.string()
        ),
        pa.array(np.asarray(values, np.float64)),
        pa.array(np.asarray(uncertainty, np.float64)),
    ]
    return pa.Table.from_arrays(arrays, schema=schema)


@dataclass
class History:
    """What rank 0 knows of the rounds so far."""

    points: list[np.ndarray] = field(default_factory=list)  # every round's points (unit cube)
    ok: list[np.ndarray] = field(default_factory=list)  # per round: which of its runs succeeded
    outputs: list[np.ndarray] = field(default_factory=list)  # per round: its successful runs' outputs
    rounds: list[dict[str, Any]] = field(default_factory=list)
    layout: Outputs | None = None
    tables: list[pa.Table] = field(default_factory=list)  # per round: its runs table
    levels: list[np.ndarray] = field(default_factory=list)  # per round: each run's level (fidelities)

    @property
    def runs(self) -> int:
        return sum(len(p) for p in self.points)

    def add(self, table: pa.Table, space: Mapping[str, Any], ok: np.ndarray, outputs: np.ndarray) -> None:
        """A finished round: its runs table, points, which succeeded, their outputs, each run's level."""
        self.tables.append(table)
        self.points.append(unit_of(table, space))
        self.ok.append(ok)
        self.outputs.append(outputs)
        self.levels.append(level_of(table))

    def space_filled(self, level: int | None = None) -> int:
        """The runs the space-filling design's continuation gave after round 0 (the share's, or a whole
        round's where the acquisition had nothing to choose by), of `level` only if given: where that
        design continues."""
        counted = 0
        for table, levels in zip(self.tables, self.levels, strict=True):
            shared = table.column("acquisition").to_numpy(zero_copy_only=False) == SPACE_FILLING
            counted += int(np.sum(shared if level is None else shared & (levels == level)))
        return counted

    def done_levels(self) -> np.ndarray:
        return np.concatenate([v[k] for v, k in zip(self.levels, self.ok, strict=True)])

    def joined_points(self, dims: int) -> np.ndarray:
        """Every point run, with its level (the joint space of pipeline/design/multifidelity.py)."""
        if not self.points:
            return np.zeros((0, dims + 1))
        return joined(np.concatenate(self.points), np.concatenate(self.levels))

    def table(self) -> pa.Table:
        """The whole runs table: every round's, in order."""
        return pa.concat_tables(self.tables, promote_options="permissive")

    def done(self) -> tuple[np.ndarray, np.ndarray]:
        x = np.concatenate([p[k] for p, k in zip(self.points, self.ok, strict=True)])
        return x, np.concatenate(self.outputs)

    def all_points(self, dims: int) -> np.ndarray:
        return np.concatenate(self.points) if self.points else np.zeros((0, dims))

    def failed_points(self, dims: int) -> np.ndarray:
        failed = [p[~k] for p, k in zip(self.points, self.ok, strict=True)]
        return np.concatenate(failed) if failed else np.zeros((0, dims))


def read_outputs(run_dir: Path, settings: Mapping[str, Any]) -> dict[str, np.ndarray]:
    """The arrays simulate.adaptive.outputs names, from the run's file (simulate.adaptive.files)."""
    adaptive = settings["adaptive"]
    files = sorted(p for p in run_dir.glob(adaptive["files"]) if p.is_file())
    if not files:
        raise Sim2dlError(
            f"config key 'simulate.adaptive.files': no file '{adaptive['files']}' in {run_dir}, "
            "which succeeded"
        )
    path = files[0]
    try:
        with reader_for(path, "auto").open(path) as opened:
            return {
                name: np.asarray(opened.decoded(name, opened.read(name, ())), np.float64)
                for name in adaptive["outputs"]
            }
    except SampleError as e:
        raise Sim2dlError(f"config key 'simulate.adaptive.outputs': {path}: {e}") from None


def round_outputs(
    table: pa.Table, first: int, root: Path, settings: Mapping[str, Any], history: History
) -> tuple[np.ndarray, np.ndarray]:
    """(which runs succeeded, their outputs) of a finished round, read from their files."""
    ok = np.array([s == "ok" for s in table.column("status").to_pylist()], bool)
    rows = []
    for i, name in enumerate(table.column("run").to_pylist()):
        if not ok[i]:
            continue
        arrays = read_outputs(run_paths(root, name, first + i, settings["files_per_dir"])[0], settings)
        if history.layout is None:
            history.layout = Outputs.of({n: a.shape for n, a in arrays.items()})
        shapes = {n: a.shape for n, a in arrays.items()}
        expected = {n: s for n, (_, _, s) in history.layout.layout.items()}
        if shapes != expected:
            raise Sim2dlError(
                f"simulate.adaptive.outputs: run {name} wrote shapes {shapes}, the first run {expected}"
            )
        rows.append(history.layout.row(arrays))
    width = history.layout.width if history.layout else 0
    return ok, np.array(rows).reshape(len(rows), width)


def unit_of(table: pa.Table, space: Mapping[str, Any]) -> np.ndarray:
    return unit_points({n: table.column(n).to_numpy(zero_copy_only=False) for n in space}, space)


def load_history(paths: AdaptivePaths, settings: Mapping[str, Any]) -> History:
    """The rounds a previous run of the step completed (their runs tables and outputs)."""
    history = History()
    if paths.rounds.exists():
        history.rounds = json.loads(paths.rounds.read_text())
    r = 0
    while paths.runs(r).exists() and paths.outputs(r).exists():
        table = pq.read_table(paths.runs(r))
        with np.load(paths.outputs(r)) as saved:
            history.add(table, settings["space"], saved["ok"], saved["outputs"])
            if history.layout is None and "layout" in saved:
                history.layout = Outputs(
                    {
                        n: (int(a), int(b), tuple(s))
                        for n, (a, b, s) in json.loads(str(saved["layout"])).items()
                    }
                )
        r += 1
    history.rounds = [row for row in history.rounds if row["round"] < r]
    return history

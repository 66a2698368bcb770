"""The plan of an ensemble (pure, `EnsemblePlan`): the design drawn from simulate.seed (random, Sobol,
Latin hypercube via scipy.stats.qmc, or a grid) over simulate.space, one row per run: `run` (run-000000,
...), each parameter, `seed` (and with simulate.fidelities each run's level: pipeline/ensemble/fidelity.py);
a run's command with its placeholders ({out}, {run}, {seed}, each parameter) filled in from its row; the
settings a farm runs with, checked on every rank.

Memory: the design is made a block of DESIGN_BLOCK runs at a time, when a rank needs its rows (the same rows
every time: random and Sobol designs jump ahead to the block; a Latin hypercube draws its whole unit
design, 8 bytes per run and parameter, once per block): a block's (a few MB at 16,384 runs), whatever the
number of runs. Time: a block's rows per block asked for.
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import string
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa

from pipeline import Sim2dlError
from pipeline.ensemble import fidelity
from pipeline.ensemble.fidelity import Fidelities, level_commands
from pipeline.ensemble.sampling import scale, unit_design
from pipeline.formats.fields.column import DESIGN_METADATA
from pipeline.runtime.launch import simulator_argv
from pipeline.runtime.mpi import all_ok

BUILT_IN_PLACEHOLDERS = ("out", "run", "seed")
# The acquisition column of a design whose runs are chosen as they are handed out: the design's own point
# (its space-filling continuation), or a point the trainers chose (Breed's loss-based resampling)
CONTINUED, CHOSEN = "space_filling", "breed"
SEED_MODULUS = 900_000_000  # per-run seeds in [1, 9e8]: what Pythia's Random:seed and most generators accept


def placeholders(command: Sequence[str]) -> set[str]:
    """The {names} the command's arguments use."""
    names = set()
    for argument in command:
        for _, name, _, _ in string.Formatter().parse(argument):
            if name is not None:
                names.add(name)
    return names


def check_command(settings: Mapping[str, Any], key: str = "simulate.command") -> None:
    """Config errors before any run: placeholders naming nothing, and a program that is not there.
    `settings["command"]`: the command checked (a level's, named by `key`)."""
    command = settings["command"]
    known = set(BUILT_IN_PLACEHOLDERS) | set(settings["space"])
    if settings.get("fidelities"):
        known.add(fidelity.PLACEHOLDER)
    try:
        unknown = sorted(placeholders(command) - known)
    except ValueError as e:
        raise Sim2dlError(f"config key '{key}': {e} in {command}") from None
    if unknown:
        raise Sim2dlError(
            f"config key '{key}': the placeholders {unknown} name no parameter of simulate.space "
            f"(have {sorted(settings['space'])}) nor {sorted(known - set(settings['space']))}"
        )
    if settings.get("persistent") and placeholders(command):
        raise Sim2dlError(
            f"config key '{key}': with simulate.persistent the command starts once for many runs, "
            f"so it takes no placeholders (it has {sorted(placeholders(command))}): each run's values come "
            "as a JSON line on its stdin (docs/ensembles.md, A simulator that starts slowly)"
        )
    if not settings["space"]:
        raise Sim2dlError("config key 'simulate.space': an ensemble needs at least one parameter")
    program = command[0]
    if settings["image"]:  # the program is the image's business; the runtime must be here
        program = simulator_argv(settings["container"], settings["image"], command, Path.cwd())[0]
    found = (
        shutil.which(program) if "/" not in program else (program if os.access(program, os.X_OK) else None)
    )
    if found is None:
        raise Sim2dlError(f"config key '{key}': program '{program}' not found or not executable")


def grid_levels(space: Mapping[str, Mapping[str, Any]], runs: int) -> dict[str, list[Any]]:
    """The cross product's values of each parameter: every value of each choice and int range (ints as
    long as they fit), and k evenly spaced values of each continuous range, k the largest with the
    product <= runs."""
    discrete = {n: list(s["values"]) for n, s in space.items() if s["type"] == "choice"}
    fixed = int(np.prod([len(v) for v in discrete.values()])) if discrete else 1
    continuous = [n for n in space if n not in discrete]
    k = 1
    while continuous and fixed * (k + 1) ** len(continuous) <= runs:
        k += 1
    levels: dict[str, list[Any]] = {}
    for name, spec in space.items():
        if name in discrete:
            levels[name] = discrete[name]
        elif spec["type"] == "int":
            levels[name] = sorted({int(v) for v in np.linspace(spec["low"], spec["high"], k).round()})
        elif spec["type"] == "log-uniform":
            levels[name] = np.geomspace(spec["low"], spec["high"], k).tolist()
        else:
            levels[name] = np.linspace(spec["low"], spec["high"], k).tolist()
    if fixed > runs:
        raise Sim2dlError(
            f"config key 'simulate.runs': a grid of the choices alone has {fixed} points (> {runs})"
        )
    return levels


def grid_rows(levels: Mapping[str, list[Any]], start: int, stop: int) -> dict[str, list[Any]]:
    """Points [start, stop) of the cross product, in itertools.product's order (the last varies fastest)."""
    places = np.unravel_index(np.arange(start, stop), [len(v) for v in levels.values()])
    return {
        name: [values[i] for i in place.tolist()]
        for (name, values), place in zip(levels.items(), places, strict=True)
    }


def column_type(spec: Mapping[str, Any], levels: list[Any] | None) -> pa.DataType:
    """A parameter's column type, the same in every block: from all the values it can take."""
    if levels is not None:
        return pa.array(levels).type
    if spec["type"] == "choice":
        return pa.array(list(spec["values"])).type
    return pa.int64() if spec["type"] == "int" else pa.float64()


# Runs of the design made at a time: a row group of the runs table, and what a rank holds of the design and
# of the outcomes (65,536 cost about 10 MB more per rank than 16,384, measured; a gather per block is cheap)
DESIGN_BLOCK = 16_384


def run_seeds(seed: int, indices: np.ndarray) -> np.ndarray:
    """The runs' seeds from simulate.seed and their indices (a design point's, with levels): in [1, 9e8]."""
    return (seed * 100_003 + np.asarray(indices, np.int64)) % SEED_MODULUS + 1


def run_name(index: int, runs: int) -> str:
    return f"run-{index:0{max(6, len(str(runs - 1)))}d}"


@dataclass
class EnsemblePlan:
    """The design: a row per run (its id, each parameter, its seed), and the digest that identifies it.
    Made a block of DESIGN_BLOCK rows at a time, whenever asked (the same rows every time), so that no
    rank holds the whole design."""

    settings: dict[str, Any]  # runs, design, space, seed
    digest: str
    runs: int
    schema: pa.Schema
    levels: dict[str, list[Any]] | None  # a grid's
    fidelities: Fidelities | None = None  # simulate.fidelities: a run's level, and its design point
    _cached: tuple[int, pa.Table] | None = None
    first: int = 0  # the index of its first run among all runs (an adaptive design's later rounds: > 0)
    # Runs chosen as they are handed out (online choosing, settings["choosing"]): their points in the unit
    # cube (NaN: the design's own point) and the acquisition's value; 8 bytes per run and parameter.
    chosen: np.ndarray | None = None
    chosen_value: np.ndarray | None = None

    @staticmethod
    def draw(settings: Mapping[str, Any]) -> EnsemblePlan:
        keyed = {k: settings[k] for k in ("runs", "design", "space", "seed")}
        if settings.get("choosing"):  # another way of choosing is another design
            keyed["choosing"] = settings["choosing"]
        fidelities = Fidelities.of(settings)
        if fidelities is not None:  # the levels' names and runs make the design (their commands do not)
            keyed["fidelities"] = [[level.name, level.runs] for level in fidelities.levels]
            keyed["runs"] = fidelities.runs  # simulate.runs is not used
        digest = hashlib.sha256(json.dumps(keyed, sort_keys=True).encode()).hexdigest()[:16]
        space = keyed["space"]
        levels = grid_levels(space, keyed["runs"]) if keyed["design"] == "grid" else None
        runs = int(np.prod([len(v) for v in levels.values()])) if levels is not None else keyed["runs"]
        fields = [pa.field("run", pa.string())]
        fields += [pa.field(n, column_type(spec, levels[n] if levels else None)) for n, spec in space.items()]
        fields.append(pa.field("seed", pa.int64()))
        if fidelities is not None:
            runs = fidelities.runs
            fields += [
                pa.field(fidelity.NAME_COLUMN, pa.string()),
                pa.field(fidelity.INDEX_COLUMN, pa.int64()),
            ]
        plan = EnsemblePlan(keyed, digest, runs, pa.schema(fields), levels, fidelities)
        if "choosing" in keyed:
            if levels is not None:
                raise Sim2dlError("config key 'simulate.design': a grid's runs cannot be chosen (use sobol)")
            fields += [pa.field("acquisition", pa.string()), pa.field("acquisition_value", pa.float64())]
            plan.chosen = np.full((runs, len(space)), np.nan)
            plan.chosen_value = np.full(runs, np.nan)
        plan.schema = pa.schema(fields, metadata={DESIGN_METADATA: digest})
        return plan

    def choose(self, index: int, point: np.ndarray, value: float) -> None:
        """Run `index` takes this point of the unit cube instead of the design's (online choosing)."""
        assert self.chosen is not None and self.chosen_value is not None
        self.chosen[index], self.chosen_value[index] = point, value
        self._cached = None

    def unit_points(self, start: int, stop: int) -> np.ndarray:
        """Runs [start, stop) as points of the unit cube, chosen ones included."""
        kind, dims, seed = self.settings["design"], len(self.settings["space"]), self.settings["seed"]
        if self.fidelities is not None:  # each level's runs: the first points of one design
            points = self.fidelities.points
            pieces = [
                unit_design(kind, points, dims, seed, a, b)
                for _, a, b in self.fidelities.segments(start, stop)
            ]
            return np.concatenate(pieces) if pieces else np.empty((0, dims))
        unit = unit_design(kind, self.runs, dims, seed, start, stop)
        if self.chosen is not None:
            mine = ~np.isnan(self.chosen[start:stop, 0])
            unit[mine] = self.chosen[start:stop][mine]
        return unit

    def __len__(self) -> int:
        return self.runs

    def block(self, k: int) -> pa.Table:
        """Rows [k * DESIGN_BLOCK, (k + 1) * DESIGN_BLOCK) of the design (the last block may be shorter)."""
        if self._cached is not None and self._cached[0] == k:
            return self._cached[1]
        start, stop = k * DESIGN_BLOCK, min(self.runs, (k + 1) * DESIGN_BLOCK)
        space, seed = self.settings["space"], self.settings["seed"]
        if self.levels is not None:
            columns: dict[str, Any] = grid_rows(self.levels, start, stop)
        else:
            unit = self.unit_points(start, stop)
            columns = {name: scale(unit[:, i], spec) for i, (name, spec) in enumerate(space.items())}
        points = np.arange(start, stop, dtype=np.int64)
        if self.fidelities is not None:
            names, indices, points = self.fidelities.columns(start, stop)
        seeds = run_seeds(seed, points)  # a design point's seed, at every level
        arrays = [pa.array([run_name(i, self.runs) for i in range(start, stop)], pa.string())]
        arrays += [pa.array(columns[name], self.schema.field(name).type) for name in space]
        arrays.append(pa.array(seeds))
        if self.fidelities is not None:
            arrays += [pa.array(names, pa.string()), pa.array(indices)]
        if self.chosen_value is not None:
            value = self.chosen_value[start:stop]
            unchosen = np.isnan(value)  # null: no acquisition value (the design's own point)
            arrays += [
                pa.array(np.where(unchosen, CONTINUED, CHOSEN).tolist(), pa.string()),
                pa.array(value, pa.float64(), mask=unchosen),
            ]
        table = pa.Table.from_arrays(arrays, schema=self.schema)
        self._cached = (k, table)
        return table

    def blocks(self) -> Iterator[pa.Table]:
        for k in range(-(-self.runs // DESIGN_BLOCK)):
            yield self.block(k)

    def rows(self, start: int, stop: int) -> list[dict[str, Any]]:
        """Runs [start, stop) as {column: value} (one conversion per chunk, not one per value)."""
        rows: list[dict[str, Any]] = []
        while start < stop:
            k = start // DESIGN_BLOCK
            first = k * DESIGN_BLOCK
            taken = min(stop, first + DESIGN_BLOCK) - start
            rows += self.block(k).slice(start - first, taken).to_pylist()
            start += taken
        return rows


def arguments(command: Sequence[str], row: Mapping[str, Any], out: Path) -> list[str]:
    """A run's command with its placeholders filled in from its row of the design (floats at full
    precision)."""
    values = {**{k: _text(v) for k, v in row.items()}, "out": str(out)}
    return [argument.format(**values) for argument in command]


def _text(value: Any) -> str:
    return repr(value) if isinstance(value, float) else str(value)


def checked_settings(
    settings: Mapping[str, Any], container: Mapping[str, Any] | None, comm: Any, check: Any = None
) -> dict[str, Any]:
    """The simulate settings a farm runs with (the container section beside them, the command resolved),
    once the command and `check` (more checks of the settings, or None) pass on every rank: every rank
    stops at once on an error, and the message is printed once."""
    settings = {**settings, "container": container or {}}
    commands = level_commands(Fidelities.of(settings), settings["command"] or [])
    error = None
    try:
        for command, key in zip(commands.values(), command_keys(settings), strict=True):
            check_command({**settings, "command": command}, key)
        if check is not None:
            check(settings)
    except Sim2dlError as e:
        error = e
    all_ok(comm, error)
    return {
        **settings,
        "command": resolved_command(settings["command"] or []),
        "commands": {name: resolved_command(command) for name, command in commands.items()},
    }


def command_keys(settings: Mapping[str, Any]) -> list[str]:
    """The config key each level's command comes from (its own, or simulate.command)."""
    levels = settings.get("fidelities") or []
    if not levels:
        return ["simulate.command"]
    return [
        f"simulate.fidelities[{i}].command" if spec.get("command") else "simulate.command"
        for i, spec in enumerate(levels)
    ]


def resolved_command(command: Sequence[str]) -> list[str]:
    """The command as it runs, in its run's directory: arguments without placeholders that name an
    existing file or directory relative to where the step started are made absolute. Links are kept: a
    virtual environment's python is a link to the interpreter, and only through the link is it the
    environment's."""
    resolved = []
    for argument in command:
        path = Path(argument)
        plain = not placeholders([argument]) and not path.is_absolute() and not argument.startswith("-")
        resolved.append(
            os.path.abspath(argument)
            if plain and path.exists() and ("/" in argument or path.is_file())
            else argument
        )
    return resolved

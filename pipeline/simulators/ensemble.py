"""ensemble: the user's own simulator run over a parameter design, many runs inside one MPI job (a task
farm), with retries, time limits and resume; the design's parameters become the runs table, which ingest
reads as labels.

Plan (pure, `EnsemblePlan`): the design is drawn from simulate.seed (random, Sobol, Latin hypercube via
scipy.stats.qmc, or a grid) over simulate.space, one row per run: `run` (run-000000, ...), each
parameter, `seed`. It is written first, as {raw}/runs.parquet (a row group per block), with a digest of
the design settings: a rerun with the same design keeps it (and the runs already done), a changed design
starts afresh.

Execute (`run_ensemble`): rank 0 hands out runs in chunks that shrink as the queue empties (guided
self-scheduling: dynamic balancing when runs differ in length, few messages when they are short); every
rank, rank 0 included, has its chunks executed by its run worker (pipeline/runtime/run_worker.py: a small
process that dies with the rank and takes the running simulator with it). A run executes the command
(an argument vector, never a shell)
with {out}, {run}, {seed} and each parameter substituted, in its own directory (also its working
directory; arguments naming files relative to where the step started are made absolute) made under a
temporary name (`.RUN.partial`) and renamed to RUN when the command exits 0 having written something (so an
interrupted run leaves nothing that looks complete); its stdout and stderr go to logs/…/RUN.log. A run
that exits non-zero, writes nothing, or outlives simulate.run_timeout_s (its whole process group is
killed) is tried again up to simulate.retries times, then recorded as failed or timed_out with its
reason. Runs already complete (their directory exists, their log ends with their outcome) are not run
again, so a rerun after a kill -9 or scancel executes only what did not complete and ends with the same
runs table. With simulate.persistent the command starts once per rank and is handed each run as a JSON
line instead (pipeline/runtime/run_worker.py says how); the directories, logs, retries and resume are the
same.

Memory: no rank holds the whole design or every outcome. The design is made a block of DESIGN_BLOCK runs
at a time, when a rank needs its rows (the same rows every time: random and Sobol designs jump ahead to
the block; a Latin hypercube draws its whole unit design, 8 bytes per run and parameter, once per
block); every rank appends its runs' outcomes (24 bytes per run) to an unlinked file beside the runs as
each chunk completes, holding a chunk's and the reasons of its failed runs; rank 0 writes the runs table a
block at a time from what every rank reads back and sends of it. So a rank's memory is a block's (a few MB
at 16,384 runs), whatever the number of runs; disk: 24 bytes per run until the table is written.
Time: the runs' own time / ranks, plus one message per chunk and one gather per block.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import logging
import os
import shutil
import string
import tempfile
import threading
import time
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq

from pipeline import Sim2dlError
from pipeline.design.space import scale, unit_design
from pipeline.formats.fields.column import DESIGN_METADATA
from pipeline.paths import RawPaths
from pipeline.reporting.progress import progress_bar
from pipeline.runtime.launch import simulator_argv
from pipeline.runtime.mpi import all_ok
from pipeline.runtime.run_worker import RunWorker
from pipeline.storage.fsutil import atomic_path, write_json_atomic

log = logging.getLogger(__name__)

STATUSES = ("ok", "failed", "timed_out")  # by pipeline.runtime.run_worker's status numbers
BUILT_IN_PLACEHOLDERS = ("out", "run", "seed")
MAX_CHUNK = 64  # runs per hand-out at most: bounds the imbalance at the end when runs are long
REQUEST, REPLY = 71, 72  # MPI tags of the farm's messages
# The acquisition column of a design whose runs are chosen as they are handed out: the design's own point
# (its space-filling continuation), or a point the trainers chose (Breed's loss-based resampling)
CONTINUED, CHOSEN = "space_filling", "breed"
SEED_MODULUS = 900_000_000  # per-run seeds in [1, 9e8]: what Pythia's Random:seed and most generators accept


# ---------------------------------------------------------------- the design (pure)


def placeholders(command: Sequence[str]) -> set[str]:
    """The {names} the command's arguments use."""
    names = set()
    for argument in command:
        for _, name, _, _ in string.Formatter().parse(argument):
            if name is not None:
                names.add(name)
    return names


def check_command(settings: Mapping[str, Any]) -> None:
    """Config errors before any run: placeholders naming nothing, and a program that is not there."""
    command = settings["command"]
    known = set(BUILT_IN_PLACEHOLDERS) | set(settings["space"])
    try:
        unknown = sorted(placeholders(command) - known)
    except ValueError as e:
        raise Sim2dlError(f"config key 'simulate.command': {e} in {command}") from None
    if unknown:
        raise Sim2dlError(
            f"config key 'simulate.command': the placeholders {unknown} name no parameter of simulate.space "
            f"(have {sorted(settings['space'])}) nor {list(BUILT_IN_PLACEHOLDERS)}"
        )
    if settings.get("persistent") and placeholders(command):
        raise Sim2dlError(
            f"config key 'simulate.command': with simulate.persistent the command starts once for many runs, "
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
        raise Sim2dlError(f"config key 'simulate.command': program '{program}' not found or not executable")


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
        digest = hashlib.sha256(json.dumps(keyed, sort_keys=True).encode()).hexdigest()[:16]
        space = keyed["space"]
        levels = grid_levels(space, keyed["runs"]) if keyed["design"] == "grid" else None
        runs = int(np.prod([len(v) for v in levels.values()])) if levels is not None else keyed["runs"]
        fields = [pa.field("run", pa.string())]
        fields += [pa.field(n, column_type(spec, levels[n] if levels else None)) for n, spec in space.items()]
        fields.append(pa.field("seed", pa.int64()))
        plan = EnsemblePlan(keyed, digest, runs, pa.schema(fields), levels)
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
        unit = unit_design(
            self.settings["design"],
            self.runs,
            len(self.settings["space"]),
            self.settings["seed"],
            start,
            stop,
        )
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
        seeds = (seed * 100_003 + np.arange(start, stop, dtype=np.int64)) % SEED_MODULUS + 1
        arrays = [pa.array([run_name(i, self.runs) for i in range(start, stop)], pa.string())]
        arrays += [pa.array(columns[name], self.schema.field(name).type) for name in space]
        arrays.append(pa.array(seeds))
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


# ---------------------------------------------------------------- one run


def run_paths(root: Path, name: str, index: int, files_per_dir: int) -> tuple[Path, Path, Path]:
    """(final directory, temporary directory, log file) of a run; at most files_per_dir runs per directory."""
    group = f"{index // files_per_dir:05d}"
    return (
        root / group / name,
        root / group / f".{name}.partial",
        RawPaths(root).run_logs / group / f"{name}.log",
    )


def run_tasks(
    plan: EnsemblePlan, settings: Mapping[str, Any], root: Path, start: int, stop: int
) -> list[dict]:
    """What the run worker needs of runs [start, stop): the command with its placeholders filled in
    ({out}: the temporary directory it writes into), its directories and log, its retries and limit."""
    tasks = []
    persistent = settings.get("persistent", False)
    names = (*BUILT_IN_PLACEHOLDERS, *settings["space"])  # a persistent simulator's request: these values
    for index, row in enumerate(plan.rows(start, stop), plan.first + start):
        final, partial, log_file = run_paths(root.resolve(), row["run"], index, settings["files_per_dir"])
        task = {
            "final": str(final),
            "partial": str(partial),
            "log": str(log_file),
            "retries": settings["retries"],
            "timeout_s": settings["run_timeout_s"],
        }
        if persistent:  # started once in the runs' root, each run a line: the placeholders' names and values
            task["request"] = {**{k: row[k] for k in names if k in row}, "out": str(partial)}
            task["cwd"] = str(root.resolve())
            argv, where = list(settings["command"]), root.resolve()
        else:
            argv, where = arguments(settings["command"], row, partial), partial
        if settings["image"]:
            argv = simulator_argv(settings["container"], settings["image"], argv, where)
        tasks.append({"argv": argv, **task})
    return tasks


# ---------------------------------------------------------------- the farm


class Queue:
    """Run indices handed out in guided chunks: remaining / (2 x ranks), between 1 and max_chunk."""

    def __init__(self, runs: int, ranks: int, max_chunk: int = MAX_CHUNK) -> None:
        self.next, self.runs, self.ranks, self.max_chunk = 0, runs, ranks, max_chunk
        self.lock = threading.Lock()

    def take(self) -> tuple[int, int]:
        with self.lock:
            size = max(1, min(self.max_chunk, (self.runs - self.next) // (2 * self.ranks)))
            start, self.next = self.next, min(self.runs, self.next + size)
            return start, self.next


def serve(hand_out: Any, comm: Any, workers: int, bar: Any) -> None:
    """Rank 0's thread: answer every other rank's requests until each has been told there is no more. A
    rank asks again when its last chunk is done: that chunk's runs advance the progress bar, so that it
    counts every rank's work (tqdm's updates hold a lock)."""
    from mpi4py import MPI

    finished = 0
    status = MPI.Status()
    given: dict[int, int] = {}  # rank -> runs in the chunk it is working on
    while finished < workers:
        if not comm.Iprobe(source=MPI.ANY_SOURCE, tag=REQUEST, status=status):
            time.sleep(0.001)  # poll gently: this rank's worker runs simulations on the same cores
            continue
        source = status.Get_source()
        comm.recv(source=source, tag=REQUEST)
        bar.update(given.pop(source, 0))
        chunk = hand_out()
        comm.send(chunk, dest=source, tag=REPLY)
        given[source] = chunk[1] - chunk[0]
        if chunk[0] == chunk[1]:
            finished += 1


OUTCOME_ROW = np.dtype(
    [
        ("index", np.int64),
        ("status", np.uint8),
        ("attempts", np.uint16),
        ("seconds", np.float32),
        ("exit_code", np.int32),
    ]
)


class RankOutcomes:
    """This rank's runs and their outcomes, in run order (the queue hands out rising ranges, and a rank works
    through its chunks in turn): each chunk's rows (OUTCOME_ROW, 24 bytes per run) appended to a file as the
    chunk completes, an unlinked temporary beside the runs (gone with the process, however it ends), so that
    a rank holds a chunk, not every run it ran; and the reasons of failed runs (few: a farm with many
    failures stops at simulate.max_failed_fraction). After the farm the rows are read back in rising
    stretches (`take_until`), a block of the runs table at a time."""

    def __init__(self, spill_dir: Path) -> None:
        # closed by close(), not by a with block: it lives as long as this object
        self.file = tempfile.TemporaryFile(dir=spill_dir, prefix=".outcomes-")  # noqa: SIM115
        self.next_index = 0  # the lowest run index the next chunk may start at
        self.pending = np.empty(0, OUTCOME_ROW)  # read back, not yet taken
        self.reasons: dict[int, str] = {}
        self.began = time.monotonic()
        self.first_new_run_s: float | None = None  # from the farm's start to this rank's first run executed

    def add(self, start: int, outcomes: Sequence[Mapping[str, Any]]) -> None:
        if start < self.next_index:
            raise Sim2dlError(
                f"simulate: run {start} handed out after run {self.next_index - 1} (internal error)"
            )
        if self.first_new_run_s is None:
            started = [o["started"] for o in outcomes if "started" in o]  # runs not complete before
            if started:
                self.first_new_run_s = min(started) - self.began  # CLOCK_MONOTONIC: one clock per machine
        rows = np.empty(len(outcomes), OUTCOME_ROW)
        rows["index"] = np.arange(start, start + len(outcomes))
        for name in ("status", "attempts", "seconds", "exit_code"):
            rows[name] = [o[name] for o in outcomes]
        self.file.write(rows.tobytes())
        self.next_index = start + len(outcomes)
        self.reasons.update({start + i: o["reason"] for i, o in enumerate(outcomes) if o["reason"]})

    def rewind(self) -> None:
        """Writing is over: `take_until` reads from the first row."""
        self.file.seek(0)
        self.pending = np.empty(0, OUTCOME_ROW)

    def take_until(self, stop: int) -> np.ndarray:
        """The rows not yet taken of runs below `stop` (called with rising stops after `rewind`)."""
        taken = []
        while True:
            if not len(self.pending):
                data = self.file.read(DESIGN_BLOCK * OUTCOME_ROW.itemsize)
                if not data:
                    break
                self.pending = np.frombuffer(data, OUTCOME_ROW)
            cut = int(np.searchsorted(self.pending["index"], stop))
            taken.append(self.pending[:cut])
            self.pending = self.pending[cut:]
            if len(self.pending):
                break
        return np.concatenate(taken) if taken else np.empty(0, OUTCOME_ROW)

    def close(self) -> None:
        self.file.close()


@dataclass
class FarmHooks:
    """What a consumer of the runs as they complete (online training) adds to the farm: runs handed out
    `max_chunk` at a time, `before` a chunk starts (its first run's index and tasks) and `after` it
    completes (also with its outcomes). Runs whose directory may stay empty (a simulator that streams its
    output) set `may_be_empty`."""

    max_chunk: int = MAX_CHUNK
    before: Any = None  # (start, tasks) -> None
    after: Any = None  # (start, tasks, outcomes) -> None
    may_be_empty: bool = False
    # On the farm's rank 0, as it hands out runs [start, stop): chooses their points (plan.choose), before
    # any rank builds their tasks; (plan, start, stop) -> None (online choosing)
    choose: Any = None


def farm(
    plan: EnsemblePlan,
    settings: Mapping[str, Any],
    root: Path,
    comm: Any,
    hooks: FarmHooks | None = None,
    worker: RunWorker | None = None,
) -> RankOutcomes:
    """The plan's runs across the ranks (rank 0 hands out chunks); this rank's outcomes. `worker`: the
    rank's run worker, kept by the caller across farms (an adaptive design's rounds: a persistent simulator
    then starts once, not once a round); None: one of its own, closed at the end."""
    rank, size = comm.Get_rank(), comm.Get_size()
    hooks = hooks or FarmHooks()
    outcomes = RankOutcomes(root)
    queue = Queue(len(plan), size, hooks.max_chunk) if rank == 0 else None
    lock = threading.Lock()

    def hand_out() -> tuple[int, int, Any]:
        """The next chunk, with the points chosen for its runs (None when nothing is chosen)."""
        assert queue is not None
        with lock:
            start, stop = queue.take()
            if hooks.choose is None or start == stop:
                return start, stop, None
            hooks.choose(plan, start, stop)
            return start, stop, (plan.chosen[start:stop].copy(), plan.chosen_value[start:stop].copy())

    server = None
    bar = progress_bar(len(plan), "simulate", rank, size, unit="run", every_rank=True)
    if rank == 0 and size > 1:
        server = threading.Thread(target=serve, args=(hand_out, comm, size - 1, bar), daemon=True)
        server.start()
    own_worker = worker is None
    worker = worker or RunWorker()
    while True:
        if queue is not None:
            start, stop, chosen = hand_out()
        else:
            comm.send(None, dest=0, tag=REQUEST)
            start, stop, chosen = comm.recv(source=0, tag=REPLY)
            if chosen is not None:  # rank 0 chose these runs' points: this rank's plan takes them
                for index, (point, value) in enumerate(zip(*chosen, strict=True), start):
                    plan.choose(index, point, value)
        if start == stop:
            break
        tasks = run_tasks(plan, settings, root, start, stop)
        for task in tasks:
            task["may_be_empty"] = hooks.may_be_empty
        if hooks.before:
            hooks.before(start, tasks)
        done = worker.execute(tasks)
        if hooks.after:
            hooks.after(start, tasks, done)
        outcomes.add(start, done)
        bar.update(stop - start)
    if own_worker:
        worker.close()
    if server is not None:
        server.join()
    bar.close()
    return outcomes


# ---------------------------------------------------------------- the step


def prepare_design(plan: EnsemblePlan, root: Path) -> None:
    """Write the design first; a different design found there means its runs belong to another design:
    they are removed, with a message."""
    paths = RawPaths(root)
    if paths.runs.exists():
        metadata = pq.read_schema(paths.runs).metadata or {}
        if metadata.get(DESIGN_METADATA, b"").decode() == plan.digest:
            return
        log.warning(
            "sim2dl simulate: the design changed since %s was written: its runs are removed", paths.runs
        )
        for group in root.glob("[0-9][0-9][0-9][0-9][0-9]"):
            shutil.rmtree(group)
        shutil.rmtree(paths.run_logs, ignore_errors=True)
    # No dictionary encoding: run names, seeds and drawn values are unique (a dictionary per column only
    # costs memory: 40 MB more at blocks of 65,536 rows, measured)
    with atomic_path(paths.runs) as tmp, pq.ParquetWriter(tmp, plan.schema, use_dictionary=False) as writer:
        for block in plan.blocks():
            writer.write_table(block)


OUTCOME_SCHEMA = [
    ("status", pa.string()),
    ("attempts", pa.uint16()),
    ("seconds", pa.float32()),
    ("exit_code", pa.int32()),
    ("reason", pa.string()),
]


def outcome_columns(block: np.ndarray, reasons: Mapping[int, str], start: int) -> list[pa.Array]:
    """A block's outcome columns from its runs' rows (OUTCOME_ROW, in run order) and its failed runs'
    reasons."""

    def column(name: str) -> pa.Array:
        return pa.array(np.ascontiguousarray(block[name]))

    status = pc.take(pa.array(STATUSES), column("status"))  # a few strings, taken per run
    why = np.zeros(len(block), np.int32)
    texts = [""]
    for i, text in sorted(reasons.items()):
        why[i - start] = len(texts)
        texts.append(text)
    return [
        status,
        column("attempts"),
        column("seconds"),
        column("exit_code"),
        pc.take(pa.array(texts, pa.string()), pa.array(why)),
    ]


def write_runs_table(
    plan: EnsemblePlan, mine: RankOutcomes, path: Path, comm: Any
) -> tuple[np.ndarray, list]:
    """The design with each run's outcome (status, attempts, seconds, exit_code, reason), written by rank 0 a
    block of the design at a time: every rank sends the outcomes it holds of that block. Returns, on rank 0,
    the number of runs per status and the first three failed runs' (index, reason)."""
    mine.rewind()
    counts, first_failed = np.zeros(len(STATUSES), np.int64), []
    schema = pa.schema(
        [*plan.schema, *(pa.field(n, t) for n, t in OUTCOME_SCHEMA)], metadata=plan.schema.metadata
    )
    with contextlib.ExitStack() as stack:
        writer = None
        if comm.Get_rank() == 0:
            writer = stack.enter_context(
                pq.ParquetWriter(
                    stack.enter_context(atomic_path(path)), schema, use_dictionary=["status", "reason"]
                )
            )
        for k in range(-(-len(plan) // DESIGN_BLOCK)):
            start, stop = k * DESIGN_BLOCK, min(len(plan), (k + 1) * DESIGN_BLOCK)
            reasons_here = {i: r for i, r in mine.reasons.items() if start <= i < stop}
            gathered = comm.gather((mine.take_until(stop), reasons_here), root=0)
            if writer is None:
                continue
            block = np.concatenate([g[0] for g in gathered])
            block = block[np.argsort(block["index"], kind="stable")]
            if not np.array_equal(block["index"], np.arange(start, stop)):
                raise Sim2dlError(
                    "simulate: the ranks' runs do not cover the design exactly once (internal error)"
                )
            reasons = {i: r for g in gathered for i, r in g[1].items()}
            first_failed += sorted(reasons.items())[: 3 - len(first_failed)]
            counts += np.bincount(block["status"], minlength=len(STATUSES))
            design = plan.block(k)
            columns = [*design.columns, *outcome_columns(block, reasons, start)]
            writer.write_table(pa.Table.from_arrays(columns, schema=schema))
    return counts, first_failed


def run_ensemble(
    settings: Mapping[str, Any],
    root: Path,
    comm: Any,
    container: Mapping[str, Any] | None = None,
    hooks: FarmHooks | None = None,
    plan: EnsemblePlan | None = None,
) -> dict[str, Any]:
    """Draw (or keep) the design, run what is not complete across the ranks, write the runs table.
    container: the config's container section (for simulate.image); hooks: a consumer of runs as they
    complete (online training); plan: the design drawn from these settings already (a consumer's, whose
    chosen runs the farm fills in)."""
    rank = comm.Get_rank()
    settings = checked_settings(settings, container, comm)
    plan = plan or EnsemblePlan.draw(settings)
    if rank == 0:
        root.mkdir(parents=True, exist_ok=True)
        prepare_design(plan, root)
    comm.barrier()
    start = time.perf_counter()
    mine = farm(plan, settings, root, comm, hooks)
    with contextlib.closing(mine):
        counts, first_failed = write_runs_table(plan, mine, RawPaths(root).runs, comm)
    first_new = [t for t in comm.gather(mine.first_new_run_s, root=0) or [] if t is not None]
    summary: dict[str, Any] = {}
    if rank == 0:
        summary = {
            "runs": len(plan),
            **dict(zip(STATUSES, counts.tolist(), strict=True)),
            "seconds_running": round(time.perf_counter() - start, 3),
            "design": settings["design"],
            "runs_table": str(RawPaths(root).runs),
        }
        if first_new:  # a resumed farm: how long it took to find the first run to do
            summary["seconds_to_first_new_run"] = round(min(first_new), 3)
        write_json_atomic(RawPaths(root).summary, {**summary, "config": json.loads(json.dumps(settings))})
    summary = comm.bcast(summary, root=0)
    error = None
    failed = summary["runs"] - summary["ok"]
    if rank == 0 and failed > settings["max_failed_fraction"] * summary["runs"]:
        first = [f"{run_name(i, len(plan))}: {why}" for i, why in first_failed]
        error = Sim2dlError(
            f"{failed} of {summary['runs']} runs did not succeed (more than simulate.max_failed_fraction "
            f"{settings['max_failed_fraction']}); the first: "
            + "; ".join(first)
            + f" (all in {RawPaths(root).runs})"
        )
    all_ok(comm, error)
    return summary


def checked_settings(
    settings: Mapping[str, Any], container: Mapping[str, Any] | None, comm: Any, check: Any = None
) -> dict[str, Any]:
    """The simulate settings a farm runs with (the container section beside them, the command resolved),
    once the command and `check` (more checks of the settings, or None) pass on every rank: every rank
    stops at once on an error, and the message is printed once."""
    settings = {**settings, "container": container or {}}
    error = None
    try:
        check_command(settings)
        if check is not None:
            check(settings)
    except Sim2dlError as e:
        error = e
    all_ok(comm, error)
    return {**settings, "command": resolved_command(settings["command"])}


def resolved_command(command: Sequence[str]) -> list[str]:
    """The command as it runs, in its run's directory: arguments without placeholders that name an
    existing file or directory relative to where the step started are made absolute."""
    resolved = []
    for argument in command:
        path = Path(argument)
        plain = not placeholders([argument]) and not path.is_absolute() and not argument.startswith("-")
        resolved.append(
            str(path.resolve())
            if plain and path.exists() and ("/" in argument or path.is_file())
            else argument
        )
    return resolved

"""The farm: the ensemble's runs over the ranks of one MPI job, with retries, time limits and resume
(`run_ensemble`, the step: the plan drawn or kept, its runs table written first, the runs farmed, the
table written with their outcomes).

Rank 0 hands out runs in chunks that shrink as the queue empties (guided self-scheduling: dynamic
balancing when runs differ in length, few messages when they are short); every rank, rank 0 included, has
its chunks executed by its run worker (pipeline/runtime/run_worker.py: a small process that dies with the
rank and takes the running simulator with it). A run executes the command (an argument vector, never a
shell) with {out}, {run}, {seed} and each parameter substituted, in its own directory (also its working
directory; arguments naming files relative to where the step started are made absolute) made under a
temporary name (`.RUN.partial`) and renamed to RUN when the command exits 0 having written something (so
an interrupted run leaves nothing that looks complete); its stdout and stderr go to logs/…/RUN.log. A run
that exits non-zero, writes nothing, or outlives simulate.run_timeout_s (its whole process group is
killed) is tried again up to simulate.retries times, then recorded as failed or timed_out with its
reason. Runs already complete (their directory exists, their log ends with their outcome) are not run
again, so a rerun after a kill -9 or scancel executes only what did not complete and ends with the same
runs table. With simulate.persistent the command starts once per rank and is handed each run as a JSON
line instead (pipeline/runtime/run_worker.py says how); the directories, logs, retries and resume are the
same.

Memory: no rank holds the whole design or every outcome: a block of the plan's rows and a chunk's
outcomes (plan.py and runs_table.py say how), a few MB at 16,384 runs, whatever the number of runs.
Time: the runs' own time / ranks, plus one message per chunk and one gather per block.
"""

from __future__ import annotations

import contextlib
import json
import logging
import threading
import time
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from pipeline import Sim2dlError
from pipeline.ensemble import fidelity
from pipeline.ensemble.fidelity import measured_costs
from pipeline.ensemble.plan import BUILT_IN_PLACEHOLDERS, EnsemblePlan, arguments, checked_settings, run_name
from pipeline.ensemble.runs_table import STATUSES, RankOutcomes, prepare_design, write_runs_table
from pipeline.paths import RawPaths
from pipeline.reporting.progress import progress_bar
from pipeline.runtime.launch import simulator_argv
from pipeline.runtime.mpi import all_ok
from pipeline.runtime.run_worker import RunWorker
from pipeline.storage.fsutil import write_json_atomic

log = logging.getLogger(__name__)

MAX_CHUNK = 64  # runs per hand-out at most: bounds the imbalance at the end when runs are long
REQUEST, REPLY = 71, 72  # MPI tags of the farm's messages


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
    # a persistent simulator's request: these values
    names = (*BUILT_IN_PLACEHOLDERS, *settings["space"], fidelity.PLACEHOLDER)
    for index, row in enumerate(plan.rows(start, stop), plan.first + start):
        command = settings["commands"][row.get(fidelity.NAME_COLUMN, "")]  # its level's
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
            argv, where = list(command), root.resolve()
        else:
            argv, where = arguments(command, row, partial), partial
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


class HandOut:
    """Rank 0's hand-out of the plan's runs, in chunks from `queue`, to its own loop and to the server's
    thread (a lock between them); `choose` (FarmHooks.choose) picks a chunk's points first."""

    def __init__(self, plan: EnsemblePlan, queue: Queue, choose: Any = None) -> None:
        self.plan, self.queue, self.choose = plan, queue, choose
        self.lock = threading.Lock()

    def __call__(self) -> tuple[int, int, Any]:
        """The next chunk, with the points chosen for its runs (None when nothing is chosen)."""
        plan = self.plan
        with self.lock:
            start, stop = self.queue.take()
            if self.choose is None or start == stop:
                return start, stop, None
            self.choose(plan, start, stop)
            return start, stop, (plan.chosen[start:stop].copy(), plan.chosen_value[start:stop].copy())


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
    hand_out = HandOut(plan, Queue(len(plan), size, hooks.max_chunk), hooks.choose) if rank == 0 else None
    server = None
    bar = progress_bar(len(plan), "simulate", rank, size, unit="run", every_rank=True)
    if rank == 0 and size > 1:
        server = threading.Thread(target=serve, args=(hand_out, comm, size - 1, bar), daemon=True)
        server.start()
    own_worker = worker is None
    worker = worker or RunWorker()
    while True:
        if hand_out is not None:
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
        if plan.fidelities is not None:  # each level's runs and cost, measured where not declared
            summary["fidelities"] = measured_costs(RawPaths(root).runs, plan.fidelities)
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

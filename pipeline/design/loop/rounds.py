"""adaptive: an ensemble whose runs are chosen in rounds by a surrogate of the runs so far
(simulate.adaptive), not all drawn before the first finishes.

Round 0 is the space-filling design (simulate.design) of `initial` runs. Every later round fits the
emulator (pipeline/design/emulator.py: a Gaussian process per principal component of the runs'
`outputs`; with `emulator: regimes`, pipeline/design/regimes.py, one per regime of the outputs) on every
run that succeeded, scores a candidate pool (`pool` scrambled Sobol points) by the
acquisition (pipeline/design/acquisitions/) and runs the `batch` it picks, none within `min_spacing` of
each other nor of any earlier run (failed runs included: their points are never proposed again). It stops
at simulate.runs runs (the budget), after `rounds` adaptive rounds, or when the emulator's validation
error (leave-one-out NRMSE over the runs, pipeline.data.scores, mean over the outputs) reaches
`target_error`.

With simulate.fidelities, round 0 is the levels' nested design and every later round chooses points and
levels by the costliest level's integrated variance taken off per unit cost, within a budget counted in
that level's runs (pipeline/design/loop/levels.py, level_round.py: the prices that keep cheaper levels
from doing harm, pipeline/design/fidelity_choice.py, pipeline/design/multifidelity.py).

One step, not a Snakemake checkpoint per round: the farm keeps its ranks across rounds (on Slurm a job per
round would wait in the queue for every batch of minutes-long runs), and rounds are many where checkpoints
re-evaluate the DAG each time. Ingest, convert, merge and training then run once on every run that
succeeded (the runs table), as for any ensemble.

Checkpoints: a round's design is written (atomically) before any of its runs, its runs table (design and
outcomes) and the outputs of its successful runs after them; a rerun reads them back, repeats no completed
run (the farm skips them), and chooses the same points (every choice is a function of the seed and the
runs before it). A changed design (space, seed, initial design, acquisition, batch, ...) starts afresh; a
larger budget (simulate.runs), more rounds or another target continue. The runs table (runs.parquet) is
every round's, with `round`, `acquisition`, `acquisition_value` and `uncertainty` (the emulator's
posterior standard deviation at the point when it was chosen, standardised outputs).

Memory: rank 0 holds the runs' points and outputs (runs x output entries), their runs table (Arrow columns:
rewritten whole after each round, never read back) and the emulator (runs² per component); the other ranks
one round's design. Time per round: the batch's runs / ranks, plus the fit (O(runs³) per component) and the
choice (the acquisition's, on one BLAS thread: integrated_variance's is references x pool x runs per
component): meant for hundreds to a few thousand runs.
"""

from __future__ import annotations

import contextlib
import json
import logging
import shutil
import time
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
from threadpoolctl import threadpool_limits

from pipeline import Sim2dlError, json_digest
from pipeline.design.acquisitions import ACQUISITIONS, Context, check_acquisition
from pipeline.design.fidelity_choice import LevelRound
from pipeline.design.loop.history import History, load_history, round_outputs, round_table
from pipeline.design.loop.level_round import cheaper_limits, fitted_levels, level_prices
from pipeline.design.loop.levels import (
    level_costs,
    level_figures,
    nested_start,
    round_spend,
    with_levels,
)
from pipeline.design.regimes import make_emulator
from pipeline.design.share import SPACE_FILLING, shared_choice
from pipeline.design.space import candidate_pool, min_spacing
from pipeline.ensemble.farm import farm
from pipeline.ensemble.fidelity import Fidelities
from pipeline.ensemble.plan import DESIGN_BLOCK, checked_settings
from pipeline.ensemble.runs_table import STATUSES, write_runs_table
from pipeline.ensemble.sampling import unit_design
from pipeline.formats.fields.column import DESIGN_METADATA
from pipeline.paths import AdaptivePaths, RawPaths
from pipeline.runtime.mpi import all_ok
from pipeline.runtime.run_worker import RunWorker
from pipeline.storage.fsutil import atomic_path, write_json_atomic

log = logging.getLogger(__name__)

INITIAL = "initial"  # the acquisition column of round 0
ROUND_KEY = b"sim2dl_round"  # a design's metadata: the statistics of its choosing
DIGEST_KEYS = ("space", "seed", "design", "command")
ADAPTIVE_DIGEST_KEYS = (
    "initial",
    "batch",
    "acquisition",
    "pool",
    "outputs",
    "files",
    "sigma",
    "committee",
    "min_spacing",
)
REGIMES_DIGEST_KEYS = (
    "emulator",
    "regimes",
)  # only with emulator: regimes, so designs made before keep theirs
# in the digest only where they choose otherwise than before they existed (a design made then keeps its digest
# where it is continued with them so; the defaults choose otherwise, and start such a design afresh)
CHOOSING_BEFORE = {"space_filling_share": 0.0, "irreducible": "none"}
# (simulate.runs, rounds and target_error are not in it: raising them continues the design)
NETWORK_ACQUISITION = "surrogate_disagreement"  # the acquisition that reads simulate.adaptive.network


@dataclass
class RoundPlan:
    """One round's runs as the farm takes a plan (pipeline.ensemble.plan.EnsemblePlan's interface): a table
    of rows."""

    table: pa.Table
    first: int

    @property
    def schema(self) -> pa.Schema:
        return self.table.schema

    def __len__(self) -> int:
        return self.table.num_rows

    def block(self, k: int) -> pa.Table:
        return self.table.slice(k * DESIGN_BLOCK, DESIGN_BLOCK)

    def rows(self, start: int, stop: int) -> list[dict[str, Any]]:
        return self.table.slice(start, stop - start).to_pylist()


def design_digest(settings: Mapping[str, Any]) -> str:
    adaptive = settings["adaptive"]
    keys = ADAPTIVE_DIGEST_KEYS + (REGIMES_DIGEST_KEYS if adaptive["emulator"] != "gp" else ())
    keyed = {k: settings[k] for k in DIGEST_KEYS} | {k: adaptive[k] for k in keys}
    keyed |= {k: adaptive[k] for k, before in CHOOSING_BEFORE.items() if adaptive[k] != before}
    if adaptive["acquisition"] == NETWORK_ACQUISITION:  # its network's settings choose too
        keyed["network"] = adaptive["network"]
    fidelities = Fidelities.of(settings)
    if fidelities is not None:  # the levels' names and nested start (not their commands nor costs)
        keyed["fidelities"] = [[level.name, level.runs] for level in fidelities.levels]
    return json_digest(keyed)


def check_rounds(settings: Mapping[str, Any]) -> None:
    """The acquisition of rounds (not online) against the registry."""
    check_acquisition(settings["adaptive"], online=False)


def choose(
    settings: Mapping[str, Any], history: History, round_index: int, digest: str, state: Path | None = None
) -> tuple[pa.Table | None, dict]:
    """The design of round `round_index` (rank 0), or None when the design is complete; and the round's
    statistics so far. `state`: where the acquisition keeps what it learned for the next round."""
    adaptive, dims = settings["adaptive"], len(settings["space"])
    fidelities = Fidelities.of(settings)
    if round_index == 0 and fidelities is not None:
        unit, levels, points = nested_start(settings, fidelities)
        nan = np.full(len(unit), np.nan)
        table = round_table(settings, unit, 0, 0, INITIAL, nan, nan, digest)
        stats = {"round": 0, "acquisition": INITIAL}
        return with_levels(table, fidelities, levels, points, settings["seed"]), stats
    if fidelities is not None:
        return choose_levels(settings, history, round_index, digest, fidelities)
    if round_index == 0:
        unit = unit_design(
            settings["design"], min(adaptive["initial"], settings["runs"]), dims, settings["seed"]
        )
        nan = np.full(len(unit), np.nan)
        return round_table(settings, unit, 0, 0, INITIAL, nan, nan, digest), {
            "round": 0,
            "acquisition": INITIAL,
        }
    stats: dict[str, Any] = {"round": round_index, "acquisition": adaptive["acquisition"]}
    x, emulator = fitted_emulator(settings, history, round_index, stats)
    batch = min(adaptive["batch"], settings["runs"] - history.runs)
    stop = stop_reason(adaptive, batch, round_index, stats["validation_nrmse_mean"])
    if stop:
        return None, {**stats, "stopped": stop, "runs": history.runs, "runs_ok": len(x)}
    choice, uncertainty = chosen(settings, history, emulator, x, round_index, batch, stats, state)
    if not len(choice.points):
        stopped = "no candidate left at min_spacing"
        return None, {**stats, "stopped": stopped, "runs": history.runs, "runs_ok": len(x)}
    values = choice.values
    stats["acquisition_value"] = {
        "min": float(values.min()),
        "mean": float(values.mean()),
        "max": float(values.max()),
    }
    stats["uncertainty_mean"] = float(uncertainty.mean())
    stats["space_filling"] = (choice.chosen_by or []).count(SPACE_FILLING)
    chosen_by = choice.chosen_by or adaptive["acquisition"]
    table = round_table(
        settings, choice.points, history.runs, round_index, chosen_by, values, uncertainty, digest
    )
    return table, stats


def choose_levels(
    settings: Mapping[str, Any], history: History, round_index: int, digest: str, fidelities: Fidelities
) -> tuple[pa.Table | None, dict]:
    """A round over levels (pipeline/design/loop/levels.py): the multi-fidelity emulator fitted on every
    level's runs, the round's spend, and its (point, level) pairs by the costliest level's integrated
    variance taken off per unit cost (pipeline/design/fidelity_choice.py)."""
    adaptive, dims = settings["adaptive"], len(settings["space"])
    stats: dict[str, Any] = {"round": round_index, "acquisition": adaptive["acquisition"]}
    costs = level_costs(fidelities, history.tables)
    every = np.concatenate(history.levels)
    spent = float(np.bincount(every, minlength=len(costs)) @ np.asarray(costs))
    emulator = fitted_levels(settings, history, len(costs), stats)
    stats["fitted_cost"] = round(spent / costs[-1], 3)  # the runs it was fitted on, in costliest runs
    spend = round_spend(adaptive, settings["runs"], costs, spent)
    # a round buys at least one run of the costliest level (what it may have left is less than one run)
    stop = stop_reason(adaptive, int(spend >= costs[-1]), round_index, stats["validation_nrmse_mean"])
    ended = {"runs": history.runs, "runs_ok": stats["fitted_on"], "spent": round(spent / costs[-1], 3)}
    if stop:
        return None, {**stats, "stopped": stop, **ended}
    started = time.perf_counter()
    priced, shared = level_prices(settings, history, fidelities, costs, spend, stats)
    with threadpool_limits(limits=1, user_api="blas"):  # as chosen(): small products
        choice = LevelRound(
            emulator,
            candidate_pool(adaptive["pool"], dims, settings["seed"], round_index),
            priced,
            spend,
            # the cheapest level may run budget x the cost ratio: its spacing, unless min_spacing is set
            min_spacing(adaptive, int(settings["runs"] * costs[-1] / costs[0]), dims),
            history.joined_points(dims),
            cheaper_limits(fidelities, costs, settings["runs"], stats["costliest_runs"]),
        ).with_share(adaptive["space_filling_share"], shared)
        uncertainty = np.sqrt(emulator.variance(choice.points)) if choice.size else np.zeros(0)
    stats["seconds_choosing"] = round(time.perf_counter() - started, 4)
    if not choice.size:
        stopped = "no candidate left at min_spacing"
        return None, {**stats, "stopped": stopped, **ended}
    values = choice.values
    stats["acquisition_value"] = {"min": values.min(), "mean": values.mean(), "max": values.max()}
    stats["acquisition_value"] = {k: float(v) for k, v in stats["acquisition_value"].items()}
    stats["uncertainty_mean"] = float(uncertainty.mean())
    stats["space_filling"] = int(choice.space_filling.sum())
    stats.update(level_figures(fidelities, every, choice.levels, costs, settings["runs"]))
    chosen_by = [SPACE_FILLING if s else adaptive["acquisition"] for s in choice.space_filling]
    table = round_table(
        settings, choice.points, history.runs, round_index, chosen_by, values, uncertainty, digest
    )
    return with_levels(table, fidelities, choice.levels, None, settings["seed"]), stats


def fitted_emulator(
    settings: Mapping[str, Any], history: History, round_index: int, stats: dict[str, Any]
) -> tuple[np.ndarray, Any]:
    """The runs that succeeded and the emulator fitted on them; its time and leave-one-out NRMSE per
    output (and their mean) into `stats`."""
    adaptive = settings["adaptive"]
    x, y = history.done()
    if len(x) < 3:
        raise Sim2dlError(
            f"simulate.adaptive: only {len(x)} runs succeeded in rounds 0-{round_index - 1}; the "
            "emulator needs 3 (see the runs table's reasons)"
        )
    started = time.perf_counter()
    emulator = make_emulator(history.layout, settings["seed"], adaptive["emulator"], adaptive["regimes"])
    emulator = emulator.fit(x, y)
    stats["seconds_fitting"] = round(time.perf_counter() - started, 4)
    stats["fitted_on"] = len(x)
    validation = emulator.outputs.nrmse(emulator.loo(), emulator.y)
    stats["validation_nrmse"] = validation
    stats["validation_nrmse_mean"] = float(np.mean(list(validation.values())))
    return x, emulator


def stop_reason(adaptive: Mapping[str, Any], batch: int, round_index: int, validation: float) -> str | None:
    """Why the design ends before this round (budget, rounds, target_error), or None."""
    target = adaptive["target_error"]
    if batch <= 0:
        return "budget"
    if adaptive["rounds"] is not None and round_index > adaptive["rounds"]:
        return "rounds"
    if target is not None and validation <= target:
        return "target_error"
    return None


def chosen(
    settings: Mapping[str, Any],
    history: History,
    emulator: Any,
    x: np.ndarray,
    round_index: int,
    batch: int,
    stats: dict[str, Any],
    state: Path | None = None,
) -> tuple[Any, np.ndarray]:
    """The round's choice (the space-filling share and the acquisition's points) and the emulator's
    uncertainty at them; the time it took into `stats`."""
    adaptive, dims, budget = settings["adaptive"], len(settings["space"]), settings["runs"]
    planned = adaptive["rounds"]
    if planned is None:
        planned = -(-(budget - adaptive["initial"]) // adaptive["batch"])
    started = time.perf_counter()
    context = Context(
        done=x,
        avoid=history.all_points(dims),
        emulator=emulator,
        pool=candidate_pool(adaptive["pool"], dims, settings["seed"], round_index),
        spacing=min_spacing(adaptive, budget, dims),
        round_index=round_index,
        rounds=max(1, planned),
        runs_so_far=history.runs,
        space_filled=history.space_filled(),
        design=settings["design"],
        seed=settings["seed"],
        settings=dict(adaptive),
        state=state,
    )
    # one BLAS thread: choosing multiplies small matrices (pool x runs), and handing each product to BLAS's
    # threads cost more than it saved (0.02 to 0.22 s a round at 56 runs on 2 cores, against 0.015 to 0.033)
    with threadpool_limits(limits=1, user_api="blas"):
        share = adaptive["space_filling_share"]
        choice = shared_choice(ACQUISITIONS[adaptive["acquisition"]], context, batch, share)
        uncertainty = np.sqrt(emulator.variance(choice.points)) if len(choice.points) else np.zeros(0)
    stats["seconds_choosing"] = round(time.perf_counter() - started, 4)
    stats.update(choice.figures or {})
    return choice, uncertainty


def prepare(paths: AdaptivePaths, root: Path, digest: str) -> None:
    """A design made with other settings is removed, with its runs (as
    pipeline.ensemble.runs_table.prepare_design does)."""
    first = paths.design(0)
    if not first.exists():
        return
    if (pq.read_schema(first).metadata or {}).get(DESIGN_METADATA, b"").decode() == digest:
        return
    log.warning(
        "sim2dl simulate: the adaptive design changed since %s was written: its runs are removed", first
    )
    shutil.rmtree(paths.root)
    for group in root.glob("[0-9][0-9][0-9][0-9][0-9]"):
        shutil.rmtree(group)
    shutil.rmtree(RawPaths(root).run_logs, ignore_errors=True)


def write_table(path: Path, table: pa.Table) -> None:
    with atomic_path(path) as tmp:
        pq.write_table(table, tmp)


def finish_round(
    paths: AdaptivePaths,
    root: Path,
    settings: Mapping[str, Any],
    history: History,
    r: int,
    first: int,
    stats: dict[str, Any],
) -> None:
    """Rank 0, after a round's farm: its outputs, the whole runs table, the rounds' figures."""
    table = pq.read_table(paths.runs(r))
    ok, outputs = round_outputs(table, first, root, settings, history)
    shapes = history.layout.layout.items() if history.layout else []
    layout = json.dumps({n: [a, b, list(s)] for n, (a, b, s) in shapes})
    with atomic_path(paths.outputs(r)) as tmp, open(tmp, "wb") as f:
        np.savez(f, ok=ok, outputs=outputs, layout=np.array(layout))
    history.add(table, settings["space"], ok, outputs)
    statuses = table.column("status").to_pylist()
    stats.update(
        {
            "runs": history.runs,
            "runs_ok": int(sum(len(x) for x in history.outputs)),
            "new_runs": len(table),
            **{f"new_{s}": statuses.count(s) for s in STATUSES},
        }
    )
    history.rounds.append(stats)
    write_json_atomic(paths.rounds, history.rounds)
    log_round(paths, stats, r)
    write_table(RawPaths(root).runs, history.table())


def log_round(paths: AdaptivePaths, stats: Mapping[str, Any], r: int) -> None:
    """A round's row as TensorBoard scalars (runs, validation error per output, the acquisition's statistics,
    seconds), step r: `tensorboard --logdir` beside the trainings."""
    from pipeline.reporting.board import ScalarLog

    board = ScalarLog(paths.tensorboard)
    board.scalars(r, {k: v for k, v in stats.items() if k not in ("round", "final")})
    board.close()


def figures(paths: AdaptivePaths, settings: Mapping[str, Any], history: History) -> None:
    from pipeline.reporting.plots import adaptive_figures

    adaptive_figures(
        history.table(), list(settings["space"]), history.rounds, paths.design_figure, paths.error_figure
    )


def round_design(
    paths: AdaptivePaths, settings: Mapping[str, Any], history: History, r: int, digest: str
) -> tuple[pa.Table | None, dict[str, Any]]:
    """Rank 0: round r's design as written before (a rerun), or chosen now and written before any of its
    runs; None when the design is complete. With the statistics of its choosing (kept in its metadata)."""
    if paths.design(r).exists():
        table = pq.read_table(paths.design(r))
        return table, json.loads((table.schema.metadata or {}).get(ROUND_KEY, b"{}"))
    table, stats = choose(settings, history, r, digest, paths.network)
    if table is not None:
        metadata = {**table.schema.metadata, ROUND_KEY: json.dumps(stats).encode()}
        write_table(paths.design(r), table.replace_schema_metadata(metadata))
    return table, stats


def summarise(
    paths: AdaptivePaths,
    root: Path,
    settings: Mapping[str, Any],
    history: History,
    rounds: int,
    final: dict[str, Any],
    seconds: float,
) -> dict[str, Any]:
    """Rank 0, after the last round: the figures, the final row of rounds.json, the step's summary."""
    every = history.table().column("status").to_pylist()
    figures(paths, settings, history)
    summary = {
        "runs": len(every),
        **{s: every.count(s) for s in STATUSES},
        "rounds": rounds,
        "stopped": final.get("stopped"),
        "validation_nrmse_mean": final.get("validation_nrmse_mean"),
        "acquisition": settings["adaptive"]["acquisition"],
        "design": settings["design"],
        "seconds_running": round(seconds, 3),
        "runs_table": str(RawPaths(root).runs),
        "rounds_table": str(paths.rounds),
    }
    history.rounds.append({**final, "round": rounds, "final": True})
    write_json_atomic(paths.rounds, history.rounds)
    log_round(paths, {**final, "runs": len(every)}, rounds)
    write_json_atomic(
        RawPaths(root).summary, {**summary, "config": json.loads(json.dumps(settings, default=str))}
    )
    return summary


def run_adaptive(
    settings: Mapping[str, Any], root: Path, comm: Any, container: Mapping[str, Any] | None = None
) -> dict[str, Any]:
    """The rounds: choose (rank 0), run across the ranks, read back; returns the summary (also written)."""
    rank = comm.Get_rank()
    settings = checked_settings(settings, container, comm, check_rounds)
    paths = RawPaths(root).adaptive
    digest = design_digest(settings)
    history = History()
    if rank == 0:
        prepare(paths, root, digest)
        paths.root.mkdir(parents=True, exist_ok=True)
        history = load_history(paths, settings)
    comm.barrier()
    started = time.perf_counter()
    worker = RunWorker()  # across the rounds: a persistent simulator starts once per rank
    try:
        final, r = DesignLoop(paths, root, settings, history, digest, comm, worker).run()
    finally:
        worker.close()
    summary = {}
    if rank == 0:
        summary = summarise(paths, root, settings, history, r, final, time.perf_counter() - started)
    summary = comm.bcast(summary, root=0)
    check_failed_fraction(summary, settings, root, comm)
    return summary


@dataclass
class DesignLoop:
    """The design's rounds on this rank: where they are written (`paths`, under the runs' `root`), the
    checked settings, the history rank 0 chooses from, the design's digest, the job's ranks and this
    rank's run worker (across the rounds: a persistent simulator starts once per rank)."""

    paths: AdaptivePaths
    root: Path
    settings: Mapping[str, Any]
    history: History
    digest: str
    comm: Any
    worker: RunWorker

    def run(self) -> tuple[dict[str, Any], int]:
        """Choose (rank 0), run across the ranks, read back, until the design is complete; returns the
        final round's statistics and the number of rounds."""
        rank = self.comm.Get_rank()
        r = 0
        while True:
            table, stats, complete, error = None, {}, False, None
            if rank == 0:
                try:
                    complete = self.paths.runs(r).exists() and self.paths.outputs(r).exists()
                    table, stats = round_design(self.paths, self.settings, self.history, r, self.digest)
                except Sim2dlError as e:
                    error = e
            all_ok(self.comm, error)
            table, complete = self.comm.bcast((table, complete), root=0)
            if table is None:
                return stats, r
            if not complete:
                self.run_round(r, table, stats)
            r += 1

    def run_round(self, r: int, table: pa.Table, stats: dict[str, Any]) -> None:
        """Round r's runs across the ranks, its runs table, then (rank 0) its outputs read back into the
        history; an error on rank 0 ends every rank."""
        first = int(table.column("run").to_pylist()[0].split("-")[1]) if len(table) else 0
        plan = RoundPlan(table, first)
        began = time.perf_counter()
        mine = farm(plan, self.settings, self.root, self.comm, worker=self.worker)
        with contextlib.closing(mine):
            write_runs_table(plan, mine, self.paths.runs(r), self.comm)
        error = None
        if self.comm.Get_rank() == 0:
            stats["seconds_simulating"] = round(time.perf_counter() - began, 3)
            try:
                finish_round(self.paths, self.root, self.settings, self.history, r, first, stats)
            except Sim2dlError as e:
                error = e
        all_ok(self.comm, error)


def check_failed_fraction(
    summary: Mapping[str, Any], settings: Mapping[str, Any], root: Path, comm: Any
) -> None:
    """More failed runs than simulate.max_failed_fraction allows end the step, on every rank."""
    failed = summary["runs"] - summary["ok"]
    error = None
    if comm.Get_rank() == 0 and failed > settings["max_failed_fraction"] * summary["runs"]:
        error = Sim2dlError(
            f"{failed} of {summary['runs']} runs did not succeed (more than "
            f"simulate.max_failed_fraction {settings['max_failed_fraction']}): their reasons are in "
            f"{RawPaths(root).runs}"
        )
    all_ok(comm, error)

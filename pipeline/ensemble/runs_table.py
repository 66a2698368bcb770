"""The runs table ({raw}/runs.parquet, which ingest reads as labels): the design written first (a row group
per block), with a digest of the design settings: a rerun with the same design keeps it (and the runs
already done), a changed design starts afresh; then the design with each run's outcome (status, attempts,
seconds, exit_code, started_simulator: the run started a persistent simulator, and its seconds hold that
start-up; reason).

Memory: no rank holds every outcome. Every rank appends its runs' outcomes (20 bytes per run) to an
unlinked file beside the runs as each chunk completes (`RankOutcomes`), holding a chunk's and the reasons
of its failed runs; rank 0 writes the table a block at a time from what every rank reads back and sends
of it. Disk: 20 bytes per run until the table is written. Time: one gather per block.
"""

from __future__ import annotations

import contextlib
import logging
import shutil
import tempfile
import time
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq

from pipeline import Sim2dlError
from pipeline.ensemble.plan import DESIGN_BLOCK, EnsemblePlan
from pipeline.formats.fields.column import DESIGN_METADATA
from pipeline.paths import RawPaths
from pipeline.storage.fsutil import atomic_path

log = logging.getLogger(__name__)

STATUSES = ("ok", "failed", "timed_out")  # by pipeline.runtime.run_worker's status numbers


OUTCOME_ROW = np.dtype(
    [
        ("index", np.int64),
        ("status", np.uint8),
        ("attempts", np.uint16),
        ("seconds", np.float32),
        ("exit_code", np.int32),
        ("started_simulator", np.bool_),
    ]
)


class RankOutcomes:
    """This rank's runs and their outcomes, in run order (the queue hands out rising ranges, and a rank works
    through its chunks in turn): each chunk's rows (OUTCOME_ROW, 20 bytes per run) appended to a file as the
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
        # a run completed before this key was logged did not say: it is counted as a steady run
        rows["started_simulator"] = [o.get("started_simulator", False) for o in outcomes]
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
    ("started_simulator", pa.bool_()),
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
        column("started_simulator"),
        pc.take(pa.array(texts, pa.string()), pa.array(why)),
    ]


def write_runs_table(
    plan: EnsemblePlan, mine: RankOutcomes, path: Path, comm: Any
) -> tuple[np.ndarray, list]:
    """The design with each run's outcome (status, attempts, seconds, exit_code, started_simulator, reason),
    written by rank 0 a block of the design at a time: every rank sends the outcomes it holds of that block.
    Returns, on rank 0, the number of runs per status and the first three failed runs' (index, reason)."""
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

"""throughput: one figure of the data steps' times and rates (ingest, convert, merge, stage), for the
workflow's report. It reads each step's JSON summary (the last one in the step's log, as the workflow
writes it) and the dataset's counts in metadata.json. Memory and time: a few small files, whatever the
dataset's size.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from pipeline import Sim2dlError
from pipeline.config import Layout

DATA_STEPS = ("ingest", "convert", "merge", "stage")


def last_summary(log: Path) -> dict[str, Any] | None:
    """The last JSON summary line a step printed into its log, or None."""
    try:
        lines = log.read_text(errors="replace").splitlines()
    except FileNotFoundError:
        return None
    for line in reversed(lines):
        if line.startswith('{"step"'):
            try:
                return json.loads(line)
            except ValueError:
                continue
    return None


def throughput(layout: Layout, out: Path) -> dict[str, Any]:
    """The data steps' times and rates, from their logs' JSON summaries, as a figure at `out`."""
    summaries = {step: s for step in DATA_STEPS if (s := last_summary(layout.log(step))) is not None}
    if not summaries:
        raise Sim2dlError(f"no step summaries in {layout.log('merge').parent}: run the data steps first")
    try:
        meta = json.loads(layout.metadata.read_text())
    except (OSError, ValueError) as e:
        raise Sim2dlError(f"cannot read {layout.metadata}: {e}") from None
    shard_bytes = sum(s["bytes"] for s in meta["shards"])
    from pipeline.reporting.plots import data_throughput

    data_throughput(summaries, meta["counts"]["records"], shard_bytes, out)
    return {"figure": str(out), "seconds_per_step": {k: v["seconds"] for k, v in summaries.items()}}

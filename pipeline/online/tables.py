"""Online training's record of every run (nothing lost): the ensemble's runs table (parameters, status,
attempts, reason) with, per run, the samples it sent, those refused (reasons in refused.csv: the run's
name as in the runs table, the file or stream step in the run's final directory, the reason), those
that entered the training buffers, those a buffer dropped before drawing them, how often its samples were
drawn (trained on), its validation samples, and the stream steps its writer dropped. Memory: a few
integers per run. Time: one pass over the runs table.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq

from pipeline.data.tables import write_csv
from pipeline.online.producer import ProducerCounts
from pipeline.storage.fsutil import atomic_path

REFUSED_COLUMNS = ("run", "source", "reason")


def write_online_runs(
    runs_table: Path, out_dir: Path, counts: Mapping[str, np.ndarray], produced: Sequence[ProducerCounts]
) -> Path:
    """{out_dir}/online_runs.parquet and {out_dir}/refused.csv; returns the table's path."""
    table = pq.read_table(runs_table)
    runs = table.num_rows
    columns = {
        "samples_sent": sum((p.sent[:runs] for p in produced), np.zeros(runs, np.int64)),
        "samples_refused": sum((p.refused[:runs] for p in produced), np.zeros(runs, np.int64)),
        "samples_buffered": counts["added"][:runs] - counts["dropped"][:runs],
        "samples_dropped_by_buffer": counts["dropped"][:runs],
        "times_trained": counts["drawn"][:runs],
        "validation_samples": counts["validation"][:runs],
        "stream_steps_dropped": sum((p.dropped[:runs] for p in produced), np.zeros(runs, np.int64)),
    }
    for name, values in columns.items():
        table = table.append_column(name, pa.array(np.asarray(values, np.int64)))
    path = out_dir / "online_runs.parquet"
    with atomic_path(path) as tmp:
        pq.write_table(table, tmp)
    # keyed like the runs table (its `run` names), in run order
    names = table.column("run").to_pylist()
    refused = sorted((run, where, why) for p in produced for run, where, why in p.reasons)
    write_csv(
        out_dir / "refused.csv", REFUSED_COLUMNS, [(names[run], where, why) for run, where, why in refused]
    )
    return path

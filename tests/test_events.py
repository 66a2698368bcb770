"""Event-indexed tables (pipeline/formats/readers/events.py): detector hits as columns of millions of rows
with an index table or a sorted event id, per-event truth from another table keyed by the same id,
PyTables/pandas HDF5 written by pandas; every event a record or a reject with its reason, on 1 and 2 ranks."""

from __future__ import annotations

import json
from pathlib import Path

import h5py
import numpy as np
import pytest

from pipeline.data.tables import read_csv
from pipeline.steps.ingest.step import ingest

from .conftest import make_config, run_cli, write_config
from .helpers import data_half, records_by_id

HITS = np.array([3, 0, 5, 2, 4, 1])  # hits per event
TRACK_IDS = np.repeat(np.arange(6), [2, 1, 3, 1, 2, 1])  # muons per event in the truth table (one per row)


def write_km3net_like(path: Path, index_rows=None, track_ids=TRACK_IDS) -> None:
    """km3pipe's layout: /hits a group of 1-D columns with /hits/_indices (index, n_items); /mc_tracks a
    compound table with group_id, several rows per event."""
    starts = np.concatenate([[0], np.cumsum(HITS)[:-1]])
    rows = int(HITS.sum())
    index = np.array(
        list(zip(starts, HITS, strict=True)) if index_rows is None else index_rows,
        dtype=[("index", "<i8"), ("n_items", "<i8")],
    )
    with h5py.File(path, "w") as f:
        hits = f.create_group("hits")
        hits["time"] = np.arange(rows, dtype="f8") * 1.5
        hits["dom_id"] = (np.arange(rows) + 100).astype("i4")
        hits["_indices"] = index
        tracks = np.zeros(len(track_ids), dtype=[("group_id", "<i8"), ("energy", "<f4"), ("dir_z", "<f4")])
        tracks["group_id"], tracks["energy"], tracks["dir_z"] = (
            track_ids,
            np.arange(len(track_ids)) + 1.0,
            -0.5,
        )
        f["mc_tracks"] = tracks


KM3NET_FIELDS = {
    "hits": {
        "path": "hits",
        "columns": ["time", "dom_id"],
        "ragged_by": "hits/_indices",
        "dtype": "float32",
        "shape": [None, 2],
    },
    "energy": {
        "path": "mc_tracks",
        "columns": ["energy"],
        "key": "group_id",
        "reduce": "sum",
        "dtype": "float32",
    },
    "muons": {"path": "mc_tracks", "columns": ["energy"], "key": "group_id", "reduce": "count"},
    "direction": {"path": "mc_tracks", "columns": ["dir_z"], "key": "group_id", "reduce": "first"},
}


def events_config(tmp_path: Path, root: Path, fields: dict, features: list[str], labels: list[str]) -> dict:
    return make_config(
        tmp_path,
        source={"path": str(root), "glob": "*.h5", "sample_id": None, "fields": fields},
        convert={"features": features, "labels": labels, "log1p": [], "normalise": [], "per_channel": []},
        ingest={"max_reject_fraction": 0.9},
    )


def test_hits_indexed_by_an_index_table_with_truth_keyed_by_event_id(tmp_path, serial):
    root = tmp_path / "data"
    root.mkdir()
    write_km3net_like(root / "run1.h5")
    config = events_config(tmp_path, root, KM3NET_FIELDS, ["hits"], ["energy", "muons", "direction"])
    summary, meta = data_half(config, root, tmp_path, serial)
    assert (summary["samples"], summary["accepted"], summary["rejected"]) == (6, 6, 0)
    assert meta["feature_spec"]["hits"]["shape"] == [None, 2]
    records = records_by_id(tmp_path / "work" / "merged")
    energy = np.arange(len(TRACK_IDS)) + 1.0
    first_hit = 0
    for event, n in enumerate(HITS):
        record = records[f"run1#{event}"]
        rows = np.arange(first_hit, first_hit + n)
        np.testing.assert_array_equal(
            record["hits"].reshape(-1, 2), np.stack([rows * 1.5, rows + 100], axis=1)
        )
        assert record["energy"] == pytest.approx(energy[event == TRACK_IDS].sum())
        assert record["muons"] == (event == TRACK_IDS).sum() and record["direction"] == pytest.approx(-0.5)
        first_hit += n


def test_bad_index_rows_and_missing_ids_reject_their_events_only(tmp_path, serial):
    """An index row past the end of the hits, a negative count, and an event id the truth table lacks:
    each of those events is a reject naming the row or id; the others are records."""
    root = tmp_path / "data"
    root.mkdir()
    starts = np.concatenate([[0], np.cumsum(HITS)[:-1]])
    rows = list(zip(starts.tolist(), HITS.tolist(), strict=True))
    rows[2] = (starts[2], 500)  # past the end
    rows[4] = (starts[4], -1)  # a negative count
    # event 3: no truth
    write_km3net_like(root / "run1.h5", index_rows=rows, track_ids=TRACK_IDS[TRACK_IDS != 3])
    config = events_config(tmp_path, root, KM3NET_FIELDS, ["hits"], ["energy", "muons"])
    summary = ingest(config, root, tmp_path / "ingest", serial)
    assert (summary["samples"], summary["accepted"], summary["rejected"]) == (6, 3, 3)
    reasons = {r["sample_id"]: r["reason"] for r in read_csv(tmp_path / "ingest" / "rejects.csv")}
    assert (
        reasons["run1#2"]
        == "index row 2 of 'hits/_indices' points past the end of 'hits' (rows 3..503 of 15)"
    )
    assert reasons["run1#4"] == "index row 4 of 'hits/_indices': negative count -1"
    assert reasons["run1#3"] == "field 'energy': event id 3 is not in 'mc_tracks' (group_id)"


def test_pandas_tables_grouped_by_a_sorted_event_id_over_two_ranks(tmp_path, serial):
    """A PyTables table written by pandas (format='table', data_columns=True): one sample per event_id,
    the same records whether one rank reads the file or two ranks read ranges of its events."""
    pandas = pytest.importorskip("pandas")
    pytest.importorskip("tables")
    root = tmp_path / "data"
    root.mkdir()
    rng = np.random.default_rng(7)
    sizes = rng.integers(1, 40, size=300)
    event_id = np.repeat(np.arange(300) * 10, sizes)  # ids need not be 0..n-1
    frame = pandas.DataFrame(
        {
            "event_id": event_id,
            "x": rng.standard_normal(event_id.size).astype("f4"),
            "q": rng.integers(0, 5, event_id.size).astype("i4"),
        }
    )
    frame.to_hdf(root / "particles.h5", key="particles", format="table", data_columns=True)
    fields = {
        "particles": {
            "path": "particles/table",
            "columns": ["x", "q"],
            "group_by": "event_id",
            "shape": [None, 2],
            "dtype": "float32",
        },
        "charge": {"path": "particles/table", "columns": ["q"], "key": "event_id", "reduce": "sum"},
    }
    config = events_config(tmp_path, root, fields, ["particles"], ["charge"])
    path = write_config(tmp_path, config)
    run_cli(["ingest", "--config", str(path)], ranks=2)
    for step in ("convert", "merge"):
        run_cli([step, "--config", str(path)], ranks=2)
    summary = json.loads((tmp_path / "work" / "ingest" / "summary.json").read_text())
    assert (summary["samples"], summary["accepted"]) == (300, 300)
    records = records_by_id(tmp_path / "work" / "merged")
    for k in (0, 1, 150, 299):
        rows = frame[frame.event_id == k * 10]
        np.testing.assert_array_equal(
            records[f"particles#{k}"]["particles"].reshape(-1, 2),
            np.stack([rows.x, rows.q], axis=1).astype("f4"),
        )
        assert records[f"particles#{k}"]["charge"] == rows.q.sum()


def test_inspect_proposes_index_tables_and_event_ids_and_its_config_reads_every_event(tmp_path, serial):
    """km3pipe's split tables with _indices, and pandas tables with an event_id column: inspect writes a
    config with columns and ragged_by / group_by / key, and that config ingests every event."""
    pandas = pytest.importorskip("pandas")
    from pipeline import config as cfg
    from pipeline.steps.inspect import inspect

    km3 = tmp_path / "km3"
    km3.mkdir()
    for k in range(2):
        write_km3net_like(km3 / f"run{k}.h5")
    frames = tmp_path / "pandas"
    frames.mkdir()
    for k in range(2):
        particles = pandas.DataFrame({"event_id": np.repeat(np.arange(10), 3), "x": np.arange(30.0) + k})
        particles.to_hdf(frames / f"p{k}.h5", key="particles", format="table", data_columns=True)
        truth = pandas.DataFrame({"event_id": np.arange(10), "energy": np.arange(10.0)})
        truth.to_hdf(frames / f"p{k}.h5", key="truth", format="table", data_columns=True)
    expected = {
        "km3": ({"path": "hits", "ragged_by": "hits/_indices"}, {"key": "group_id"}, 2 * len(HITS)),
        "pandas": ({"path": "particles/table", "group_by": "event_id"}, {"key": "event_id"}, 20),
    }
    for name, (events, keyed, count) in expected.items():
        report, _ = inspect(str(tmp_path / name), write=tmp_path / f"{name}.yaml")
        config = cfg.load(tmp_path / f"{name}.yaml")
        fields = config["source"]["fields"]
        feature, label = config["convert"]["features"][0], config["convert"]["labels"][0]
        assert events.items() <= fields[feature].items(), report
        assert keyed.items() <= fields[label].items(), report
        config["workdir"] = str(tmp_path / name / "work")
        summary = ingest(config, tmp_path / name, tmp_path / f"{name}-ingest", serial)
        assert (summary["samples"], summary["accepted"]) == (count, count)

"""`sim2dl status WORKDIR`: where a workflow stands, read from the files its steps already write (no MPI,
nothing written, safe beside a running job): per step done / running / not started, the ensemble's runs
(done, failed, running of the design), records per step, and training's current epoch (round, step), its
best validation loss and an estimate of the time left.

What marks a step done is the file it writes last (simulate.json, ingest's summary.json, convert's
stats.json, merged/metadata.json, staged/summary.json, train's summary.json); a step whose directory
exists without it is running, or was interrupted (a rerun resumes it). While an ensemble runs, its runs
are counted from the farm's own marks: a finished run's directory, a running one's `.RUN.partial`, a
started one's log (runs that ended without a directory failed or wait for their retry).

Memory: a few numbers per step; time: the JSON files, plus while an ensemble runs one directory listing
per group of simulate.files_per_dir runs (about a second per million runs on a local disk).
"""

from __future__ import annotations

import json
import math
import os
import time
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from pipeline.paths import Layout, RawPaths, SearchPaths, TrainPaths

DONE, RUNNING, NOT_STARTED = "done", "running", "not started"


def _json(path: Path) -> Any:
    """A JSON file, or None while it is missing or half-written by a step that is not atomic about it."""
    try:
        return json.loads(path.read_text())
    except (FileNotFoundError, json.JSONDecodeError):
        return None


def _lines(path: Path) -> list[dict[str, Any]]:
    try:
        text = path.read_text()
    except FileNotFoundError:
        return []
    rows = []
    for line in text.splitlines():
        try:
            rows.append(json.loads(line))
        except json.JSONDecodeError:  # a line being appended
            break
    return rows


def _state(directory: Path, marker: Path) -> str:
    return DONE if marker.exists() else RUNNING if directory.exists() else NOT_STARTED


def ensemble_runs(raw: Path) -> dict[str, Any] | None:
    """The runs of an ensemble (raw/runs.parquet) by status: from the table's status column once the farm
    has written it, else from the run directories and logs so far. None: not an ensemble."""
    import pyarrow.parquet as pq

    table_path = RawPaths(raw).runs
    if not table_path.exists():
        return None
    parquet = pq.ParquetFile(table_path)
    design = parquet.metadata.num_rows
    if "status" in parquet.schema_arrow.names:
        import pyarrow.compute as pc

        counted = pc.value_counts(pq.read_table(table_path, columns=["status"])["status"]).to_pylist()
        return {"design": design, **{c["values"]: c["counts"] for c in counted}}
    finished = running = 0
    for group in _subdirectories(raw, skip={"logs"}):
        for entry in os.scandir(group):
            if entry.name.endswith(".partial"):
                running += 1
            elif entry.is_dir():
                finished += 1
    started = sum(
        sum(1 for e in os.scandir(g) if e.name.endswith(".log")) for g in _subdirectories(raw / "logs")
    )
    return {
        "design": design,
        "ok": finished,
        "running": running,
        "failed_or_retrying": max(started - finished - running, 0),
    }


def _subdirectories(root: Path, skip: set[str] = frozenset()) -> list[Path]:
    if not root.is_dir():
        return []
    return [
        Path(e.path)
        for e in os.scandir(root)
        if e.is_dir() and e.name not in skip and not e.name.startswith(".")
    ]


def data_steps(layout: Layout) -> list[dict[str, Any]]:
    """simulate, ingest, convert, merge and stage: their state and counts."""
    raw = layout.raw
    simulate = {"step": "simulate", "state": _state(raw, layout.simulate_summary)}
    runs = ensemble_runs(raw)
    if runs is not None:
        simulate["runs"] = runs
        if simulate["state"] != DONE and runs.get("running"):
            simulate["state"] = RUNNING
    elif (summary := _json(layout.simulate_summary)) is not None:
        simulate["samples"] = summary.get("samples")
    rounds = _json(RawPaths(raw).adaptive.rounds)
    if rounds:  # an adaptive design: its last round, and the emulator's validation error then
        fitted = [r for r in rounds if "validation_nrmse_mean" in r]
        simulate["round"] = {"round": rounds[-1]["round"], "runs": rounds[-1].get("runs")}
        if fitted:
            simulate["round"]["validation_nrmse"] = round(fitted[-1]["validation_nrmse_mean"], 4)
    ingested = _json(layout.ingest_summary) or {}
    converted = _json(layout.stats) or {}
    meta = _json(layout.metadata) or {}
    staged = _json(layout.stage_summary) or {}
    splits = {name: s.get("records") for name, s in meta.get("splits", {}).items()}
    return [
        simulate,
        {
            "step": "ingest",
            "state": _state(layout.ingest, layout.ingest_summary),
            **{k: ingested[k] for k in ("inputs", "samples", "accepted", "rejected") if k in ingested},
        },
        {
            "step": "convert",
            "state": _state(layout.convert, layout.stats),
            **{k: converted[k] for k in ("samples", "rejected") if k in converted},
        },
        {
            "step": "merge",
            "state": _state(layout.merged, layout.metadata),
            **({"records": meta["counts"]["records"], "shards": meta["counts"]["shards"]} if meta else {}),
            **({"splits": splits} if splits else {}),
        },
        {
            "step": "stage",
            "state": _state(layout.stage_summary.parent, layout.stage_summary),
            **{k: staged[k] for k in ("mode", "nodes", "bytes_read_shared_fs") if k in staged},
        },
    ]


def search_step(layout: Layout) -> dict[str, Any]:
    paths = SearchPaths(layout.search)
    trials = _lines(layout.search / "trials.jsonl")
    losses = [t["loss"] for t in trials if t.get("loss") is not None]
    return {
        "step": "search",
        "state": _state(layout.search, paths.best),
        "trials": len(trials),
        "failed_trials": len(trials) - len(losses),
        "best_val_loss": min(losses) if losses else None,
    }


def training_progress(
    history: Sequence[Mapping[str, Any]], unit: str, total: int | None, now: float
) -> dict[str, Any]:
    """Where training stands from its history rows: the unit reached (of total), the best validation loss
    and where, the mean seconds per unit of the rows so far, and the estimated seconds left."""
    if not history:
        return {"unit": unit, "at": 0, "of": total}
    last = history[-1]
    finite = [
        r for r in history if isinstance(r.get("val_loss"), int | float) and math.isfinite(r["val_loss"])
    ]
    best = min(finite, key=lambda r: r["val_loss"]) if finite else None
    times = [r["time"] for r in history if "time" in r]
    per_unit = (
        (times[-1] - times[0]) / (last[unit] - history[0][unit]) if len(times) > 1 else last.get("seconds")
    )
    record: dict[str, Any] = {
        "unit": unit,
        "at": last[unit],
        "of": total,
        "seconds_per_unit": per_unit,
        "best_val_loss": best["val_loss"] if best else None,
        f"best_{unit}": best[unit] if best else None,
        "since_last_s": now - times[-1] if times else None,
    }
    if total is not None and per_unit is not None:
        record["eta_s"] = max(total - last[unit], 0) * per_unit
    return record


def headline_scores(summary: Mapping[str, Any]) -> dict[str, Any]:
    """A training summary's headline scores, by the names its task gave (`score_names`)."""
    return {k: summary[k] for k in summary.get("score_names", ()) if k in summary}


def train_step(layout: Layout, now: float) -> dict[str, Any]:
    paths = TrainPaths(layout.train)
    record: dict[str, Any] = {"step": "train", "state": _state(paths.root, paths.summary)}
    summary = _json(paths.summary)
    starts = _lines(paths.attempts)
    start = starts[-1] if starts else {}
    history = _json(paths.metrics) or []
    # every mode's start record names its unit and length (attempts written before they did: inferred)
    unit = start.get("unit") or next(
        (u for u in ("round", "step", "epoch") if history and u in history[0]), None
    )
    unit = unit or ("round" if "rounds" in start else "step" if "online_steps" in start else "epoch")
    total = start.get(
        "length", start.get({"round": "rounds", "step": "online_steps", "epoch": "epochs"}[unit])
    )
    record.update(training_progress(history, unit, total, now), attempts=len(starts))
    if summary is not None:
        record["scored_on"] = summary.get("scored_on")
        record["scores"] = headline_scores(summary)
        record["below_baseline"] = summary.get("below_baseline")
    if paths.tensorboard.is_dir():
        record["tensorboard"] = str(paths.tensorboard)
    return record


def campaign_status(workdir: Path, now: float | None = None) -> dict[str, Any]:
    """The workflow's state below `workdir` (the config's workdir)."""
    if not workdir.is_dir():
        raise FileNotFoundError(f"{workdir}: no such workflow directory (the config's workdir)")
    layout = Layout(workdir)
    now = time.time() if now is None else now
    steps = [*data_steps(layout), search_step(layout), train_step(layout, now)]
    return {"workdir": str(workdir), "time": now, "steps": steps}


def _duration(seconds: float | None) -> str:
    if seconds is None:
        return "?"
    whole = round(seconds)
    return (
        f"{whole // 3600}h{whole % 3600 // 60:02d}m" if whole >= 3600 else f"{whole // 60}m{whole % 60:02d}s"
    )


def _details(step: Mapping[str, Any]) -> str:
    name = step["step"]
    if name == "simulate" and "runs" in step:
        runs = step["runs"]
        text = f"{sum(v for k, v in runs.items() if k != 'design')} of {runs['design']} runs: " + ", ".join(
            f"{v} {k.replace('_', ' ')}" for k, v in runs.items() if k != "design"
        )
        if "round" in step:
            at = step["round"]
            text += f"; round {at['round']}"
            if "validation_nrmse" in at:
                text += f", validation NRMSE {at['validation_nrmse']}"
        return text
    if name == "train":
        if not step.get("at"):
            return ""
        text = f"{step['unit']} {step['at']}" + (f"/{step['of']}" if step.get("of") else "")
        if step.get("best_val_loss") is not None:
            text += (
                f", best val_loss {step['best_val_loss']:.4g} ({step['unit']} {step['best_' + step['unit']]})"
            )
        if step["state"] != DONE and step.get("eta_s") is not None:
            per_unit, left = _duration(step["seconds_per_unit"]), _duration(step["eta_s"])
            text += f", {per_unit} per {step['unit']}, about {left} left"
        if step["state"] != DONE and step.get("since_last_s") is not None:  # a stopped job's last row ages
            text += f" (last {step['unit']} {_duration(step['since_last_s'])} ago)"
        if step.get("scores"):
            text += f"; on {step['scored_on']}: " + _scores(step["scores"])
        return text
    if name == "search":
        best = step["best_val_loss"]
        return (
            f"{step['trials']} trials" + (f", best val_loss {best:.4g}" if best is not None else "")
            if step["trials"]
            else ""
        )
    shown = {k: v for k, v in step.items() if k not in ("step", "state")}
    return ", ".join(f"{k} {v}" for k, v in shown.items())


def _scores(scores: Mapping[str, Any]) -> str:
    """{'r2': {'sigma_8': 0.99312}} -> 'r2 sigma_8 0.993'; {'accuracy': 0.9} -> 'accuracy 0.900'."""
    parts = []
    for metric, value in scores.items():
        if isinstance(value, Mapping):
            parts.append(f"{metric} " + ", ".join(f"{k} {v:.3f}" for k, v in value.items() if v is not None))
        elif value is not None:
            parts.append(f"{metric} {value:.3f}")
    return "; ".join(parts)


def render(status: Mapping[str, Any]) -> str:
    """The status as a few lines a person reads (`sim2dl status`; --json prints the record itself)."""
    stamp = time.strftime("%Y-%m-%d %H:%M:%S", time.localtime(status["time"]))
    lines = [f"sim2dl status {status['workdir']}  ({stamp})"]
    for step in status["steps"]:
        lines.append(f"  {step['step']:<9} {step['state']:<12} {_details(step)}".rstrip())
    train = status["steps"][-1]
    if "tensorboard" in train:
        lines.append(f"  watch it: tensorboard --logdir {train['tensorboard']}")
    return "\n".join(lines)


def _value(value: Any) -> str:
    return f"{value:.3g}" if isinstance(value, int | float) else str(value)


def score_lines(summary: Mapping[str, Any]) -> list[str]:
    """Each headline score, per output where it has several, beside the classical baseline's and, for a
    next state, persistence's (the floors a result has to beat)."""
    baseline = summary.get("baseline") or {}
    lines = []
    for metric in summary.get("score_names", ()):
        ours, theirs, held = summary.get(metric), baseline.get(metric), summary.get(f"persistence_{metric}")
        named = ours.items() if isinstance(ours, Mapping) else [(None, ours)]
        for name, value in named:
            if value is None:
                continue
            beside = []
            for label, other in (("baseline", theirs), ("persistence", held)):
                found = other.get(name) if isinstance(other, Mapping) else other if name is None else None
                if found is not None:
                    beside.append(f"{label} {_value(found)}")
            where = f"{metric} {name}" if name is not None else metric
            lines.append(f"  {where}: {_value(value)}" + (f"  ({', '.join(beside)})" if beside else ""))
    rollout = summary.get("rollout") or {}
    if rollout.get("nrmse_per_step"):
        last, held = rollout["nrmse_per_step"][-1], rollout["persistence_nrmse_per_step"][-1]
        every = (
            "below persistence at every step"
            if rollout.get("below_persistence_at_every_step")
            else ("not below persistence at every step")
        )
        lines.append(
            f"  rollout of {rollout['steps']} steps on {rollout.get('split')}: NRMSE {_value(last)} at the "
            f"last (persistence {_value(held)}), {every}"
        )
    if summary.get("below_baseline"):
        lines.append(f"  below the baseline on: {', '.join(map(str, summary['below_baseline']))}")
    return lines


def outcome(workdir: Path) -> str:
    """What a finished workflow gave, as `make demo` ends with it: training's headline scores on the split
    they were scored on, each beside its baseline, and where the summary, the figures and the report are
    ("" where training has not finished)."""
    paths = TrainPaths(Layout(workdir).train)
    summary = _json(paths.summary)
    if summary is None:
        return ""
    lines = [
        f"sim2dl: {summary.get('task', 'training')} of {workdir}, scored on {summary.get('scored_on')} "
        f"({summary.get(str(summary.get('scored_on')) + '_records', '?')} records):",
        *score_lines(summary),
        f"  summary: {paths.summary}",
    ]
    figures = sorted(paths.root.glob("*.png"))
    if figures:
        lines.append(f"  figures: {', '.join(str(f) for f in figures)}")
    lines.append("  report: snakemake --report report.html, with this run's --configfile and --config")
    return "\n".join(lines)

"""The benchmark check (`make bench-check`): every quick benchmark run (those this machine class runs without
set-up of its own: BY_HAND names the others and why), each headline figure compared with the one last
recorded in bench/recorded.json, and every figure that moved beyond its own noise band named.

    python bench/check.py                 # every quick benchmark, compared with the record
    python bench/check.py merge read      # only these (a change to a step: its benchmark)
    python bench/check.py --record        # run each REPEATS times; record medians and bands
    python bench/check.py --record merge  # re-record these, keep the others' figures

A figure's band comes from repeated runs: half the spread of the recorded runs plus twice their standard
deviation, and at least MIN_RELATIVE_BAND of the median (a figure whose runs agreed to the digit still
moves a little on this kind of machine). A figure beyond its band is named as better or worse by the
direction its HEADLINES entry gives; the check fails (exit 1) when any figure got worse, or a benchmark
failed. An improvement is named too: record it (`--record NAME`) once it is meant to stay.

Benchmarks stay out of `make test`: they time things, and a test must not. Each benchmark prints one JSON
object as its last line; HEADLINES says which of its figures are headline ones (dotted paths into it).
Time: the benchmarks' own (each under about a minute in quick mode), times REPEATS when recording.
"""

from __future__ import annotations

import argparse
import datetime
import json
import math
import platform
import statistics
import subprocess
import sys
import time
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))

from common import REPO, bench_env

RECORD = REPO / "bench" / "recorded.json"
REPEATS = 3
MIN_RELATIVE_BAND = 0.03
HIGHER, LOWER = "higher", "lower"  # which way a figure is better

# benchmark -> (its quick command line after `python`, {figure's dotted path: which way is better})
HEADLINES: dict[str, tuple[tuple[str, ...], dict[str, str]]] = {
    "merge": (
        ("bench/merge.py", "--quick"),
        {
            "speedup_vs_naive": HIGHER,
            "fraction_of_read_floor": HIGHER,
            "sim2dl.steps_seconds.ingest": LOWER,
            "sim2dl.steps_seconds.convert": LOWER,
            "sim2dl.steps_seconds.merge": LOWER,
            "without_splits.fraction_of_read_floor": HIGHER,
            "without_splits.merge_seconds": LOWER,
            "ingest_peak_rss_mb": LOWER,
        },
    ),
    "read": (
        ("bench/read.py", "--quick"),
        {
            "shard_speedup_vs_hdf5": HIGHER,
            "fraction_of_read_floor": HIGHER,
            "fraction_of_parallel_read_floor": HIGHER,
            "numpy_reader_fraction_of_read_floor": HIGHER,
        },
    ),
    "stage": (
        ("bench/stage.py", "--quick"),
        {
            "nodes_2.time_vs_naive": LOWER,
            "nodes_4.time_vs_naive": LOWER,
            "nodes_2.source_read_ratio": LOWER,
            "nodes_4.source_read_ratio": LOWER,
        },
    ),
    "exascale": (
        ("bench/exascale.py", "--quick"),
        {
            "vs_viewer.h5_file_based": HIGHER,
            "vs_viewer.bp5_variable_based": HIGHER,
        },
    ),
    "train": (
        ("bench/train.py", "--quick"),
        {
            "scaling_efficiency_2": HIGHER,
            "input_wait_fraction": LOWER,
            "samples_per_s_2_ranks": HIGHER,
            "segmentation.samples_per_s_2_ranks": HIGHER,
        },
    ),
    "ensemble": (
        ("bench/ensemble.py", "--quick"),
        {
            "runs_per_s_vs_xargs": HIGHER,
            "runs_per_s_vs_xargs_at_largest": HIGHER,
        },
    ),
    "online": (
        ("bench/online.py", "--quick"),
        {
            "seconds_to_first_step.online_runs": LOWER,
            "online_vs_offline_to_target.online_runs": LOWER,
            "online_vs_offline_to_target.online_stream": LOWER,
        },
    ),
    "search": (
        ("bench/search.py", "--quick"),
        {
            "bohb_best_loss": LOWER,
            "bohb_budget_to_match_random": LOWER,
        },
    ),
    "surrogate": (
        ("bench/surrogate.py", "--quick"),
        {
            "vrmse.state.network.128": LOWER,
            "network_over_emulator.state": LOWER,
            "next.vrmse.fno2d": LOWER,
            "next.network_over_persistence": LOWER,
        },
    ),
    # seeded designs and fits: the same figures every run (the choosing's share of a round is timed: in
    # docs/benchmarks.md, not here)
    "adaptive": (
        ("bench/adaptive.py", "--quick"),
        {
            "curves.bistable.integrated_variance.mean.40": LOWER,
            "curves.bistable.space_filling.mean.40": LOWER,
            "worst_over_control.reaction.integrated_variance": LOWER,
        },
    ),
    "ltfb": (
        ("bench/ltfb.py", "--quick"),
        {
            "effective_parallel_efficiency.2.by_seconds": HIGHER,
            "best_val_loss.population_2": LOWER,
            "best_val_loss.population_4": LOWER,
        },
    ),
}
# Quick benchmarks this check leaves to be run by hand, and why: each needs what a 2-core machine of this
# class lacks without set-up of its own (their figures: docs/benchmarks.md).
BY_HAND = {
    "learning": "the N-body preset's simulator environment (examples/nbody/setup.sh) and about 20 minutes",
    "spatial": "about 15 GB of memory for its unsplit 128^3 baseline",
    "cluster": "a virtual Slurm cluster (scripts/vcluster.sh, root)",
    "scale": "10^5..10^7 files: minutes to hours (--quick: 200,000 files)",
}


def figure(result: Any, path: str) -> float | None:
    """The number at a dotted path of a benchmark's JSON (None where it has none). A key may hold dots
    itself (bench/surrogate.py's flat 'vrmse.state.network.128'): the longest key that matches is taken."""
    if not path:
        return float(result) if isinstance(result, (int, float)) and not isinstance(result, bool) else None
    if not isinstance(result, Mapping):
        return None
    parts = path.split(".")
    for cut in range(len(parts), 0, -1):
        key = ".".join(parts[:cut])
        if key in result:
            return figure(result[key], ".".join(parts[cut:]))
    return None


def run_benchmark(argv: Sequence[str]) -> tuple[dict[str, Any] | None, float, str]:
    """(its last line's JSON, or None where it failed; its wall seconds; the tail of its output)."""
    start = time.perf_counter()
    proc = subprocess.run([sys.executable, *argv], cwd=REPO, env=bench_env(), capture_output=True, text=True)
    seconds = time.perf_counter() - start
    lines = proc.stdout.strip().splitlines()
    tail = "\n".join((proc.stdout + proc.stderr).strip().splitlines()[-15:])
    if proc.returncode or not lines:
        return None, seconds, tail
    try:
        return json.loads(lines[-1]), seconds, tail
    except json.JSONDecodeError:
        return None, seconds, tail


def band(runs: Sequence[float]) -> float:
    """A figure's noise band (half-width) from its repeated runs (see the module doc)."""
    middle = statistics.median(runs)
    spread = (max(runs) - min(runs)) / 2
    deviation = statistics.stdev(runs) if len(runs) > 1 else 0.0
    return max(spread + 2 * deviation, MIN_RELATIVE_BAND * abs(middle))


def recorded_figures(runs: Sequence[Mapping[str, Any]], better: Mapping[str, str]) -> dict[str, Any]:
    """Each headline figure's median, band, direction and runs, from a benchmark's repeated results."""
    figures = {}
    for path, way in better.items():
        values = [v for v in (figure(r, path) for r in runs) if v is not None and math.isfinite(v)]
        if values:
            figures[path] = {"value": statistics.median(values), "band": band(values), "better": way,
                             "runs": values}  # fmt: skip
    return figures


def compare(recorded: Mapping[str, Any], result: Mapping[str, Any]) -> list[dict[str, Any]]:
    """Every recorded figure of one benchmark against a new result: value, change, and whether it moved
    beyond its band (better or worse) or is missing."""
    rows = []
    for path, rec in recorded.items():
        value = figure(result, path)
        if value is None:
            rows.append({"figure": path, "verdict": "missing", "recorded": rec["value"]})
            continue
        change = value - rec["value"]
        verdict = "within"
        if abs(change) > rec["band"]:
            verdict = "better" if (change > 0) == (rec["better"] == HIGHER) else "worse"
        rows.append({"figure": path, "verdict": verdict, "value": value, "recorded": rec["value"],
                     "band": rec["band"], "change": change})  # fmt: skip
    return rows


def machine() -> dict[str, Any]:
    import os

    return {"host": platform.node(), "cpus": os.cpu_count(), "python": platform.python_version()}


def record(names: Sequence[str], repeats: int) -> int:
    """Run each benchmark `repeats` times and write its figures into the record (others kept)."""
    previous = json.loads(RECORD.read_text()) if RECORD.exists() else {"benchmarks": {}}
    benchmarks = dict(previous["benchmarks"])
    failed = []
    for name in names:
        argv, better = HEADLINES[name]
        runs, seconds = [], []
        for k in range(repeats):
            result, wall, tail = run_benchmark(argv)
            print(f"{name} run {k + 1}/{repeats}: {wall:.0f} s{'' if result else ' FAILED'}", file=sys.stderr)
            if result is None:
                print(tail, file=sys.stderr)
                failed.append(name)
                break
            runs.append(result)
            seconds.append(wall)
        figures = recorded_figures(runs, better) if len(runs) == repeats else {}
        if len(runs) == repeats and not figures:  # a record that compares nothing would pass every check
            print(f"{name}: none of its headline figures {sorted(better)} is in its output", file=sys.stderr)
            failed.append(name)
        elif figures:
            benchmarks[name] = {"argv": list(argv), "wall_seconds": [round(s, 1) for s in seconds],
                                "figures": figures}  # fmt: skip
    document = {
        "about": "bench/check.py --record: headline figures of the quick benchmarks, medians of repeated runs "
        "with their noise bands (half-widths)",
        "recorded": datetime.datetime.now(datetime.UTC).isoformat(timespec="seconds"),
        "commit": git_commit(),
        "machine": machine(),
        "repeats": repeats,
        "benchmarks": dict(sorted(benchmarks.items())),
    }
    RECORD.write_text(json.dumps(document, indent=1) + "\n")
    print(json.dumps({"recorded": sorted(set(names) - set(failed)), "failed": failed}))
    return 1 if failed else 0


def check(names: Sequence[str]) -> int:
    """Run each benchmark once and compare its headline figures with the record."""
    if not RECORD.exists():
        raise SystemExit(f"no {RECORD.relative_to(REPO)}: run `python bench/check.py --record` first")
    recorded = json.loads(RECORD.read_text())["benchmarks"]
    moved: list[str] = []
    worse: list[str] = []
    failed: list[str] = []
    unrecorded: list[str] = []
    for name in names:
        if name not in recorded:
            unrecorded.append(name)
            continue
        result, wall, tail = run_benchmark(HEADLINES[name][0])
        if result is None:
            print(f"{name}: FAILED after {wall:.0f} s\n{tail}", file=sys.stderr)
            failed.append(name)
            continue
        print(f"{name} ({wall:.0f} s)", file=sys.stderr)
        for row in compare(recorded[name]["figures"], result):
            label = f"{name}.{row['figure']}"
            if row["verdict"] == "missing":
                print(f"  {row['figure']}: missing from the result (recorded {row['recorded']:.4g})", file=sys.stderr)
                worse.append(label)
                continue
            print(f"  {row['figure']}: {row['value']:.4g} (recorded {row['recorded']:.4g} ± {row['band']:.2g}) "
                  f"{row['verdict']}", file=sys.stderr)  # fmt: skip
            if row["verdict"] != "within":
                moved.append(label)
            if row["verdict"] == "worse":
                worse.append(label)
    print(json.dumps({"moved": moved, "worse": worse, "failed": failed, "unrecorded": unrecorded}))
    return 1 if worse or failed else 0


def git_commit() -> str:
    proc = subprocess.run(["git", "rev-parse", "--short", "HEAD"], cwd=REPO, capture_output=True, text=True)
    return proc.stdout.strip()


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("names", nargs="*", help=f"benchmarks (default: all of {', '.join(HEADLINES)}; "
                        f"not {', '.join(BY_HAND)}: see BY_HAND)")  # fmt: skip
    parser.add_argument("--record", action="store_true", help="run each REPEATS times and record the figures")
    parser.add_argument("--repeats", type=int, default=REPEATS, help=f"runs per benchmark when recording ({REPEATS})")
    args = parser.parse_args()
    unknown = sorted(set(args.names) - set(HEADLINES))
    if unknown:
        why = "; ".join(f"{name} is run by hand: it needs {BY_HAND[name]}" for name in unknown if name in BY_HAND)
        parser.error(
            f"no benchmark {', '.join(unknown)} in the check (known: {', '.join(HEADLINES)}){'; ' + why if why else ''}"
        )
    names = args.names or list(HEADLINES)
    return record(names, args.repeats) if args.record else check(names)


if __name__ == "__main__":
    raise SystemExit(main())

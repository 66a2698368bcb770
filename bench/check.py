"""The benchmark check (`make bench-check`): the quick benchmarks of a base commit and of the working tree,
run alternately on this machine, each headline figure compared as a ratio of the two, with the noise taken
from this run's own repeats, as airspeed velocity's `asv continuous` compares two commits.

    python bench/check.py                     # the benchmarks the change since the base touches
    python bench/check.py merge read          # these, whatever changed
    python bench/check.py --base HEAD~3 merge # against another base (default: the record's commit)
    python bench/check.py --against-record    # one run each, against bench/recorded.json (absolute figures)
    python bench/check.py --record merge      # run REPEATS times; record medians and bands (history, docs)

Side by side. The base commit is checked out in a scratch worktree (`git worktree add`, removed after);
its own bench scripts run its own code (bench/common.py's PYTHONPATH is the tree the script is in) with
this venv's Python. Each benchmark runs `pairs` times on each side, alternated (base, head, head, base, ...)
so that drift of the machine falls on both. A figure is named worse or better when both hold:
- the ratio of the medians is beyond FACTOR (1.10, asv continuous's default factor) in that direction;
- the two sides' runs differ: Student's two-sample t-test and a paired t-test on the log-ratios head/base
  of the alternated pairs both at 5 % (each pair ran side by side, so drift of the machine falls on both
  of its runs), or a sign test at 5 % on those pairs (every pair the same way: 6 of 6, 7 of 7 or 7 of
  8; it holds whatever the noise's shape: a busy machine's runs are far from normal), or, where both
  sides' runs agreed to the digit (seeded figures), any difference; a benchmark with one pair has no
  test, and the factor alone decides (only seeded benchmarks run one pair).
A figure beyond the factor whose test has not decided yet (a busy machine: the three pairs of a planted
1.7 x slowdown once read as noise of ±24 %) runs more pairs, one at a time, until it is decided, up to
MAX_PAIRS and the benchmark's time budget.
The check fails (exit 1) when a figure got worse, went missing, or the working tree's benchmark failed. A
benchmark the base does not have, or whose base run failed (its script may predate the command line), is
listed as not compared.

Which benchmarks run by default: those whose code changed since the base. A benchmark depends on its own
script, the bench modules it imports, the pipeline modules it imports or names (`-m pipeline.x`), its
steps' modules (`steps`: `sim2dl STEP` runs pipeline/steps/STEP), every pipeline module those import,
transitively (read from the working tree's sources), and the presets it reads; SHARED paths touch all.

Time: each benchmark's wall time times 2 x pairs; PAIRS below keep every benchmark of the check under 20
minutes on 2 cores, base included (from bench/recorded.json's wall times; tests/test_bench_check.py
checks it). Memory: the benchmarks' own, one at a time.
"""

from __future__ import annotations

import argparse
import ast
import contextlib
import datetime
import functools
import json
import math
import os
import platform
import re
import shutil
import signal
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))

from common import REPO, bench_env

RECORD = REPO / "bench" / "recorded.json"
REPEATS = 3
MIN_RELATIVE_BAND = 0.03
FACTOR = 1.10
ALPHA = 0.05
BUDGET_SECONDS = 20 * 60  # per benchmark, base included
MAX_PAIRS = 8  # pairs an undecided figure may ask for, within BUDGET_SECONDS
HIGHER, LOWER = "higher", "lower"  # which way a figure is better
# changes to these touch every benchmark: the schema and default config every step reads, the packages
SHARED = ("pipeline/schema.yaml", "config/config.yaml", "requirements/constraints.txt")


@dataclass(frozen=True)
class Benchmark:
    argv: tuple[str, ...]  # its quick command line after `python`, from the tree's root
    figures: dict[str, str]  # headline figure's dotted path -> which way is better
    steps: tuple[str, ...] = ()  # the `sim2dl STEP`s its figures time (not those that only make its inputs)
    pairs: int = 3  # alternated base/head runs side by side (1: seeded figures only)
    presets: tuple[str, ...] = field(default=())  # config/presets files it reads


BENCHMARKS: dict[str, Benchmark] = {
    "merge": Benchmark(
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
            "grown.seconds_vs_fresh": LOWER,
            "grown.convert_seconds_vs_fresh": LOWER,
            "grown.merge_seconds_vs_fresh": LOWER,
            "grown.steps_seconds_vs_fresh": LOWER,
        },
        steps=("ingest", "convert", "merge"),
    ),
    "read": Benchmark(
        ("bench/read.py", "--quick"),
        {
            "shard_speedup_vs_hdf5": HIGHER,
            "fraction_of_read_floor": HIGHER,
            "fraction_of_parallel_read_floor": HIGHER,
            "numpy_reader_fraction_of_read_floor": HIGHER,
        },
        steps=("ingest", "convert", "merge"),
    ),
    "stage": Benchmark(
        ("bench/stage.py", "--quick"),
        {
            "nodes_2.time_vs_naive": LOWER,
            "nodes_4.time_vs_naive": LOWER,
            "nodes_2.source_read_ratio": LOWER,
            "nodes_4.source_read_ratio": LOWER,
        },
        steps=("stage",),
    ),
    "exascale": Benchmark(
        ("bench/exascale.py", "--quick"),
        {"vs_viewer.h5_file_based": HIGHER, "vs_viewer.bp5_variable_based": HIGHER},
        steps=("ingest",),
    ),
    "train": Benchmark(
        ("bench/train.py", "--quick"),
        {
            "scaling_efficiency_2": HIGHER,
            "input_wait_fraction": LOWER,
            "samples_per_s_2_ranks": HIGHER,
            "segmentation.samples_per_s_2_ranks": HIGHER,
            "demo_sigma_8_r2_lowest": HIGHER,
        },
        steps=("ingest", "convert", "merge", "stage", "train"),
        pairs=2,
        presets=("climate-segmentation.yaml",),
    ),
    "ensemble": Benchmark(
        ("bench/ensemble.py", "--quick"),
        {"runs_per_s_vs_xargs": HIGHER, "runs_per_s_vs_xargs_at_largest": HIGHER},
        steps=("simulate",),
    ),
    "online": Benchmark(
        ("bench/online.py", "--quick"),
        {
            "seconds_to_first_step.online_runs": LOWER,
            "online_vs_offline_to_target.online_runs": LOWER,
            "online_vs_offline_to_target.online_stream": LOWER,
        },
        steps=("simulate", "train", "online"),
    ),
    "search": Benchmark(
        ("bench/search.py", "--quick"),
        {"bohb_best_loss": LOWER, "bohb_budget_to_match_random": LOWER},
        pairs=1,  # seeded: the same figures every run
    ),
    "surrogate": Benchmark(
        ("bench/surrogate.py", "--quick"),
        {
            "nrmse.state.network.128": LOWER,
            "network_over_emulator.state": LOWER,
            "next.nrmse.fno2d": LOWER,
            "next.network_over_persistence": LOWER,
        },
        pairs=1,  # seeded
        presets=("surrogate-forward.yaml", "surrogate-next-state.yaml"),
    ),
    # seeded designs and fits (the choosing's share of a round is timed: in docs/benchmarks.md, not here);
    # the preset's design and the control only, so that both sides fit in the check's 20 minutes
    "adaptive": Benchmark(
        ("bench/adaptive.py", "--quick", "--designs", "preset"),
        {
            "curves.bistable.regimes.preset.mean.32": LOWER,
            "curves.bistable.regimes.preset.mean.64": LOWER,
            "curves.bistable.regimes.space_filling.mean.64": LOWER,
            "worst_over_control.reaction.preset.emulator": LOWER,
            "worst_over_control.reaction.preset.gp": LOWER,
        },
        steps=("simulate",),
        pairs=1,
        presets=("adaptive-fronts.yaml",),
    ),
    # One pair: a run takes about 5 minutes (2 pairs: 21 minutes). Its validation losses repeat within 1 %
    # from run to run, so the factor alone can judge them; the seconds-based efficiency spread 19 % between
    # two runs of one commit (0.395, 0.326), beyond the factor, so it is not compared here: the kernel's
    # speed is the train benchmark's samples/s (the same compiled step).
    "ltfb": Benchmark(
        ("bench/ltfb.py", "--quick"),
        {
            "best_val_loss.population_2": LOWER,
            "best_val_loss.population_4": LOWER,
        },
        steps=("train", "search"),
        pairs=1,
    ),
}
# Quick benchmarks this check leaves to be run by hand, and why: each needs what a 2-core machine of this
# class lacks without set-up of its own (their figures: docs/benchmarks.md).
BY_HAND = {
    "learning": "the N-body preset's simulator environment (examples/nbody/setup.sh) and about 20 minutes",
    "spatial": "about 15 GB of memory for its unsplit 128^3 baseline",
    "cluster": "a virtual Slurm cluster (scripts/vcluster.sh, root)",
    "scale": "10^5..10^7 files: minutes to hours (--quick: 200,000 files)",
    "fidelity": "about an hour: a real code's runs at 256 x 256 cells, 5 seeds, each design also trained "
    "(`bench/fidelity.py --quick`: 3 seeds, by the emulators, about 20 minutes); its costs are measured, so "
    "its designs depend on timing",
    "adaptive-online": "more runs than the check's 20 minutes hold (`bench/adaptive.py --quick --online`, 7 "
    "minutes): its arrivals depend on timing, and its seeds spread beyond the check's factor",
}


def figure(result: Any, path: str) -> float | None:
    """The number at a dotted path of a benchmark's JSON (None where it has none). A key may hold dots
    itself (bench/surrogate.py's flat 'nrmse.state.network.128'): the longest key that matches is taken."""
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


def run_benchmark(argv: Sequence[str], tree: Path | None = None) -> tuple[dict[str, Any] | None, float, str]:
    """Run `python ARGV` in `tree` (default this one): (its last line's JSON, or None where it failed;
    its wall seconds; the tail of its output)."""
    tree = tree or REPO
    # the tree's own code: its bench modules put their folder first, and PYTHONPATH puts its pipeline before
    # the venv's editable install of this one
    env = {**bench_env(), "PYTHONPATH": str(tree)}
    start = time.perf_counter()
    proc = subprocess.run([sys.executable, *argv], cwd=tree, env=env, capture_output=True, text=True)
    seconds = time.perf_counter() - start
    lines = proc.stdout.strip().splitlines()
    tail = "\n".join((proc.stdout + proc.stderr).strip().splitlines()[-15:])
    if proc.returncode or not lines:
        return None, seconds, tail
    try:
        return json.loads(lines[-1]), seconds, tail
    except json.JSONDecodeError:
        return None, seconds, tail


def values_of(runs: Sequence[Mapping[str, Any]], path: str) -> list[float]:
    return [v for v in (figure(r, path) for r in runs) if v is not None and math.isfinite(v)]


# ---------------------------------------------------------------------------------------------- side by side


def differ(base: Sequence[float], head: Sequence[float]) -> bool:
    """Whether two sides' runs differ beyond their noise (see the module doc): paired by run where both
    sides have a positive figure from every run, else Student's two-sample test."""
    if len(base) < 2 or len(head) < 2:
        return True  # nothing to test with: the factor alone decides
    if len(set(base)) == 1 and len(set(head)) == 1:
        return base[0] != head[0]
    from scipy import stats

    apart = bool(stats.ttest_ind(base, head).pvalue < ALPHA)
    if len(base) != len(head) or min(*base, *head) <= 0:
        return apart
    ratios = [math.log(h / b) for b, h in zip(base, head, strict=True)]
    if len(set(ratios)) == 1:
        return ratios[0] != 0
    paired = bool(stats.ttest_1samp(ratios, 0.0).pvalue < ALPHA)
    # a pair of equal figures tells neither
    slower, faster = sum(r > 0 for r in ratios), sum(r < 0 for r in ratios)
    signs = stats.binomtest(max(slower, faster), slower + faster).pvalue < ALPHA
    return (apart and paired) or bool(signs)


def verdict(
    base: Sequence[float], head: Sequence[float], better: str, factor: float = FACTOR
) -> dict[str, Any]:
    """One figure's comparison: medians, the ratio head/base, this run's noise (the larger relative
    half-spread of the two sides) and the verdict: within, better or worse."""
    b, h = statistics.median(base), statistics.median(head)
    row: dict[str, Any] = {"base": b, "head": h, "base_runs": list(base), "head_runs": list(head)}
    row["noise"] = max(
        (max(v) - min(v)) / 2 / abs(statistics.median(v)) if statistics.median(v) else 0.0
        for v in (base, head)
    )
    if b == h:
        return {**row, "ratio": 1.0, "verdict": "within"}
    if b == 0:
        gain = math.inf if (h > 0) == (better == HIGHER) else 0.0
        row["ratio"] = math.inf
    else:
        row["ratio"] = h / b
        gain = row["ratio"] if better == HIGHER else (1 / row["ratio"] if row["ratio"] else math.inf)
    if 1 / factor < gain < factor:
        return {**row, "verdict": "within"}
    if not differ(base, head):
        return {**row, "verdict": "within", "undecided": True}  # beyond the factor, not beyond the noise
    return {**row, "verdict": "better" if gain > 1 else "worse"}


def git(*args: str, strict: bool = True) -> str:
    """git's output in this repository; an error ends the check, unless not `strict` (then: empty)."""
    proc = subprocess.run(["git", *args], cwd=REPO, capture_output=True, text=True)
    if proc.returncode and strict:
        raise SystemExit(f"git {' '.join(args)}: {proc.stderr.strip()}")
    return proc.stdout.strip()


def changed_paths(base: str) -> set[str]:
    """Paths of the working tree that differ from `base`: committed since, staged, unstaged and untracked."""
    tracked = git("diff", "--name-only", base).splitlines()
    untracked = git("ls-files", "--others", "--exclude-standard").splitlines()
    return {p for p in (*tracked, *untracked) if p}


_DOTTED = re.compile(r"\bpipeline(?:\.[A-Za-z_]\w*)+")


def module_path(name: str, root: Path = REPO) -> str | None:
    """The file of a module 'a.b.c' below root, relative ('a/b/c.py' or 'a/b/c/__init__.py'), or None."""
    base = name.replace(".", "/")
    for candidate in (f"{base}.py", f"{base}/__init__.py"):
        if (root / candidate).is_file():
            return candidate
    return None


def references(path: Path, top_level: bool = False) -> set[str]:
    """The modules a Python file imports (lazily too, unless `top_level`), bare names included (bench modules
    import each other so); a bench script's or a YAML file's `pipeline.x` strings too (`-m pipeline.x`).
    Parsed once per file version: every benchmark's walk reads the same files."""
    stat = path.stat()
    return set(_references(path, top_level, stat.st_mtime_ns, stat.st_size))


@functools.cache
def _references(path: Path, top_level: bool, mtime_ns: int, size: int) -> frozenset[str]:
    text = path.read_text()
    names = set(_DOTTED.findall(text)) if path.suffix != ".py" or path.parts[-2:-1] == ("bench",) else set()
    if path.suffix != ".py":
        return frozenset(names)
    tree = ast.parse(text)
    for node in tree.body if top_level else ast.walk(tree):
        if isinstance(node, ast.Import):
            names.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module and not node.level:
            names.add(node.module)
            names.update(f"{node.module}.{alias.name}" for alias in node.names)
    return frozenset(names)


def step_module(step: str) -> str:
    return f"pipeline.steps.{step}.step" if step in ("ingest", "merge") else f"pipeline.steps.{step}"


def dependencies(benchmark: Benchmark, root: Path = REPO) -> set[str]:
    """Every repository path the benchmark's figures depend on (see the module doc), relative to root. The
    CLI counts with its top-level imports only: it imports every step, lazily, and a benchmark runs some."""
    todo = [benchmark.argv[0], *(f"config/presets/{p}" for p in benchmark.presets)]
    todo += [p for step in benchmark.steps if (p := module_path(step_module(step), root))]
    seen: set[str] = set()
    if benchmark.steps:
        seen.add("pipeline/cli.py")
        todo += [
            p for m in references(root / "pipeline" / "cli.py", top_level=True) if (p := module_path(m, root))
        ]
    while todo:
        path = todo.pop()
        if path in seen or not (root / path).is_file():
            continue
        seen.add(path)
        for module in references(root / path):
            parts = module.split(".")
            # a package's __init__ runs on import of anything below it; bench modules import each other bare
            candidates = [".".join(parts[:k]) for k in range(1, len(parts) + 1)]
            if len(parts) == 1:
                candidates.append(f"bench.{module}")
            todo += [p for c in candidates if (p := module_path(c, root))]
    return seen | set(SHARED)


def touched(changed: set[str], root: Path = REPO) -> dict[str, list[str]]:
    """Benchmark -> the changed paths it depends on, for every benchmark some change touches."""
    found = {}
    for name, benchmark in BENCHMARKS.items():
        hits = sorted(changed & dependencies(benchmark, root))
        if hits:
            found[name] = hits
    return found


@contextlib.contextmanager
def base_tree(rev: str) -> Iterator[Path]:
    """The base commit checked out in a scratch worktree, removed afterwards."""
    where = Path(tempfile.mkdtemp(prefix="sim2dl-bench-base-"))
    git("worktree", "add", "--detach", "--force", str(where / "tree"), rev)
    try:
        yield where / "tree"
    finally:
        shutil.rmtree(where, ignore_errors=True)
        subprocess.run(["git", "worktree", "prune"], cwd=REPO, capture_output=True)


def planned_seconds(name: str, pairs: int) -> float | None:
    """The check's time for one benchmark, both sides, from its recorded wall time (None: never recorded with
    this command line)."""
    recorded = json.loads(RECORD.read_text())["benchmarks"].get(name, {}) if RECORD.exists() else {}
    if tuple(recorded.get("argv", ())) != BENCHMARKS[name].argv:
        return None
    return 2 * pairs * statistics.median(recorded["wall_seconds"])


def undecided(
    benchmark: Benchmark,
    runs: Mapping[str, list[dict[str, Any]]],
    walls: Mapping[str, list[float]],
    factor: float,
    planned: int,
) -> bool:
    """Whether another pair should run: some figure is beyond the factor but not yet beyond the noise, and
    one more pair fits MAX_PAIRS and the time budget (never for a benchmark planned as one pair)."""
    done = len(runs["head"])
    pair_seconds = statistics.median(walls["base"]) + statistics.median(walls["head"])
    if planned < 2 or done >= MAX_PAIRS or (done + 1) * pair_seconds > BUDGET_SECONDS:
        return False
    for path, better in benchmark.figures.items():
        base_values, head_values = values_of(runs["base"], path), values_of(runs["head"], path)
        if base_values and head_values and verdict(base_values, head_values, better, factor).get("undecided"):
            return True
    return False


def side_by_side(names: Sequence[str], base: str, pairs: int | None, factor: float) -> int:
    """Run each benchmark alternately on the base and the working tree and compare (see the module doc)."""
    report: dict[str, Any] = {"base": base, "moved": [], "worse": [], "failed": [], "not_compared": {}}
    with base_tree(base) as tree:
        for name in names:
            benchmark = BENCHMARKS[name]
            n = pairs or benchmark.pairs
            if not (tree / benchmark.argv[0]).is_file():
                report["not_compared"][name] = f"the base has no {benchmark.argv[0]}"
                result, wall, tail = run_benchmark(benchmark.argv)
                if result is None:
                    print(f"{name}: FAILED after {wall:.0f} s\n{tail}", file=sys.stderr)
                    report["failed"].append(name)
                continue
            runs: dict[str, list[dict[str, Any]]] = {"base": [], "head": []}
            walls: dict[str, list[float]] = {"base": [], "head": []}
            broken, k = None, 0
            while broken is None and (k < n or undecided(benchmark, runs, walls, factor, n)):
                for side in ("base", "head") if k % 2 == 0 else ("head", "base"):
                    result, wall, tail = run_benchmark(benchmark.argv, tree if side == "base" else REPO)
                    print(
                        f"{name} {side} run {k + 1}/{max(k + 1, n)}: {wall:.0f} "
                        f"s{'' if result else ' FAILED'}",
                        file=sys.stderr,
                    )
                    if result is None:
                        broken = (side, tail)
                        break
                    runs[side].append(result)
                    walls[side].append(wall)
                k += 1
            if broken:
                side, tail = broken
                print(tail, file=sys.stderr)
                if side == "head":
                    report["failed"].append(name)
                else:
                    report["not_compared"][name] = (
                        "its run on the base failed (it may predate this command line)"
                    )
                continue
            for path, better in benchmark.figures.items():
                label = f"{name}.{path}"
                base_values, head_values = values_of(runs["base"], path), values_of(runs["head"], path)
                if not head_values:
                    print(f"  {path}: missing from the working tree's result", file=sys.stderr)
                    report["worse"].append(label)
                    continue
                if not base_values:
                    print(
                        f"  {path}: {statistics.median(head_values):.4g} (not in the base's result)",
                        file=sys.stderr,
                    )
                    continue
                row = verdict(base_values, head_values, better, factor)
                why = " (beyond the factor, not the noise)" if row.get("undecided") else ""
                print(
                    f"  {path}: {row['head']:.4g} against the base's {row['base']:.4g}: x{row['ratio']:.3f} "
                    f"(noise ±{row['noise']:.1%}, {len(head_values)} pairs) {row['verdict']}{why}",
                    file=sys.stderr,
                )
                if row["verdict"] != "within":
                    report["moved"].append(label)
                if row["verdict"] == "worse":
                    report["worse"].append(label)
            wall = {side: statistics.median(seconds) for side, seconds in walls.items()}
            print(f"  wall: base {wall['base']:.0f} s, head {wall['head']:.0f} s", file=sys.stderr)
    print(json.dumps(report))
    return 1 if report["worse"] or report["failed"] else 0


# ------------------------------------------------------------------------------ the record (history, docs)


def band(runs: Sequence[float]) -> float:
    """A recorded figure's noise band (half-width): half the spread of the recorded runs plus twice their
    standard deviation, and at least MIN_RELATIVE_BAND of the median."""
    middle = statistics.median(runs)
    spread = (max(runs) - min(runs)) / 2
    deviation = statistics.stdev(runs) if len(runs) > 1 else 0.0
    return max(spread + 2 * deviation, MIN_RELATIVE_BAND * abs(middle))


def recorded_figures(runs: Sequence[Mapping[str, Any]], better: Mapping[str, str]) -> dict[str, Any]:
    """Each headline figure's median, band, direction and runs, from a benchmark's repeated results."""
    figures = {}
    for path, way in better.items():
        values = values_of(runs, path)
        if values:
            figures[path] = {
                "value": statistics.median(values),
                "band": band(values),
                "better": way,
                "runs": values,
            }
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
        rows.append(
            {
                "figure": path,
                "verdict": verdict,
                "value": value,
                "recorded": rec["value"],
                "band": rec["band"],
                "change": change,
            }
        )
    return rows


def machine() -> dict[str, Any]:
    return {"host": platform.node(), "cpus": os.cpu_count(), "python": platform.python_version()}


def record(names: Sequence[str], repeats: int) -> int:
    """Run each benchmark `repeats` times and write its figures into the record (others kept)."""
    previous = json.loads(RECORD.read_text()) if RECORD.exists() else {"benchmarks": {}}
    benchmarks = dict(previous["benchmarks"])
    commit = git("rev-parse", "--short", "HEAD", strict=False)
    now = datetime.datetime.now(datetime.UTC).isoformat(timespec="seconds")
    failed = []
    for name in names:
        benchmark = BENCHMARKS[name]
        runs, seconds = [], []
        for k in range(repeats):
            result, wall, tail = run_benchmark(benchmark.argv)
            print(f"{name} run {k + 1}/{repeats}: {wall:.0f} s{'' if result else ' FAILED'}", file=sys.stderr)
            if result is None:
                print(tail, file=sys.stderr)
                failed.append(name)
                break
            runs.append(result)
            seconds.append(wall)
        figures = recorded_figures(runs, benchmark.figures) if len(runs) == repeats else {}
        if len(runs) == repeats and not figures:  # a record that compares nothing would pass every check
            print(
                f"{name}: none of its headline figures {sorted(benchmark.figures)} is in its output",
                file=sys.stderr,
            )
            failed.append(name)
        elif figures:
            benchmarks[name] = {
                "argv": list(benchmark.argv),
                "wall_seconds": [round(s, 1) for s in seconds],
                "commit": commit,
                "recorded": now,
                "repeats": repeats,
                "figures": figures,
            }
    document = {
        "about": "bench/check.py --record: headline figures of the quick benchmarks, medians of repeated "
        "runs with their noise bands (half-widths); each benchmark's commit, time and repeats beside it",
        "recorded": now,
        "commit": commit,  # the latest recording's: the side-by-side check's default base
        "machine": machine(),
        "benchmarks": dict(sorted(benchmarks.items())),
    }
    RECORD.write_text(json.dumps(document, indent=1) + "\n")
    print(json.dumps({"recorded": sorted(set(names) - set(failed)), "failed": failed}))
    return 1 if failed else 0


def against_record(names: Sequence[str]) -> int:
    """Run each benchmark once and compare its headline figures with the record (absolute figures: holds on
    the machine that recorded them, not across machines of the class)."""
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
        result, wall, tail = run_benchmark(BENCHMARKS[name].argv)
        if result is None:
            print(f"{name}: FAILED after {wall:.0f} s\n{tail}", file=sys.stderr)
            failed.append(name)
            continue
        print(f"{name} ({wall:.0f} s)", file=sys.stderr)
        for row in compare(recorded[name]["figures"], result):
            label = f"{name}.{row['figure']}"
            if row["verdict"] == "missing":
                print(
                    f"  {row['figure']}: missing from the result (recorded {row['recorded']:.4g})",
                    file=sys.stderr,
                )
                worse.append(label)
                continue
            print(
                f"  {row['figure']}: {row['value']:.4g} (recorded {row['recorded']:.4g} ± {row['band']:.2g}) "
                f"{row['verdict']}",
                file=sys.stderr,
            )
            if row["verdict"] != "within":
                moved.append(label)
            if row["verdict"] == "worse":
                worse.append(label)
    print(json.dumps({"moved": moved, "worse": worse, "failed": failed, "unrecorded": unrecorded}))
    return 1 if worse or failed else 0


def default_base() -> str:
    if not RECORD.exists():
        raise SystemExit(f"no {RECORD.relative_to(REPO)} to take the base commit from: say --base REV")
    return json.loads(RECORD.read_text())["commit"]


def main() -> int:
    # a check stopped by SIGTERM (a job's time limit, kill) still removes the base's worktree
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument(
        "names",
        nargs="*",
        help=f"benchmarks (default: those the change touches, of "
        f"{', '.join(BENCHMARKS)}; not {', '.join(BY_HAND)}: see BY_HAND)",
    )
    parser.add_argument(
        "--base", help="the commit to compare with (default: the one bench/recorded.json was made at)"
    )
    parser.add_argument(
        "--pairs", type=int, help="alternated runs on each side (default: each benchmark's own)"
    )
    parser.add_argument("--factor", type=float, default=FACTOR, help=f"the least ratio named ({FACTOR})")
    parser.add_argument(
        "--against-record", action="store_true", help="one run each against bench/recorded.json"
    )
    parser.add_argument("--record", action="store_true", help="run each REPEATS times and record the figures")
    parser.add_argument(
        "--repeats", type=int, default=REPEATS, help=f"runs per benchmark when recording ({REPEATS})"
    )
    args = parser.parse_args()
    unknown = sorted(set(args.names) - set(BENCHMARKS))
    if unknown:
        why = "; ".join(
            f"{name} is run by hand: it needs {BY_HAND[name]}" for name in unknown if name in BY_HAND
        )
        known = ", ".join(BENCHMARKS)
        parser.error(
            f"no benchmark {', '.join(unknown)} in the check (known: {known}){'; ' + why if why else ''}"
        )
    if args.record:
        return record(args.names or list(BENCHMARKS), args.repeats)
    if args.against_record:
        return against_record(args.names or list(BENCHMARKS))
    base = git("rev-parse", "--short", args.base or default_base())
    names = args.names
    if not names:
        hits = touched(changed_paths(base))
        for name in BENCHMARKS:
            print(
                f"{name}: {'touched by ' + ', '.join(hits[name][:4]) if name in hits else 'untouched'}"
                f"{' ...' if len(hits.get(name, ())) > 4 else ''}",
                file=sys.stderr,
            )
        names = list(hits)
    planned = [planned_seconds(n, args.pairs or BENCHMARKS[n].pairs) for n in names]
    print(
        f"side by side with {base}: {', '.join(names) or 'nothing to run'} (about "
        f"{sum(p or 0 for p in planned) / 60:.0f} min)",
        file=sys.stderr,
    )
    if not names:
        print(json.dumps({"base": base, "moved": [], "worse": [], "failed": [], "not_compared": {}}))
        return 0
    return side_by_side(names, base, args.pairs, args.factor)


if __name__ == "__main__":
    raise SystemExit(main())

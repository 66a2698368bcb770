"""bench/check.py (`make bench-check`): a base commit and the working tree side by side (the verdict's rules,
which benchmarks a change touches, and a planted slowdown in a real step named worse by the real merge
benchmark, small); and the record (history): figures recorded from repeated runs with their noise bands, a
later run's figures compared with them, with a tiny benchmark (a script printing the JSON line the test
sets) standing in for the real ones."""

from __future__ import annotations

import importlib.util
import json
import re
import shutil
import subprocess
import sys

import pytest

from .conftest import REPO, SLOW, env


def load_check(monkeypatch):
    spec = importlib.util.spec_from_file_location("bench_check", REPO / "bench" / "check.py")
    module = importlib.util.module_from_spec(spec)
    monkeypatch.syspath_prepend(str(REPO / "bench"))
    monkeypatch.setitem(sys.modules, "bench_check", module)  # where its dataclass looks its annotations up
    spec.loader.exec_module(module)
    return module


@pytest.fixture
def check(tmp_path, monkeypatch):
    module = load_check(monkeypatch)
    values = tmp_path / "values.json"  # what the tiny benchmark prints: one run's figures a line, in turn
    script = tmp_path / "tiny.py"
    script.write_text(
        "import json, pathlib, sys\n"
        f"p = pathlib.Path({str(values)!r}); lines = p.read_text().splitlines()\n"
        "p.write_text('\\n'.join(lines[1:]))\n"
        "print('noise before the last line'); print(lines[0])\n"
    )
    monkeypatch.setattr(module, "RECORD", tmp_path / "recorded.json")
    figures = {"speedup": module.HIGHER, "steps.merge_s": module.LOWER, "absent": module.HIGHER}
    monkeypatch.setattr(module, "BENCHMARKS", {"tiny": module.Benchmark((str(script),), figures)})
    monkeypatch.setattr(module, "REPO", tmp_path)

    def runs(*figures):
        values.write_text("\n".join(json.dumps({"speedup": s, "steps": {"merge_s": m}}) for s, m in figures))

    return module, runs


def test_recording_keeps_medians_and_bands_from_repeated_runs(check):
    module, runs = check
    runs((2.0, 0.50), (2.2, 0.54), (2.1, 0.52))
    assert module.record(["tiny"], 3) == 0
    figures = json.loads(module.RECORD.read_text())["benchmarks"]["tiny"]["figures"]
    # a figure the benchmark does not print is not recorded
    assert set(figures) == {"speedup", "steps.merge_s"}
    speedup = figures["speedup"]
    assert speedup["value"] == 2.1 and speedup["runs"] == [2.0, 2.2, 2.1] and speedup["better"] == "higher"
    assert speedup["band"] == pytest.approx(0.1 + 2 * 0.1)  # half the spread plus twice the deviation
    assert figures["steps.merge_s"]["band"] == pytest.approx(0.02 + 2 * 0.02)


def test_a_figure_beyond_its_band_is_named_and_only_a_worse_one_fails(check, capsys):
    module, runs = check
    runs((2.0, 0.50), (2.0, 0.50), (2.0, 0.50))
    module.record(["tiny"], 3)
    band = json.loads(module.RECORD.read_text())["benchmarks"]["tiny"]["figures"]["speedup"]["band"]
    assert band == pytest.approx(2.0 * module.MIN_RELATIVE_BAND)  # runs that agreed: the least band
    capsys.readouterr()
    runs((2.05, 0.505))  # within both bands
    assert module.against_record(["tiny"]) == 0
    assert json.loads(capsys.readouterr().out.splitlines()[-1]) == {
        "moved": [],
        "worse": [],
        "failed": [],
        "unrecorded": [],
    }
    runs((2.5, 0.50))  # faster: named, not a failure
    assert module.against_record(["tiny"]) == 0
    assert json.loads(capsys.readouterr().out.splitlines()[-1])["moved"] == ["tiny.speedup"]
    # the merge step slower: named and failed, as the regression of issue 67 would have been
    runs((2.0, 0.79))
    assert module.against_record(["tiny"]) == 1
    out = json.loads(capsys.readouterr().out.splitlines()[-1])
    assert out["moved"] == out["worse"] == ["tiny.steps.merge_s"]


def test_a_failing_benchmark_fails_the_check_and_an_unknown_name_is_refused(check, capsys, monkeypatch):
    module, runs = check
    runs((2.0, 0.5), (2.0, 0.5), (2.0, 0.5))
    module.record(["tiny"], 3)
    runs()  # no line to print: the benchmark fails
    assert module.against_record(["tiny"]) == 1
    assert json.loads(capsys.readouterr().out.splitlines()[-1])["failed"] == ["tiny"]
    monkeypatch.setattr(sys, "argv", ["check.py", "nosuch"])
    with pytest.raises(SystemExit):
        module.main()
    assert "no benchmark nosuch" in capsys.readouterr().err


def test_a_key_holding_dots_is_found_and_a_benchmark_with_no_headline_figure_is_not_recorded(check, capsys):
    """A benchmark may print flat keys with dots in them ('vrmse.state.network.128'): the headline path finds
    them; one whose output holds none of its headline figures fails the recording (a record of nothing
    would pass every later check)."""
    module, _ = check
    assert module.figure({"vrmse.state": {"n.128": 0.3}, "a": {"b": 2}}, "vrmse.state.n.128") == 0.3
    assert module.figure({"a": {"b": 2}}, "a.b") == 2.0 and module.figure({"a": {"b": 2}}, "a.c") is None
    module.RECORD.unlink(missing_ok=True)
    (module.REPO / "values.json").write_text("\n".join(json.dumps({"other": 1.0}) for _ in range(3)))
    assert module.record(["tiny"], 3) == 1
    assert "none of its headline figures" in capsys.readouterr().err
    assert "tiny" not in json.loads(module.RECORD.read_text())["benchmarks"]


def test_side_by_side_names_a_figure_only_beyond_the_factor_and_the_noise_of_this_run(monkeypatch):
    module = load_check(monkeypatch)
    verdict = module.verdict
    # timing figures: 5 % apart (within the factor), 20 % apart with tight runs (worse, and better the other
    # way)
    assert verdict([1.00, 1.02, 0.99], [1.05, 1.04, 1.06], module.LOWER)["verdict"] == "within"
    assert verdict([1.00, 1.02, 0.99], [1.20, 1.22, 1.21], module.LOWER)["verdict"] == "worse"
    assert verdict([1.00, 1.02, 0.99], [1.20, 1.22, 1.21], module.HIGHER)["verdict"] == "better"
    # 20 % apart in the medians, but the runs overlap: the t-test finds no difference, so nothing is named
    # yet, and the figure is undecided (beyond the factor, not beyond the noise: more pairs would run)
    noisy = verdict([1.0, 1.6, 0.7], [1.2, 0.8, 1.5], module.LOWER)
    assert noisy["ratio"] == pytest.approx(1.2) and noisy["verdict"] == "within" and noisy["undecided"]
    assert noisy["noise"] == pytest.approx(0.45)
    # a machine whose load drifts 3 x over the check, each head run 1.5 x its pair's base: apart, the two
    # sides' runs overlap (Student's test on them: p = 0.4), so 3 pairs leave it undecided; 6 pairs, each
    # the same way, decide it (the sign test: p = 0.03)
    assert verdict([1.0, 2.0, 3.0], [1.5, 3.0, 4.4], module.LOWER)["undecided"]
    drifting = verdict([1.0, 2.0, 3.0] * 2, [1.5, 3.0, 4.4] * 2, module.LOWER)
    assert drifting["verdict"] == "worse" and "undecided" not in drifting
    assert verdict([1.0, 2.0, 3.0], [1.0, 2.1, 2.9], module.LOWER)["verdict"] == "within"
    # seeded figures (every run the same): any difference beyond the factor is real; one pair: the factor
    # decides
    assert verdict([0.30, 0.30], [0.34, 0.34], module.LOWER)["verdict"] == "worse"
    assert verdict([0.30], [0.32], module.LOWER)["verdict"] == "within"
    assert verdict([0.30], [0.40], module.LOWER, factor=1.2)["verdict"] == "worse"
    assert verdict([0.0, 0.0], [0.0, 0.0], module.HIGHER)["verdict"] == "within"


def test_an_undecided_figure_asks_for_another_pair_within_the_pairs_and_time_allowed(monkeypatch):
    module = load_check(monkeypatch)
    benchmark = module.Benchmark(("bench/x.py",), {"seconds": module.LOWER})

    def sides(base, head):
        return {"base": [{"seconds": v} for v in base], "head": [{"seconds": v} for v in head]}

    walls = {"base": [10.0], "head": [10.0]}
    noisy = sides([1.0, 1.6, 0.7], [1.2, 0.8, 1.5])
    assert module.undecided(benchmark, noisy, walls, module.FACTOR, 3)
    # one planned pair: the factor decides
    assert not module.undecided(benchmark, noisy, walls, module.FACTOR, 1)
    # budget
    assert not module.undecided(benchmark, noisy, {"base": [400.0], "head": [400.0]}, module.FACTOR, 3)
    many = sides([1.0, 1.6, 0.7, 1.0, 1.6, 0.7, 1.0, 1.6], [1.2, 0.8, 1.5, 1.2, 0.8, 1.5, 1.2, 0.8])
    assert not module.undecided(benchmark, many, walls, module.FACTOR, 3)  # MAX_PAIRS ran
    assert not module.undecided(
        benchmark, sides([1.0, 1.02, 0.99], [1.2, 1.22, 1.21]), walls, module.FACTOR, 3
    )


def test_a_change_touches_the_benchmarks_whose_code_imports_it(monkeypatch):
    """Which benchmarks run by default: from the working tree's imports, a change to merge's step touches the
    benchmarks that run merge and no other; a shared file touches all; docs touch none."""
    module = load_check(monkeypatch)
    merge = set(module.touched({"pipeline/steps/merge/step.py"}))
    assert {"merge", "read", "train"} <= merge
    assert not merge & {"stage", "search", "surrogate", "adaptive", "exascale", "ensemble"}
    design = set(module.touched({"pipeline/design/batch.py"}))
    assert "adaptive" in design and not design & {"merge", "read", "stage", "exascale", "surrogate"}
    assert set(module.touched({"config/presets/adaptive-fronts.yaml"})) == {"adaptive"}
    assert set(module.touched({"bench/common.py"})) == set(module.BENCHMARKS)
    assert set(module.touched({"pipeline/schema.yaml"})) == set(module.BENCHMARKS)
    assert module.touched({"docs/benchmarks.md", "README.md"}) == {}


def test_every_benchmark_of_the_check_fits_its_time_base_included(monkeypatch):
    module = load_check(monkeypatch)
    for name, benchmark in module.BENCHMARKS.items():
        planned = module.planned_seconds(name, benchmark.pairs)
        assert planned is not None, f"{name}: no recorded wall time for {benchmark.argv}"
        assert planned <= module.BUDGET_SECONDS, (name, planned)


PLANT = "SIM2DL_PLANTED_SLOWDOWN_S"
# A benchmark of one real step, small: `sim2dl ingest` of the session's small cubes (one rank), its seconds.
INGEST_BENCHMARK = """import json, shutil, subprocess, sys
shutil.rmtree(sys.argv[2], ignore_errors=True)
command = ["sim2dl", "ingest", "--config", sys.argv[1], "--out", sys.argv[2]]
proc = subprocess.run(command, capture_output=True, text=True, check=True)
print(json.dumps({"ingest_seconds": json.loads(proc.stdout.strip().splitlines()[-1])["seconds"]}))
"""


@SLOW
def test_a_planted_slowdown_in_a_step_is_named_worse_and_the_unchanged_tree_nothing(tmp_path, small_cubes):
    """bench/check.py side by side in a scratch copy of this tree, committed as the base, with a benchmark of
    the real ingest step; in the copy's working tree ingest sleeps when the test sets an environment
    variable. Unset, the two sides run the same code and nothing is named worse; set (2 s: 1.6 x a step of
    3.4 s, 3 x one of 0.9 s), ingest's seconds are, and the check fails. Both with another job busy beside the
    check: a busy machine once made a planted 1.7 x read as noise."""
    cubes, _ = small_cubes
    repo = tmp_path / "repo"
    files = subprocess.run(
        ["git", "ls-files", "-co", "--exclude-standard"], cwd=REPO, capture_output=True, text=True, check=True
    ).stdout.split()
    for name in files:
        if (REPO / name).is_file():
            (repo / name).parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(REPO / name, repo / name)
    (repo / "bench" / "ingest_small.py").write_text(INGEST_BENCHMARK)
    git = ["git", "-c", "user.name=sim2dl", "-c", "user.email=sim2dl@localhost"]
    for command in (["init", "-q"], ["add", "-A"], ["commit", "-q", "-m", "base"]):
        subprocess.run([*git, *command], cwd=repo, check=True, capture_output=True)
    step = repo / "pipeline" / "steps" / "ingest" / "step.py"
    plant = f"\\1    import os, time\\n    time.sleep(float(os.environ.get({PLANT!r}, 0)))\\n"
    planted, count = re.subn(r"(\ndef ingest\(.*?\) -> .*?:\n)", plant, step.read_text(), count=1, flags=re.S)
    assert count == 1
    step.write_text(planted)
    argv = ("bench/ingest_small.py", str(cubes / "config.yaml"), str(tmp_path / "ingested"))

    def run(extra: dict[str, str]) -> tuple[int, dict]:
        code = (
            "import sys; sys.path.insert(0, 'bench'); import check\n"
            f"check.BENCHMARKS = {{'ingest': check.Benchmark({argv!r}, {{'ingest_seconds': check.LOWER}})}}\n"
            "raise SystemExit(check.side_by_side(['ingest'], 'HEAD', 3, check.FACTOR))\n"
        )
        proc = subprocess.run(
            [sys.executable, "-c", code],
            cwd=repo,
            capture_output=True,
            text=True,
            env={**env(), **extra},
            timeout=600,
        )
        return proc.returncode, json.loads(proc.stdout.strip().splitlines()[-1]) | {"log": proc.stderr}

    hog = subprocess.Popen([sys.executable, "-c", "while True: pass"])  # a job beside the check, on one core
    try:
        code, unchanged = run({})
        assert code == 0 and unchanged["worse"] == unchanged["failed"] == unchanged["moved"] == [], unchanged[
            "log"
        ]
        code, planted = run({PLANT: "2"})
        assert code == 1 and planted["worse"] == ["ingest.ingest_seconds"], planted["log"]
    finally:
        hog.kill()
        hog.wait()
    assert "(noise" in planted["log"]
    print(unchanged["log"], planted["log"])  # the verdicts (pytest -rP shows them)
    worktrees = subprocess.run(
        ["git", "worktree", "list", "--porcelain"], cwd=repo, capture_output=True, text=True
    )
    assert worktrees.stdout.count("worktree ") == 1  # the base's scratch worktree is gone

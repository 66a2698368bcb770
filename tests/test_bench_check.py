"""bench/check.py (`make bench-check`): figures recorded from repeated runs with their noise bands, and a later
run's figures compared with them. A tiny benchmark (a script printing the JSON line the test sets) stands in
for the real ones, which time things and stay out of the test suite."""

from __future__ import annotations

import importlib.util
import json
import sys

import pytest

from .conftest import REPO


@pytest.fixture
def check(tmp_path, monkeypatch):
    spec = importlib.util.spec_from_file_location("bench_check", REPO / "bench" / "check.py")
    module = importlib.util.module_from_spec(spec)
    monkeypatch.syspath_prepend(str(REPO / "bench"))
    spec.loader.exec_module(module)
    values = tmp_path / "values.json"  # what the tiny benchmark prints: one run's figures a line, in turn
    script = tmp_path / "tiny.py"
    script.write_text(
        "import json, pathlib, sys\n"
        f"p = pathlib.Path({str(values)!r}); lines = p.read_text().splitlines()\n"
        "p.write_text('\\n'.join(lines[1:]))\n"
        "print('noise before the last line'); print(lines[0])\n"
    )
    monkeypatch.setattr(module, "RECORD", tmp_path / "recorded.json")
    monkeypatch.setattr(module, "HEADLINES", {
        "tiny": ((str(script),), {"speedup": module.HIGHER, "steps.merge_s": module.LOWER, "absent": module.HIGHER}),
    })  # fmt: skip
    monkeypatch.setattr(module, "REPO", tmp_path)

    def runs(*figures):
        values.write_text("\n".join(json.dumps({"speedup": s, "steps": {"merge_s": m}}) for s, m in figures))

    return module, runs


def test_recording_keeps_medians_and_bands_from_repeated_runs(check):
    module, runs = check
    runs((2.0, 0.50), (2.2, 0.54), (2.1, 0.52))
    assert module.record(["tiny"], 3) == 0
    figures = json.loads(module.RECORD.read_text())["benchmarks"]["tiny"]["figures"]
    assert set(figures) == {"speedup", "steps.merge_s"}  # a figure the benchmark does not print is not recorded
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
    assert module.check(["tiny"]) == 0
    assert json.loads(capsys.readouterr().out.splitlines()[-1]) == {"moved": [], "worse": [], "failed": [],
                                                                   "unrecorded": []}  # fmt: skip
    runs((2.5, 0.50))  # faster: named, not a failure
    assert module.check(["tiny"]) == 0
    assert json.loads(capsys.readouterr().out.splitlines()[-1])["moved"] == ["tiny.speedup"]
    runs((2.0, 0.79))  # the merge step slower: named and failed, as the regression of issue 67 would have been
    assert module.check(["tiny"]) == 1
    out = json.loads(capsys.readouterr().out.splitlines()[-1])
    assert out["moved"] == out["worse"] == ["tiny.steps.merge_s"]


def test_a_failing_benchmark_fails_the_check_and_an_unknown_name_is_refused(check, capsys, monkeypatch):
    module, runs = check
    runs((2.0, 0.5), (2.0, 0.5), (2.0, 0.5))
    module.record(["tiny"], 3)
    runs()  # no line to print: the benchmark fails
    assert module.check(["tiny"]) == 1
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

"""Ensembles of the user's own simulator: the design, the task farm on real MPI ranks, retries, time-outs,
runs that write nothing or what ingest rejects, resume after kill -9, and Pythia 8 through the workflow."""

from __future__ import annotations

import json
import os
import sys
import time
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
import yaml

from pipeline import Sim2dlError
from pipeline.ensemble.plan import EnsemblePlan, check_command, placeholders, resolved_command

from .conftest import (
    REPO,
    SLOW,
    kill_tree,
    make_config,
    run_cli,
    snakemake_configfile,
    start_cli,
    write_config,
)

FLAKY = """
import os, sys, time
out, kind, ledger, run = sys.argv[1:5]
with open(ledger, "a") as f:
    f.write(run + "\\n")
tries = os.path.join(os.path.dirname(ledger), run + ".tries")
attempt = int(open(tries).read()) + 1 if os.path.exists(tries) else 1
open(tries + ".tmp", "w").write(str(attempt))
# atomic: a run killed here leaves the count whole (as sim2dl asks of a simulator)
os.replace(tries + ".tmp", tries)
print("attempt", attempt, "of", run, kind)
if kind == "fail_once" and attempt == 1:
    sys.exit(3)
if kind == "fail":
    print("no convergence", file=sys.stderr)
    sys.exit(5)
if kind == "hang":
    time.sleep(600)
if kind == "empty":
    sys.exit(0)
if kind == "slow":
    time.sleep(0.4)
if kind == "garbage":  # a file ingest cannot read
    open(os.path.join(out, "out.npy"), "wb").write(b"not a numpy file")
else:
    import numpy as np
    np.save(os.path.join(out, "out.npy"), np.full(4, float(run.split("-")[1]), np.float32))
"""


def ensemble_config(tmp_path: Path, kinds: list[str], **simulate) -> dict:
    script = tmp_path / "flaky.py"
    script.write_text(FLAKY)
    (tmp_path / "ledger").mkdir(exist_ok=True)
    return make_config(
        tmp_path,
        simulate={
            "command": [
                "python3",
                str(script),
                "{out}",
                "{kind}",
                str(tmp_path / "ledger" / "runs.txt"),
                "{run}",
            ],
            "runs": len(kinds),
            "design": "grid",
            "space": {"kind": {"type": "choice", "values": kinds}},
            "retries": 1,
            "run_timeout_s": 3,
            "max_failed_fraction": 1.0,
            **simulate,
        },
        source={
            "glob": "**/*.npy",
            "format": "auto",
            "sample_id": None,
            "fields": {
                "value": {"path": ".", "dtype": "float32", "shape": [4]},
                "kind": {"column": "kind", "categorical": True},
            },
        },
        convert={"features": ["value"], "labels": ["kind"], "log1p": [], "normalise": [], "per_channel": []},
    )


def runs_table(tmp_path: Path) -> list[dict]:
    return pq.read_table(tmp_path / "work" / "raw" / "runs.parquet").to_pylist()


# ---------------------------------------------------------------- the design


@pytest.mark.parametrize("design", ["random", "sobol", "lhs"])
def test_designs_cover_the_space_and_are_drawn_once_from_the_seed(design):
    space = {
        "omega_m": {"type": "uniform", "low": 0.2, "high": 0.4},
        "sigma8": {"type": "log-uniform", "low": 0.6, "high": 1.0},
        "steps": {"type": "int", "low": 1, "high": 4},
        "process": {"type": "choice", "values": ["qcd", "ttbar", "zll"]},
    }
    settings = {"runs": 64, "design": design, "space": space, "seed": 7}
    plan = EnsemblePlan.draw(settings)
    table = whole(plan).to_pydict()
    assert table["run"][:2] == ["run-000000", "run-000001"] and len(set(table["seed"])) == 64
    assert min(table["omega_m"]) >= 0.2 and max(table["omega_m"]) < 0.4
    assert min(table["sigma8"]) >= 0.6 and max(table["sigma8"]) < 1.0
    assert set(table["steps"]) == {1, 2, 3, 4} and set(table["process"]) == {"qcd", "ttbar", "zll"}
    assert whole(EnsemblePlan.draw(settings)).equals(whole(plan))  # the same seed, the same design
    assert EnsemblePlan.draw({**settings, "seed": 8}).digest != plan.digest
    if design != "random":  # space-filling: each quarter of a range holds a quarter of the points
        quarters = np.histogram(table["omega_m"], bins=4, range=(0.2, 0.4))[0]
        assert quarters.min() >= 12


def whole(plan: EnsemblePlan) -> pa.Table:
    return pa.concat_tables(plan.blocks())


def test_a_ranks_outcomes_go_to_an_unlinked_file_and_come_back_a_stretch_at_a_time(tmp_path, monkeypatch):
    """A rank holds a chunk of outcomes, not every run it ran: rows are appended to an unlinked file (nothing
    left in the directory) and read back for rising stops, the reads crossing their own size; a chunk
    handed out below a finished one is an error, not a silently unordered table."""
    import pipeline.ensemble.runs_table as runs_table

    monkeypatch.setattr(runs_table, "DESIGN_BLOCK", 4)  # rows read back per file read
    mine = runs_table.RankOutcomes(tmp_path)
    chunks = [(0, 3), (3, 4), (10, 6), (20, 1)]  # rising, with other ranks' runs between them
    for start, count in chunks:
        mine.add(
            start,
            [
                {
                    "status": i % 3,
                    "attempts": 1 + i % 2,
                    "seconds": i / 10,
                    "exit_code": i % 3,
                    "reason": f"r{i}" if i % 3 else "",
                }
                for i in range(start, start + count)
            ],
        )
    assert list(tmp_path.iterdir()) == []
    with pytest.raises(Sim2dlError, match="handed out after"):
        mine.add(15, [{"status": 0, "attempts": 1, "seconds": 0, "exit_code": 0, "reason": ""}])
    mine.rewind()
    stretches = [mine.take_until(stop) for stop in (2, 5, 10, 16, 21, 30)]
    expected = [range(0, 2), range(2, 5), range(5, 7), range(10, 16), range(20, 21), range(0)]
    assert [list(s["index"]) for s in stretches] == [list(e) for e in expected]
    rows = np.concatenate(stretches)
    assert list(rows["status"]) == [i % 3 for i in rows["index"]]
    assert list(rows["attempts"]) == [1 + i % 2 for i in rows["index"]]
    assert mine.reasons == {i: f"r{i}" for i in rows["index"] if i % 3}
    mine.close()


@pytest.mark.parametrize("design", ["random", "sobol", "lhs", "grid"])
def test_the_design_made_a_block_at_a_time_is_the_whole_design(design, monkeypatch):
    """No rank holds the whole design: blocks are made when asked (random and Sobol designs jump ahead to a
    block's first point), and they are the rows of the design drawn at once, whatever the block size."""
    from itertools import product

    from scipy.stats import qmc

    import pipeline.ensemble.plan as plan_module

    space = {
        "a": {"type": "uniform", "low": 0, "high": 1},
        "n": {"type": "int", "low": 1, "high": 9},
        "kind": {"type": "choice", "values": ["x", "y", "z"]},
    }
    settings = {"runs": 300, "design": design, "space": space, "seed": 5}
    monkeypatch.setattr(plan_module, "DESIGN_BLOCK", 7)
    blocked = EnsemblePlan.draw(settings)
    rows = blocked.rows(0, len(blocked))
    assert [r["run"] for r in blocked.rows(5, 16)] == [f"run-{i:06d}" for i in range(5, 16)]  # across blocks
    assert blocked.rows(200, 203) == rows[200:203]
    monkeypatch.setattr(plan_module, "DESIGN_BLOCK", 65_536)
    assert whole(EnsemblePlan.draw(settings)).to_pylist() == rows
    if design == "grid":
        levels = plan_module.grid_levels(space, 300)
        assert [(r["a"], r["n"], r["kind"]) for r in rows] == list(product(*levels.values()))
        return
    at_once = {
        "random": lambda: np.random.default_rng(5).random((300, 3)),
        "sobol": lambda: qmc.Sobol(3, scramble=True, seed=5).random(300),
        "lhs": lambda: qmc.LatinHypercube(3, seed=5).random(300),
    }[design]()
    np.testing.assert_array_equal([r["a"] for r in rows], at_once[:, 0])


def test_a_grid_is_the_cross_product_within_the_run_count():
    space = {"a": {"type": "uniform", "low": 0, "high": 1}, "b": {"type": "choice", "values": ["x", "y"]}}
    table = whole(EnsemblePlan.draw({"runs": 10, "design": "grid", "space": space, "seed": 1})).to_pydict()
    assert len(table["run"]) == 10 and sorted(set(table["a"])) == pytest.approx(np.linspace(0, 1, 5).tolist())
    assert sorted(zip(table["a"], table["b"], strict=True)) == sorted(
        (a, b) for a in np.linspace(0, 1, 5) for b in ("x", "y")
    )


def test_placeholders_naming_nothing_and_missing_programs_are_config_errors():
    base = {"space": {"x": {"type": "uniform", "low": 0, "high": 1}}, "image": ""}
    assert placeholders(["--x", "{x}", "{out}/a-{run}"]) == {"x", "out", "run"}
    with pytest.raises(Sim2dlError, match=r"the placeholders \['y'\] name no parameter"):
        check_command({**base, "command": ["true", "{y}"]})
    with pytest.raises(Sim2dlError, match="program 'no-such-simulator' not found"):
        check_command({**base, "command": ["no-such-simulator", "{x}"]})
    with pytest.raises(
        Sim2dlError, match=r"with simulate.persistent .* no placeholders \(it has \['out', 'x'\]\)"
    ):
        check_command({**base, "command": ["true", "{out}", "{x}"], "persistent": True})
    check_command({**base, "command": ["true"], "persistent": True})


# ---------------------------------------------------------------- the farm, with faults


@SLOW
def test_faults_are_retried_recorded_with_their_reasons_and_nothing_is_lost(tmp_path):
    kinds = ["ok", "fail_once", "fail", "hang", "empty", "garbage"]
    config = ensemble_config(tmp_path, kinds)
    path = write_config(tmp_path, config)
    proc = run_cli(["simulate", "--config", str(path)], ranks=2, timeout=120)
    summary = json.loads(proc.stdout.strip().splitlines()[-1])
    assert (summary["runs"], summary["ok"], summary["failed"], summary["timed_out"]) == (6, 3, 2, 1)
    assert "simulate: 100%" in proc.stderr and "6/6" in proc.stderr  # rank 0's bar counts both ranks' runs
    rows = {r["kind"]: r for r in runs_table(tmp_path)}
    assert (rows["ok"]["status"], rows["ok"]["attempts"], rows["ok"]["reason"]) == ("ok", 1, "")
    assert (rows["fail_once"]["status"], rows["fail_once"]["attempts"]) == ("ok", 2)
    assert (rows["fail"]["status"], rows["fail"]["attempts"], rows["fail"]["exit_code"]) == ("failed", 2, 5)
    assert rows["fail"]["reason"].startswith("exit code 5 (log: ")
    log = Path(rows["fail"]["reason"].split("(log: ")[1].rstrip(")"))
    assert log.read_text().count("no convergence") == 2  # both attempts' stderr, in the run's own log
    assert rows["hang"]["status"] == "timed_out" and "killed with its process group" in rows["hang"]["reason"]
    assert rows["empty"]["status"] == "failed" and "wrote no files" in rows["empty"]["reason"]
    raw = tmp_path / "work" / "raw"
    done = sorted(p.name for p in raw.glob("0*/run-*"))
    assert done == sorted(rows[k]["run"] for k in ("ok", "fail_once", "garbage"))
    assert not list(raw.glob("0*/.*partial"))  # nothing half-written looks complete, nothing is left over
    # The runs' files into ingest: the garbage file is rejected with its reason, the labels come from the
    # runs table by run directory (no labels_table configured).
    run_cli(["ingest", "--config", str(path)], ranks=2)
    ingest = json.loads((tmp_path / "work" / "ingest" / "summary.json").read_text())
    assert ingest["accepted"] == 2 and ingest["classes"] == {"kind": ["fail_once", "ok"]}
    rejects = (tmp_path / "work" / "ingest" / "rejects.csv").read_text()
    assert f"{rows['garbage']['run']}/out.npy" in rejects  # the run's file, with ingest's reason
    # Above max_failed_fraction the step fails, naming the first failures and the table.
    strict = write_config(
        tmp_path, {**config, "simulate": {**config["simulate"], "max_failed_fraction": 0.1}}
    )
    failed = run_cli(["simulate", "--config", str(strict)], ranks=2, check=False, timeout=120)
    assert failed.returncode != 0 and "3 of 6 runs did not succeed" in failed.stderr
    assert (
        f"{rows['fail']['run']}: exit code 5" in failed.stderr and failed.stderr.count("did not succeed") == 1
    )
    # That rerun ran only what had not completed: a completed run keeps its outcome (attempts from its log).
    ledger = (tmp_path / "ledger" / "runs.txt").read_text().split()
    assert ledger.count(rows["fail_once"]["run"]) == 2 and ledger.count(rows["ok"]["run"]) == 1
    assert ledger.count(rows["fail"]["run"]) == 4  # tried again by the rerun
    rerun = {r["kind"]: r for r in runs_table(tmp_path)}
    assert (rerun["fail_once"]["status"], rerun["fail_once"]["attempts"]) == ("ok", 2)
    # A program that is not there fails the step at once, with one message, before any run.
    missing = {**config["simulate"], "command": ["no-such-simulator", "{out}"]}
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    path = write_config(elsewhere, {**config, "workdir": str(elsewhere / "work"), "simulate": missing})
    proc = run_cli(["simulate", "--config", str(path)], ranks=2, check=False)
    assert proc.returncode != 0 and proc.stderr.count("program 'no-such-simulator' not found") == 1
    assert not (elsewhere / "work" / "raw").exists()


@SLOW
def test_killed_anywhere_a_rerun_runs_only_what_did_not_complete(tmp_path):
    """The kill may land anywhere, also inside the test's simulator while it counts its attempts (written
    atomically: a count cut short made every later attempt of that run fail, and the ledger counted them);
    the runs' time limit is far above a slow run's 0.4 s, so a start-up slowed by other work is no retry."""
    space = {"kind": {"type": "choice", "values": ["slow"]}, "x": {"type": "uniform", "low": 0, "high": 1}}
    config = ensemble_config(tmp_path, ["slow"], runs=16, design="random", space=space, run_timeout_s=60)
    path = write_config(tmp_path, config)
    job = start_cli(["simulate", "--config", str(path)], 2)
    raw = tmp_path / "work" / "raw"
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline and len(list(raw.glob("0*/run-*"))) < 4:
        time.sleep(0.05)
    kill_tree(job)
    before = {p.name for p in raw.glob("0*/run-*")}
    assert 4 <= len(before) < 16 and not (raw / "simulate.json").exists()
    # `sim2dl status` on the killed farm: its runs counted from the run directories and logs
    stopped = json.loads(run_cli(["status", str(raw.parent), "--json"], ranks=None).stdout)["steps"][0]
    assert stopped["state"] == "running" and stopped["runs"]["design"] == 16
    assert stopped["runs"]["ok"] == len(before) and stopped["runs"]["running"] == len(
        list(raw.glob("0*/.run-*"))
    )
    run_cli(["simulate", "--config", str(path)], ranks=2, timeout=120)
    done = json.loads(run_cli(["status", str(raw.parent), "--json"], ranks=None).stdout)["steps"][0]
    assert done == {"step": "simulate", "state": "done", "runs": {"design": 16, "ok": 16}}
    ledger = (tmp_path / "ledger" / "runs.txt").read_text().split()
    assert sorted(set(ledger)) == [f"run-{i:06d}" for i in range(16)]
    assert all(ledger.count(run) == 1 for run in before)  # completed runs never ran again
    assert len(ledger) - 16 <= 2  # at most the runs in flight at the kill (one per rank) ran twice
    # The same table as an uninterrupted run's, apart from times.
    fresh = tmp_path / "fresh"
    fresh.mkdir()
    fresh_config = ensemble_config(fresh, ["slow"], runs=16, design="random", space=space, run_timeout_s=60)
    run_cli(["simulate", "--config", str(write_config(fresh, fresh_config))], ranks=2, timeout=120)

    def timeless(rows):
        return [{k: v for k, v in r.items() if k != "seconds"} for r in rows]

    assert timeless(runs_table(tmp_path)) == timeless(runs_table(fresh))


def test_a_changed_design_starts_afresh_and_the_same_one_keeps_its_runs(tmp_path):
    config = ensemble_config(tmp_path, ["ok", "ok2"], design="grid")
    path = write_config(tmp_path, config)
    run_cli(["simulate", "--config", str(path)], ranks=1)
    ledger = tmp_path / "ledger" / "runs.txt"
    assert len(ledger.read_text().split()) == 2
    run_cli(["simulate", "--config", str(path)], ranks=1)
    assert len(ledger.read_text().split()) == 2  # nothing ran again
    changed = write_config(tmp_path, {**config, "simulate": {**config["simulate"], "seed": 99}})
    proc = run_cli(["simulate", "--config", str(changed)], ranks=1)
    assert "the design changed" in proc.stderr and len(ledger.read_text().split()) == 4


# ---------------------------------------------------------------- a persistent simulator

PERSISTENT = """
import json, os, sys, time
import numpy as np
ledger = sys.argv[1]
with open(ledger, "a") as f:
    # the MPI launcher's variables for its ranks, if the rank's environment leaked them: it is not a rank
    rank_variables = [k for k in os.environ if k.startswith(("PMI_", "HYDI_", "MPI_LOCALRANKID"))]
    f.write(f"start {os.getpid()} {','.join(rank_variables) or 'none'}\\n")
print("loading the code", flush=True)  # before any run: in the log of the run that started it
for line in sys.stdin:
    run = json.loads(line)
    name = run["run"]
    tries = os.path.join(os.path.dirname(ledger), name + ".tries")
    attempt = int(open(tries).read()) + 1 if os.path.exists(tries) else 1
    open(tries + ".tmp", "w").write(str(attempt))
    os.replace(tries + ".tmp", tries)
    print("attempt", attempt, "of", name, "x", run["x"], "seed", run["seed"], flush=True)
    print("to stderr from", name, file=sys.stderr, flush=True)
    if name == "run-000001" and attempt == 1:
        sys.exit(4)  # a crash: started again for the retry
    if name == "run-000002":
        print("sim2dl-failed", name, "no convergence", flush=True)  # a failed run: the process goes on
        continue
    if name == "run-000003":
        time.sleep(600)  # no answer: killed, started again
    np.save(os.path.join(run["out"], "out.npy"), np.full(4, run["x"], np.float32))
    print("sim2dl-done", name, flush=True)
"""


@SLOW
def test_a_persistent_simulator_starts_once_per_rank_and_its_faults_are_retried_like_any_runs(tmp_path):
    """simulate.persistent: the command starts once per rank and is handed each run as a JSON line; a
    crash or a run without an answer (killed at run_timeout_s) starts it again for the next attempt, a run
    it answers as failed is retried in the same process; its output goes to the log of the run it is on,
    and when the farm ends every simulator process has exited."""
    script = tmp_path / "persistent.py"
    script.write_text(PERSISTENT)
    (tmp_path / "ledger").mkdir()
    ledger = tmp_path / "ledger" / "starts.txt"
    config = ensemble_config(
        tmp_path,
        ["ok"],
        command=["python3", str(script), str(ledger)],
        persistent=True,
        runs=12,
        design="random",
        space={"x": {"type": "uniform", "low": 0, "high": 1}},
    )
    config["source"]["fields"] = {"value": {"path": ".", "dtype": "float32", "shape": [4]}}
    config["convert"]["labels"] = []
    proc = run_cli(["simulate", "--config", str(write_config(tmp_path, config))], ranks=2, timeout=120)
    summary = json.loads(proc.stdout.strip().splitlines()[-1])
    assert (summary["runs"], summary["ok"], summary["failed"], summary["timed_out"]) == (12, 10, 1, 1)
    rows = {r["run"]: r for r in runs_table(tmp_path)}
    assert (rows["run-000001"]["status"], rows["run-000001"]["attempts"]) == ("ok", 2)
    refused = rows["run-000002"]
    assert (refused["status"], refused["attempts"], refused["exit_code"]) == ("failed", 2, 1)
    assert "the simulator failed the run: no convergence" in refused["reason"]
    hung = rows["run-000003"]
    assert (hung["status"], hung["attempts"]) == ("timed_out", 2) and "no answer after 3 s" in hung["reason"]
    others = [r for name, r in rows.items() if name not in ("run-000001", "run-000002", "run-000003")]
    assert all((r["status"], r["attempts"]) == ("ok", 1) for r in others)
    # Started once per rank, and again only after the crash and the two kills: not once per run.
    pids = [int(line.split()[1]) for line in ledger.read_text().splitlines()]
    # the ranks run under mpiexec (PMI_RANK, PMI_FD, ...); their simulators do not see it
    assert {line.split()[2] for line in ledger.read_text().splitlines()} == {"none"}
    logs = {p.stem: p.read_text() for p in (tmp_path / "work" / "raw" / "logs").glob("*/run-*.log")}
    assert 2 <= len(pids) <= 5 and len(pids) == sum(log.count("# sim2dl: starting") for log in logs.values())
    for name, log in logs.items():
        assert f"to stderr from {name}" in log and "to stderr from" not in log.replace(f"from {name}", "")
        if "# sim2dl: starting" in log:
            assert "loading the code" in log
    # the runs table says which runs started it (their seconds hold its start-up, which costs leave out)
    starters = {name for name, log in logs.items() if "# sim2dl: starting" in log}
    assert {name for name, r in rows.items() if r["started_simulator"]} == starters
    for row in others:  # each run's own values reached the simulator
        saved = np.load(tmp_path / "work" / "raw" / "00000" / row["run"] / "out.npy")
        assert saved == pytest.approx(np.full(4, row["x"], np.float32))
    for pid in pids:  # every simulator exited: at the end of its input, or killed
        with pytest.raises(ProcessLookupError):
            os.kill(pid, 0)
    # A rerun keeps what completed: only the failed and timed-out runs are handed out again.
    tries_before = {name: (tmp_path / "ledger" / f"{name}.tries").read_text() for name in rows}
    run_cli(["simulate", "--config", str(write_config(tmp_path, config))], ranks=2, timeout=120)
    again = {n for n in rows if (tmp_path / "ledger" / f"{n}.tries").read_text() != tries_before[n]}
    assert again == {"run-000002", "run-000003"}


@SLOW
def test_the_persistent_simulator_docs_example_runs_as_written(tmp_path):
    """docs/ensembles.md's persistent config and its Python driver, unchanged but for the run count and
    the workdir: every run done by one process per rank, its file a sample labelled from the runs table."""
    import re

    from .helpers import doc_blocks

    [text] = [text for _, mark, text in doc_blocks() if mark == "run" and "persistent: true" in text]
    config = yaml.safe_load(text)
    config["simulate"]["runs"] = 6
    config["workdir"] = str(tmp_path / "work")
    [driver] = re.findall(r"```python\n(.*?)```", (REPO / "docs" / "ensembles.md").read_text(), re.S)
    (tmp_path / "my_driver.py").write_text(driver)
    path = write_config(tmp_path, config)
    proc = run_cli(["simulate", "--config", str(path)], ranks=2, timeout=120, cwd=tmp_path)
    summary = json.loads(proc.stdout.strip().splitlines()[-1])
    assert (summary["runs"], summary["ok"]) == (6, 6)
    logs = [p.read_text() for p in (tmp_path / "work" / "raw" / "logs").glob("*/run-*.log")]
    assert 1 <= sum(log.count("# sim2dl: starting") for log in logs) <= 2  # once per rank that ran
    run_cli(["ingest", "--config", str(path)], ranks=2, cwd=tmp_path)
    ingest = json.loads((tmp_path / "work" / "ingest" / "summary.json").read_text())
    assert (ingest["accepted"], ingest["rejected"]) == (6, 0)
    run_cli(["convert", "--config", str(path)], ranks=2, cwd=tmp_path)
    run_cli(["merge", "--config", str(path)], ranks=2, cwd=tmp_path)
    from pipeline.formats.shards.shard_reader import ShardReader

    rate = {row["run"]: row["rate"] for row in runs_table(tmp_path)}
    records = list(ShardReader(tmp_path / "work" / "merged"))
    assert len(records) == 6
    for record in records:  # sample id: the file's path below raw/, GROUP/RUN/state.h5
        run = record["sample_id"].split("/")[-2]
        assert record["rate"] == pytest.approx(rate[run], rel=1e-6)


# ---------------------------------------------------------------- a real generator: Pythia 8


def test_pythia_events_preset_runs_the_whole_workflow(tmp_path):
    """config/presets/pythia-events.yaml at a small size under Snakemake: an ensemble of Pythia 8 runs over
    processes and alpha_s, one sample per event (variable-length particle lists), the process from the
    runs table as the class, and a process classifier trained on 2 Horovod ranks."""
    import pythia8mc  # noqa: F401  (make env installs it: requirements/base.in; this test never skips)

    preset = yaml.safe_load((REPO / "config" / "presets" / "pythia-events.yaml").read_text())
    preset["workdir"] = str(tmp_path / "work")
    sim = preset["simulate"]
    sim["runs"] = 6
    sim["command"] = [str(REPO / a) if a.startswith("examples/") else a for a in sim["command"]]
    sim["command"][sim["command"].index("100")] = "25"
    preset["train"]["epochs"] = 2
    preset["stage"] = {"target": str(tmp_path / "local")}
    # six runs split by file are too few for three splits (the preset's 24 are not): two, as before
    preset["merge"]["splits"] = {"train": 0.8, "validation": 0.2}
    path = tmp_path / "pythia.yaml"
    path.write_text(yaml.safe_dump(preset, sort_keys=False))
    proc = snakemake_configfile(path, tmp_path)
    assert proc.returncode == 0, proc.stderr[-3000:]
    work = tmp_path / "work"
    runs = runs_table(tmp_path)
    assert [r["status"] for r in runs] == ["ok"] * 6 and {r["process"] for r in runs} == {
        "qcd",
        "ttbar",
        "zll",
    }
    ingest = json.loads((work / "ingest" / "summary.json").read_text())
    assert ingest["accepted"] == 150 and ingest["classes"] == {"process": ["qcd", "ttbar", "zll"]}
    meta = json.loads((work / "merged" / "metadata.json").read_text())
    assert meta["feature_spec"]["particles"]["shape"] == [None, 4]
    summary = json.loads((work / "train" / "summary.json").read_text())
    assert summary["task"] == "classification" and summary["weights_identical_across_ranks"]
    assert summary["classes"] == ["qcd", "ttbar", "zll"] and 0 <= summary["accuracy"] <= 1


def test_a_simulator_with_its_own_image_runs_each_run_in_it():
    """simulate.image: each run enters the simulator's image with its run directory bound and as its working
    directory, no host MPI (exact argument vectors: Apptainer and Shifter cannot run here), and the farm
    itself runs outside the step container."""
    from pipeline.runtime.launch import simulator_argv, step_argv

    run = Path("/w/raw/00000/.run-000001.partial")
    sim = ["my-sim", "--out", str(run)]
    apptainer = make_config(Path("/w"), container={"runtime": "apptainer", "host_mpi": {"enabled": True}})
    assert simulator_argv(apptainer["container"], "/images/sim.sif", sim, run) == [
        "apptainer",
        "exec",
        "--pwd",
        str(run),
        "--bind",
        f"{run}:{run}",
        "--env",
        "SIM2DL_IMAGE=/images/sim.sif",
        "/images/sim.sif",
        *sim,
    ]
    shifter = make_config(Path("/w"), container={"runtime": "shifter"})
    assert simulator_argv(shifter["container"], "docker:me/sim:1", sim, run) == [
        "shifter",
        "--image=docker:me/sim:1",
        f"--volume={run}:{run}",
        "--env=SIM2DL_IMAGE=docker:me/sim:1",
        *sim,
    ]
    ensemble = make_config(
        Path("/w"),
        container={"runtime": "apptainer"},
        simulate={
            "command": ["my-sim"],
            "image": "/images/sim.sif",
            "space": {"x": {"type": "uniform", "low": 0, "high": 1}},
        },
    )
    argv = step_argv(ensemble, "mpiexec", 2, ["simulate"], [Path("/w")], Path("/w"))
    assert "apptainer" not in argv and argv[-1] == "simulate"  # the farm on the host; runs in the image


MY_SIM = """#!/usr/bin/env python3
# A stand-in for a user's simulator: the command line docs/ensembles.md gives, a 64^3 density out.
import argparse, os
import h5py, numpy as np
p = argparse.ArgumentParser()
for name in ("--out", "--omega-m", "--sigma8", "--seed"):
    p.add_argument(name, required=True)
a = p.parse_args()
rng = np.random.default_rng(int(a.seed))
with h5py.File(os.path.join(a.out, "density.h5"), "w") as f:
    f["density"] = (float(a.sigma8) * rng.standard_normal((64, 64, 64))).astype("f4")
"""


@SLOW
def test_the_ensemble_docs_example_runs_as_written(tmp_path, monkeypatch):
    """docs/ensembles.md's config, unchanged but for the run count and the workdir, with `my-sim` on PATH:
    every file the simulator writes is a sample (named by its path), labelled from the runs table."""
    import yaml

    from .helpers import doc_block

    mark, text = doc_block("docs/ensembles.md#0")
    assert mark == "run"
    config = yaml.safe_load(text)
    config["simulate"]["runs"] = 6
    config["workdir"] = str(tmp_path / "work")
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    (bin_dir / "my-sim").write_text(f"#!{sys.executable}\n" + MY_SIM.split("\n", 1)[1])
    (bin_dir / "my-sim").chmod(0o755)
    monkeypatch.setenv("PATH", f"{bin_dir}:{os.environ['PATH']}")
    path = write_config(tmp_path, config)
    run_cli(["simulate", "--config", str(path)], ranks=2, timeout=120)
    run_cli(["ingest", "--config", str(path)], ranks=2)
    ingest = json.loads((tmp_path / "work" / "ingest" / "summary.json").read_text())
    assert (ingest["accepted"], ingest["rejected"]) == (6, 0)
    run_cli(["convert", "--config", str(path)], ranks=2)
    run_cli(["merge", "--config", str(path)], ranks=2)
    from pipeline.formats.shards.shard_reader import ShardReader

    sigma8 = {row["run"]: row["sigma8"] for row in runs_table(tmp_path)}
    records = list(ShardReader(tmp_path / "work" / "merged"))
    assert len(records) == 6
    for record in records:  # sample id: the file's path below raw/, GROUP/RUN/density
        run = record["sample_id"].split("/")[-2]
        assert record["sigma8"] == pytest.approx(sigma8[run], rel=1e-6)


def test_a_relative_program_is_made_absolute_through_its_link(tmp_path, monkeypatch):
    """A virtual environment's python is a link to the interpreter: resolving the link would run the
    interpreter without the environment (a user's simulator then misses its packages)."""
    (tmp_path / "venv" / "bin").mkdir(parents=True)
    (tmp_path / "venv" / "bin" / "python").symlink_to(sys.executable)
    (tmp_path / "sim.py").write_text("")
    monkeypatch.chdir(tmp_path)
    command = resolved_command(["venv/bin/python", "sim.py", "--out", "{out}", "-x"])
    assert command == [
        str(tmp_path / "venv" / "bin" / "python"),
        str(tmp_path / "sim.py"),
        "--out",
        "{out}",
        "-x",
    ]

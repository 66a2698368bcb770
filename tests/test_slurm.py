"""The workflow through a real single-node Slurm (scripts/slurm_up.sh) with `--profile profiles/slurm`.

Runs wherever Slurm is up or can be brought up (root with apt, or already installed); on a laptop without
either it skips, and under CI=true it never skips.
"""

import csv
import json
import os
import re
import shutil
import signal
import subprocess
import time
from pathlib import Path

import pytest
import yaml

from .conftest import REPO, env, run_snakemake, small_cube_config, step_summaries
from .helpers import assert_report_holds

STATE = Path("/tmp/sim2dl-slurm")


def slurm_responds() -> bool:
    if shutil.which("sinfo") is None:
        return False
    proc = subprocess.run(["sinfo", "-h", "-o", "%t"], capture_output=True, text=True, timeout=30)
    return proc.returncode == 0 and proc.stdout.strip().startswith(("idle", "mix", "alloc"))


@pytest.fixture(scope="module")
def slurm():
    started = False
    if not slurm_responds():
        can_start = os.geteuid() == 0 and (shutil.which("apt-get") or shutil.which("slurmctld"))
        if not can_start:
            if os.environ.get("CI") == "true":
                pytest.fail("CI=true: Slurm is needed and cannot be brought up (not root, no apt-get)")
            pytest.skip("no Slurm here and it cannot be brought up (needs root and apt)")
        proc = subprocess.run(
            [str(REPO / "scripts" / "slurm_up.sh"), str(STATE)], capture_output=True, text=True, timeout=900
        )
        assert proc.returncode == 0, proc.stdout + proc.stderr
        started = True
    yield
    if started:
        subprocess.run([str(REPO / "scripts" / "slurm_down.sh"), str(STATE)], capture_output=True, timeout=120)


def slurm_profile(tmp_path):
    """The options every run here uses: the repository's Slurm profile, job logs kept in tmp_path."""
    return ["--profile", "profiles/slurm", "--slurm-logdir", str(tmp_path / "slurm_logs")]


def snakemake(tmp_path, *args, timeout=1500):
    proc = run_snakemake([*slurm_profile(tmp_path), *args], timeout)
    return proc, proc.stdout + proc.stderr


def small_config(tmp_path, **sections):
    """The demo, small: 96 cubes of 16^3, two epochs of a small network, search off unless given."""
    defaults = {
        "merge": {"shard_size_mb": 0.1},
        "train": {"epochs": 2, "batch_size": 8, "depth": 2, "width": 4, "dense": 16},
        "search": {"enabled": False},
    }
    config = small_cube_config(tmp_path, **{**defaults, **sections})
    path = tmp_path / f"config-{len(list(tmp_path.glob('config-*')))}.yaml"
    path.write_text(yaml.safe_dump(config))
    return path


def test_demo_workflow_runs_as_slurm_jobs_and_srun_steps(tmp_path, slurm):
    # search off: the search itself is test_search's; here, that every step is an srun step of its job
    config = small_config(tmp_path)
    proc, log = snakemake(tmp_path, "--configfile", str(config))
    assert proc.returncode == 0, log
    figures = ["learning_curves.png", "validation.png", "throughput.png"]
    assert_report_holds(tmp_path, ["--configfile", str(config)], figures)
    job_ids = set(re.findall(r"SLURM jobid (\d+)", log))
    assert len(job_ids) >= 3, log  # data group, stage, train
    summaries = step_summaries(tmp_path / "work" / "logs")
    assert "slurm" not in summaries.pop("throughput")[0]  # a figure: a local rule, run where Snakemake runs
    assert set(summaries) == {"simulate", "ingest", "convert", "merge", "stage", "train"}, summaries
    for step, (summary, *_) in summaries.items():
        # every step ran as an srun step with two tasks inside one of the batch jobs Snakemake submitted
        assert summary["ranks"] == 2, (step, summary)
        assert summary["slurm"]["job_id"] in job_ids and summary["slurm"]["step_id"] not in (None, "batch")
        assert summary["slurm"]["ntasks"] == "2"
    data_jobs = {summaries[s][0]["slurm"]["job_id"] for s in ("simulate", "ingest", "convert", "merge")}
    assert len(data_jobs) == 1  # grouped: one batch job for the four data steps
    trained = json.loads((tmp_path / "work" / "train" / "summary.json").read_text())
    assert trained["weights_identical_across_ranks"]


def epochs_done(workdir: Path) -> int:
    try:
        return len(json.loads((workdir / "train" / "metrics.json").read_text()))
    except (OSError, ValueError):
        return 0


def wait_for(condition, what, timeout=600):
    deadline = time.monotonic() + timeout
    while not condition():
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        time.sleep(0.5)


def test_a_cancelled_job_is_retried_and_an_interrupted_run_resumes_without_redoing_work(tmp_path, slurm):
    config = small_config(tmp_path, train={"epochs": 40, "batch_size": 8, "depth": 2, "width": 4, "dense": 16})
    workdir = tmp_path / "work"
    cmd = ["snakemake", *slurm_profile(tmp_path), "--configfile", str(config)]
    log1 = open(tmp_path / "run1.log", "w")  # noqa: SIM115 - closed below
    run = subprocess.Popen(cmd, stdout=log1, stderr=subprocess.STDOUT, env=env(), cwd=REPO, start_new_session=True)
    try:
        # 1. A failing job (cancelled by Slurm mid-training) is resubmitted and resumes from its checkpoint.
        wait_for(lambda: epochs_done(workdir) >= 2, "two epochs of the first attempt")
        running = subprocess.run(["squeue", "-h", "-t", "R", "-o", "%i"], capture_output=True, text=True).stdout.split()
        assert len(running) == 1, running  # the train job
        subprocess.run(["scancel", running[0]], check=True)
        before = epochs_done(workdir)
        wait_for(lambda: epochs_done(workdir) >= before + 2, "the retried train job to go on")
        # 2. The run itself is interrupted: Ctrl-C, on which Snakemake cancels its Slurm jobs.
        os.killpg(run.pid, signal.SIGINT)
        assert run.wait(timeout=120) != 0
    finally:
        if run.poll() is None:
            os.killpg(run.pid, signal.SIGKILL)
        log1.close()
    log = (tmp_path / "run1.log").read_text()
    assert "Trying to restart job" in log or "retry" in log.lower(), log[-3000:]
    interrupted_at = epochs_done(workdir)
    wait_for(lambda: not subprocess.run(["squeue", "-h"], capture_output=True, text=True).stdout.strip(), "no jobs")
    assert not (workdir / "train" / "summary.json").exists()  # the interruption came before the end

    proc, log = snakemake(tmp_path, "--configfile", str(config))
    assert proc.returncode == 0, log
    assert "rule train:" in log
    assert not re.search(r"rule (simulate|ingest|convert|merge|stage):", log)  # finished work is not redone
    trained = json.loads((workdir / "train" / "summary.json").read_text())
    assert trained["epochs"] == 40 and epochs_done(workdir) == 40
    # every start of training, kept across attempts (each attempt's log replaces the last)
    attempts = (workdir / "train" / "attempts.jsonl").read_text().splitlines()
    resumed = [json.loads(line)["resume_from_epoch"] for line in attempts]
    # three attempts: fresh, resumed after the cancel, resumed after the interruption
    assert sorted(resumed)[0] == 0 and len(resumed) == 3
    assert sorted(resumed)[1] >= 2 and sorted(resumed)[2] >= interrupted_at - 1


def test_a_two_point_sweep_runs_every_point_in_its_own_directory_and_compares_them(tmp_path, slurm):
    base = small_config(tmp_path)
    sweep = tmp_path / "sweep.yaml"
    sweep.write_text(
        yaml.safe_dump(
            {
                "sweep": {
                    "name": "lr",
                    "workdir": str(tmp_path / "sweep"),
                    "grid": {"train.learning_rate": [0.001, 0.004]},
                }
            }
        )
    )
    proc, log = snakemake(tmp_path, "--configfile", str(base), str(sweep))
    assert proc.returncode == 0, log
    with open(tmp_path / "sweep" / "summary.csv") as f:
        rows = list(csv.DictReader(f))
    assert [r["point"] for r in rows] == ["learning_rate=0.001", "learning_rate=0.004"]
    for row in rows:
        trained = json.loads((tmp_path / "sweep" / row["point"] / "train" / "summary.json").read_text())
        assert trained["settings"]["learning_rate"] == float(row["train.learning_rate"])
        assert float(row["val_loss"]) == pytest.approx(trained["val_loss"], rel=1e-4)
    assert (tmp_path / "sweep" / "summary.png").stat().st_size > 10_000
    assert_report_holds(tmp_path, ["--configfile", str(base), str(sweep)], ["summary.png", "throughput.png"])
    # two configurations, two data groups, two trainings: all through Slurm
    assert len(set(re.findall(r"SLURM jobid (\d+)", log))) >= 6

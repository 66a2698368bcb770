"""MPI start-up that survives load (pipeline/runtime/startup.py): `sim2dl launch` starts a launch again
that failed before every rank got through MPI_Init, never one that failed after, and names the node and
the reason. The launches are real (the venv's mpiexec, real steps); the start-up failure is injected by
a launcher wrapper that prints what Slurm's pmi2 plugin printed on the virtual cluster under load and
exits, as srun then did. The same failure for real: tests/test_cluster.py and scripts/stress_cluster.sh.
"""

import json
import os
import subprocess
from pathlib import Path
from typing import Any

from pipeline.runtime.startup import STARTED_PREFIX, StartupWatch, same_file

from .conftest import MPIEXEC, cli_command, env, make_config, write_config

# what slurmstepd printed when a PMI-1 request arrived in two pieces (issue #48)
PMI2_SPLIT = [
    "slurmstepd-node2: error: mpi/pmi2: value not properly terminated in client request",
    "slurmstepd-node2: error: mpi/pmi2: request not begin with 'cmd='",
    "slurmstepd-node2: error: mpi/pmi2: full request is: 00305",
]


def test_the_first_start_up_error_names_its_node_and_the_started_token_ends_the_watch():
    watch = StartupWatch("t0k3n")
    watch.feed("srun: job 7 queued\n" + PMI2_SPLIT[0][:30])  # a line may arrive in pieces
    watch.feed(PMI2_SPLIT[0][30:] + "\n" + "\n".join(PMI2_SPLIT[1:]) + "\n")
    watch.feed("srun: error: node3: task 2: Exited with exit code 15\n")
    assert not watch.started
    assert watch.diagnosis(1) == (
        "MPI start-up failed on node2 (mpi/pmi2: value not properly terminated in client request)"
    )
    quiet = StartupWatch("t0k3n")
    quiet.feed("Abort(1091215) on node 1: Fatal error in internal_Init_thread: Other MPI error\n")
    assert quiet.diagnosis(137) == (
        "MPI start-up failed (the launcher exited with code 137 before every rank had started)"
    )
    assert "no rank reached the start-up barrier" in quiet.diagnosis(None)
    # the token of this launch only; progress bars (\r) before it on the same line do not hide it
    other = StartupWatch("t0k3n")
    other.feed(f"{STARTED_PREFIX}0ther (2 ranks)\n")
    assert not other.started
    other.feed(f"ingest 10%\r{STARTED_PREFIX}t0k3n (2 ranks)\n")
    assert other.started


def flaky_launcher(tmp_path: Path, failures: int, hang: bool = False) -> tuple[Path, Path]:
    """A launcher whose first `failures` calls fail in start-up as srun did under load (or hang in it),
    then the real mpiexec. Returns (launcher, file counting its calls)."""
    calls = tmp_path / "calls"
    script = tmp_path / "flaky-mpiexec"
    lines = " ".join(f"'{line}'" for line in PMI2_SPLIT)
    fail = "exec sleep 600" if hang else f"printf '%s\\n' {lines} >&2; exit 1"
    script.write_text(
        "#!/bin/sh\n"
        f'n=$(( $(cat "{calls}" 2>/dev/null || echo 0) + 1 )); echo $n > "{calls}"\n'
        f"if [ $n -le {failures} ]; then {fail}; fi\n"
        f'exec "{MPIEXEC}" "$@"\n'
    )
    script.chmod(0o755)
    return script, calls


def launch(
    tmp_path: Path, launcher: Path, step: str, timeout: float = 300, **sections
) -> subprocess.CompletedProcess:
    path = write_config(tmp_path, make_config(tmp_path, **sections))
    cmd = cli_command(
        ["launch", "--mpi", str(launcher), "--tasks", "2", "--config", str(path), step], ranks=None
    )
    return subprocess.run(cmd, capture_output=True, text=True, env=env(), cwd=tmp_path, timeout=timeout)


def test_a_launch_that_fails_in_mpi_start_up_is_started_again_and_the_step_runs_once(tmp_path):
    launcher, calls = flaky_launcher(tmp_path, failures=1)
    proc = launch(tmp_path, launcher, "simulate")
    assert proc.returncode == 0, proc.stderr
    assert calls.read_text().strip() == "2"
    assert (
        "sim2dl launch: MPI start-up failed on node2 (mpi/pmi2: value not properly terminated in client "
        "request); starting again in 2 s (attempt 2 of 3)"
    ) in proc.stderr
    assert proc.stderr.count(STARTED_PREFIX) == 1  # the second launch's two ranks met once
    summary = json.loads(proc.stdout.strip().splitlines()[-1])  # the step's own summary, on stdout as before
    assert summary["step"] == "simulate" and summary["ranks"] == 2
    assert (tmp_path / "work" / "raw" / "simulate.json").exists()


def test_start_up_retries_are_bounded_and_a_step_that_fails_after_start_up_is_not_retried(tmp_path):
    launcher, calls = flaky_launcher(tmp_path, failures=5)
    proc = launch(tmp_path, launcher, "simulate", launch={"startup_retries": 1})
    assert proc.returncode == 1 and calls.read_text().strip() == "2"
    assert "gave up after 2 attempts (launch.startup_retries)" in proc.stderr
    # a step error after start-up (ingest with nothing simulated) is the step's: one launch, its own code
    calls.unlink()
    launcher, calls = flaky_launcher(tmp_path, failures=0)
    proc = launch(tmp_path, launcher, "ingest")
    assert proc.returncode != 0 and calls.read_text().strip() == "1", proc.stderr
    assert "MPI start-up failed" not in proc.stderr and "sim2dl ingest: error" in proc.stderr


def test_a_start_up_that_hangs_is_killed_after_its_time_out_and_tried_again(tmp_path):
    launcher, calls = flaky_launcher(tmp_path, failures=1, hang=True)
    proc = launch(tmp_path, launcher, "simulate", launch={"startup_timeout_s": 3})
    assert proc.returncode == 0, proc.stderr
    assert calls.read_text().strip() == "2"
    assert "MPI start-up failed (no rank reached the start-up barrier within the time-out)" in proc.stderr


RANK_FAILS = """
import sys

from mpi4py import MPI

from pipeline import cli


def load_failing_on_rank_1(*args, **kwargs):
    if MPI.COMM_WORLD.Get_rank() == 1:
        def deeper(n):
            return deeper(n - 1) if n else ()[0]  # a bug: IndexError, 20 frames down
        deeper(20)
    MPI.COMM_WORLD.barrier()  # rank 0 waits in a collective, as a step's ranks do when another fails


cli.checked_load = load_failing_on_rank_1
sys.exit(cli.main(["ingest", "--config", "unused.yaml"]))
"""


def python_on_two_ranks(script: Path, **output: Any) -> subprocess.CompletedProcess:
    """`python SCRIPT` on 2 ranks of a real mpiexec, in the script's directory, with the tests'
    environment."""
    return subprocess.run(
        [MPIEXEC, "-n", "2", str(Path(MPIEXEC).parent / "python"), str(script)],
        env=env(),
        timeout=120,
        cwd=script.parent,
        **output,
    )


def test_a_bug_on_one_rank_reaches_the_step_log_whole_before_the_job_is_aborted(tmp_path):
    """A rank that raises something other than sim2dl's own errors (a bug) ends the whole job, and its
    traceback reaches the step's log whole, as Snakemake collects it (stdout and stderr to one file),
    naming the rank, before MPI_Abort tears the job down (seen: a log ending at "Traceback (most recent
    call last):")."""
    script, log = tmp_path / "fails.py", tmp_path / "step.log"
    script.write_text(RANK_FAILS)
    with open(log, "wb") as out:
        proc = python_on_two_ranks(script, stdout=out, stderr=subprocess.STDOUT)
    text = log.read_text()
    assert proc.returncode != 0
    assert "sim2dl ingest: rank 1 of 2 failed:" in text, text
    # every frame, the repeated ones as Python folds them, and the exception's line last
    assert "in deeper" in text and "repeated 18 more times" in text, text
    assert "IndexError: tuple index out of range" in text, text


INTERLEAVES = """
import json
import sys

from mpi4py import MPI

from pipeline.runtime.startup import announce_started, join_streams_if_asked

join_streams_if_asked()  # what cli.main does first in every rank
announce_started(MPI.COMM_WORLD)
if MPI.COMM_WORLD.Get_rank() == 0:
    for i in range(200):  # a step's log lines and progress (stderr) between its prints (stdout)
        print(f"line {i}", file=sys.stderr if i % 2 else sys.stdout)
    print(json.dumps({"step": "interleaves"}))
"""


def test_a_step_log_keeps_the_order_of_a_ranks_output_and_errors_and_ends_with_its_summary(tmp_path):
    """A rule sends `sim2dl launch`'s output and errors to one file; the launcher forwards a rank's
    stdout and stderr separately and launch relays stderr, so lines could swap (seen: a stage log ending
    with the progress bar's last line after the JSON summary). Launched for real through `sim2dl launch`
    (its launcher a wrapper running a rank program that interleaves the two streams), the file keeps the
    order written."""
    script = tmp_path / "interleaves.py"
    script.write_text(INTERLEAVES)
    launcher = tmp_path / "mpiexec-interleaves"
    launcher.write_text(f'#!/bin/sh\nexec "{MPIEXEC}" -n 2 "{Path(MPIEXEC).parent / "python"}" "{script}"\n')
    launcher.chmod(0o755)
    path = write_config(tmp_path, make_config(tmp_path))
    cmd = cli_command(
        ["launch", "--mpi", str(launcher), "--tasks", "2", "--config", str(path), "simulate"], ranks=None
    )
    log = tmp_path / "step.log"
    with open(log, "wb") as out:
        proc = subprocess.run(cmd, stdout=out, stderr=subprocess.STDOUT, env=env(), cwd=tmp_path, timeout=120)
    lines = log.read_text().splitlines()
    assert proc.returncode == 0, lines
    written = [line for line in lines if not line.startswith(("sim2dl launch: ", STARTED_PREFIX))]
    assert written == [f"line {i}" for i in range(200)] + ['{"step": "interleaves"}']


def test_one_file_is_told_by_the_descriptors_not_their_numbers():
    first, second = os.pipe(), os.pipe()
    copy = os.dup(first[1])
    try:
        assert same_file(first[1], copy)  # `> log 2>&1`: two descriptors, one file
        assert not same_file(first[1], second[1])
        os.close(second[0])
        os.close(second[1])
        assert not same_file(first[1], second[1])  # a closed stream is not the same file
    finally:
        for fd in (*first, copy):
            os.close(fd)


WAITS = """
import json
import time

from mpi4py import MPI

from pipeline.runtime.mpi import all_ok

comm = MPI.COMM_WORLD
if comm.Get_rank() == 0:
    time.sleep(2.0)  # rank 0's serial work: an adaptive design's fit, a summary
began_wall, began_cpu = time.perf_counter(), time.process_time()
all_ok(comm, None)
if comm.Get_rank() == 1:  # one rank prints: two ranks' lines can reach mpiexec's stdout interleaved
    print(json.dumps({"wall": time.perf_counter() - began_wall, "cpu": time.process_time() - began_cpu}))
"""


def test_a_rank_waiting_for_rank_0_at_the_error_check_leaves_the_core_to_it(tmp_path):
    """MPI's blocking collectives spin: a rank that waited there for rank 0's fit took a core from it (the
    adaptive preset's fits ran 11 x slower on 2 cores). all_ok waits at a barrier polled with a sleep: the
    waiting rank's CPU time is a small share of its wait."""
    script = tmp_path / "waits.py"
    script.write_text(WAITS)
    proc = python_on_two_ranks(script, capture_output=True, text=True)
    assert proc.returncode == 0, proc.stderr
    waited = json.loads(proc.stdout.strip().splitlines()[-1])
    assert waited["wall"] > 1.5, waited
    assert waited["cpu"] < 0.25 * waited["wall"], waited

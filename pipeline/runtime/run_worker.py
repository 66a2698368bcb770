"""The process that executes an ensemble's runs for its rank: one small process per rank (no numpy, no
MPI), started once under `setpriv --pdeathsig TERM`, so that when the rank dies (kill -9, scancel) the
worker kills the running simulator's whole process group and exits: no orphaned run keeps writing.

The rank hands it a chunk of runs at a time (JSON lines over pipes: a list of runs in, a list of outcomes
out) and only dispatches; the worker does each run's bookkeeping and execution. A run: unless its
directory exists and its log ends with its outcome (it completed before), up to 1 + retries attempts, each
in a fresh temporary directory (`.RUN.partial`, also the working directory) with the command started in a
new session (a time-out kills its whole process group) and its stdout and stderr in the run's log (every
attempt of one execution in one log, started afresh); an attempt succeeds when the command exits 0 having
written something. Then the outcome (attempts, seconds) is appended to the log and the directory renamed
to RUN: the rename is what makes a run complete, so an interrupted run leaves nothing that looks complete.
Per run: a directory, a log and the command's own files; no file of sim2dl's own in the run's directory.

A small process starts a command in about 1.2 ms where the rank (large, many open files) takes 2 ms, and
a pidfd wakes at the command's exit where Popen.wait with a time-out polls (bench/ensemble.py). Memory:
one small process per rank and a chunk of runs. Time: the runs' own, plus a process start per attempt.
"""

from __future__ import annotations

import contextlib
import json
import os
import select
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import IO, Any

ATTEMPT = "# sim2dl: "  # the log's line before each attempt's output
OUTCOME = "# sim2dl outcome: "  # the log's last line once the run succeeded: {attempts, seconds, exit_code}
OK, FAILED, TIMED_OUT = range(3)


def wait(proc: subprocess.Popen[bytes], timeout_s: float) -> int | None:
    """The exit code, or None after timeout_s (its process group then killed)."""
    try:
        fd = os.pidfd_open(proc.pid)
    except (AttributeError, OSError):
        try:
            return proc.wait(timeout=timeout_s)
        except subprocess.TimeoutExpired:
            pass
    else:
        try:
            ready = select.select([fd], [], [], timeout_s)[0]
        finally:
            os.close(fd)
        if ready:
            return proc.wait()
    with contextlib.suppress(ProcessLookupError):
        os.killpg(proc.pid, signal.SIGKILL)
    proc.wait()
    return None


def completed_outcome(log: Path) -> dict[str, Any] | None:
    """The outcome a completed run's log ends with, or None (no log, or the run never completed)."""
    try:
        with open(log, "rb") as f:
            f.seek(max(0, f.seek(0, os.SEEK_END) - 4096))
            tail = f.read().decode(errors="replace")
    except FileNotFoundError:
        return None
    at = tail.rfind(OUTCOME)
    if at < 0:
        return None
    line = tail[at + len(OUTCOME) :].split("\n", 1)[0]
    try:
        return json.loads(line)
    except json.JSONDecodeError:
        return None


class Worker:
    def __init__(self) -> None:
        self.running: subprocess.Popen[bytes] | None = None
        self.log_dirs: set[Path] = set()  # made already
        self.rank = os.getppid()
        # The rank's death (SIGTERM, by the parent-death signal) while a run is being started: that run
        # is killed once it is known. Without this, a run forked in that instant outlived the kill and
        # ran again on the rerun: one more than the one in flight.
        self.starting = self.dying = False

    def start(self, argv: list[str], cwd: Path, log: IO[bytes]) -> subprocess.Popen[bytes] | None:
        log.write(f"{ATTEMPT}{json.dumps(argv)}\n".encode())
        log.flush()
        try:
            return subprocess.Popen(
                argv,
                cwd=cwd,
                stdin=subprocess.DEVNULL,
                stdout=log,
                stderr=subprocess.STDOUT,
                start_new_session=True,
            )
        except OSError as e:
            log.write(f"sim2dl: cannot start {argv[0]}: {e.strerror}\n".encode())
            return None

    def attempt(self, run: dict[str, Any], partial: Path, log: IO[bytes]) -> tuple[int, int, str]:
        """(status, exit code, reason) of one execution."""
        if os.getppid() != self.rank:  # the rank is gone: start nothing more
            os._exit(1)
        self.starting = True
        proc = self.start(run["argv"], partial, log)
        self.running, self.starting = proc, False
        if self.dying:
            self.kill_running()
            os._exit(1)
        if proc is None:
            return FAILED, 127, f"cannot start {run['argv'][0]}"
        code = wait(proc, run["timeout_s"])
        self.running = None
        if code is None:
            return TIMED_OUT, -9, f"still running after {run['timeout_s']:g} s: killed with its process group"
        if code != 0:
            return FAILED, code, f"exit code {code}" if code > 0 else f"killed by signal {-code}"
        if not run.get("may_be_empty") and not any(True for _ in partial.iterdir()):
            return FAILED, 0, "exited 0 but wrote no files"
        return OK, 0, ""

    def execute(self, run: dict[str, Any]) -> dict[str, Any]:
        """One run (unless it completed before) with its retries: its outcome."""
        final, partial, log_path = Path(run["final"]), Path(run["partial"]), Path(run["log"])
        if final.is_dir():
            done = completed_outcome(log_path)
            if done is not None:
                return {**done, "status": OK, "reason": ""}
        if log_path.parent not in self.log_dirs:
            log_path.parent.mkdir(parents=True, exist_ok=True)
            self.log_dirs.add(log_path.parent)
        start, started = time.perf_counter(), time.monotonic()
        status, code, reason = FAILED, -1, "no attempt"
        with open(log_path, "wb") as log:  # every attempt of this execution in one log
            for tries in range(1, run["retries"] + 2):
                if tries > 1 or partial.exists():  # an earlier attempt's (or a killed run's) leftovers
                    shutil.rmtree(partial, ignore_errors=True)
                partial.mkdir(parents=True)
                status, code, reason = self.attempt(run, partial, log)
                if status == OK:
                    outcome = {"attempts": tries, "seconds": time.perf_counter() - start, "exit_code": 0}
                    # The outcome goes into the log (no file of its own: one file less per run, which is most
                    # of the farm's cost with short runs); the rename below is what makes the run complete.
                    log.write(f"{OUTCOME}{json.dumps(outcome)}\n".encode())
                    log.flush()
                    if final.exists():  # a directory sim2dl never completed (no outcome in its log): replaced
                        shutil.rmtree(final)
                    os.rename(partial, final)
                    return {**outcome, "status": OK, "reason": "", "started": started}
        shutil.rmtree(partial, ignore_errors=True)
        seconds = time.perf_counter() - start
        failed = {
            "attempts": run["retries"] + 1,
            "seconds": seconds,
            "exit_code": code,
            "status": status,
            "started": started,
        }
        return {**failed, "reason": f"{reason} (log: {log_path})"}

    def kill_running(self) -> None:
        if self.running is not None:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(self.running.pid, signal.SIGKILL)

    def serve(self, requests: IO[str], replies: IO[str]) -> None:
        """Chunks of runs until the rank closes the pipe; dies with the rank, killing the running command."""

        def rank_died(signum: int, frame: Any) -> None:
            if self.starting:  # attempt kills the run it is starting, then exits
                self.dying = True
                return
            self.kill_running()
            os._exit(1)

        signal.signal(signal.SIGTERM, rank_died)
        for line in requests:
            replies.write(json.dumps([self.execute(run) for run in json.loads(line)]) + "\n")
            replies.flush()


class RunWorker:
    """The rank's side: the worker process, and chunks of runs executed by it."""

    def __init__(self) -> None:
        from pipeline.runtime.processes import with_parent_death_signal

        argv = with_parent_death_signal([sys.executable, "-m", "pipeline.runtime.run_worker"])
        env = {**os.environ, "PYTHONPATH": str(Path(__file__).resolve().parents[2])}  # the repository
        self.proc = subprocess.Popen(argv, stdin=subprocess.PIPE, stdout=subprocess.PIPE, env=env)

    def execute(self, runs: list[dict[str, Any]]) -> list[dict[str, Any]]:
        """Each run: {argv, final, partial, log, retries, timeout_s}; the outcomes in the same order."""
        assert self.proc.stdin is not None and self.proc.stdout is not None
        self.proc.stdin.write((json.dumps(runs) + "\n").encode())
        self.proc.stdin.flush()
        line = self.proc.stdout.readline()
        if not line:
            raise RuntimeError(f"the run worker ended (exit code {self.proc.wait()})")
        return json.loads(line)

    def close(self) -> None:
        if self.proc.stdin is not None:
            self.proc.stdin.close()
        self.proc.wait()


if __name__ == "__main__":
    Worker().serve(sys.stdin, sys.stdout)

"""The process that executes an ensemble's runs for its rank: one small process per rank (no numpy, no
MPI), started once under `setpriv --pdeathsig TERM`, so that when the rank dies (kill -9, scancel) the
worker kills the running simulator's whole process group and exits: no orphaned run keeps writing.

The rank hands it a chunk of runs at a time (JSON lines over pipes: a list of runs in, a list of outcomes
out) and only dispatches; the worker does each run's bookkeeping and execution. A run: unless its
directory exists and its log ends with its outcome (it completed before), up to 1 + retries attempts, each
in a fresh temporary directory (`.RUN.partial`, also the working directory) with the command started in a
new session (a time-out kills its whole process group) and its stdout and stderr in the run's log (every
attempt of one execution in one log, started afresh); an attempt succeeds when the command exits 0 having
written something. Then the outcome (attempts, seconds, whether it started a persistent simulator, whose
start-up its seconds then hold) is appended to the log and the directory renamed
to RUN: the rename is what makes a run complete, so an interrupted run leaves nothing that looks complete.
Per run: a directory, a log and the command's own files; no file of sim2dl's own in the run's directory.

A persistent simulator (simulate.persistent: a code that compiles or loads for long before its first run)
is started once and kept: each run is one JSON line on its stdin ({"run", "out", "seed", and each
parameter}: the names of simulate.command's placeholders), and the simulator answers `sim2dl-done RUN` on
a line of its stdout once the run's files are in `out`, or `sim2dl-failed RUN REASON`. Everything else it
prints (stdout and stderr) goes to the log of the run it is on. An answer that does not come within the
run's time-out kills the simulator's process group; an exit ends the attempt as failed. Either way the
next attempt or run starts it again, and the attempts are retried like any run's. Runs with different
commands (the levels of simulate.fidelities) each have their own persistent simulator, kept side by side.

A command's environment is the rank's less the MPI launcher's per-rank variables (PMI_*, PMIX_*, Open
MPI's world: processes.outside_the_job): a simulator is not a rank of the job, and one that believed it
was (py-pde exits without mpi4py when PMI_SIZE > 1) would fail every run.

A small process starts a command in about 1.2 ms where the rank (large, many open files) takes 2 ms, and
a pidfd wakes at the command's exit where Popen.wait with a time-out polls (bench/ensemble.py). Memory:
one small process per rank and a chunk of runs. Time: the runs' own, plus a process start per attempt (a
persistent simulator: per rank, and again after each crash or time-out).
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
DONE, FAILED_RUN = b"sim2dl-done ", b"sim2dl-failed "  # a persistent simulator's answers, then the run
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


class Persistent:
    """A persistent simulator's process: started once, fed a run per line, its output read line by line
    (the answers, and the rest for the run's log), every read bounded by the run's time-out."""

    def __init__(self, argv: list[str], cwd: Path) -> None:
        self.proc = subprocess.Popen(
            argv,
            cwd=cwd,
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )
        self.buffer = b""

    def line(self, deadline: float) -> bytes | None:
        """The next line of output (b"" at its end), or None when the deadline passed first."""
        assert self.proc.stdout is not None
        fd = self.proc.stdout.fileno()
        while b"\n" not in self.buffer:
            remaining = deadline - time.monotonic()
            if remaining <= 0 or not select.select([fd], [], [], remaining)[0]:
                return None
            chunk = os.read(fd, 1 << 16)
            if not chunk:
                rest, self.buffer = self.buffer, b""
                return rest
            self.buffer += chunk
        line, _, self.buffer = self.buffer.partition(b"\n")
        return line + b"\n"

    def run(self, request: dict[str, Any], log: IO[bytes], timeout_s: float) -> tuple[int, int, str]:
        """(status, exit code, reason) of one run handed to the simulator."""
        assert self.proc.stdin is not None
        name = str(request["run"]).encode()
        try:
            self.proc.stdin.write((json.dumps(request) + "\n").encode())
            self.proc.stdin.flush()
        except BrokenPipeError:
            pass  # it has ended: its output says how, and its exit code
        deadline = time.monotonic() + timeout_s
        while True:
            line = self.line(deadline)
            if line is None:
                self.kill()
                return TIMED_OUT, -9, f"no answer after {timeout_s:g} s: killed with its process group"
            if not line:
                code = self.proc.wait()
                return FAILED, code, f"the persistent simulator ended (exit code {code}) before answering"
            if line.startswith(DONE) and line[len(DONE) :].strip() == name:
                return OK, 0, ""
            if line.startswith(FAILED_RUN) and line[len(FAILED_RUN) :].split(maxsplit=1)[:1] == [name]:
                said = line[len(FAILED_RUN) + len(name) :].decode(errors="replace").strip()
                return FAILED, 1, f"the simulator failed the run: {said or 'no reason given'}"
            log.write(line)
            log.flush()

    def alive(self) -> bool:
        return self.proc.poll() is None

    def kill(self) -> None:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(self.proc.pid, signal.SIGKILL)
        self.proc.wait()

    def close(self, grace_s: float = 10) -> None:
        """End of input: the simulator exits on its own within grace_s, or is killed."""
        with contextlib.suppress(OSError):  # a pipe broken by its exit
            assert self.proc.stdin is not None
            self.proc.stdin.close()
        wait(self.proc, grace_s)  # past grace_s, its process group is killed


class Worker:
    def __init__(self) -> None:
        self.running: subprocess.Popen[bytes] | None = None
        # simulate.persistent's processes, kept between runs: one per command (a level of simulate.fidelities)
        self.persistent: dict[tuple[str, ...], Persistent] = {}
        self.log_dirs: set[Path] = set()  # made already
        self.rank = os.getppid()
        # The rank's death (SIGTERM, by the parent-death signal) while a run is being started: that run
        # is killed once it is known. Without this, a run forked in that instant outlived the kill and
        # ran again on the rerun: one more than the one in flight.
        self.starting = self.dying = False
        # this execution started a persistent simulator: its seconds hold the simulator's start-up too
        self.started_simulator = False

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
        if "request" in run:
            return self.hand(run, partial, log)
        self.starting = True
        proc = self.running = self.start(run["argv"], partial, log)
        self.started()
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

    def hand(self, run: dict[str, Any], partial: Path, log: IO[bytes]) -> tuple[int, int, str]:
        """One run handed to the persistent simulator (started first when it is not running)."""
        log.write(f"{ATTEMPT}{json.dumps(run['request'])}\n".encode())
        log.flush()
        command = tuple(run["argv"])
        simulator = self.persistent.get(command)
        if simulator is None or not simulator.alive():  # first, or after a crash or a kill
            log.write(f"{ATTEMPT}starting {json.dumps(run['argv'])}\n".encode())
            log.flush()
            self.starting = self.started_simulator = True
            try:
                simulator = self.persistent[command] = Persistent(run["argv"], Path(run["cwd"]))
            except OSError as e:
                self.persistent.pop(command, None)
                return FAILED, 127, f"cannot start {run['argv'][0]}: {e.strerror}"
            finally:
                self.started()
        status, code, reason = simulator.run(run["request"], log, run["timeout_s"])
        if status == OK and not run.get("may_be_empty") and not any(True for _ in partial.iterdir()):
            return FAILED, 0, "answered done but wrote no files"
        return status, code, reason

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
        self.started_simulator = False
        status, code, reason = FAILED, -1, "no attempt"
        with open(log_path, "wb") as log:  # every attempt of this execution in one log
            for tries in range(1, run["retries"] + 2):
                if tries > 1 or partial.exists():  # an earlier attempt's (or a killed run's) leftovers
                    shutil.rmtree(partial, ignore_errors=True)
                partial.mkdir(parents=True)
                status, code, reason = self.attempt(run, partial, log)
                if status == OK:
                    outcome = {
                        "attempts": tries,
                        "seconds": time.perf_counter() - start,
                        "exit_code": 0,
                        "started_simulator": self.started_simulator,
                    }
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
            "started_simulator": self.started_simulator,
            "status": status,
            "started": started,
        }
        return {**failed, "reason": f"{reason} (log: {log_path})"}

    def started(self) -> None:
        """A start is over: a death signal that came during it kills what started, now that it is known."""
        self.starting = False
        if self.dying:
            self.kill_running()
            os._exit(1)

    def kill_running(self) -> None:
        for proc in (self.running, *(simulator.proc for simulator in self.persistent.values())):
            if proc is not None:
                with contextlib.suppress(ProcessLookupError):
                    os.killpg(proc.pid, signal.SIGKILL)

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
        for simulator in self.persistent.values():  # the rank is done: each gets the end of its input
            simulator.close()


class RunWorker:
    """The rank's side: the worker process, and chunks of runs executed by it."""

    def __init__(self) -> None:
        from pipeline.runtime.processes import outside_the_job, with_parent_death_signal

        argv = with_parent_death_signal([sys.executable, "-m", "pipeline.runtime.run_worker"])
        # the simulator's runs are not ranks of this job (processes.RANK_VARIABLE_PREFIXES)
        env = {**outside_the_job(os.environ), "PYTHONPATH": str(Path(__file__).resolve().parents[2])}
        self.proc = subprocess.Popen(argv, stdin=subprocess.PIPE, stdout=subprocess.PIPE, env=env)

    def execute(self, runs: list[dict[str, Any]]) -> list[dict[str, Any]]:
        """Each run: {argv, final, partial, log, retries, timeout_s}, and with a persistent simulator
        {request, cwd} (argv: the simulator's, started once); the outcomes in the same order."""
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

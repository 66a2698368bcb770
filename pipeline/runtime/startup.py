"""MPI start-up that survives a loaded machine: `sim2dl launch` knows whether every rank of a step got
through MPI_Init, retries a launch that failed before that (a bounded number of times), and names why.

Why a retry is safe and needed: Slurm 22.05's `mpi/pmi2` plugin serves MPICH's PMI-1 requests by reading
each one with a single read() of at most 1024 bytes (src/plugins/mpi/pmi2/pmi1.c, handle_pmi1_cmd: "TODO:
read until newline"). A stream socket keeps no message boundaries, so a request that arrives in two
pieces (a long `put` of a UCX address, a writer descheduled between its writes under load) is parsed as
two broken requests: "value not properly terminated in client request", then "request not begin with
'cmd='" for the rest of the line, and MPI_Init aborts on every rank. Nothing of the step has run then,
so starting the same step again is exactly what a user would do by hand.

How a start-up is recognised: the launcher's children get a random token (TOKEN_ENV); right after
MPI_Init each step's ranks meet in one barrier and rank 0 prints STARTED_PREFIX + token on stderr
(`announce_started`). The launcher's stderr passes through `sim2dl launch` on its way to the step's log;
a launch that ends non-zero before the token appeared failed in start-up (retried), one that ends after it
failed in the step (not retried here: the step resumes under Snakemake's own retry). A start-up that
hangs (a rank stuck in MPI_Init) is killed after a time-out and counts as failed.

One stream when the output goes to one file (a rule's `> step.log 2>&1`): the launcher forwards each
rank's stdout and stderr separately, and the stderr passes through `sim2dl launch` on top, so a line
written to stderr before the step's JSON summary could land in the file after it (seen: a stage log
ending with the progress bar's last line). Then `sim2dl launch` asks the ranks (ONE_STREAM_ENV) to write
their errors on their output stream, and relays that one stream itself: the file keeps the ranks' order.

Memory: the last line of the launcher's stderr; time: what the step takes, plus a backoff per retry.
"""

from __future__ import annotations

import os
import re
import select
import signal
import subprocess
import sys
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

TOKEN_ENV = "SIM2DL_LAUNCH_TOKEN"
ONE_STREAM_ENV = "SIM2DL_ONE_STREAM"
STARTED_PREFIX = "sim2dl: MPI started: "

# Lines of a failed start-up as Slurm, MPICH (hydra and ch4) and UCX print them; the first one seen names
# the node (where the line says it) and the reason in the step's log.
STARTUP_ERRORS: tuple[re.Pattern[str], ...] = (
    re.compile(r"slurmstepd(?:-(?P<node>[\w.-]+))?: error: (?P<what>mpi/pmi\w*: .+)"),
    re.compile(r"srun: error: (?P<node>[\w.-]+): tasks? [\d,-]+: (?P<what>Exited with exit code \d+|Killed)"),
    re.compile(r"(?P<what>(?:MPIR_Init_thread|MPI_Init_thread|MPI_Init)\S*.*failed.*)"),
    re.compile(r"(?P<what>UCX\s+ERROR .*no active messages transport.*)"),
    re.compile(r"\[proxy:[^@\]]*@(?P<node>[\w.-]+)\] (?P<what>.*(?:PMI|pmi).*)"),
)


def announce_started(comm: Any, environ: Mapping[str, str] | None = None) -> None:
    """Called by every rank right after MPI_Init: once all ranks meet (a barrier: every rank got through
    MPI_Init and the fabric connects them), rank 0 tells the launching `sim2dl launch`."""
    token = (os.environ if environ is None else environ).get(TOKEN_ENV)
    if not token:
        return
    comm.barrier()
    if comm.Get_rank() == 0:
        print(f"{STARTED_PREFIX}{token} ({comm.Get_size()} ranks)", file=sys.stderr, flush=True)


def rank_environment(token: str, one_stream: bool) -> dict[str, str]:
    """What a launch tells its ranks: the start-up token, and whether to write on one stream."""
    return {TOKEN_ENV: token, **({ONE_STREAM_ENV: "1"} if one_stream else {})}


def same_file(fd_a: int, fd_b: int) -> bool:
    """Whether two descriptors write to one file, pipe or terminal (not when either is closed)."""
    try:
        a, b = os.fstat(fd_a), os.fstat(fd_b)
    except OSError:
        return False
    return (a.st_dev, a.st_ino) == (b.st_dev, b.st_ino)


def join_streams_if_asked(environ: Mapping[str, str] | None = None) -> bool:
    """In a rank launched with ONE_STREAM_ENV: stderr becomes the output stream (line-buffered), so what
    the rank writes reaches the launcher, and the file, in the order written."""
    if (os.environ if environ is None else environ).get(ONE_STREAM_ENV) != "1":
        return False
    sys.stdout.flush()
    sys.stderr.flush()
    os.dup2(sys.stdout.fileno(), sys.stderr.fileno())
    sys.stdout.reconfigure(line_buffering=True)  # type: ignore[union-attr]
    return True


@dataclass
class StartupWatch:
    """Reads the launcher's stderr as it comes: whether the token appeared, and the first start-up error."""

    token: str
    started: bool = False
    node: str | None = None
    error: str | None = None
    _partial: str = field(default="", repr=False)

    def feed(self, chunk: str) -> None:
        lines = (self._partial + chunk).split("\n")
        self._partial = lines.pop()[-4096:]  # a line still being written (bounded: progress bars use \r)
        for line in lines:
            self._line(line.rsplit("\r", 1)[-1])

    def close(self) -> None:
        if self._partial:
            self._line(self._partial)
            self._partial = ""

    def _line(self, line: str) -> None:
        if f"{STARTED_PREFIX}{self.token}" in line:
            self.started = True
            return
        if self.started or self.error is not None:
            return
        for pattern in STARTUP_ERRORS:
            match = pattern.search(line)
            if match:
                self.node = match.groupdict().get("node")
                self.error = match.group("what").strip()
                return

    def diagnosis(self, returncode: int | None) -> str:
        where = f" on {self.node}" if self.node else ""
        why = self.error or (
            "no rank reached the start-up barrier within the time-out"
            if returncode is None
            else f"the launcher exited with code {returncode} before every rank had started"
        )
        return f"MPI start-up failed{where} ({why})"


@dataclass(frozen=True)
class StartupPolicy:
    """How often and how long: config `launch.startup_retries`, `launch.startup_timeout_s`."""

    retries: int = 2
    timeout_s: float = 600.0
    backoff_s: float = 2.0  # doubled per retry: a loaded node gets a moment


def _terminate(proc: subprocess.Popen[bytes], grace_s: float = 10.0) -> None:
    """srun and mpiexec pass SIGTERM on to their ranks; SIGKILL if they do not end in time."""
    if proc.poll() is not None:
        return
    proc.terminate()
    try:
        proc.wait(timeout=grace_s)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait()


def run_once(
    command: Sequence[str],
    token: str,
    timeout_s: float,
    environ: Mapping[str, str],
    out: Any,
    one_stream: bool = False,
) -> tuple[int | None, StartupWatch]:
    """One launch: stderr (with `one_stream`, stdout and stderr as one stream) passed through to `out` as
    it comes, watched. Returns (exit code, or None when start-up timed out and the launch was killed; the
    watch)."""
    watch = StartupWatch(token)
    stdout, stderr = (subprocess.PIPE, subprocess.STDOUT) if one_stream else (None, subprocess.PIPE)
    proc = subprocess.Popen(list(command), stdout=stdout, stderr=stderr, env=dict(environ))
    stream = proc.stdout if one_stream else proc.stderr
    forward = {signal.SIGTERM: None, signal.SIGINT: None}

    def pass_on(signum: int, _frame: Any) -> None:  # a cancelled job or Ctrl-C reaches the ranks
        if proc.poll() is None:
            proc.send_signal(signum)

    for signum in forward:
        forward[signum] = signal.signal(signum, pass_on)
    deadline = time.monotonic() + timeout_s
    assert stream is not None
    fd = stream.fileno()
    timed_out = False
    try:
        while True:
            wait = max(0.0, deadline - time.monotonic()) if not watch.started else None
            ready, _, _ = select.select([fd], [], [], wait)
            if not ready:
                timed_out = True
                _terminate(proc)
                break
            chunk = os.read(fd, 65536)
            if not chunk:
                break
            out.write(chunk.decode(errors="replace"))
            out.flush()
            watch.feed(chunk.decode(errors="replace"))
        # the rest of stderr (after a time-out, what the killed launcher printed)
        rest = stream.read()
        if rest:
            out.write(rest.decode(errors="replace"))
            out.flush()
            watch.feed(rest.decode(errors="replace"))
        watch.close()
        code = proc.wait()
    finally:
        for signum, handler in forward.items():
            signal.signal(signum, handler)
        stream.close()
    return (None if timed_out else code), watch


def launch_with_retries(
    command: Sequence[str],
    token: str,
    policy: StartupPolicy,
    environ: Mapping[str, str],
    out: Any = None,
    sleep: Callable[[float], None] = time.sleep,
    one_stream: bool = False,
) -> int:
    """Runs `command` until it gets through start-up, at most 1 + policy.retries times; returns its exit
    code (that of the last attempt). Every failed start-up is reported on `out` as one line naming the
    node and the reason. `one_stream`: the ranks are asked (ONE_STREAM_ENV) to write on one stream, and
    the command's stdout is relayed with its stderr."""
    out = sys.stderr if out is None else out
    attempts = 1 + policy.retries
    for attempt in range(1, attempts + 1):
        environ_of_ranks = {**environ, **rank_environment(token, one_stream)}
        code, watch = run_once(command, token, policy.timeout_s, environ_of_ranks, out, one_stream)
        if code == 0 or watch.started:
            return code if code is not None else 1
        again = attempt < attempts
        delay = policy.backoff_s * 2 ** (attempt - 1)
        tail = (
            f"; starting again in {delay:g} s (attempt {attempt + 1} of {attempts})"
            if again
            else (f"; gave up after {attempts} attempts (launch.startup_retries)")
        )
        print(f"sim2dl launch: {watch.diagnosis(code)}{tail}", file=out, flush=True)
        if not again:
            return code if code is not None else 124
        sleep(delay)
    raise AssertionError("unreachable")

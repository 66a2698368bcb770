"""Watch a workflow's Slurm jobs for ones that can never start, so that the workflow ends instead of hanging.

Slurm keeps a job PENDING, without end, while the nodes it needs are down or drained (a node that died, a
slurmd that stopped answering): squeue's reason is `ReqNodeNotAvail, UnavailableNodes:...` or `Nodes
required for job are DOWN, DRAINED or reserved for jobs in higher priority partitions`. Snakemake's Slurm
executor waits for such a job as for any other pending one, so the whole workflow would wait forever.

The watcher is a thread in the Snakemake process (the Snakefile's `onstart`, under the Slurm executor
only). It polls squeue for this workflow's pending jobs (this user's, with the workflow's directory as
their working directory and the executor's `rule_...` comment). A job waiting for unavailable nodes is
reported at once, with the nodes that are down, and cancelled when it has waited longer than
`slurm.unavailable_nodes_timeout_s`: Snakemake then sees a failed job, retries it as its profile says and
ends with the error. A retry of a job cancelled so, waiting for the same reason, is cancelled at its first
sighting. Nodes reserved for maintenance are waited for (they come back when the reservation ends).

When the workflow ends in error, Ctrl-C included (the Snakefile's `onerror`), `cancel_leftovers` cancels
any job of this workflow still queued or running. Snakemake cancels its jobs on Ctrl-C itself, but it
misses the ones whose status it is checking at that moment (snakemake-interface-executor-plugins 9.4
takes the active jobs out of its list while squeue runs), and such a job would run to its end.

Plan and decision (`UnavailableNodesWatch.decide`, `leftover_jobs`) are pure and unit-tested; `watch` and
`cancel_leftovers` run squeue/scancel as argument vectors. Memory: the jobs pending now and the rules
cancelled; time: one squeue per poll.
"""

from __future__ import annotations

import getpass
import os
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path

NODE_REASONS = ("ReqNodeNotAvail", "Nodes required for job are DOWN")
SQUEUE_FORMAT = "%i|%Z|%r|%k"  # job id, working directory, reason, comment (last: wildcards may hold "|")


@dataclass(frozen=True)
class PendingJob:
    job_id: str
    workdir: str
    reason: str
    comment: str  # the Slurm executor's `rule_NAME[_wildcards_...]`

    @property
    def rule(self) -> str:
        name = self.comment.removeprefix("rule_")
        return name.split("_wildcards_")[0]


def parse_squeue(text: str) -> list[PendingJob]:
    jobs = []
    for line in text.splitlines():
        parts = line.split("|", 3)
        if len(parts) == 4:
            jobs.append(PendingJob(*(p.strip() for p in parts)))
    return jobs


def waits_for_unavailable_nodes(reason: str) -> bool:
    """A reason that only a node coming back can end (not a busy cluster, not a maintenance reservation)."""
    return reason.startswith(NODE_REASONS) and "maint" not in reason.lower()


@dataclass
class UnavailableNodesWatch:
    """Which of a workflow's pending jobs to cancel, and what to say; pure (time and jobs are passed in)."""

    workdir: str
    timeout_s: float
    first_seen: dict[str, float] = field(default_factory=dict)  # job id -> when first seen waiting
    cancelled_rules: set[str] = field(default_factory=set)

    def decide(
        self, jobs: Sequence[PendingJob], now: float, down_nodes: str
    ) -> tuple[list[str], list[PendingJob]]:
        """(messages to print, jobs to cancel) for the pending jobs seen now."""
        messages: list[str] = []
        cancel: list[PendingJob] = []
        waiting = [
            j
            for j in jobs
            if j.workdir == self.workdir
            and j.comment.startswith("rule_")
            and waits_for_unavailable_nodes(j.reason)
        ]
        down = f"; nodes down or drained: {down_nodes}" if down_nodes else ""
        for job in waiting:
            if job.job_id not in self.first_seen:
                self.first_seen[job.job_id] = now
                if job.comment not in self.cancelled_rules:
                    messages.append(
                        f"sim2dl: Slurm job {job.job_id} (rule {job.rule}) cannot start: {job.reason}{down}. "
                        f"It is cancelled in {self.timeout_s:g} s unless the nodes come back "
                        "(config key slurm.unavailable_nodes_timeout_s)."
                    )
            waited = now - self.first_seen[job.job_id]
            if job.comment in self.cancelled_rules or waited >= self.timeout_s:
                again = " again" if job.comment in self.cancelled_rules else f" after {waited:.0f} s"
                messages.append(
                    f"sim2dl: cancelling Slurm job {job.job_id} (rule {job.rule}){again}: it waits for nodes "
                    f"that are not available ({job.reason}{down}). Run again on the nodes that are up, e.g. "
                    f"`--set-resources {job.rule}:nodes=N`, or when the nodes are back."
                )
                cancel.append(job)
                self.cancelled_rules.add(job.comment)
        still = {j.job_id for j in waiting}
        self.first_seen = {k: v for k, v in self.first_seen.items() if k in still}
        return messages, cancel


def _run(argv: Sequence[str]) -> str:
    try:
        proc = subprocess.run(list(argv), capture_output=True, text=True, timeout=60)
    except (OSError, subprocess.TimeoutExpired):
        return ""
    return proc.stdout if proc.returncode == 0 else ""


def watch(
    workdir: Path,
    timeout_s: float,
    poll_s: float = 5.0,
    stop: threading.Event | None = None,
    say: Callable[[str], None] = lambda m: print(m, file=sys.stderr, flush=True),
) -> None:
    """Poll until `stop` is set (forever in a daemon thread)."""
    state = UnavailableNodesWatch(str(workdir.resolve()), timeout_s)
    stop = stop or threading.Event()
    user = getpass.getuser()
    while not stop.wait(poll_s):
        out = _run(["squeue", "--user", user, "--noheader", "--states", "PENDING", "--format", SQUEUE_FORMAT])
        jobs = [replace(j, workdir=os.path.realpath(j.workdir)) for j in parse_squeue(out)]
        if not any(waits_for_unavailable_nodes(j.reason) for j in jobs):
            continue
        down = " ".join(
            _run(["sinfo", "--noheader", "--states", "down,drain,fail", "--format", "%N"]).split()
        )
        messages, cancel = state.decide(jobs, time.monotonic(), down)
        for message in messages:
            say(message)
        if cancel:
            _run(["scancel", *(j.job_id for j in cancel)])


def leftover_jobs(jobs: Sequence[PendingJob], workdir: Path) -> list[PendingJob]:
    """The jobs (any state squeue lists) that this workflow's Slurm executor submitted from `workdir`."""
    mine = os.path.realpath(workdir)
    return [j for j in jobs if os.path.realpath(j.workdir) == mine and j.comment.startswith("rule_")]


def cancel_leftovers(
    workdir: Path, say: Callable[[str], None] = lambda m: print(m, file=sys.stderr, flush=True)
) -> list[str]:
    """Cancel this workflow's jobs that are still queued or running; their ids."""
    out = _run(["squeue", "--user", getpass.getuser(), "--noheader", "--format", SQUEUE_FORMAT])
    left = leftover_jobs(parse_squeue(out), workdir)
    if left:
        _run(["scancel", *(j.job_id for j in left)])
        for job in left:
            say(
                f"sim2dl: cancelled Slurm job {job.job_id} (rule {job.rule}): the workflow ended, it was "
                "still queued"
            )
    return [j.job_id for j in left]


def start(workdir: Path, timeout_s: float, poll_s: float = 5.0) -> threading.Thread | None:
    """The watcher as a daemon thread (it ends with Snakemake); None when disabled (timeout 0)."""
    if timeout_s <= 0:
        return None
    thread = threading.Thread(
        target=watch, args=(workdir, timeout_s, poll_s), name="sim2dl-slurm-watch", daemon=True
    )
    thread.start()
    return thread

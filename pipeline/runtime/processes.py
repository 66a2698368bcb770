"""Child processes that must not outlive their parent: a parent-death signal for launched commands, and
killing a whole process tree (a trial's launcher and ranks, a hung simulator run)."""

from __future__ import annotations

import contextlib
import shutil
import subprocess


def with_parent_death_signal(cmd: list[str]) -> list[str]:
    """A killed parent (a search worker, an ensemble rank) must not leave its child running on: util-linux
    `setpriv --pdeathsig` makes the child get SIGTERM when the parent dies (kept across exec; a no-op
    where setpriv is missing)."""
    setpriv = shutil.which("setpriv")
    return [setpriv, "--pdeathsig", "TERM", "--", *cmd] if setpriv else cmd


def kill_tree(proc: subprocess.Popen[bytes]) -> None:
    """SIGKILL the process and everything below it, then reap it."""
    import psutil

    with contextlib.suppress(psutil.NoSuchProcess):
        parent = psutil.Process(proc.pid)
        for p in [*parent.children(recursive=True), parent]:
            with contextlib.suppress(psutil.NoSuchProcess):
                p.kill()
    proc.wait()

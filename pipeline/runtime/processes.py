"""Child processes that must not outlive their parent: a parent-death signal for launched commands, and
killing a whole process tree (a trial's launcher and ranks, a hung simulator run); and the environment a
command that is not one of the job's ranks gets (the rank's, less what makes it one)."""

from __future__ import annotations

import contextlib
import shutil
import subprocess
from collections.abc import Mapping


def with_parent_death_signal(cmd: list[str]) -> list[str]:
    """A killed parent (a search worker, an ensemble rank) must not leave its child running on: util-linux
    `setpriv --pdeathsig` makes the child get SIGTERM when the parent dies (kept across exec; a no-op
    where setpriv is missing)."""
    setpriv = shutil.which("setpriv")
    return [setpriv, "--pdeathsig", "TERM", "--", *cmd] if setpriv else cmd


# What the MPI launcher sets for each of its ranks (MPICH/Hydra's PMI and PMIx, Open MPI's world and
# Cray PALS): inherited by a rank's child, it tells the child it is a rank of the job, and a simulator that
# checks (py-pde's PDE class exits without mpi4py when PMI_SIZE > 1) or calls MPI_Init (a singleton would
# talk to the launcher through PMI_FD) misbehaves. Slurm's variables stay: a command may run srun steps.
RANK_VARIABLE_PREFIXES = ("PMI_", "PMIX_", "HYDI_", "HYDRA_", "MPI_LOCALNRANKS", "MPI_LOCALRANKID")
RANK_VARIABLE_PREFIXES += ("OMPI_COMM_WORLD_", "OMPI_UNIVERSE_SIZE", "PALS_")


def outside_the_job(environ: Mapping[str, str]) -> dict[str, str]:
    """The environment less the variables that make a process one of the MPI job's ranks."""
    return {k: v for k, v in environ.items() if not k.startswith(RANK_VARIABLE_PREFIXES)}


def kill_tree(proc: subprocess.Popen[bytes]) -> None:
    """SIGKILL the process and everything below it, then reap it."""
    import psutil

    with contextlib.suppress(psutil.NoSuchProcess):
        parent = psutil.Process(proc.pid)
        for p in [*parent.children(recursive=True), parent]:
            with contextlib.suppress(psutil.NoSuchProcess):
                p.kill()
    proc.wait()

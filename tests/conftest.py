"""Shared helpers: small configs, real MPI launches of the `sim2dl` CLI."""

from __future__ import annotations

import contextlib
import glob
import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
import yaml

from pipeline import config as cfg
from pipeline.parallel import SerialComm

REPO = Path(__file__).resolve().parent.parent
BIN = Path(sys.executable).parent
MPIEXEC = str(BIN / "mpiexec")


def make_config(tmp_path: Path, **sections: Any) -> dict[str, Any]:
    """A validated config rooted in tmp_path, the demo defaults updated section by section."""
    config = yaml.safe_load((REPO / "config" / "config.yaml").read_text())
    config["workdir"] = str(tmp_path / "work")
    config["simulate"]["samples"] = 48
    config["ingest"]["max_reject_fraction"] = 0.5
    for key, value in sections.items():
        if isinstance(value, dict) and isinstance(config.get(key), dict):
            config[key].update(value)
        else:
            config[key] = value
    return cfg.validate(config)


def write_config(tmp_path: Path, config: dict[str, Any]) -> Path:
    path = tmp_path / "config.yaml"
    path.write_text(yaml.safe_dump(config, sort_keys=False))
    return path


def env() -> dict[str, str]:
    e = dict(os.environ)
    e["PATH"] = f"{BIN}:{e.get('PATH', '')}"
    e.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")
    return e


def cli_command(args: list[str], ranks: int | None) -> list[str]:
    """`sim2dl ARGS` under `mpiexec -n RANKS` (ranks None: no launcher, e.g. for `sim2dl launch`)."""
    launcher = [] if ranks is None else [MPIEXEC, "-n", str(ranks)]
    return [*launcher, str(BIN / "sim2dl"), *args]


def run_snakemake(
    args: list[str], timeout: float, extra_env: dict[str, str] | None = None
) -> subprocess.CompletedProcess[str]:
    """`snakemake ARGS` in the repository, under `timeout -k` so a stuck executor cannot hang the tests."""
    cmd = ["timeout", "-k", "30", str(timeout), "snakemake", *args]
    return subprocess.run(cmd, capture_output=True, text=True, env={**env(), **(extra_env or {})}, cwd=REPO)


def start_cli(args: list[str], ranks: int, log: Path | None = None) -> subprocess.Popen[bytes]:
    """Start `sim2dl ARGS` under `mpiexec -n RANKS` in the background (to be killed by kill_tree);
    stdout and stderr go to `log` if given."""
    with open(log, "wb") if log else contextlib.nullcontext(subprocess.DEVNULL) as out:
        return subprocess.Popen(
            cli_command(args, ranks),
            env=env(),
            stdout=out,
            stderr=subprocess.STDOUT if log else subprocess.DEVNULL,
            start_new_session=True,
        )


def run_cli(
    args: list[str], ranks: int = 1, check: bool = True, timeout: float = 300
) -> subprocess.CompletedProcess[str]:
    """Run `sim2dl ARGS` under a real `mpiexec -n RANKS`."""
    cmd = cli_command(args, ranks)
    proc = subprocess.run(cmd, capture_output=True, text=True, env=env(), timeout=timeout)
    if check and proc.returncode != 0:
        raise AssertionError(f"{cmd} failed ({proc.returncode}):\n{proc.stdout}\n{proc.stderr}")
    return proc


@pytest.fixture
def serial() -> SerialComm:
    return SerialComm()


def kill_tree(proc: subprocess.Popen[bytes]) -> None:
    """SIGKILL a launched job and every process below it (MPI proxies may sit in their own process
    groups), and wait until all are gone, so the test sees the state the kill left behind."""
    import psutil

    try:
        parent = psutil.Process(proc.pid)
    except psutil.NoSuchProcess:  # ended and already reaped
        return
    victims = [parent, *parent.children(recursive=True)]
    for p in victims:
        with contextlib.suppress(psutil.NoSuchProcess):
            p.kill()
    proc.wait()
    psutil.wait_procs(victims, timeout=30)


# What MPICH leaves behind when a job aborts or is killed, which several tests do on purpose: the
# launcher's topology files, and the ranks' shared-memory segments (MBs each, in RAM-backed /dev/shm).
MPI_LEFTOVERS = ("/tmp/hydra_hwloc_xmlfile_*", "/dev/shm/mpich_shm_*")


@pytest.fixture(scope="session", autouse=True)
def remove_mpi_leftovers():
    """Remove the MPI leftovers this session created (those of other jobs, running or not, are kept)."""
    before = {p for pattern in MPI_LEFTOVERS for p in glob.glob(pattern)}
    yield
    in_use = _mapped_files()
    for leftover in {p for pattern in MPI_LEFTOVERS for p in glob.glob(pattern)} - before - in_use:
        with contextlib.suppress(OSError):
            os.unlink(leftover)


def _mapped_files() -> set[str]:
    """Every file a live process maps (a job started outside the tests, say, still uses its segments)."""
    mapped = set()
    for maps in glob.glob("/proc/[0-9]*/maps"):
        with contextlib.suppress(OSError), open(maps) as f:
            for line in f:
                fields = line.split(maxsplit=5)  # address, perms, offset, device, inode, [path]
                if len(fields) == 6:
                    mapped.add(fields[5].rstrip("\n"))
    return mapped


def step_summaries(log_dir: Path) -> dict[str, list[dict[str, Any]]]:
    """The JSON summary each step printed, by step, from the steps' logs. A log holds stdout and stderr
    together, forwarded by mpiexec separately: the summary may follow a progress bar's last update on
    the same line, so it is found where it begins in the line."""
    found: dict[str, list[dict[str, Any]]] = {}
    for log in log_dir.rglob("*.log"):
        for line in log.read_text(errors="replace").splitlines():
            at = line.find('{"step"')
            if at >= 0:
                summary = json.loads(line[at:])
                found.setdefault(summary["step"], []).append(summary)
    return found


def small_cube_config(tmp_path: Path, **sections: Any) -> dict[str, Any]:
    """96 cubes of 16^3, staged below tmp_path: small enough to train on in seconds."""
    return make_config(
        tmp_path,
        simulate={"samples": 96, "cube": {"size": 16, "box_size": 128.0, "mean_density": 8.0}},
        source={
            "fields": {
                "density": {"path": "density", "dtype": "float32", "shape": [16, 16, 16]},
                "params": {"path": "params", "dtype": "float32", "shape": [3]},
            }
        },
        **{**sections, "stage": {"target": str(tmp_path / "local"), **sections.get("stage", {})}},
    )

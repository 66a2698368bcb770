"""doctor: check a site before a long job, and say how to fix each problem.

Checks: the container runtime (found, version), the image (present), the host MPI (flavour and ABI, which
must be MPICH's for the image), the MPI library a rank sees inside the container (must be the host's when
host_mpi is enabled), the GPUs a rank is given and TensorFlow sees there (against train.device), the MPI
launcher, and the node-local staging target (exists, writable, free space
against the merged dataset if there is one).
"""

from __future__ import annotations

import json
import os
import shlex
import shutil
import subprocess
import sys
import tempfile
from collections.abc import Mapping
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from pipeline import Sim2dlError
from pipeline.paths import MergedPaths
from pipeline.runtime import host_mpi as hostmpi
from pipeline.runtime.container_image import image_reference
from pipeline.runtime.runtimes import runtime_of

# Printed inside the container by the image's python: what MPI library mpi4py loads there.
INSIDE_PROBE = "from mpi4py import MPI; print(MPI.Get_library_version().strip())"
# Printed where a rank trains (inside the container, with its GPU switch): the GPUs it is given and sees.
GPU_PROBE = (
    "import glob, json, os; import tensorflow as tf; print(json.dumps({"
    "'cuda_visible_devices': os.environ.get('CUDA_VISIBLE_DEVICES'), "
    "'device_files': sorted(glob.glob('/dev/nvidia[0-9]*')), "
    "'tensorflow_gpus': [d.name for d in tf.config.list_physical_devices('GPU')]}))"
)


@dataclass
class Check:
    name: str
    status: str  # ok | warn | fail | skip
    detail: str
    fix: str = ""


def _run(argv: list[str], timeout: float = 120, env: Mapping[str, str] | None = None) -> tuple[int, str]:
    try:
        done = subprocess.run(
            argv,
            capture_output=True,
            text=True,
            timeout=timeout,
            stdin=subprocess.DEVNULL,
            env=None if env is None else {**os.environ, **env},
        )
    except FileNotFoundError:
        return 127, f"{argv[0]}: not found"
    except subprocess.TimeoutExpired:
        return 124, f"timed out after {timeout:.0f} s"
    return done.returncode, (done.stdout + done.stderr).strip()


def check_runtime(settings: Mapping[str, Any]) -> Check:
    runtime = runtime_of(settings)
    if not runtime.contained:
        return Check("runtime", "ok", f"{runtime.name}: steps run in this environment (no container)")
    binary = runtime.binary
    path = shutil.which(binary)
    if path is None:
        return Check("runtime", "fail", f"{runtime.name}: {binary} is not on PATH", runtime.install_hint)
    code, out = _run([binary, "--version"], timeout=30)
    version = out.splitlines()[0] if out else "?"
    return Check("runtime", "ok" if code == 0 else "warn", f"{runtime.name}: {path} ({version})")


def pull_fix(settings: Mapping[str, Any]) -> str:
    """The command that fixes a missing image: `sim2dl image pull`, with what it runs for this runtime."""
    from pipeline.runtime.oci_registry import configured_reference, pull_plan

    try:
        ref = configured_reference(settings, None)
    except Sim2dlError:
        return (
            "sim2dl image pull HOST/NAME:TAG (the published image; or container.name: HOST/NAME), or "
            "sim2dl image build (needs root, debootstrap and bubblewrap)"
        )
    runs = "; ".join(shlex.join(c) for c in pull_plan(settings, ref).commands)
    return f"sim2dl image pull (runs: {runs}), or sim2dl image build (needs root, debootstrap and bubblewrap)"


def check_image(settings: Mapping[str, Any]) -> Check:
    runtime = runtime_of(settings)
    if not runtime.contained:
        return Check("image", "skip", "no container runtime")
    present, detail = runtime.has_image(image_reference(settings), lambda argv: _run(argv, timeout=60))
    if present is None:
        return Check("image", "skip", detail)
    return Check("image", "ok", detail) if present else Check("image", "fail", detail, pull_fix(settings))


def host_library(settings: Mapping[str, Any]) -> Path | None:
    host = settings["host_mpi"]
    if host["enabled"] and host["paths"]:
        return hostmpi.find_library(host["paths"], [host["libmpi"], *hostmpi.OPENMPI_SONAMES])
    return hostmpi.system_library()


def check_host_mpi(settings: Mapping[str, Any]) -> tuple[Check, str | None]:
    host = settings["host_mpi"]
    contained = runtime_of(settings).contained
    if not contained:
        code, out = _run([sys.executable, "-c", INSIDE_PROBE], timeout=60)
        if code != 0:
            return Check(
                "host MPI", "fail", f"mpi4py cannot load an MPI library: {out[-300:]}", "make env"
            ), None
        return Check("host MPI", "ok", f"this environment's mpi4py: {hostmpi.version_line(out)}"), out
    if not runtime_of(settings).binds_host_mpi and host["enabled"]:  # the runtime's module brings it
        modules = ", ".join(settings["shifter_modules"])
        return Check("host MPI", "ok", f"provided by shifter --module={modules} (checked inside)"), None
    library = host_library(settings)
    if library is None:
        if host["enabled"]:
            return Check(
                "host MPI",
                "fail",
                f"no {host['libmpi']} in host_mpi.paths {host['paths']}",
                "sim2dl image host-mpi --out DIR, then host_mpi.paths: [DIR]",
            ), None
        return Check(
            "host MPI",
            "warn",
            "no MPICH-ABI library found by the dynamic linker",
            "steps use the MPI inside the image (fine on one node; slower across nodes)",
        ), None
    try:
        version = hostmpi.library_version(library)
    except Sim2dlError as e:
        return Check(
            "host MPI", "fail", str(e), "check that host_mpi.paths holds a complete MPI installation"
        ), None
    name, abi = hostmpi.flavour(version)
    detail = f"{library}: {hostmpi.version_line(version)} ({name}, {abi} ABI)"
    if abi != "MPICH":
        return Check(
            "host MPI",
            "fail",
            detail,
            "the image is MPICH-ABI (libmpi.so.12): bind an MPICH-ABI MPI "
            "(Cray MPICH, MPICH, Intel MPI, MVAPICH), or set host_mpi.enabled: false",
        ), version
    status = "ok" if host["enabled"] or not contained else "warn"
    fix = (
        "" if status == "ok" else "set container.host_mpi.enabled: true so ranks use it (full network speed)"
    )
    return Check("host MPI", status, detail, fix), version


def probe_where_ranks_run(settings: Mapping[str, Any], code: str, cwd: Path, **env: str) -> tuple[int, str]:
    """(exit status, output) of Python `code` run as a rank would start: in the container with the same
    binds, environment and switches (the image's python3), or in this environment without one."""
    from pipeline.runtime.launch import container_argv, prepare_mount_points

    python = runtime_of(settings).program("python3")
    with tempfile.TemporaryDirectory() as scratch:
        prepare_mount_points(settings, [Path(scratch)], cwd)
        argv = container_argv(settings, [python, "-c", code], [Path(scratch)], cwd)
        return _run(argv, timeout=300, env={"USER": os.environ.get("USER", "root"), **env})


def check_inside(settings: Mapping[str, Any], host_version: str | None, cwd: Path) -> Check:
    """Run the MPI probe in the container as a rank would start (same binds and environment)."""
    if not runtime_of(settings).contained:
        return Check("MPI inside", "skip", "no container runtime")
    try:
        code, out = probe_where_ranks_run(settings, INSIDE_PROBE, cwd)
    except Sim2dlError as e:
        return Check("MPI inside", "fail", str(e), "see the message")
    if code != 0:
        return Check(
            "MPI inside",
            "fail",
            f"probe failed ({code}): {out.splitlines()[-1:] or ''}",
            "run the command `sim2dl launch --dry-run` prints to see the runtime's error",
        )
    inside = out.splitlines()[-1] if out else "?"
    first = next((line for line in out.splitlines() if "version" in line.lower()), inside)
    if not settings["host_mpi"]["enabled"]:
        return Check("MPI inside", "ok", f"the image's own: {first}")
    if host_version and host_version.splitlines()[0] not in out:
        return Check(
            "MPI inside",
            "fail",
            f"{first}: not the host's {host_version.splitlines()[0]}",
            "check host_mpi.paths (bound + LD_LIBRARY_PATH) and host_mpi.libmpi (MPI4PY_LIBMPI)",
        )
    return Check("MPI inside", "ok", f"the host's: {first}")


def gpu_verdict(device: str, probe: Mapping[str, Any]) -> Check:
    """What train.device will do with what the probe saw (pure: the probe's JSON in, a check out)."""
    seen = probe["tensorflow_gpus"]
    detail = (
        f"TensorFlow sees {len(seen)} GPU(s); device files {probe['device_files'] or 'none'}; "
        f"CUDA_VISIBLE_DEVICES={probe['cuda_visible_devices']!r}"
    )
    if device == "cpu":
        return Check("GPUs", "ok", detail + "; train.device cpu: training uses the CPU")
    if seen:
        return Check("GPUs", "ok", detail + f"; train.device {device}: one GPU per rank")
    fix = (
        "on Slurm ask for GPUs (--gpus-per-task), in a container set container.gpus: true; "
        "a driver without device files: check the node"
    )
    if device == "gpu":
        return Check("GPUs", "fail", detail + "; train.device gpu will refuse to run", fix)
    status = "warn" if probe["device_files"] else "ok"  # GPUs on the node that TensorFlow cannot use
    return Check(
        "GPUs", status, detail + "; train.device auto: training uses the CPU", fix if status == "warn" else ""
    )


def check_gpus(config: Mapping[str, Any], cwd: Path) -> Check:
    """The GPU probe where a rank trains: in the container (with container.gpus' switch) or on the host."""
    try:
        code, out = probe_where_ranks_run(config["container"], GPU_PROBE, cwd, TF_CPP_MIN_LOG_LEVEL="3")
    except Sim2dlError as e:
        return Check("GPUs", "fail", str(e), "see the message")
    try:  # the probe's one line of JSON, wherever the runtime's or TensorFlow's messages put it
        probe = json.loads(next(line for line in reversed(out.splitlines()) if line.startswith("{")))
    except (StopIteration, ValueError):
        return Check(
            "GPUs",
            "fail",
            f"the probe failed ({code}): {out.splitlines()[-1:] or ''}",
            "run the command `sim2dl launch --dry-run` prints to see the runtime's error",
        )
    return gpu_verdict(config["train"]["device"], probe)


def check_launcher(environ: Mapping[str, str]) -> Check:
    if "SLURM_JOB_ID" in environ:
        path = shutil.which("srun")
        return Check(
            "launcher", "ok" if path else "fail", f"srun: {path}", "" if path else "srun is not on PATH"
        )
    path = shutil.which("mpiexec")
    if path is None:
        return Check(
            "launcher", "fail", "mpiexec is not on PATH", "make env (the venv's MPICH), or load an MPI module"
        )
    code, out = _run(["mpiexec", "--version"], timeout=30)
    kind = "MPICH hydra" if "hydra" in out.lower() else "Open MPI" if "open" in out.lower() else "unknown"
    return Check("launcher", "ok" if code == 0 else "warn", f"mpiexec: {path} ({kind})")


def check_staging(config: Mapping[str, Any]) -> Check:
    from pipeline.config import layout
    from pipeline.runtime.placement import target_root

    target = target_root(config["stage"])
    probe = target
    while not probe.exists() and probe != probe.parent:
        probe = probe.parent
    if not os.access(probe, os.W_OK):
        return Check(
            "node-local",
            "fail",
            f"{target}: {probe} is not writable",
            "set stage.target to node-local storage you can write ($TMPDIR, /dev/shm, NVMe)",
        )
    free = shutil.disk_usage(probe).free
    needed = _dataset_bytes(layout(config).merged)
    detail = f"{target}: {free / 1e9:.1f} GB free"
    if needed is None:
        return Check("node-local", "ok", detail + " (dataset not merged yet)")
    detail += f", dataset {needed / 1e9:.2f} GB"
    if needed > free:
        return Check(
            "node-local", "fail", detail, "use stage.mode partition or sample, or a larger stage.target"
        )
    return Check("node-local", "ok", detail)


def _dataset_bytes(merged_dir: Path) -> int | None:
    try:  # metadata.json read as JSON here (doctor stands below the formats that write it)
        return sum(
            int(s["bytes"]) for s in json.loads(MergedPaths(merged_dir).metadata.read_text())["shards"]
        )
    except (OSError, ValueError, KeyError, TypeError):
        return None


def doctor(config: Mapping[str, Any], cwd: Path | None = None) -> list[Check]:
    settings = config["container"]
    checks = [check_runtime(settings), check_image(settings)]
    host, host_version = check_host_mpi(settings)
    checks.append(host)
    if not runtime_of(settings).contained or (checks[0].status == "ok" and checks[1].status == "ok"):
        checks.append(check_inside(settings, host_version, cwd or Path.cwd()))
        checks.append(check_gpus(config, cwd or Path.cwd()))
    else:
        checks.append(Check("MPI inside", "skip", "runtime or image missing"))
        checks.append(Check("GPUs", "skip", "runtime or image missing"))
    checks += [check_launcher(os.environ), check_staging(config)]
    return checks


def report(checks: list[Check], out: Any = sys.stdout) -> None:
    width = max(len(c.name) for c in checks)
    for c in checks:
        print(f"{c.status.upper():5} {c.name:<{width}}  {c.detail}", file=out)
        if c.fix and c.status in ("fail", "warn"):
            print(f"{'':5} {'':<{width}}  fix: {c.fix}", file=out)


def as_json(checks: list[Check]) -> str:
    return json.dumps([asdict(c) for c in checks])

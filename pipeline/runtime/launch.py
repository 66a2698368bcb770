"""launch: the exact argument vector that runs a sim2dl step on N ranks, one container per rank.

    [MPI launcher, -n, N] + [container runtime ... image] + [sim2dl, STEP, ARGS...]

The launcher (srun inside a Slurm allocation, mpiexec elsewhere) stays outside; each rank starts its own
container, which uses the HOST's MPI library (bind model: Cray MPICH at NERSC through Shifter's mpich
module, or host MPICH directories bound in with LD_LIBRARY_PATH and MPI4PY_LIBMPI for Apptainer,
Singularity, charliecloud and podman), so ranks talk over the host's fabric at full speed.

Runtimes whose host-MPI injection is the site's (Shifter's --module=mpich, podman-hpc's and Sarus's --mpi)
get that flag when container.host_mpi.enabled; host_mpi.paths, when given, are bound as for the others.
enroot runs through pyxis when the launcher is srun (`srun --container-image=... --container-mounts=...`,
the path of NVIDIA's MLPerf runs), else as `enroot start`. Runtimes without an option for one variable
(enroot, Sarus) get the variables through `env K=V ... COMMAND` inside the container.

With container.gpus, the steps that train (train, search) get the runtime's GPU switch (Apptainer and
Singularity --nv, podman-hpc --gpu, podman the CDI device nvidia.com/gpu=all, Shifter's gpu module, enroot
and pyxis NVIDIA_VISIBLE_DEVICES for enroot's hook; Sarus's hook follows the host's CUDA_VISIBLE_DEVICES by
itself); the data steps never do, so they run on nodes without GPUs too.

Everything is an argument vector executed without a shell: config values (image names, bind paths,
environment values) can hold quotes, spaces, `;` or `$(...)` and still reach the runtime as one argument.
"""

from __future__ import annotations

import os
import shlex
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from pipeline import Sim2dlError
from pipeline.runtime.container_image import image_reference
from pipeline.runtime.runtimes import RUNTIMES as RUNTIME_TABLE
from pipeline.runtime.runtimes import Container, NoRuntime, runtime_of

# charliecloud and podman give every rank its own user namespace: MPICH's single-copy transfers (CMA,
# process_vm_readv) and UCX's /proc/PID/fd shared-memory links are refused between ranks there, and
# MPI_Init or the first large message fails. Shared memory through /dev/shm still works. (Config
# `container.env` can override these, e.g. with ch-run --join set up by the site.)
SEPARATE_NAMESPACE_ENV = {"MPIR_CVAR_CH4_CMA_ENABLE": "0", "UCX_POSIX_USE_PROC_LINK": "n", "UCX_TLS": "^cma"}

# container.gpus: the steps that compute on GPUs. Each runtime's switch is its class's (runtimes/); the
# device each rank takes is pipeline.training.devices' choice.
GPU_STEPS = ("train", "search")
RUNTIMES = tuple(RUNTIME_TABLE)


def mpi_launcher(
    mpi: str,
    tasks: int,
    environ: Mapping[str, str] | None = None,
    nested: bool = False,
    gpus_per_task: int = 0,
) -> list[str]:
    """`mpi` is "auto" (srun inside a Slurm allocation, else mpiexec) or a launcher command line from the
    profile (e.g. "srun --mpi=pmi2"); one task runs without a launcher only when mpi is "none".

    `gpus_per_task` (slurm.gpus_per_task, for the steps that train): srun binds that many of the job's
    GPUs to each task (--gpus-per-task, --gpu-bind=per_task), so each rank's CUDA_VISIBLE_DEVICES names its
    own. Explicit on srun's command line, because Snakemake's job-step executor removes the job's SLURM_*
    variables (SLURM_GPUS, SLURM_TRES_PER_TASK) before it runs the rule, and so that they never meet a
    --ntasks-per-gpu from elsewhere. mpiexec gets nothing: each rank takes the GPU of its local rank.

    `nested`: launched from a rank of a running step (a search worker starting a trial): srun must share
    that step's CPUs (--overlap), or it would wait for them forever. The same holds inside any job step
    (SLURM_STEP_ID set): Snakemake runs each rule of a group job under an srun of its own, and a node
    with exactly the job's CPUs (found on the virtual cluster) then has none left for the step's srun."""
    environ = os.environ if environ is None else environ
    if mpi == "none":
        if tasks != 1:
            raise Sim2dlError(f"mpi 'none' runs one task, {tasks} were asked for (resource 'tasks')")
        return []
    if mpi == "auto":
        mpi = "srun" if "SLURM_JOB_ID" in environ else "mpiexec"
    argv = [*shlex.split(mpi), "-n", str(tasks)]
    in_step = environ.get("SLURM_STEP_ID", "batch") not in ("batch", "extern", "interactive")
    if (nested or in_step) and Path(argv[0]).name == "srun" and "--overlap" not in argv:
        argv.insert(1, "--overlap")
    if gpus_per_task and Path(argv[0]).name == "srun":
        argv[1:1] = [f"--gpus-per-task={gpus_per_task}", f"--gpu-bind=per_task:{gpus_per_task}"]
    if Path(argv[0]).name == "srun" and not any(a.startswith(("-K", "--kill-on-bad-exit")) for a in argv):
        # a rank that dies ends the step, as mpiexec does: srun's default waits for the others, and a rank
        # left blocked in MPI_Init by a dead peer (seen once on the virtual cluster) would hold the job
        # until its time limit instead of failing it for Snakemake to retry
        argv.insert(1, "--kill-on-bad-exit=1")
    return argv


def srun_environment_conflicts(argv: Sequence[str]) -> list[str]:
    """Variables to remove from srun's environment for this command line: a batch job submitted with
    --ntasks-per-gpu (as Snakemake's Slurm plugin does for GPU jobs) exports SLURM_NTASKS_PER_GPU, and
    srun refuses --gpus-per-task beside it (checked on the virtual cluster)."""
    if argv and Path(argv[0]).name == "srun" and any(a.startswith("--gpus-per-task") for a in argv):
        return ["SLURM_NTASKS_PER_GPU"]
    return []


def host_mpi_settings(settings: Mapping[str, Any]) -> tuple[list[str], dict[str, str]]:
    """(host directories to bind, environment) for the bind model with a generic runtime."""
    host = settings["host_mpi"]
    if not host["enabled"]:
        return [], {}
    paths = [str(p) for p in host["paths"]]
    # MPI4PY_LIBMPI: mpi4py must load the host library by name, not its own path.
    # LD_BIND_NOW: a host MPI linked to a shared libhwloc (Debian's MPICH) and TensorFlow, which exports
    # its own copy of hwloc, define the same symbols; bound lazily, MPI_Finalize's hwloc_topology_destroy
    # resolved to TensorFlow's copy and freed the topology the real hwloc made (double free, signal 6/11,
    # in about half the 2-rank runs). Bound at load, the MPI's symbols resolve before TensorFlow is loaded.
    env = {"MPI4PY_LIBMPI": host["libmpi"], "LD_BIND_NOW": "1"}
    if paths:
        env["LD_LIBRARY_PATH"] = ":".join(paths)
    return paths, env


def binds(settings: Mapping[str, Any], data_dirs: Sequence[Path]) -> list[tuple[str, str]]:
    """Data directories appear at the same path inside (so paths in configs and manifests stay valid),
    then the configured extra binds ("src" or "src:dst")."""
    pairs = [(str(d), str(d)) for d in data_dirs]
    for spec in settings["binds"]:
        src, _, dst = str(spec).partition(":")
        pairs.append((src, dst or src))
    return pairs


def container_mounts(
    settings: Mapping[str, Any], data_dirs: Sequence[Path], cwd: Path
) -> list[tuple[str, str]]:
    """(host path, container path) of every bind: cwd and data at their own paths, configured binds, and
    the host MPI directories (Shifter's module brings its own)."""
    mounts = binds(settings, [cwd, *data_dirs])
    if runtime_of(settings).binds_host_mpi:
        mounts += [(p, p) for p in host_mpi_settings(settings)[0]]
    return mounts


def container_environment(settings: Mapping[str, Any]) -> dict[str, str]:
    """Variables set in every container: the image's name, namespace workarounds, the bind model's, then
    container.env."""
    runtime = runtime_of(settings)
    host_env = host_mpi_settings(settings)[1] if runtime.binds_host_mpi else {}
    # SIM2DL_IMAGE: steps record which image ran them
    namespaced = SEPARATE_NAMESPACE_ENV if runtime.own_user_namespace else {}
    image = image_reference(settings)
    return {
        "SIM2DL_IMAGE": image,
        **namespaced,
        **host_env,
        **{str(k): str(v) for k, v in settings["env"].items()},
    }


def container_argv(
    settings: Mapping[str, Any], command: Sequence[str], data_dirs: Sequence[Path], cwd: Path
) -> list[str]:
    """The argument vector that runs `command` in one container with `settings` (config `container:`),
    with `data_dirs` and the working directory `cwd` at the same paths inside: the runtime's own
    (pipeline/runtime/runtimes/, one file each)."""
    runtime = runtime_of(settings)
    if not runtime.contained:
        return list(command)
    return runtime.argv(container_of(settings, data_dirs, cwd), command)


def container_of(settings: Mapping[str, Any], data_dirs: Sequence[Path], cwd: Path) -> Container:
    """What a runtime is given to run a command in one container."""
    return Container(
        settings,
        image_reference(settings),
        container_mounts(settings, data_dirs, cwd),
        container_environment(settings),
        cwd,
        bool(settings.get("gpus")),
    )


def prepare_mount_points(settings: Mapping[str, Any], data_dirs: Sequence[Path], cwd: Path) -> list[str]:
    """A runtime that cannot create a bind destination inside a read-only image (charliecloud 0.31): the
    missing ones made in a directory image before the ranks start (once, from the launching process); a
    squashfs or unwritable image gets an error naming them. Returns the directories created."""
    if not runtime_of(settings).makes_mount_points:
        return []
    image = Path(image_reference(settings))
    destinations = [d for _, d in container_mounts(settings, data_dirs, cwd)]
    missing = [d for d in dict.fromkeys(destinations) if not (image / d.lstrip("/")).is_dir()]
    if not missing:
        return []
    if not image.is_dir():
        raise Sim2dlError(
            f"image {image} has no mount point for {', '.join(missing)} and is not a directory "
            "charliecloud can add them to: build a directory image or bind below /mnt"
        )
    try:
        for d in missing:
            (image / d.lstrip("/")).mkdir(parents=True, exist_ok=True)
    except OSError as e:
        raise Sim2dlError(
            f"cannot create mount point {e.filename} in image {image} ({e.strerror}): "
            f"create {', '.join(missing)} there once as the image's owner"
        ) from e
    return missing


def _is_hydra(program: str) -> bool:
    """MPICH's launcher (hydra) by name: mpiexec, mpiexec.hydra, mpiexec.mpich, mpirun. The image is
    MPICH-ABI, so the launcher of its bind model is MPICH's (or srun)."""
    return Path(program).name in ("mpiexec", "mpiexec.hydra", "mpiexec.mpich", "mpirun", "mpirun.mpich")


def step_argv(
    config: Mapping[str, Any],
    mpi: str,
    tasks: int,
    step_args: Sequence[str],
    data_dirs: Sequence[Path],
    cwd: Path,
) -> list[str]:
    """Launcher + container + `sim2dl STEP ARGS` for one workflow step. An ensemble whose simulator has
    an image of its own (simulate.image) runs its farm outside any container: each run enters the
    simulator's image itself (containers do not nest)."""
    from pipeline.config import runs_a_command

    settings = config["container"]
    if (
        step_args[:1] == ["simulate"]
        and runs_a_command(config["simulate"])
        and config["simulate"].get("image")
    ):
        settings = {**settings, "runtime": NoRuntime.name}
    trains = bool(step_args) and step_args[0] in GPU_STEPS
    settings = {**settings, "gpus": bool(settings.get("gpus") and trains)}
    sim2dl = runtime_of(settings).program("sim2dl")
    launcher = mpi_launcher(mpi, tasks, gpus_per_task=config["slurm"]["gpus_per_task"] if trains else 0)
    if (
        not runtime_of(settings).inherits_fds
        and launcher
        and _is_hydra(launcher[0])
        and "-pmi-port" not in launcher
    ):
        # hydra hands each rank its PMI connection as an inherited fd, which does not reach a podman
        # container; over a port (PMI_PORT, passed by name) it does, with --network=host
        launcher.insert(1, "-pmi-port")
    runtime = runtime_of(settings)
    if runtime.srun_plugin and launcher and Path(launcher[0]).name == "srun":
        # the container is srun's business (one per task: pyxis for enroot)
        return runtime.srun_argv(container_of(settings, data_dirs, cwd), launcher, [sim2dl, *step_args])
    return [*launcher, *container_argv(settings, [sim2dl, *step_args], data_dirs, cwd)]


def data_directories(config: Mapping[str, Any]) -> list[Path]:
    """What a step may read or write: the workdir, the input data (and the directories of the list naming
    it, of the labels table and of the user's model file), and the node-local staging target (created
    here, since runtimes refuse to bind a missing directory)."""
    from pipeline.config import layout, model_files, side_files, source_dir
    from pipeline.runtime.placement import target_root

    dirs = [layout(config).workdir, source_dir(config), target_root(config["stage"])]
    dirs += [path.parent for path in side_files(config["source"], source_dir(config))]
    dirs += [path.resolve().parent for path in model_files(config["train"])]
    for d in dirs:
        d.mkdir(parents=True, exist_ok=True)
    unique: list[Path] = []
    for d in (p.resolve() for p in dirs):
        if not any(d == u or u in d.parents for u in unique):
            unique.append(d)
    return unique


def simulator_argv(
    container: Mapping[str, Any], image: str, command: Sequence[str], run_dir: Path
) -> list[str]:
    """One ensemble run's command in the simulator's own image (simulate.image), with the run's
    directory bound at the same path and as the working directory; the host's MPI is not bound (a
    simulator run is not an MPI rank of sim2dl's), and no GPU switch (it is not a step that trains)."""
    host_mpi = {**container["host_mpi"], "enabled": False}
    settings = {**container, "image": image, "host_mpi": host_mpi, "env": {}, "gpus": False}
    return container_argv(settings, command, [], run_dir)

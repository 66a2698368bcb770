"""What every container runtime is asked for, behind one interface (`Runtime`), so that adding a runtime
is one small file registered in this package's __init__: the argument vector that runs a command in one
container (`argv`, from a `Container`: the image, binds, environment, working directory, GPUs), the form
of the image's name it runs (`image`), the commands that pull an image from a registry into it (`pull`, a
`Plan`), and doctor's checks (`binary`, `install_hint`, `has_image`). Memory and time: argument vectors.

Where a runtime cannot exist on a machine (Shifter, Apptainer, enroot/pyxis, Sarus), tests/test_launch.py
checks the exact vectors it would be given.
"""

from __future__ import annotations

import base64
import json
import os
import shutil
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, ClassVar

from pipeline import Sim2dlError

# What MPI launchers hand each rank (PMI wiring, Slurm step ids): runtimes that do not pass the host
# environment through (podman) are told to pass these names.
PASS_THROUGH_NAMES = [
    "PMI_FD",
    "PMI_PORT",
    "PMI_RANK",
    "PMI_SIZE",
    "PMI_ID",
    "PMI_JOBID",
    "PMI_SPAWNED",
    "PMI_SUBVERSION",
    "PMI_VERSION",
    "MPI_LOCALRANKID",
    "MPI_LOCALNRANKS",
    "SLURM_JOB_ID",
    "SLURM_STEP_ID",
    "SLURM_PROCID",
    "SLURM_LOCALID",
    "SLURM_NTASKS",
    "SLURM_NODEID",
]
GPU_PASS_THROUGH_NAMES = ["CUDA_VISIBLE_DEVICES", "SLURM_STEP_GPUS", "SLURM_LOCALID"]
# enroot's NVIDIA hook runs when these are set in the container's environment (all GPUs of the task's
# cgroup; the rank then takes its own by CUDA_VISIBLE_DEVICES or its local rank)
ENROOT_GPU_ENV = {"NVIDIA_VISIBLE_DEVICES": "all", "NVIDIA_DRIVER_CAPABILITIES": "compute,utility"}

Run = Callable[[list[str]], tuple[int, str]]  # runs an argument vector: (exit code, output)


@dataclass(frozen=True)
class Container:
    """One container to run a command in: the config's `container:` settings, the image as this runtime
    names it, the binds (host path, container path), the environment set inside, the working directory
    and whether it gets the runtime's GPU switch."""

    settings: Mapping[str, Any]
    image: str
    mounts: list[tuple[str, str]]
    env: dict[str, str]
    cwd: Path
    gpus: bool

    @property
    def host_mpi(self) -> bool:
        return bool(self.settings["host_mpi"]["enabled"])


@dataclass
class Plan:
    """What to run: argument vectors in order, the environment they add (None removes a variable), and,
    for runtimes that write a file or directory, where it goes and the temporary name it is written as."""

    runtime: str
    commands: list[list[str]]
    env: dict[str, str | None] = field(default_factory=dict)
    target: Path | None = None
    partial: Path | None = None
    image: str = ""
    notes: list[str] = field(default_factory=list)


class Runtime:
    """A container runtime. Subclasses set the class attributes and implement argv, image and pull."""

    name: ClassVar[str]
    binary: ClassVar[str]  # the program doctor looks for
    install_hint: ClassVar[str]
    own_user_namespace: ClassVar[bool] = False  # a user namespace per rank (SEPARATE_NAMESPACE_ENV applies)
    injects_mpi: ClassVar[bool] = False  # the runtime's own MPI flag applies (container.host_mpi.enabled)
    binds_host_mpi: ClassVar[bool] = True  # host_mpi.paths are bound and its environment set (not Shifter's)
    # a rank gets the launcher's inherited fds (hydra's PMI_FD; not podman)
    inherits_fds: ClassVar[bool] = True
    contained: ClassVar[bool] = True  # steps run in a container (an image to check, a host MPI to bind)
    makes_mount_points: ClassVar[bool] = False  # bind destinations must exist in the image beforehand
    srun_plugin: ClassVar[bool] = False  # under srun, a Slurm plugin starts the containers (srun_argv)

    def argv(self, container: Container, command: Sequence[str]) -> list[str]:
        raise NotImplementedError

    def program(self, name: str) -> str:
        """How a step names a program of the environment it runs in (`sim2dl`, `python3`): the image's,
        found on its PATH."""
        return name

    def srun_argv(self, container: Container, launcher: Sequence[str], command: Sequence[str]) -> list[str]:
        """With srun_plugin: the launcher's options that start the containers, then the command."""
        raise NotImplementedError

    def image(self, name: str, tag: str, build_dir: Path, slug: str) -> str:
        """The image as this runtime runs it, from container.name/tag (registry form) or the build
        directory and the image's file name (slug)."""
        return f"{name}:{tag}"

    def pull(self, settings: Mapping[str, Any], ref: Any, image: str, cert_dir: Path | None) -> Plan:
        """The commands that bring registry image `ref` (pipeline.runtime.oci_registry.RegistryRef) into
        this runtime as `image`, as its users would type them."""
        raise NotImplementedError

    def has_image(self, image: str, run: Run) -> tuple[bool | None, str]:
        """Whether the runtime has `image` (None: it cannot say here), and what was seen."""
        present = Path(image).exists()
        return present, image if present else f"{image} does not exist"


class FileImage(Runtime):
    """A runtime whose image is a file or directory of the build directory."""

    suffix: ClassVar[str] = ""

    def image(self, name: str, tag: str, build_dir: Path, slug: str) -> str:
        return str(build_dir / f"{slug}{self.suffix}")


def env_prefix(env: Mapping[str, str]) -> list[str]:
    """`env K=V ...` run inside the container: one argument per variable, values verbatim."""
    return ["env", *(f"{k}={v}" for k, v in env.items())] if env else []


def listed_mounts(mounts: Sequence[tuple[str, str]], runtime: str) -> list[tuple[str, str]]:
    """Mounts for runtimes that list them separated by ',' (pyxis, Sarus): a path holding one cannot be
    said."""
    for pair in mounts:
        for path in pair:
            if "," in path:
                raise Sim2dlError(
                    f"{runtime} cannot bind {path!r}: its mount list is separated by ','; bind a path "
                    "without a comma (container.binds, workdir, data or staging directory)"
                )
    return list(mounts)


def partial_name(target: Path, suffix: str = "") -> Path:
    """The temporary name a pull writes `target` under (renamed into place when complete)."""
    return target.with_name(f".{target.name}.pull-{os.getpid()}{suffix}")


def containers_options(settings: Mapping[str, Any], cert_dir: Path | None, prefix: str = "") -> list[str]:
    """TLS and credential options of the containers/image tools (podman, skopeo): `prefix` is skopeo's
    'dest-' for a push."""
    argv = []
    if not settings["registry_tls_verify"]:
        argv.append(f"--{prefix}tls-verify=false")
    elif cert_dir is not None:
        argv.append(f"--{prefix}cert-dir={cert_dir}")
    if settings["registry_auth_file"]:
        argv.append(f"--{prefix}authfile={settings['registry_auth_file']}")
    return argv


def registry_credentials(ref: Any, settings: Mapping[str, Any]) -> tuple[str, str] | None:
    """(user, password) for ref's registry from registry_auth_file (the containers-auth.json format)."""
    path = settings["registry_auth_file"]
    if not path:
        return None
    try:
        auths = json.loads(Path(path).expanduser().read_text()).get("auths", {})
        entry = auths.get(ref.registry) or auths.get(f"https://{ref.registry}") or {}
        user, _, password = (
            base64.b64decode(entry["auth"]).decode().partition(":") if "auth" in entry else ("", "", "")
        )
    except (OSError, ValueError) as e:
        raise Sim2dlError(f"container.registry_auth_file {path}: cannot read it ({e})") from e
    return (user, password) if user else None


def listed_image(image: str, lister: list[str], run: Run) -> tuple[bool | None, str]:
    """Whether a runtime that runs what it pulled by name (Shifter, Sarus) lists `image`."""
    if shutil.which(lister[0]) is None:
        return None, f"{lister[0]} not found; cannot check {image}"
    code, out = run(lister)
    name = image.removeprefix("docker:").rpartition(":")[0]
    tag = image.rpartition(":")[2]
    present = code == 0 and any(name in line and tag in line for line in out.splitlines())
    return present, image if present else f"{image} has not been pulled"

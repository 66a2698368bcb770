"""podman and NERSC's podman-hpc: `podman run --rm [--mpi] [GPU] --ipc=host --network=host --pid=host
--timeout=S -w CWD -v S:D -e NAME... -e K=V IMAGE CMD`, one container per rank sharing the host's IPC (MPI
shared memory) and network; PMI wiring and Slurm ids are passed by name, since podman does not pass the
host environment. podman-hpc takes podman's options; its --mpi module brings the site's MPI, --gpu the
devices and driver (podman itself takes the CDI device nvidia.com/gpu=all). Pulled with `podman pull`
(podman-hpc then migrates the image where the compute nodes read it). Memory and time: argument vectors."""

from __future__ import annotations

import shutil
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from pipeline.runtime.runtimes.base import (
    GPU_PASS_THROUGH_NAMES,
    PASS_THROUGH_NAMES,
    Container,
    Plan,
    Runtime,
    containers_options,
)


class Podman(Runtime):
    name = "podman"
    binary = "podman"
    install_hint = "apt-get install podman runc"
    own_user_namespace = True
    inherits_fds = False

    def gpu_options(self) -> list[str]:
        return ["--device", "nvidia.com/gpu=all"]

    def argv(self, container: Container, command: Sequence[str]) -> list[str]:
        argv = [self.name, "run", "--rm"]
        if self.injects_mpi and container.host_mpi:
            argv.append("--mpi")
        if container.gpus:
            argv += self.gpu_options()
        argv += ["--ipc=host", "--network=host", "--pid=host"]  # (--init needs a PID namespace of its own)
        argv += [f"--timeout={int(container.settings['podman_timeout_s'])}", "-w", str(container.cwd)]
        for s, d in container.mounts:
            argv += ["-v", f"{s}:{d}"]
        for name in PASS_THROUGH_NAMES + (GPU_PASS_THROUGH_NAMES if container.gpus else []):
            argv += ["-e", name]
        for k, v in container.env.items():
            argv += ["-e", f"{k}={v}"]
        return [*argv, container.image, *command]

    def pull(self, settings: Mapping[str, Any], ref: Any, image: str, cert_dir: Path | None) -> Plan:
        commands = [[self.name, "pull", *containers_options(settings, cert_dir), ref.docker_uri]]
        local = str(ref)
        if image != str(ref):
            commands.append([self.name, "tag", str(ref), image])
            local = image
        return Plan(self.name, commands + self.after_pull(local), image=image)

    def after_pull(self, local: str) -> list[list[str]]:
        return []

    def has_image(self, image: str, run: Any) -> tuple[bool | None, str]:
        if shutil.which(self.name) is None:
            return None, f"{self.name} not found"
        code, _ = run([self.name, "image", "exists", image])
        return code == 0, image if code == 0 else f"{self.name} has no image {image}"


class PodmanHpc(Podman):
    name = "podman-hpc"
    binary = "podman-hpc"
    install_hint = (
        "on Perlmutter already; elsewhere pip install podman-hpc (needs podman, fuse-overlayfs, squashfuse)"
    )
    injects_mpi = True

    def gpu_options(self) -> list[str]:
        return ["--gpu"]  # its module binds the devices and driver

    def after_pull(self, local: str) -> list[list[str]]:
        return [[self.name, "migrate", local]]  # squash the image where the compute nodes read it

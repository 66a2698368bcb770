"""NERSC's Shifter: `shifter --image=docker:NAME:TAG --module=mpich,gpu --volume=SRC:DST --env=K=V CMD`.
It passes the host environment; its mpich module injects Cray MPICH and sets the paths, its gpu module the
driver and CUDA libraries (one --module option names them all). The image is pulled by name with
`shifterimg pull` and run by that name. Memory and time: argument vectors."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from pipeline.runtime.runtimes.base import Container, Plan, Runtime, listed_image


class Shifter(Runtime):
    name = "shifter"
    binary = "shifter"
    install_hint = "Shifter is a site install (NERSC: available on login and compute nodes); ask the site"
    injects_mpi = True
    binds_host_mpi = False  # its mpich module brings the host's MPI

    def argv(self, container: Container, command: Sequence[str]) -> list[str]:
        argv = ["shifter", f"--image={container.image}"]
        modules = [
            *(container.settings["shifter_modules"] if self.injects_mpi and container.host_mpi else []),
            *(["gpu"] if container.gpus else []),
        ]
        if modules:
            argv.append("--module=" + ",".join(modules))
        argv += [f"--volume={s}:{d}" for s, d in container.mounts]
        argv += [f"--env={k}={v}" for k, v in container.env.items()]
        return [*argv, *command]

    def image(self, name: str, tag: str, build_dir: Path, slug: str) -> str:
        return f"docker:{name}:{tag}"  # after `shifterimg pull docker:NAME:TAG`

    def pull(self, settings: Mapping[str, Any], ref: Any, image: str, cert_dir: Path | None) -> Plan:
        pulled = f"docker:{ref}"
        notes = (
            []
            if pulled == image
            else [f"steps run {image}: set container.name: {ref.registry}/{ref.repository}"]
        )
        return Plan(self.name, [["shifterimg", "pull", pulled]], image=image, notes=notes)

    def has_image(self, image: str, run: Any) -> tuple[bool | None, str]:
        return listed_image(image, ["shifterimg", "images"], run)

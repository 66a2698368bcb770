"""CSCS's Sarus: `sarus run [--mpi] --workdir=CWD --mount=type=bind,source=S,destination=D IMAGE env K=V
CMD`. It passes the host environment (PMI, Slurm) itself; --mpi is its native MPICH hook; its NVIDIA hook
follows the host's CUDA_VISIBLE_DEVICES. Mounts are a ','-separated list. Pulled by name (`sarus pull`).
Memory and time: argument vectors."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from pipeline.runtime.runtimes.base import Container, Plan, Runtime, env_prefix, listed_image, listed_mounts


class Sarus(Runtime):
    name = "sarus"
    binary = "sarus"
    install_hint = "Sarus is a site install (CSCS: module load sarus); ask the site"
    injects_mpi = True

    def argv(self, container: Container, command: Sequence[str]) -> list[str]:
        mpi = ["--mpi"] if self.injects_mpi and container.host_mpi else []
        argv = ["sarus", "run", *mpi, f"--workdir={container.cwd}"]
        mounts = listed_mounts(container.mounts, "sarus")
        argv += [f"--mount=type=bind,source={s},destination={d}" for s, d in mounts]
        return [*argv, container.image, *env_prefix(container.env), *command]

    def pull(self, settings: Mapping[str, Any], ref: Any, image: str, cert_dir: Path | None) -> Plan:
        pulled = str(ref)
        notes = (
            []
            if pulled == image
            else [f"steps run {image}: set container.name: {ref.registry}/{ref.repository}"]
        )
        return Plan(self.name, [["sarus", "pull", pulled]], image=image, notes=notes)

    def has_image(self, image: str, run: Any) -> tuple[bool | None, str]:
        return listed_image(image, ["sarus", "images"], run)

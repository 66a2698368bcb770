"""NVIDIA's enroot: `enroot start --mount=S:D --env=NVIDIA_... IMAGE.sqsh env --chdir=CWD K=V CMD` outside
Slurm; under srun the container is pyxis's (pipeline.runtime.launch.step_argv: --container-image,
--container-mounts, a ','-separated list). Its NVIDIA hook runs when NVIDIA_VISIBLE_DEVICES is set. The
image is a squashfs file of the build directory, imported with `enroot import`. Memory and time: argument
vectors."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from pipeline.runtime.runtimes.base import (
    ENROOT_GPU_ENV,
    Container,
    FileImage,
    Plan,
    env_prefix,
    listed_mounts,
    partial_name,
)


class Enroot(FileImage):
    name = "enroot"
    binary = "enroot"
    install_hint = "enroot + pyxis are site installs (https://github.com/NVIDIA/enroot); ask the site"
    suffix = ".sqsh"
    srun_plugin = True

    def srun_argv(self, container: Container, launcher: Sequence[str], command: Sequence[str]) -> list[str]:
        """pyxis: srun starts the containers (one per task) with --container-image and --container-mounts
        (a ','-separated list); the variables are set inside by `env`; enroot's NVIDIA hook reads srun's
        environment, which pyxis hands to the container."""
        mounts = listed_mounts(container.mounts, "pyxis")
        options = [f"--container-image={container.image}"]
        if mounts:
            options.append("--container-mounts=" + ",".join(f"{s}:{d}" for s, d in mounts))
        options += [
            f"--container-workdir={container.cwd}",
            "--no-container-mount-home",
            "--no-container-remap-root",
        ]
        gpu_env = env_prefix(ENROOT_GPU_ENV) if container.gpus else []
        return [*gpu_env, *launcher, *options, *env_prefix(container.env), *command]

    def argv(self, container: Container, command: Sequence[str]) -> list[str]:
        # env --chdir: enroot has no working-directory option
        argv = ["enroot", "start", *(f"--mount={s}:{d}" for s, d in container.mounts)]
        argv += [f"--env={k}={v}" for k, v in (ENROOT_GPU_ENV if container.gpus else {}).items()]
        argv.append(container.image)
        return [*argv, "env", f"--chdir={container.cwd}", *env_prefix(container.env)[1:], *command]

    def pull(self, settings: Mapping[str, Any], ref: Any, image: str, cert_dir: Path | None) -> Plan:
        target = Path(image)
        partial = partial_name(target, ".sqsh")
        ca = str(settings["registry_ca"]) if settings["registry_ca"] else None
        env = (
            {"ENROOT_ALLOW_HTTP": "yes"}
            if not settings["registry_tls_verify"]
            else ({"CURL_CA_BUNDLE": ca} if ca else {})
        )
        return Plan(
            self.name,
            [["enroot", "import", "-o", str(partial), ref.enroot_uri]],
            dict(env),
            target,
            partial,
            image,
        )

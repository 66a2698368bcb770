"""Apptainer and Singularity: `apptainer exec [--nv] --pwd CWD --bind S:D --env K=V IMAGE.sif CMD`; the
image is a SIF file of the build directory, pulled with `apptainer pull` (plain HTTP by --no-https, or
Singularity's --nohttps). Memory and time: argument vectors."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any, ClassVar

from pipeline.runtime.runtimes.base import Container, FileImage, Plan, partial_name


class Apptainer(FileImage):
    name = "apptainer"
    binary = "apptainer"
    install_hint = "load the site's apptainer module, or install Apptainer (https://apptainer.org/docs)"
    suffix = ".sif"
    no_https: ClassVar[str] = "--no-https"

    def argv(self, container: Container, command: Sequence[str]) -> list[str]:
        argv = [self.name, "exec", *(["--nv"] if container.gpus else []), "--pwd", str(container.cwd)]
        for s, d in container.mounts:
            argv += ["--bind", f"{s}:{d}"]
        for k, v in container.env.items():
            argv += ["--env", f"{k}={v}"]
        return [*argv, container.image, *command]

    def pull(self, settings: Mapping[str, Any], ref: Any, image: str, cert_dir: Path | None) -> Plan:
        target = Path(image)
        partial = partial_name(target, ".sif")
        ca = str(settings["registry_ca"]) if settings["registry_ca"] else None
        http = [] if settings["registry_tls_verify"] else [self.no_https]
        argv = [self.name, "pull", *http, str(partial), ref.docker_uri]
        return Plan(self.name, [argv], {"SSL_CERT_FILE": ca} if ca else {}, target, partial, image)


class Singularity(Apptainer):
    name = "singularity"
    binary = "singularity"
    install_hint = "load the site's singularity module, or set container.runtime: apptainer"
    no_https = "--nohttps"

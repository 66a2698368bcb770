"""Charliecloud, an unprivileged HPC runtime: `ch-run --cd=CWD --set-env --env-no-expand -b S:D
--set-env=K=V IMAGE -- CMD` on a directory (or squashfs) image of the build directory. Each rank gets its
own user namespace. Pulled with ch-image, converted with ch-convert; with GPUs, ch-fromhost --nvidia copies
the host's driver libraries into the image once. Memory and time: argument vectors."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from pipeline import Sim2dlError
from pipeline.runtime.runtimes.base import Container, FileImage, Plan, partial_name, registry_credentials


class Charliecloud(FileImage):
    name = "charliecloud"
    binary = "ch-run"
    install_hint = "apt-get install charliecloud (or the site's charliecloud module)"
    own_user_namespace = True
    makes_mount_points = True  # (0.31) it cannot create a bind destination inside a read-only image

    def argv(self, container: Container, command: Sequence[str]) -> list[str]:
        # --set-env: the image's /ch/environment first; --env-no-expand: config values arrive verbatim
        argv = ["ch-run", f"--cd={container.cwd}", "--set-env", "--env-no-expand"]
        for s, d in container.mounts:
            argv += ["-b", f"{s}:{d}"]
        for k, v in container.env.items():
            argv += [f"--set-env={k}={v}"]
        return [*argv, container.image, "--", *command]

    def pull(self, settings: Mapping[str, Any], ref: Any, image: str, cert_dir: Path | None) -> Plan:
        target = Path(image)
        squash = target.suffix in (".sqfs", ".squashfs")
        partial = partial_name(target, ".sqfs" if squash else "")
        verify = settings["registry_tls_verify"]
        ca = str(settings["registry_ca"]) if settings["registry_ca"] else None
        # --no-cache: no second copy in the build cache; delete: the unpacked copy in ch-image's storage is
        # not what ch-run runs (the downloaded layers stay in its download cache for the next pull).
        # ch-image (Python requests) trusts REQUESTS_CA_BUNDLE over --tls-no-verify: set or clear it.
        env: dict[str, str | None] = {"REQUESTS_CA_BUNDLE": ca if verify else None}
        user = registry_credentials(ref, settings)
        if user:
            env.update({"CH_IMAGE_USERNAME": user[0], "CH_IMAGE_PASSWORD": user[1]})
        options = [*([] if verify else ["--tls-no-verify"]), *(["--auth"] if user else [])]
        commands = [
            ["ch-image", "pull", "--no-cache", *options, str(ref)],
            ["ch-convert", "-i", "ch-image", "-o", "squash" if squash else "dir", str(ref), str(partial)],
            ["ch-image", "delete", str(ref)],
        ]
        if settings["gpus"]:
            # ch-run has no GPU switch: the host's NVIDIA driver libraries are copied into the image once,
            # at pull time (so pull on a GPU node of the driver version the jobs will see)
            if squash:
                raise Sim2dlError(
                    "config key 'container.gpus': charliecloud's ch-fromhost --nvidia writes into a "
                    f"directory image, and container.image is a squashfs file ({target.name}): pull a "
                    "directory image"
                )
            commands.append(["ch-fromhost", "--nvidia", str(partial)])
        return Plan(self.name, commands, env, target, partial, image)

"""container.runtime: none: the steps run in this environment, no container. Memory and time: nothing."""

from __future__ import annotations

import sys
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from pipeline import Sim2dlError
from pipeline.runtime.runtimes.base import Container, Plan, Runtime


class NoRuntime(Runtime):
    name = "none"
    binary = ""
    install_hint = ""
    contained = False

    def program(self, name: str) -> str:
        """This environment's own (beside its python: a step must not pick another from PATH)."""
        return sys.executable if name.startswith("python") else str(Path(sys.executable).with_name(name))

    def argv(self, container: Container, command: Sequence[str]) -> list[str]:
        return list(command)

    def pull(self, settings: Mapping[str, Any], ref: Any, image: str, cert_dir: Path | None) -> Plan:
        raise Sim2dlError(
            "container.runtime is 'none': there is nothing to pull an image into "
            "(set container.runtime to the site's runtime)"
        )

    def has_image(self, image: str, run: Any) -> tuple[bool | None, str]:
        return None, "no container runtime"

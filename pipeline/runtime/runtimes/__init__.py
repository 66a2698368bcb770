"""Container runtimes, one file each behind `base.Runtime`, in one table keyed by container.runtime's
value. Adding a runtime: a file with its Runtime subclass, listed here (and in the schema's enum).
Memory and time: the table."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from pipeline import Sim2dlError
from pipeline.runtime.runtimes.apptainer import Apptainer, Singularity
from pipeline.runtime.runtimes.base import Container, Plan, Runtime
from pipeline.runtime.runtimes.charliecloud import Charliecloud
from pipeline.runtime.runtimes.enroot import Enroot
from pipeline.runtime.runtimes.none import NoRuntime
from pipeline.runtime.runtimes.podman import Podman, PodmanHpc
from pipeline.runtime.runtimes.sarus import Sarus
from pipeline.runtime.runtimes.shifter import Shifter

RUNTIMES: dict[str, Runtime] = {
    r.name: r
    for r in (
        NoRuntime(),
        Shifter(),
        Apptainer(),
        Singularity(),
        Charliecloud(),
        Podman(),
        PodmanHpc(),
        Enroot(),
        Sarus(),
    )
}

__all__ = ["RUNTIMES", "Container", "NoRuntime", "Plan", "Runtime", "runtime_of"]


def runtime_of(settings: Mapping[str, Any]) -> Runtime:
    """The runtime named by container.runtime."""
    name = settings["runtime"]
    if name not in RUNTIMES:
        raise Sim2dlError(
            f"container runtime '{name}' is not one of {', '.join(RUNTIMES)} (key 'container.runtime')"
        )
    return RUNTIMES[name]

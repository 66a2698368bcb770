"""The ways of choosing the next runs (simulate.adaptive.acquisition). Adding one: a module with an
`Acquisition` subclass, registered here: the config's checks read the names and what each works with from
this registry alone."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from pipeline import Sim2dlError
from pipeline.design.acquisitions.base import Acquisition, Choice, Context
from pipeline.design.acquisitions.boundary_variance import BoundaryVariance
from pipeline.design.acquisitions.breed import Breed
from pipeline.design.acquisitions.committee import Committee
from pipeline.design.acquisitions.error_weighted_variance import ErrorWeightedVariance
from pipeline.design.acquisitions.integrated_variance import IntegratedVariance
from pipeline.design.acquisitions.space_filling import SpaceFilling
from pipeline.design.acquisitions.surrogate_disagreement import SurrogateDisagreement
from pipeline.design.acquisitions.variance import PosteriorVariance

ACQUISITIONS: dict[str, Acquisition] = {
    a.name: a
    for a in (
        SpaceFilling(),
        PosteriorVariance(),
        IntegratedVariance(),
        ErrorWeightedVariance(),
        BoundaryVariance(),
        Committee(),
        SurrogateDisagreement(),
        Breed(),
    )
}


def check_acquisition(adaptive: Mapping[str, Any], online: bool) -> None:
    """simulate.adaptive.acquisition against the registry: a known name, one the trainers can choose by with
    train.online, and one that works with simulate.adaptive.emulator."""
    key, name = "config key 'simulate.adaptive.acquisition'", adaptive["acquisition"]
    if name not in ACQUISITIONS:
        raise Sim2dlError(f"{key}: '{name}' is not one of {sorted(ACQUISITIONS)}")
    by_trainers = sorted(a.name for a in ACQUISITIONS.values() if a.online)
    if online and name not in by_trainers:
        raise Sim2dlError(
            f"{key}: with train.online the trainers choose by {' or '.join(by_trainers)} (the "
            f"model's loss at arrival), not {name}"
        )
    emulators = ACQUISITIONS[name].emulators
    if emulators and adaptive["emulator"] not in emulators:
        raise Sim2dlError(
            f"{key}: {name} does not work with simulate.adaptive.emulator "
            f"'{adaptive['emulator']}' (use {' or '.join(emulators)})"
        )


__all__ = ["ACQUISITIONS", "Acquisition", "Choice", "Context", "check_acquisition"]

"""The ways of choosing the next runs (simulate.adaptive.acquisition). Adding one: a module with an
`Acquisition` subclass, registered here."""

from __future__ import annotations

from pipeline.design.acquisitions.base import Acquisition, Choice, Context
from pipeline.design.acquisitions.breed import Breed
from pipeline.design.acquisitions.committee import Committee
from pipeline.design.acquisitions.error_weighted_variance import ErrorWeightedVariance
from pipeline.design.acquisitions.integrated_variance import IntegratedVariance
from pipeline.design.acquisitions.space_filling import SpaceFilling
from pipeline.design.acquisitions.variance import PosteriorVariance

ACQUISITIONS: dict[str, Acquisition] = {
    a.name: a
    for a in (SpaceFilling(), PosteriorVariance(), IntegratedVariance(), ErrorWeightedVariance(), Committee(), Breed())
}

__all__ = ["ACQUISITIONS", "Acquisition", "Choice", "Context"]

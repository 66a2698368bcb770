"""What every way of choosing the next runs implements (`Acquisition`), and what it is given (`Context`).

Memory and time: per acquisition (its file's docstring).
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from pipeline.design.emulator import Emulator
from pipeline.design.regimes import RegimeEmulator


@dataclass
class Context:
    """One round's state, in the unit cube."""

    done: np.ndarray  # runs with outputs (ok): points x dims
    avoid: np.ndarray  # every point run or chosen before, failed runs' included: never proposed again
    emulator: Emulator | RegimeEmulator  # simulate.adaptive.emulator's, fitted on `done` and their outputs
    pool: np.ndarray  # the round's candidates (space.candidate_pool)
    spacing: float  # a batch's minimum spacing
    round_index: int  # 1 for the first adaptive round
    rounds: int  # adaptive rounds planned (for schedules)
    runs_so_far: int  # runs chosen so far, failed included (the space-filling design's continuation)
    design: str  # the initial design's kind (sobol, lhs, random)
    seed: int
    settings: dict[str, Any]  # simulate.adaptive
    state: Path | None = (
        None  # where an acquisition keeps what it learned for the next round (a network's weights)
    )
    space_filled: int = 0  # runs the space-filling design's continuation gave after round 0 (share.py)
    # what an acquisition worked out for this round, kept for its later calls (a replace()d copy shares it)
    memo: dict[str, Any] = field(default_factory=dict)

    @property
    def rng(self) -> np.random.Generator:
        return np.random.default_rng([self.seed, self.round_index, 7])


@dataclass
class Choice:
    points: np.ndarray  # batch x dims, unit cube
    values: np.ndarray  # the acquisition's value at each when it was chosen
    chosen_by: list[str] | None = (
        None  # per point, what chose it (design/share.py: the share's or the acquisition)
    )
    figures: dict[str, Any] | None = None  # the round's row gains these (rounds.json, TensorBoard)


class Acquisition(ABC):
    name: (
        str  # simulate.adaptive.acquisition: the registry (acquisitions/__init__.py) is the one list of names
    )
    online: bool = False  # the trainers can choose by it as runs arrive (train.online)
    emulators: tuple[str, ...] = ()  # the simulate.adaptive.emulator values it works with; () for any

    def defers(self, context: Context) -> bool:
        """Whether it has nothing to choose by this round, so that the whole round continues the
        space-filling design (share.py); boundary_variance where the outputs show no separated regimes."""
        return False

    @abstractmethod
    def choose(self, context: Context, batch: int) -> Choice:
        """Up to `batch` new points, none within context.spacing of context.avoid nor of each other."""

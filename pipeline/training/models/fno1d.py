"""fno1d: the Fourier neural operator of fno.py on 1-D fields (X[, C]): a next state of 1-D trajectories
(train.next_state.spatial_dims: 1; PDEBench's advection, Burgers and reaction-diffusion sets), or a
field-to-field surrogate on a line; a run's parameters as FiLM's vector as in 2-D. The lowest `modes` of
the real FFT along X are mixed per block. Memory: modes x width² complex weights per block, and the line's
feature maps; time: two FFTs of the line per channel per block.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from pipeline.training.models.fno import build_operator

NAME = "fno1d"
SPATIAL_DIMS = 1
TASKS = ("surrogate", "next_state")  # a next state: train.next_state.spatial_dims: 1
OPTIONS = {"modes": 16}  # model_args: Fourier modes kept (at most half the line, plus one)


def build(input_shape: Sequence[int | None], outputs: int, task: Any, args: Mapping[str, Any]) -> Any:
    return build_operator(input_shape, task, args, SPATIAL_DIMS, NAME)

"""fno3d: the Fourier neural operator of fno.py on 3-D fields (D, H, W[, C]) to fields on the same grid: a
field-to-field surrogate of cubes (an N-body box's initial density to its final one), or a next state of
3-D trajectories (train.next_state.spatial_dims: 3; a run's parameters as FiLM's vector as in 2-D). The
lowest `modes` along each axis (four corners of low and high frequencies along D and H, the low along W)
are mixed per block. Memory: 4 x modes³ x width² complex weights per block, and the cube's feature maps;
time: two 3-D FFTs of the cube per channel per block.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from pipeline.training.models.fno import build_operator

NAME = "fno3d"
SPATIAL_DIMS = 3
TASKS = ("surrogate", "next_state")  # a next state: train.next_state.spatial_dims: 3
OPTIONS = {"modes": 8}  # model_args: Fourier modes kept per axis (at most half of each axis)


def build(input_shape: Sequence[int | None], outputs: int, task: Any, args: Mapping[str, Any]) -> Any:
    return build_operator(input_shape, task, args, SPATIAL_DIMS, NAME)

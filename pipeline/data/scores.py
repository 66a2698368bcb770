"""Scores several tiers share: VRMSE as The Well defines it (the surrogate tasks score with it, and the
emulator an adaptive design chooses with). Memory and time: linear in the arrays scored.
"""

from __future__ import annotations

import numpy as np

VARIANCE_FLOOR = 1e-7  # The Well's epsilon: a constant truth scores sqrt(mean error² / 1e-7)


def vrmse(predicted: np.ndarray, true: np.ndarray, over: tuple[int, ...] | None = None) -> np.ndarray:
    """Per sample (first axis): sqrt(mean((predicted - true)^2) / (var(true) + 1e-7)) over its entries, or
    over the axes `over` (a state's grid: one value per sample, step and field, as The Well scores)."""
    axes = tuple(range(1, true.ndim)) if over is None else over
    error = np.mean((predicted - true) ** 2, axis=axes) if axes else (predicted - true) ** 2
    spread = np.var(true, axis=axes) if axes else np.zeros(len(true))
    return np.sqrt(error / (spread + VARIANCE_FLOOR))

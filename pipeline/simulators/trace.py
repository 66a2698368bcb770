"""trace: variable-length records (lengths log-uniform over two orders of magnitude), like the execution
traces of etalumis, whose statistics depend on the cube family's parameters. Fields: trace (length x
channels float32), params (3 float32). Time: linear in the length."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import numpy as np

from pipeline.simulators.cube import PARAM_NAMES, draw_params

NAME = "trace"
PARAMETERS = PARAM_NAMES  # the cube's: a trace is drawn from the same parameters


def trace_record(params: np.ndarray, length: int, features: int, rng: np.random.Generator) -> np.ndarray:
    """A (length, features) random walk whose drift, step size and memory depend on the parameters."""
    sigma_8, n_s, omega_m = (float(p) for p in params)
    steps = rng.normal(loc=sigma_8 - 0.8, scale=n_s, size=(length, features))
    memory = np.clip(omega_m * 2, 0.0, 0.95)
    walk = np.empty_like(steps)
    walk[0] = steps[0]
    for t in range(1, length):
        walk[t] = memory * walk[t - 1] + steps[t]
    return walk.astype(np.float32)


def make(config: Mapping[str, Any], rng: np.random.Generator) -> dict[str, np.ndarray]:
    params = draw_params(rng, config["params"])
    tr = config["trace"]
    length = round(np.exp(rng.uniform(np.log(tr["min_length"]), np.log(tr["max_length"]))))
    return {"trace": trace_record(params, length, tr["channels"], rng), "params": params}

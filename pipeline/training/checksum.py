"""A model's weights as one hash (xxh3-128 over every weight's bytes, in the model's order): equal on every
rank when data parallelism kept them in step, and equal across runs when training is deterministic."""

from __future__ import annotations

from typing import Any

import numpy as np


def weights_checksum(model: Any) -> str:
    import xxhash

    h = xxhash.xxh3_128()
    for w in model.get_weights():
        h.update(np.ascontiguousarray(w).tobytes())
    return h.hexdigest()

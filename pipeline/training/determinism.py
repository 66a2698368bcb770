"""The same weights twice (`train.deterministic`, default true): the same config, data and rank count
train to bit-identical weights on a rerun.

What varies between two runs otherwise, and what fixes it:
- initial weights and dropout masks: TensorFlow's global seed, from `train.seed` (always set: a seed is
  free; `train.seed` changes the initialisation and every shuffle);
- record order: the shuffles are seeded from `train.seed` already; an interleave of shards that takes
  whichever file is ready first is not, so with determinism it takes them in turn;
- kernels that accumulate in a thread-dependent order: TensorFlow's op determinism;
- Horovod's tensor fusion: which gradients share a fused allreduce depends on timing, and with more than
  two ranks MPI's reduce-scatter sums an element in an order that depends on where it lies in the buffer;
  with determinism every gradient is reduced on its own (HOROVOD_FUSION_THRESHOLD=0, before hvd.init).

Costs (bench/train.py, `deterministic_cost`): fewer parallel kernels and no fusion; the figures are in
docs/benchmarks.md. Memory and time: nothing that grows with the data.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from typing import Any


def before_horovod(settings: Mapping[str, Any]) -> None:
    """Environment Horovod reads at hvd.init()."""
    if settings["deterministic"]:
        os.environ["HOROVOD_FUSION_THRESHOLD"] = "0"


def seed_and_fix(settings: Mapping[str, Any]) -> None:
    """Seed Python, NumPy and TensorFlow from train.seed; with train.deterministic, deterministic kernels.
    Before the model is built and before any operation runs."""
    import tensorflow as tf

    tf.keras.utils.set_random_seed(settings["seed"])
    if settings["deterministic"]:
        tf.config.experimental.enable_op_determinism()

"""The saved model of a surrogate trained on levels of one simulator (simulate.fidelities): it answers for
the costliest level by default.

The network learns every level's runs with the run's level among its inputs (the `fidelity_index` field in
the stack of the parameters, as config.check_level_input asks). A user wants the code they asked a
surrogate of: train/model takes the parameters alone and answers for the costliest level (its index put
into the input where the stack has it), and train/model_levels takes the level too, for the cheaper
levels. Where the level is not an entry of a flat stack of the model's input, the saved model keeps it as
an input (both paths hold the same model).

Memory and time: a Keras model that wraps the trained one; nothing per sample.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import numpy as np

from pipeline.ensemble.fidelity import INDEX_COLUMN


def level_offset(config: Mapping[str, Any], feature: str) -> int | None:
    """Where the level sits in the model's input: its place in the stack `feature` of convert.stack, when
    that stack is of scalars (a vector of one entry per field: the parameters and the level); else None."""
    fields = config["source"]["fields"]
    stack = config["convert"]["stack"].get(feature)
    if not config["simulate"]["fidelities"] or not stack:
        return None
    if any(int(np.prod(fields.get(name, {}).get("shape") or [1])) != 1 for name in stack):
        return None  # a stack of arrays: the level is a channel, not an entry
    level = [name for name in stack if fields.get(name, {}).get("column") == INDEX_COLUMN]
    return stack.index(level[0]) if level else None


def for_costliest_level(exported: Any, offset: int, level: int) -> Any:
    """The exported model with the level's entry of its input fixed at `level`: it takes the rest."""
    import tensorflow as tf

    width = int(exported.inputs[0].shape[-1])
    inputs = tf.keras.layers.Input(shape=(width - 1,), name=exported.input_names[0])
    fixed = tf.ones_like(inputs[:, :1]) * float(level)
    whole = tf.concat([inputs[:, :offset], fixed, inputs[:, offset:]], axis=1)
    return tf.keras.Model(inputs, exported(whole), name=f"{exported.name}_costliest_level")

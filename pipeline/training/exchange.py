"""Moving a trainer's model between the ranks of a population (pipeline.training.population), by MPI over
the job's fabric, never through the file system: a model is its weights and its optimizer's state (Adam's
moments and step count: an adopted model goes on as it was trained, not with a fresh optimizer whose first
steps are large), variables in a fixed order, packed as their raw bytes into one buffer (exact, any dtype).

Pairs swap with one Sendrecv between corresponding ranks; a truncation winner sends and its loser receives;
a trainer's first rank broadcasts its model to every rank for validation on the common split. Memory: two
or T buffers of the model and optimizer state (about 3x the weights each); time: one transfer of them.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np

_TAG = 4717  # the population's point-to-point messages


def state_variables(model: Any, optimizer: Any) -> list[Any]:
    """The variables that make a trainer's model: the model's (trainable and not), then the optimizer's,
    in their creation order (the same on every rank of the same model and optimizer)."""
    return [*model.variables, *optimizer.variables()]


def pack(variables: Sequence[Any]) -> np.ndarray:
    """The variables' values, as one byte buffer."""
    parts = [np.ascontiguousarray(v.numpy()).view(np.uint8).ravel() for v in variables]
    return np.concatenate(parts) if parts else np.zeros(0, np.uint8)


def numpy_dtype(variable: Any) -> np.dtype:
    """A variable's dtype as NumPy's: a tf.Variable's (as_numpy_dtype), or a Keras variable's name."""
    return np.dtype(getattr(variable.dtype, "as_numpy_dtype", variable.dtype))


def unpack(variables: Sequence[Any], buffer: np.ndarray) -> None:
    """Assign the values of a buffer `pack` made of variables of the same shapes and dtypes."""
    offset = 0
    for v in variables:
        dtype = numpy_dtype(v)
        size = int(np.prod(v.shape)) * dtype.itemsize
        v.assign(buffer[offset : offset + size].view(dtype).reshape(v.shape))
        offset += size
    if offset != buffer.size:
        raise ValueError(
            f"a model of {buffer.size} bytes received for variables of {offset}: not the same model"
        )


def swap(comm: Any, peer: int, buffer: np.ndarray) -> np.ndarray:
    """Send this rank's model to `peer` and receive peer's in one Sendrecv (no ordering to deadlock)."""
    received = np.empty_like(buffer)
    comm.Sendrecv(buffer, dest=peer, sendtag=_TAG, recvbuf=received, source=peer, recvtag=_TAG)
    return received


def send(comm: Any, peer: int, buffer: np.ndarray) -> None:
    comm.Send(buffer, dest=peer, tag=_TAG)


def receive(comm: Any, peer: int, like: np.ndarray) -> np.ndarray:
    received = np.empty_like(like)
    comm.Recv(received, source=peer, tag=_TAG)
    return received


def broadcast_models(comm: Any, leaders: Sequence[int], buffer: np.ndarray) -> list[np.ndarray]:
    """Every trainer's model on every rank: trainer t's from its first rank `leaders[t]`."""
    models = []
    for leader in leaders:
        model = buffer.copy() if comm.Get_rank() == leader else np.empty_like(buffer)
        comm.Bcast(model, root=leader)
        models.append(model)
    return models

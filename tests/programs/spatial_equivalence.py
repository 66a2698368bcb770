"""Run under `mpiexec -n N python spatial_equivalence.py SPLIT OUT.json`: the built-in cosmoflow model on
samples split across SPLIT ranks against the unsplit model on the same whole samples (one rank computes
both; every group draws its own samples). Rank 0 writes, per trainable tensor, the relative error of the
split gradient (after Horovod's average over all ranks, as training applies it) against the unsplit one
(averaged over the groups), the outputs' relative error, and the float32 floor: the same unsplit gradient
computed with the batch in reverse order, which sums the same terms in another order."""

from __future__ import annotations

import json
import os
import sys

os.environ.setdefault("TF_USE_LEGACY_KERAS", "1")

import horovod.tensorflow as hvd
import numpy as np
import tensorflow as tf
from mpi4py import MPI

from pipeline.training.models import cosmoflow
from pipeline.training.spatial.layers import init_horovod

SHAPE = (16, 12, 8, 2)  # depth, height, width, channels: unequal, so a wrong axis shows
ARGS = {"depth": 3, "width": 4, "dense": 8, "dropout": 0.0}


def relative(a: np.ndarray, b: np.ndarray) -> float:
    return float(np.linalg.norm(a - b) / max(np.linalg.norm(a), 1e-30))


def main(split: int, out: str) -> None:
    comm = MPI.COMM_WORLD
    layout, process_set = init_horovod(split, comm)
    tf.keras.utils.set_random_seed(7)
    whole = cosmoflow.build(SHAPE, 3, None, ARGS)
    parts = cosmoflow.build_split(SHAPE, 3, None, ARGS, layout, process_set)
    assert [w.shape for w in whole.weights] == [w.shape for w in parts.weights]
    # Trained-looking weights: non-zero biases, so that a bias applied on the wrong planes shows.
    rng = np.random.default_rng(11)
    whole.set_weights(
        [w + rng.normal(scale=0.05, size=w.shape).astype("float32") for w in whole.get_weights()]
    )
    parts.set_weights(whole.get_weights())
    data = np.random.default_rng(100 + layout.group)
    x = data.normal(size=(3, *SHAPE)).astype("float32")
    y = data.normal(size=(3, 3)).astype("float32")
    start, stop = layout.slab(SHAPE[0])

    @tf.function
    def gradients(model: tf.keras.Model, xs: tf.Tensor, ys: tf.Tensor, distributed: bool):
        with tf.GradientTape() as tape:
            outputs = model(xs, training=True)
            loss = tf.reduce_mean(tf.square(outputs - ys))
        if distributed:
            tape = hvd.DistributedGradientTape(tape)
        return outputs, tape.gradient(loss, model.trainable_variables)

    out_whole, g_whole = gradients(whole, tf.constant(x), tf.constant(y), False)
    _, g_reversed = gradients(whole, tf.constant(x[::-1].copy()), tf.constant(y[::-1].copy()), False)
    out_split, g_split = gradients(parts, tf.constant(x[:, start:stop]), tf.constant(y), True)
    average = [hvd.allreduce(g, op=hvd.Average, name=f"reference_{i}").numpy() for i, g in enumerate(g_whole)]
    floor = [hvd.allreduce(g, op=hvd.Average, name=f"floor_{i}").numpy() for i, g in enumerate(g_reversed)]
    names = [v.name for v in whole.trainable_variables]
    report = {
        "rank": layout.rank,
        "output_error": relative(out_whole.numpy(), out_split.numpy()),
        "gradients": {
            n: {"error": relative(a, b.numpy()), "floor": relative(a, f)}
            for n, a, b, f in zip(names, average, g_split, floor, strict=True)
        },
        "split_layers": sum(type(layer).__name__ == "SplitConv3D" for layer in parts.layers),
        "gathers": sum(type(layer).__name__ == "GatherDepth" for layer in parts.layers),
    }
    reports = comm.gather(report)
    if layout.rank == 0:
        with open(out, "w") as f:
            json.dump(reports, f)


if __name__ == "__main__":
    main(int(sys.argv[1]), sys.argv[2])

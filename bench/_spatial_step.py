"""One rank of bench/spatial.py: the built-in cosmoflow model (split across `split` ranks, or whole with
split 1) trained for a few steps on random samples of the given shape, as train's step does it (Horovod's
DistributedGradientTape, Adam). Writes this rank's figures to OUT_DIR/rank-R.json: peak RSS (ru_maxrss,
after the steps) and RSS after start-up (TensorFlow, Horovod, MPI loaded: the part no split divides), and
the median step time. Usage: _spatial_step.py OUT_DIR SPLIT DEPTH HEIGHT WIDTH CHANNELS BATCH STEPS."""

from __future__ import annotations

import json
import os
import resource
import statistics
import sys
import time
from pathlib import Path

os.environ.setdefault("TF_USE_LEGACY_KERAS", "1")


def status_mb(field: str = "VmRSS") -> float:
    with open("/proc/self/status") as f:
        return next(int(line.split()[1]) for line in f if line.startswith(f"{field}:")) / 1000


def main() -> None:
    out, split, *dims, batch, steps = sys.argv[1], *map(int, sys.argv[2:])
    import horovod.tensorflow as hvd
    import tensorflow as tf
    from mpi4py import MPI

    from pipeline.training.models import cosmoflow
    from pipeline.training.spatial.layers import init_horovod

    comm = MPI.COMM_WORLD
    layout, process_set = init_horovod(split, comm)
    shape = tuple(dims)
    args = {"depth": 3, "width": 8, "dense": 64, "dropout": 0.0}  # the demo's cosmoflow
    tf.keras.utils.set_random_seed(1)
    if split == 1:
        model = cosmoflow.build(shape, 3, None, args)
    else:
        model = cosmoflow.build_split(shape, 3, None, args, layout, process_set)
    optimizer = tf.keras.optimizers.Adam(1e-4)
    start, stop = layout.slab(shape[0])
    # this rank's planes of its group's samples (random: the values do not matter here, the sizes do)
    x = tf.random.stateless_normal(
        (batch, stop - start, *shape[1:]), seed=(layout.group, 1 + layout.spatial_rank)
    )
    y = tf.random.stateless_normal((batch, 3), seed=(layout.group, 0))
    baseline = status_mb()

    @tf.function
    def step() -> tf.Tensor:
        with tf.GradientTape() as tape:
            loss = tf.reduce_mean(tf.square(model(x, training=True) - y))
        tape = hvd.DistributedGradientTape(tape)
        grads = tape.gradient(loss, model.trainable_variables)
        optimizer.apply_gradients(zip(grads, model.trainable_variables, strict=True))
        return loss

    step()  # tracing and the first allocations
    times = []
    for _ in range(steps):
        comm.Barrier()
        t0 = time.perf_counter()
        float(step())
        times.append(time.perf_counter() - t0)
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1000
    figures = {
        "rank": layout.rank,
        "peak_rss_mb": peak,
        "startup_rss_mb": baseline,
        "step_s": statistics.median(times),
        "data_mb": status_mb("VmData"),
    }
    Path(out, f"rank-{layout.rank}.json").write_text(json.dumps(figures))


if __name__ == "__main__":
    main()

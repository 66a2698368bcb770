"""The layers of a model whose samples are split along depth across the S ranks of a spatial set.

Tensors are (batch, depth slab, height, width, channels). Horovod's collectives slice along their first
axis, so depth is moved to the front around each one. Every collective runs within the spatial set (a
Horovod process set); the gradients are written out here (custom gradients) rather than left to Horovod's
registered ones where the replicated part of the model makes them simpler and exact:

- halo exchange: `hvd.alltoall` of the edge planes (its registered gradient sends each halo's gradient
  back to its owner, where it is added to the edge planes);
- gather (the end of the split part): the replicated model downstream computes the same loss on every
  rank of the set, so each rank's gradient is its own planes of the incoming gradient (no communication);
- mean over the whole sample: the mean of the slabs' means (equal slabs), whose gradient is 1/S of the
  incoming one on each rank;
- split weights: their gradient is scaled by S on the way back (see the package docstring).

Memory: a split convolution keeps what the unsplit one keeps for its slab, plus 2 x HALO halo planes;
time: the convolution's share, two one-plane convolutions and one alltoall of 2 planes per call.
"""

from __future__ import annotations

from typing import Any

import horovod.tensorflow as hvd
import tensorflow as tf

from pipeline.training.spatial.layout import HALO, SpatialLayout

DEPTH_FIRST = [1, 0, 2, 3, 4]  # (B, D, H, W, C) <-> (D, B, H, W, C): its own inverse


def scale_gradient(tensor: Any, factor: float) -> Any:
    """`tensor` unchanged; its gradient multiplied by `factor`."""

    @tf.custom_gradient
    def scaled(t: Any) -> Any:
        return tf.identity(t), lambda g: g * tf.cast(factor, g.dtype)

    return scaled(tensor)


def halo_planes(x: Any, layout: SpatialLayout, process_set: Any) -> tuple[Any, Any]:
    """The HALO planes just below and just above this rank's slab, (B, HALO, H, W, C) each, from its depth
    neighbours (zero planes at the sample's edges): one alltoall within the spatial set, each rank sending
    its edge planes.

    Every rank builds the same operations, only their sizes differ (0 planes towards a missing
    neighbour): Horovod matches a collective across ranks by its name, which TensorFlow derives from the
    graph around it, the gradient's alltoall included. Only the edge planes are moved to the front for
    the alltoall (which splits its first axis), never the slab."""
    lower, upper = layout.neighbours()
    n_lower, n_upper = HALO * (lower is not None), HALO * (upper is not None)
    thickness = x.shape[1]
    sends = tf.transpose(tf.concat([x[:, :n_lower], x[:, thickness - n_upper :]], 1), DEPTH_FIRST)
    splits = [0] * layout.split
    if lower is not None:
        splits[lower] = HALO
    if upper is not None:
        splits[upper] = HALO
    received, _ = hvd.alltoall(sends, splits=splits, process_set=process_set)
    received = tf.transpose(received, DEPTH_FIRST)
    zeros = tf.zeros_like(x[:, :HALO])
    # from the lower rank its last planes come first, then the upper rank's first planes
    below = tf.concat([zeros[:, : HALO - n_lower], received[:, :n_lower]], 1)
    above = tf.concat([received[:, n_lower : n_lower + n_upper], zeros[:, : HALO - n_upper]], 1)
    below.set_shape(zeros.shape)  # Horovod's ops leave the axis unknown; Keras' shape inference needs it
    above.set_shape(zeros.shape)
    return below, above


class SpatialLayer(tf.keras.layers.Layer):
    """A layer that works within this rank's spatial set (its layout and Horovod process set)."""

    def __init__(self, layout: SpatialLayout, process_set: Any, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.layout, self.process_set = layout, process_set


class SplitConv3D(SpatialLayer):
    """Conv3D(filters, 3, padding='same') on a depth slab. The slab is convolved as it is (SAME: zero
    planes beyond it), then the neighbours' halo planes add their terms to the first and last output
    planes (the kernel's outer depth taps, SAME across), in place: what backpropagation keeps is what
    the unsplit layer keeps (no padded copy of the slab). Its weights have Conv3D's names and shapes, so a
    split model and an unsplit one exchange weights."""

    def __init__(self, filters: int, layout: SpatialLayout, process_set: Any, **kwargs: Any) -> None:
        super().__init__(layout, process_set, **kwargs)
        self.filters = filters

    def build(self, input_shape: Any) -> None:
        channels = int(input_shape[-1])
        self.kernel = self.add_weight(
            name="kernel", shape=(3, 3, 3, channels, self.filters), initializer="glorot_uniform"
        )
        self.bias = self.add_weight(name="bias", shape=(self.filters,), initializer="zeros")
        super().build(input_shape)

    def call(self, x: Any) -> Any:
        below, above = halo_planes(x, self.layout, self.process_set)
        kernel = tf.cast(scale_gradient(self.kernel, self.layout.split), x.dtype)
        bias = tf.cast(scale_gradient(self.bias, self.layout.split), x.dtype)
        same = [1] * 5
        y = tf.nn.conv3d(x, kernel, strides=same, padding="SAME")
        # cross-correlation: output plane d sums input planes d-1, d, d+1 with taps 0, 1, 2
        first = tf.nn.conv3d(below, kernel[0:1], strides=same, padding="SAME")[:, 0]
        last = tf.nn.conv3d(above, kernel[2:3], strides=same, padding="SAME")[:, 0]
        batch, thickness = tf.shape(x)[0], x.shape[1]
        rows = tf.range(batch)
        index = tf.concat(
            [tf.stack([rows, tf.zeros_like(rows)], 1), tf.stack([rows, tf.fill([batch], thickness - 1)], 1)],
            0,
        )
        y = tf.tensor_scatter_nd_add(y, index, tf.concat([first, last], 0))
        return tf.nn.bias_add(y, bias)


class GatherDepth(SpatialLayer):
    """The whole sample on every rank of the set, from its slabs: the end of the split part."""

    def call(self, x: Any) -> Any:
        index = self.layout.spatial_rank

        @tf.custom_gradient
        def gather(slab: Any) -> Any:
            planes = tf.transpose(slab, DEPTH_FIRST)
            whole = hvd.allgather(planes, process_set=self.process_set)

            def grad(g: Any) -> Any:
                thickness = tf.shape(planes)[0]
                mine = tf.transpose(g, DEPTH_FIRST)[index * thickness : (index + 1) * thickness]
                return tf.transpose(mine, DEPTH_FIRST)

            return tf.transpose(whole, DEPTH_FIRST), grad

        whole = gather(x)
        whole.set_shape(
            [x.shape[0], None if x.shape[1] is None else x.shape[1] * self.layout.split, *x.shape[2:]]
        )
        return whole


class SampleMean(SpatialLayer):
    """(B, C): each channel's mean over the whole sample's positions, from the slabs' means."""

    def call(self, x: Any) -> Any:
        split = self.layout.split

        @tf.custom_gradient
        def mean_of_means(local: Any) -> Any:
            whole = hvd.allreduce(local, op=hvd.Average, process_set=self.process_set)
            return whole, lambda g: g / tf.cast(split, g.dtype)

        local = tf.reduce_mean(x, axis=[1, 2, 3])
        whole = mean_of_means(local)
        whole.set_shape(local.shape)
        return whole


def init_horovod(split: int, comm: Any) -> tuple[SpatialLayout, Any]:
    """hvd.init on comm's ranks, with one process set per spatial set (every rank registers all of them, as
    Horovod's static process sets require; a split is of the whole job, comm its world); returns this
    rank's layout and its spatial set (None without a split)."""
    layout = SpatialLayout(split, comm.Get_size(), comm.Get_rank())
    if split == 1:
        from mpi4py import MPI

        # the job's world as Horovod's own default (as the train step always started it); a trainer's or the
        # training ranks' communicator as given
        hvd.init(comm=None if comm == MPI.COMM_WORLD else comm)
        return layout, None
    if split == comm.Get_size():  # one set of every rank: Horovod's global set
        hvd.init()
        return layout, hvd.global_process_set
    sets = [hvd.ProcessSet(ranks) for ranks in layout.spatial_sets()]
    hvd.init(process_sets=sets)
    return layout, sets[layout.group]

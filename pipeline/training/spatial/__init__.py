"""Spatial parallelism (`train.spatial.ranks_per_sample: S`): each sample split along its first spatial
axis (depth) into S slabs, one per rank of a spatial set; the job's ranks are S x data-parallel groups.

    layout.py  which ranks share a sample, each rank's slab, which levels of a model stay split, and the
               config checks (pure: no TensorFlow)
    layers.py  the split layers: halo exchange (Horovod alltoall within the spatial set), a convolution
               VALID along depth and SAME across, the gather that ends the split part, a mean over the
               whole sample, and the gradient scale that makes the stock data-parallel average right

Gradients: a split layer's weight gradient on one rank is its slab's share; the sum over the spatial set
is the sample's. Horovod's DistributedGradientTape averages over all G x S ranks, so a split layer scales
its weights' gradients by S on the way back (sum over the set, mean over the groups); the replicated part
after the gather has the whole gradient on every rank of a set already. Memory per rank: the slab's
activations (1/S of the split levels) plus the replicated tail; time: the split levels' compute / S plus
one halo exchange of 2 planes per split convolution.
"""

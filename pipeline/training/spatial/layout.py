"""Where each rank stands in spatial parallelism, and the checks made before any data is read. Pure
(no TensorFlow, no MPI): unit-tested on plain numbers. Memory and time: O(ranks) for the rank lists."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from pipeline import Sim2dlError

KEY = "train.spatial.ranks_per_sample"
HALO = 1  # planes each split convolution needs from each neighbour: (kernel 3 - 1) / 2


@dataclass(frozen=True)
class SpatialLayout:
    """Rank `rank` of `size`, in spatial sets of `split` consecutive ranks (one set per data-parallel
    group)."""

    split: int
    size: int
    rank: int

    @property
    def groups(self) -> int:
        """Data-parallel groups: each reads its own samples."""
        return self.size // self.split

    @property
    def group(self) -> int:
        return self.rank // self.split

    @property
    def spatial_rank(self) -> int:
        """This rank's slab: 0 holds the first planes of the sample."""
        return self.rank % self.split

    def spatial_sets(self) -> list[list[int]]:
        """Every spatial set's ranks, in group order (each rank must register all of them with Horovod)."""
        return [list(range(g * self.split, (g + 1) * self.split)) for g in range(self.groups)]

    def slab(self, depth: int) -> tuple[int, int]:
        """This rank's planes [start, stop) of a sample `depth` planes deep."""
        thickness = depth // self.split
        return self.spatial_rank * thickness, (self.spatial_rank + 1) * thickness

    def neighbours(self) -> tuple[int | None, int | None]:
        """The spatial ranks below and above this one (None at the sample's edges)."""
        s = self.spatial_rank
        return (s - 1 if s > 0 else None), (s + 1 if s < self.split - 1 else None)


def split_levels(depth: int, split: int, levels: int) -> int:
    """How many conv + 2x pooling levels of a model keep the sample split: a level stays split while its
    slab is at least HALO planes thick before the convolution and even before the pooling (a 2x2x2 pool
    of an even slab needs no halo); the first level where that fails gathers the slabs and runs
    replicated from there on."""
    if split == 1:
        return 0
    thickness = depth // split
    for level in range(levels):
        if thickness < HALO or thickness % 2:
            return level
        thickness //= 2
    return levels


def check_spatial(
    split: int, size: int | None, shape: Sequence[int | None] | None, model: str, splittable: bool
) -> None:
    """Config errors naming the value, before any data is read: S must divide the ranks (size; None where
    they are not known yet) and the sample's depth (its first axis; shape None where it is not known yet),
    and the model must be one that can split."""
    if split == 1:
        return
    if not splittable:
        raise Sim2dlError(
            f"config key '{KEY}': {split}, but model '{model}' cannot be split (built-ins that can: "
            "cosmoflow); set split: 1, or crop the samples (convert.crop)"
        )
    if size is not None and size % split:
        raise Sim2dlError(
            f"config key '{KEY}': {split} does not divide train's {size} ranks (ranks = split x groups)"
        )
    if shape is not None:
        depth = shape[0]
        if depth is None or depth % split:
            raise Sim2dlError(
                f"config key '{KEY}': {split} does not divide the samples' depth (first axis of shape "
                f"{list(shape)})"
            )
        if depth // split < 2 * HALO:
            raise Sim2dlError(
                f"config key '{KEY}': slabs of {depth // split} planes are thinner than the {2 * HALO} a "
                f"split convolution needs (depth {depth}): use a smaller split"
            )

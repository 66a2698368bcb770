"""The reaction simulator as a program one ensemble run executes (simulate.command), as a user's own
simulator would be: one run = one set of parameters (vx, vy, kappa, r), its final state, mass curve and
trajectory written to one HDF5 file (`reaction.h5`, written beside and renamed into place).

    python -m pipeline.simulators.reaction_run --out {out} --vx {vx} --vy {vy} --kappa {kappa} --r {r}
        [--size 32 --steps 50 --snapshots 10 --t-end 1.0 --blobs fixed --seed {seed}]

What a surrogate trained while the ensemble runs (train.online with train.task: surrogate) learns from.
Memory: one trajectory. Time: steps x an FFT of size².
"""

from __future__ import annotations

import argparse
import os
from pathlib import Path

import numpy as np

from pipeline.simulators.reaction import FIXED_BLOBS, blobs, solve


def arguments(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--out", type=Path, required=True)
    for name in ("vx", "vy", "kappa", "r"):
        parser.add_argument(f"--{name}", type=float, required=True)
    parser.add_argument("--size", type=int, default=32)
    parser.add_argument("--steps", type=int, default=50)
    parser.add_argument("--snapshots", type=int, default=10)
    parser.add_argument("--t-end", type=float, default=1.0)
    # --initial: the old name (simulate.reaction.initial), accepted until release 0.2
    parser.add_argument("--blobs", "--initial", choices=["fixed", "random"], default="fixed")
    parser.add_argument("--seed", type=int, default=0, help="with --blobs random: the blobs' seed")
    return parser.parse_args(argv)


def main(argv: list[str] | None = None) -> None:
    import h5py

    args = arguments(argv)
    params = np.array([args.vx, args.vy, args.kappa, args.r])
    if args.blobs == "fixed":
        centres = np.array(FIXED_BLOBS)
    else:
        rng = np.random.default_rng(args.seed)
        count = int(rng.integers(2, 5))
        centres = np.column_stack([rng.uniform(0, 1, (count, 2)), rng.uniform(0.04, 0.1, count)])
    initial = blobs(args.size, centres)
    trajectory = solve(initial, params, args.t_end, args.steps, args.snapshots)
    args.out.mkdir(parents=True, exist_ok=True)
    path = args.out / "reaction.h5"
    tmp = path.with_name(f".{path.name}.tmp")
    with h5py.File(tmp, "w") as f:
        f["params"] = params.astype(np.float32)
        f["initial"] = initial.astype(np.float32)
        f["state"] = trajectory[-1].astype(np.float32)
        f["mass"] = trajectory.mean(axis=(1, 2)).astype(np.float32)
        f["trajectory"] = trajectory.astype(np.float32)
    os.replace(tmp, path)


if __name__ == "__main__":
    main()

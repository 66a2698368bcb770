"""A built-in simulator whose output changes sharply in part of its parameter space: a bistable medium
(the Nagumo / Allee equation) that ignites or dies out by a threshold,

    du/dt = kappa laplacian u + growth u (1 - u) (u - a)

on the periodic unit square, from a level u = `level` with a small fixed ripple (amplitude 0.03, the same
every run), a hot wall (u = 1) and a cold wall (u = 0) held at two strips. Where the level is well above
the threshold a the medium ignites everywhere (u -> 1), well below it dies out (u -> 0, a front creeping
from the hot wall); in a band along level = a the ripple's crests ignite and spread into patches: the final
state jumps across the band and is smooth on both sides. The walls keep a structure in every state, so
each has a spread to score by (VRMSE divides by it). The demonstration of adaptive design
(config/presets/adaptive-fronts.yaml): where to run matters.

    python -m pipeline.simulators.bistable_run --out {out} --level {level} --a {a}
        [--size 32 --steps 150 --t-end 1.5 --kappa 0.001 --growth 10 --fail-above A]

Writes bistable.h5 in --out (beside, then renamed): params (level, a: float32[2]), state (the field at
t_end: size x size), mass (the mean of u at 10 evenly spaced times). Deterministic: the same parameters
give the same data. --fail-above exits 3 for a > A without writing (a simulator that fails in part of its
space: the tests of failed runs). Solved by splitting: diffusion exactly in Fourier space, then the cubic
reaction by an explicit step (growth x dt = 0.1 at the defaults: stable). Time: steps x an FFT of size²;
memory: a few fields.
"""

from __future__ import annotations

import argparse
import os
import sys
from pathlib import Path

import numpy as np

RIPPLE, RIPPLE_SEED = 0.03, 5
FAILED_EXIT = 3
SNAPSHOTS = 10


def ripple(size: int) -> np.ndarray:
    """A smooth random field of unit spread, the same for every run (a fixed seed)."""
    k = np.fft.fftfreq(size, 1.0 / size)
    white = np.random.default_rng(RIPPLE_SEED).normal(size=(size, size))
    field = np.fft.ifft2(np.fft.fft2(white) * np.exp(-(k[:, None] ** 2 + k[None, :] ** 2) / 8)).real
    return field / field.std()


def solve(
    level: float,
    a: float,
    size: int = 32,
    steps: int = 150,
    t_end: float = 1.5,
    kappa: float = 1e-3,
    growth: float = 10.0,
) -> tuple[np.ndarray, np.ndarray]:
    """(final state, mean of u at SNAPSHOTS evenly spaced times, the last at t_end)."""
    hot, cold = np.zeros((size, size), bool), np.zeros((size, size), bool)
    hot[:, : max(1, size // 16)] = True
    cold[:, size // 2 : size // 2 + max(1, size // 16)] = True
    u = np.clip(level + RIPPLE * ripple(size), 0.0, 1.0)
    k = 2 * np.pi * np.fft.fftfreq(size, 1.0 / size)
    dt = t_end / steps
    propagator = np.exp(-kappa * (k[:, None] ** 2 + k[None, :] ** 2) * dt)
    keep = {round((i + 1) * steps / SNAPSHOTS) for i in range(SNAPSHOTS)}
    mass = []
    for step in range(1, steps + 1):
        u[hot], u[cold] = 1.0, 0.0
        u = np.fft.ifft2(np.fft.fft2(u) * propagator).real
        u = u + dt * growth * u * (1.0 - u) * (u - a)
        u[hot], u[cold] = 1.0, 0.0
        if step in keep:
            mass.append(u.mean())
    return u, np.array(mass)


def main(argv: list[str] | None = None) -> None:
    import h5py

    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--out", type=Path, required=True)
    parser.add_argument("--level", type=float, required=True, help="the initial level of u")
    parser.add_argument(
        "--a", type=float, required=True, help="the threshold (0 < a < 1/2 for fronts that spread)"
    )
    parser.add_argument("--size", type=int, default=32)
    parser.add_argument("--steps", type=int, default=150)
    parser.add_argument("--t-end", type=float, default=1.5)
    parser.add_argument("--kappa", type=float, default=1e-3)
    parser.add_argument("--growth", type=float, default=10.0)
    parser.add_argument(
        "--fail-above", type=float, default=None, help="exit 3, writing nothing, for a above this"
    )
    args = parser.parse_args(argv)
    if args.fail_above is not None and args.a > args.fail_above:
        print(f"bistable_run: a = {args.a} above --fail-above {args.fail_above}: failing", file=sys.stderr)
        sys.exit(FAILED_EXIT)
    state, mass = solve(args.level, args.a, args.size, args.steps, args.t_end, args.kappa, args.growth)
    args.out.mkdir(parents=True, exist_ok=True)
    path = args.out / "bistable.h5"
    tmp = path.with_name(f".{path.name}.tmp")
    with h5py.File(tmp, "w") as f:
        f["params"] = np.array([args.level, args.a], np.float32)
        f["state"] = state.astype(np.float32)
        f["mass"] = mass.astype(np.float32)
    os.replace(tmp, path)


if __name__ == "__main__":
    main()

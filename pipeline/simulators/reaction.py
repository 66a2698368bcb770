"""reaction: a 2-D front that spreads, drifts and blurs: the Fisher-KPP advection-diffusion-reaction equation

    du/dt + v . grad u = kappa laplacian u + r u (1 - u)

on the periodic unit square, from blobs of concentration. The parameters (velocity v = (vx, vy), diffusivity
kappa, growth rate r) are drawn per sample; the blobs are the same for every sample (blobs: fixed, so the
outputs are a function of the parameters alone: the forward surrogate's data) or drawn per sample (random:
trajectories of states for a next-state surrogate). Non-linear (the logistic growth saturates at 1, so
fronts form and merge), yet smooth in its parameters.

Solved by operator splitting per time step: advection and diffusion exactly in Fourier space, then the
logistic growth exactly at every point. Fields: params (vx, vy, kappa, r: float32[4]), initial (the field
at t = 0: size x size), state (the field at t_end), mass (the mean concentration at each snapshot:
float32[snapshots]) and trajectory (snapshots x size x size, evenly spaced in time, the last at t_end).
Time: steps x an FFT of size² per sample; memory: the trajectory.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import numpy as np

NAME = "reaction"
PARAMETERS = ("vx", "vy", "kappa", "r")
FIXED_BLOBS = ((0.3, 0.3, 0.08), (0.7, 0.45, 0.05), (0.45, 0.75, 0.06))  # (x, y, radius) of blobs: fixed


def blobs(size: int, centres: Any) -> np.ndarray:
    """Gaussian blobs of peak 0.9 at (x, y, radius) on the periodic grid (distances wrap around)."""
    grid = (np.arange(size) + 0.5) / size
    field = np.zeros((size, size))
    for x, y, radius in centres:
        dx = (grid[None, :] - x + 0.5) % 1.0 - 0.5
        dy = (grid[:, None] - y + 0.5) % 1.0 - 0.5
        field = np.maximum(field, 0.9 * np.exp(-(dx**2 + dy**2) / (2 * radius**2)))
    return field


def solve(u0: np.ndarray, params: np.ndarray, t_end: float, steps: int, snapshots: int) -> np.ndarray:
    """The states at `snapshots` evenly spaced times up to t_end (the last at t_end), by `steps` split
    steps."""
    size = u0.shape[0]
    vx, vy, kappa, r = (float(p) for p in params)
    dt = t_end / steps
    k = 2 * np.pi * np.fft.fftfreq(size, 1.0 / size)
    ky, kx = k[:, None], k[None, :]
    propagator = np.exp((-1j * (kx * vx + ky * vy) - kappa * (kx**2 + ky**2)) * dt)
    growth = np.exp(r * dt)
    keep = {round((i + 1) * steps / snapshots) for i in range(snapshots)}
    out, u = [], u0.astype(np.float64)
    for step in range(1, steps + 1):
        u = np.fft.ifft2(np.fft.fft2(u) * propagator).real
        u = u * growth / (1.0 + u * (growth - 1.0))  # the logistic step, exact for u in [0, 1]
        if step in keep:
            out.append(u.copy())
    return np.stack(out)


def draw(rng: np.random.Generator, settings: Mapping[str, Any]) -> np.ndarray:
    """(vx, vy, kappa, r): velocities uniform, kappa log-uniform, r uniform over their ranges."""
    low, high = settings["velocity"]
    vx, vy = rng.uniform(low, high, 2)
    kappa = np.exp(rng.uniform(*np.log(settings["diffusivity"])))
    r = rng.uniform(*settings["growth"])
    return np.array([vx, vy, kappa, r])


def make(config: Mapping[str, Any], rng: np.random.Generator) -> dict[str, np.ndarray]:
    settings = config["reaction"]
    size = settings["size"]
    params = draw(rng, settings)
    if settings["blobs"] == "fixed":
        centres: Any = FIXED_BLOBS
    else:
        count = int(rng.integers(2, 5))
        centres = np.column_stack([rng.uniform(0, 1, (count, 2)), rng.uniform(0.04, 0.1, count)])
    initial = blobs(size, centres)
    trajectory = solve(initial, params, settings["t_end"], settings["time_steps"], settings["snapshots"])
    return {
        "params": params.astype(np.float32),
        "initial": initial.astype(np.float32),
        "state": trajectory[-1].astype(np.float32),
        "mass": trajectory.mean(axis=(1, 2)).astype(np.float32),
        "trajectory": trajectory.astype(np.float32),
    }

"""cube: a 3D density cube per sample, a lognormal transform of a Gaussian random field whose power
spectrum P(k) ∝ k^n_s T(k; Omega_m)^2 (BBKS transfer function) is normalised to sigma_8, Poisson-sampled
into particle counts, so that a network can learn to recover (sigma_8, n_s, Omega_m) from the cube.
Fields: density (size³ float32), params (3 float32). Time: an FFT of size³ per sample."""

from __future__ import annotations

import functools
from collections.abc import Mapping
from typing import Any

import numpy as np

NAME = "cube"
PARAM_NAMES = ("sigma_8", "n_s", "omega_m")
PARAMETERS = PARAM_NAMES  # the names of the entries of a sample's `params`
HUBBLE = 0.7
SIGMA_RADIUS = 8.0  # Mpc/h: sigma_8 is the rms density contrast in spheres of this radius


def draw_params(rng: np.random.Generator, ranges: Mapping[str, list[float]]) -> np.ndarray:
    return np.array([rng.uniform(*ranges[name]) for name in PARAM_NAMES], dtype=np.float32)


def bbks_transfer(k: np.ndarray, omega_m: float) -> np.ndarray:
    q = k / (omega_m * HUBBLE)
    q = np.where(q == 0, 1e-12, q)
    return (
        np.log1p(2.34 * q)
        / (2.34 * q)
        * (1 + 3.89 * q + (16.1 * q) ** 2 + (5.46 * q) ** 3 + (6.71 * q) ** 4) ** -0.25
    )


def top_hat_window(kr: np.ndarray) -> np.ndarray:
    kr = np.where(kr == 0, 1e-12, kr)
    return 3 * (np.sin(kr) - kr * np.cos(kr)) / kr**3


@functools.lru_cache(maxsize=8)
def wave_numbers(size: int, box_size: float) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """|k| on the rfft grid, the window of radius SIGMA_RADIUS there, and each mode's weight (rfft
    halves the last axis: modes stand for two, all but kz=0 and Nyquist). The same for every sample."""
    k1d = 2 * np.pi * np.fft.fftfreq(size, d=box_size / size)
    kz = 2 * np.pi * np.fft.rfftfreq(size, d=box_size / size)
    k = np.sqrt(k1d[:, None, None] ** 2 + k1d[None, :, None] ** 2 + kz[None, None, :] ** 2)
    weight = np.full(kz.shape, 2.0)
    weight[0] = 1.0
    if size % 2 == 0:
        weight[-1] = 1.0
    for array in (k, weight):
        array.flags.writeable = False  # shared by every call
    window = top_hat_window(k * SIGMA_RADIUS) ** 2
    window.flags.writeable = False
    return k, window, weight


def density_cube(
    params: np.ndarray, size: int, box_size: float, mean_density: float, rng: np.random.Generator
) -> np.ndarray:
    """Particle counts per cell (float32, shape size^3) of a lognormal field with these parameters."""
    sigma_8, n_s, omega_m = (float(p) for p in params)
    k, window, weight = wave_numbers(size, box_size)
    power = np.where(k > 0, k**n_s * bbks_transfer(k, omega_m) ** 2, 0.0)
    sigma8_unit = np.sum(weight * power * window) / size**3
    amplitude = sigma_8 / np.sqrt(sigma8_unit)
    noise = np.fft.rfftn(rng.standard_normal((size, size, size)))
    gaussian = np.fft.irfftn(noise * np.sqrt(power) * amplitude, s=(size, size, size), axes=(0, 1, 2))
    lognormal = np.exp(gaussian - gaussian.var() / 2)
    return rng.poisson(mean_density * lognormal).astype(np.float32)


def make(config: Mapping[str, Any], rng: np.random.Generator) -> dict[str, np.ndarray]:
    params = draw_params(rng, config["params"])
    cube = config["cube"]
    density = density_cube(params, cube["size"], cube["box_size"], cube["mean_density"], rng)
    return {"density": density, "params": params}

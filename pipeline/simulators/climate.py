"""climate: DeepCAM-like 2-D fields for segmentation. Each sample is a (size, size, 4) float32 field of
sea-level pressure anomaly, wind u, wind v and moisture over a smooth noisy background, with 0..cyclones
tropical-cyclone-like vortices (a pressure low with tangential winds, radius drawn per vortex) and
0..rivers atmospheric-river-like bands of moisture, and a (size, size) uint8 mask: 0 background,
1 cyclone, 2 atmospheric river (cyclones win where they overlap). Most pixels are background, as in
climate masks. Fields: fields, mask, cyclones (the number of vortices, int64). Time: a few FFTs of
size² per sample.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import numpy as np

NAME = "climate"
CHANNELS = ("pressure", "wind_u", "wind_v", "moisture")
CLASSES = ("background", "cyclone", "river")


def smooth_noise(rng: np.random.Generator, size: int, channels: int, scale: float) -> np.ndarray:
    """Gaussian noise with a power-law spectrum (large-scale weather), unit variance per channel."""
    k = np.sqrt(np.fft.fftfreq(size)[:, None] ** 2 + np.fft.rfftfreq(size)[None, :] ** 2)
    amplitude = np.where(k > 0, (k + 1.0 / size) ** -1.5, 0.0)
    noise = np.fft.rfft2(rng.standard_normal((channels, size, size))) * amplitude
    field = np.fft.irfft2(noise, s=(size, size))
    field /= field.std(axis=(1, 2), keepdims=True) + 1e-12
    return np.moveaxis(field, 0, -1) * scale


def make(config: Mapping[str, Any], rng: np.random.Generator) -> dict[str, np.ndarray]:
    settings = config["climate"]
    size = settings["size"]
    fields = smooth_noise(rng, size, len(CHANNELS), settings["noise"])
    mask = np.zeros((size, size), np.uint8)
    y, x = np.mgrid[0:size, 0:size].astype(np.float64)
    for _ in range(int(rng.integers(0, settings["rivers"] + 1))):
        angle = rng.uniform(0, np.pi)
        offset = rng.uniform(0.25, 0.75) * size
        width = rng.uniform(0.03, 0.06) * size
        distance = np.abs((x - size / 2) * np.sin(angle) - (y - size / 2) * np.cos(angle) - (offset - size / 2))
        fields[..., 3] += rng.uniform(1.5, 2.5) * np.exp(-(distance**2) / (2 * width**2))
        mask[distance < 1.5 * width] = 2
    cyclones = int(rng.integers(0, settings["cyclones"] + 1))
    for _ in range(cyclones):
        cx, cy = rng.uniform(0.1, 0.9, size=2) * size
        radius = rng.uniform(0.05, 0.1) * size
        strength = rng.uniform(1.5, 3.0)
        dx, dy = x - cx, y - cy
        r = np.sqrt(dx**2 + dy**2) + 1e-9
        fields[..., 0] -= strength * np.exp(-(r**2) / (2 * radius**2))
        # Tangential wind of a Rankine-like vortex: rising to the radius, decaying beyond.
        speed = strength * (r / radius) * np.exp(0.5 * (1 - (r / radius) ** 2))
        fields[..., 1] += -speed * dy / r
        fields[..., 2] += speed * dx / r
        mask[r < 1.5 * radius] = 1
    return {"fields": fields.astype(np.float32), "mask": mask, "cyclones": np.int64(cyclones)}

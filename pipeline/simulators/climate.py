"""climate: DeepCAM-like 2-D fields for segmentation. Each sample is a (size, size, 4) float32 field of
sea-level pressure anomaly, wind u, wind v and moisture over a smooth noisy background, with 0..cyclones
tropical-cyclone-like vortices (a pressure low with tangential winds, radius drawn per vortex) and
0..rivers atmospheric-river-like bands of moisture, and a (size, size) uint8 mask: 0 background,
1 cyclone, 2 atmospheric river (cyclones win where they overlap). Most pixels are background, as in
climate masks. Fields: fields, mask, cyclones (the number of vortices, int64), anomaly (int64: 1 where
the output was corrupted). With `anomalies` (a share of the samples), a sample's output is corrupted as an
instrument or I/O fault corrupts it: a block of an eighth of the grid per side stuck at one value in one
channel, and SPIKES isolated pixels of SPIKE_SIGMAS standard deviations (no NaN: the anomaly must be found,
not filtered): local faults, a few dozen of thousands of values. The corruption is drawn after everything
else, so a sample's clean fields do not depend on it. Time: a few FFTs of size² per sample.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import numpy as np

NAME = "climate"
PARAMETERS: tuple[str, ...] = ()  # no `params` array
CHANNELS = ("pressure", "wind_u", "wind_v", "moisture")
CLASSES = ("background", "cyclone", "river")
SPIKES = 8
SPIKE_SIGMAS = 6.0


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
        distance = np.abs(
            (x - size / 2) * np.sin(angle) - (y - size / 2) * np.cos(angle) - (offset - size / 2)
        )
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
    anomaly = settings.get("anomalies", 0) > 0 and rng.random() < settings["anomalies"]
    if anomaly:
        corrupt(fields, rng)
    return {
        "fields": fields.astype(np.float32),
        "mask": mask,
        "cyclones": np.int64(cyclones),
        "anomaly": np.int64(anomaly),
    }


def corrupt(fields: np.ndarray, rng: np.random.Generator) -> None:
    """In place: a block of one channel stuck at that channel's largest value, and SPIKES spikes of
    ±SPIKE_SIGMAS of the channel's standard deviation at random pixels of random channels."""
    size, channels = fields.shape[0], fields.shape[-1]
    side = max(size // 8, 1)
    row, column = rng.integers(0, size - side + 1, size=2)
    channel = int(rng.integers(0, channels))
    fields[row : row + side, column : column + side, channel] = fields[..., channel].max()
    spread = fields.std(axis=(0, 1))
    for _ in range(SPIKES):
        y, x, c = int(rng.integers(0, size)), int(rng.integers(0, size)), int(rng.integers(0, channels))
        fields[y, x, c] += rng.choice([-1.0, 1.0]) * SPIKE_SIGMAS * spread[c]

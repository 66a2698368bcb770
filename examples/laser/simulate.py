#!/usr/bin/env python3
"""A laser pulse's field as a particle-in-cell code's diagnostics write it: the user's simulator of
bench/learning.py's openPMD field set (issue #55). Not a PIC code: the field is the paraxial Gaussian
pulse in vacuum (Siegman's solution of the wave equation, in 2-D slab geometry), which is what a PIC code
launches and what its E-field diagnostic holds before the pulse meets a plasma, plus cell-level noise as
a PIC code's finite particle count leaves on it.

One run: a pulse of peak normalised amplitude a0 at focus, waist w0 and duration tau (FWHM of the
intensity), written as an openPMD 1.1 series (openPMD-api, group-based HDF5: every iteration in
`diags/openpmd.h5`, so that a run's snapshots stay in one split with merge.split_by: file) with a moving
window: ITERATIONS snapshots of E (x, y, z components; a 64 x 96 (x, z) grid of 0.5 x 0.2 um cells) in
V/m, each with the pulse at a random distance from focus (within half a Rayleigh length: the waist, the
wavefront's curvature, the Gouy phase and the amplitude change as they do), a random position in the
window and a random carrier-envelope phase. The run's parameters are series attributes.

    simulate.py --a0 2.0 --waist 6.0 --duration 20.0 --seed 7 --out DIR

Why a0 is worth learning from the field: it is the pulse's peak, a local quantity, while the field's
moments and power spectrum mix the amplitude with the pulse's extent (variance ~ a0^2 w0 tau).
Memory and time: a few (64 x 96) float64 grids per snapshot; milliseconds per run.
"""

from __future__ import annotations

import argparse
from pathlib import Path

import numpy as np

WAVELENGTH = 0.8e-6  # m
C = 299_792_458.0
E_PER_A0 = 9.109_383_7e-31 * C * (2 * np.pi * C / WAVELENGTH) / 1.602_176_634e-19  # m_e c omega / e, V/m
CELLS = (64, 96)  # (x, z)
SPACING = (0.5e-6, 0.2e-6)  # m
ITERATIONS = 4
NOISE = 0.05  # a0 units per cell


def pulse(a0: float, waist: float, duration: float, rng: np.random.Generator) -> np.ndarray:
    """(64, 96, 3) E in units of a0: the pulse at a random distance from focus, position and phase."""
    k = 2 * np.pi / WAVELENGTH
    rayleigh = np.pi * waist**2 / WAVELENGTH
    z_focus = rng.uniform(-0.5, 0.5) * rayleigh  # the pulse's distance past focus
    centre = rng.uniform(0.35, 0.65) * CELLS[1] * SPACING[1]
    x = (np.arange(CELLS[0]) - CELLS[0] / 2 + 0.5)[:, None] * SPACING[0]
    z = np.arange(CELLS[1])[None, :] * SPACING[1] - centre
    width = waist * np.sqrt(1 + (z_focus / rayleigh) ** 2)
    curvature = z_focus * (1 + (rayleigh / z_focus) ** 2) if z_focus else np.inf
    gouy = 0.5 * np.arctan(z_focus / rayleigh)  # 2-D: half the 3-D Gouy phase
    length = C * duration / np.sqrt(2 * np.log(2))  # the field envelope's 1/e half-length
    envelope = np.sqrt(waist / width) * np.exp(-(x**2) / width**2 - z**2 / length**2)
    phase = k * z + k * x**2 / (2 * curvature) - gouy + rng.uniform(0, 2 * np.pi)
    field = np.zeros((*CELLS, 3))
    field[..., 0] = a0 * envelope * np.cos(phase)
    field[..., 2] = a0 * envelope * (2 * x / (k * width**2)) * np.sin(phase)  # paraxial E_z
    return field + rng.normal(0.0, NOISE, field.shape)


def write(out: Path, a0: float, waist: float, duration: float, seed: int) -> None:
    import openpmd_api as io

    rng = np.random.default_rng(seed)
    (out / "diags").mkdir(parents=True, exist_ok=True)
    series = io.Series(str(out / "diags" / "openpmd.h5"), io.Access.create)
    series.set_attribute("software", "sim2dl examples/laser")
    for name, value in (("a0", a0), ("waist", waist), ("duration", duration)):
        series.set_attribute(name, float(value))
    for step in range(ITERATIONS):
        iteration = series.write_iterations()[step * 100]
        iteration.time, iteration.dt, iteration.time_unit_SI = step * 100 * 1e-16, 1e-16, 1.0
        mesh = iteration.meshes["E"]
        mesh.unit_dimension = {
            io.Unit_Dimension.M: 1,
            io.Unit_Dimension.L: 1,
            io.Unit_Dimension.I: -1,
            io.Unit_Dimension.T: -3,
        }
        mesh.axis_labels, mesh.grid_spacing, mesh.grid_unit_SI = ["x", "z"], list(SPACING), 1.0
        mesh.grid_global_offset = [0.0, step * 100 * 1e-16 * C]
        values = pulse(a0, waist * 1e-6, duration * 1e-15, rng).astype(np.float32)
        for index, axis in enumerate("xyz"):
            component = mesh[axis]
            component.reset_dataset(io.Dataset(values[..., index].dtype, values[..., index].shape))
            component.unit_SI = E_PER_A0
            component.store_chunk(np.ascontiguousarray(values[..., index]))
        iteration.close()
    series.close()


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--a0", type=float, required=True, help="peak normalised amplitude at focus")
    parser.add_argument("--waist", type=float, required=True, help="w0 at focus, um")
    parser.add_argument("--duration", type=float, required=True, help="FWHM of the intensity, fs")
    parser.add_argument("--seed", type=int, required=True)
    parser.add_argument("--out", type=Path, required=True)
    args = parser.parse_args()
    write(args.out, args.a0, args.waist, args.duration, args.seed)


if __name__ == "__main__":
    main()

#!/usr/bin/env python3
"""A laser-wakefield run with FBPIC (a real spectral quasi-3D particle-in-cell code, PyPI `fbpic`): the user's
simulator of docs/configuration.md's thetaMode example. A Gaussian laser pulse of peak normalised amplitude
a0 enters a uniform plasma of electron density n_e and drives a wake; FBPIC writes its fields itself as an
openPMD file-based series in thetaMode geometry (`diags/hdf5/data%08T.h5`: every component (2·Nm − 1, Nr,
Nz) = (3, 24, 128), axisLabels [r, z]), in a moving window.

    simulate.py --a0 2.0 --density 4e24 --out DIR [--steps 81 --period 40]

The run's parameters are not in the files (FBPIC writes none of them): the ensemble's runs table holds
them, as it would for any code. Memory and time: a few (24 x 128) complex grids per mode and a few
thousand macro-particles; seconds per run after numba compiles FBPIC's kernels (up to a minute, once per
process, cached in __pycache__ beside FBPIC).
"""

from __future__ import annotations

import argparse

from scipy.constants import c

CELLS_Z, CELLS_R, MODES = 128, 24, 2
ZMIN, ZMAX, RMAX = -20.0e-6, 10.0e-6, 20.0e-6  # m: the window, and its radius
WAVELENGTH, WAIST, LENGTH = 0.8e-6, 5.0e-6, 3.0e-6  # m: the laser (LENGTH is c tau)


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--a0", type=float, required=True, help="the laser's peak normalised amplitude")
    parser.add_argument("--density", type=float, required=True, help="the plasma's electron density, per m^3")
    parser.add_argument("--out", required=True, help="the run's directory (FBPIC writes DIR/diags/hdf5/)")
    parser.add_argument("--steps", type=int, default=81)
    parser.add_argument("--period", type=int, default=40, help="steps between field snapshots")
    args = parser.parse_args()

    from fbpic.lpa_utils.laser import add_laser
    from fbpic.main import Simulation
    from fbpic.openpmd_diag import FieldDiagnostic

    dt = (ZMAX - ZMIN) / CELLS_Z / c
    sim = Simulation(
        CELLS_Z,
        ZMAX,
        CELLS_R,
        RMAX,
        MODES,
        dt,
        zmin=ZMIN,
        n_e=args.density,
        p_zmin=0.0,
        p_zmax=1.0e-3,
        p_rmin=0.0,
        p_rmax=0.9 * RMAX,
        p_nz=1,
        p_nr=1,
        p_nt=4,
        boundaries={"z": "open", "r": "reflective"},
        use_cuda=False,
        verbose_level=0,
    )
    add_laser(sim, args.a0, WAIST, LENGTH, z0=-8.0e-6, lambda0=WAVELENGTH, zf=0.0)
    sim.set_moving_window(v=c)
    sim.diags = [
        FieldDiagnostic(
            args.period, sim.fld, comm=sim.comm, fieldtypes=["E", "rho"], write_dir=f"{args.out}/diags"
        )
    ]
    sim.step(args.steps, show_progress=False)


if __name__ == "__main__":
    main()

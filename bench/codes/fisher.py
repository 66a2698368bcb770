"""Fisher–KPP fronts written with py-pde's generic PDE class, at any resolution, one run per call or as a
persistent simulator:

    du/dt = d lap u + r u (1 - u)

on a periodic box of side 32 from the same two Gaussian seeds of population for every run (one of height
1 and width 2 at (8, 8), one of height 0.5 and width 1.5 at (22, 20)), to t = 8 (explicit Euler, py-pde's
numpy backend, the time step 0.2 x the cell's width squared: stable for every d of the box). Over d in
[0.05, 1] and r in [0.2, 2], the box a user of the equation would pick, the fronts spread at speed about
2 sqrt(d r): from seeds that barely grow to a population that fills the box. A cheap level is the same
code on a coarser grid: its fronts are diffused by the coarser grid and slowed or sped by its error.

    python fisher.py --out DIR --d D --r R [--cells 128]
    python fisher.py --persistent [--cells 32]        # simulate.persistent: runs on stdin

Writes DIR/fisher.h5: params (d, r: float32[2]) and state (u's final field averaged onto 32 x 32 cells,
float32[32, 32]: every resolution writes the same array, a finer one its blocks' means). bench/fidelity.py
runs it at two resolutions and measures what each costs.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

import numpy as np
import pde

sys.path.insert(0, str(Path(__file__).resolve().parent))  # run as a script in the codes' environment
import driver

SIDE, OUTPUT_CELLS, T_END, STEP = 32.0, 32, 8.0, 0.2
SEEDS = ((8.0, 8.0, 1.0, 2.0), (22.0, 20.0, 0.5, 1.5))  # x, y, height, width


def solve(d: float, r: float, cells: int) -> np.ndarray:
    """u's final field on `cells` x `cells`, averaged onto OUTPUT_CELLS x OUTPUT_CELLS."""
    grid = pde.CartesianGrid([[0.0, SIDE], [0.0, SIDE]], [cells, cells], periodic=True)
    x, y = np.meshgrid(*grid.axes_coords, indexing="ij")
    start = sum(h * np.exp(-((x - cx) ** 2 + (y - cy) ** 2) / (2 * w**2)) for cx, cy, h, w in SEEDS)
    equation = pde.PDE({"u": "d * laplace(u) + r * u * (1 - u)"}, consts={"d": d, "r": r})
    final = driver.euler(equation, pde.ScalarField(grid, start), T_END, STEP * (SIDE / cells) ** 2)
    return driver.block_means(np.asarray(final.data), OUTPUT_CELLS)


def write_run(out: Path, d: float, r: float, cells: int) -> None:
    driver.write_run(out, "fisher", [d, r], lambda: solve(d, r, cells))


def main() -> None:
    def check(out: Path, values: dict[str, float], args: argparse.Namespace) -> None:
        if args.cells % OUTPUT_CELLS:
            raise SystemExit(f"--cells must be a multiple of {OUTPUT_CELLS}")
        write_run(out, values["d"], values["r"], args.cells)

    driver.main(
        __doc__,
        ("d", "r"),
        check,
        lambda parser: parser.add_argument(
            "--cells", type=int, default=128, help="cells per side (a multiple of 32)"
        ),
    )


if __name__ == "__main__":
    main()

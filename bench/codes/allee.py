"""A population with a strong Allee effect (the Nagumo equation) written with py-pde's generic PDE class,
one run per call or as a persistent simulator:

    du/dt = lap u + u (1 - u) (u - a)

on a periodic box of side 32 (64 x 64 cells), from one patch of population u = 1 of radius R at the box's
centre (its edge a tanh of width 1, the same for every run), to t = 60 (explicit Euler, py-pde's numpy
backend, the time step 0.2 x the cell's width squared). The question a user of the equation asks of it is
the patch's fate: below the Allee threshold a a population declines, so a patch smaller than a critical
size dies out, and a larger one establishes and invades at speed sqrt(2) (1/2 - a). Over a in [0, 0.5]
(every threshold at which an established population invades at all) and R in [1, 8] (from the front's own
width to a quarter of the box), read at t = 60 (when a patch that established at a = 0.25, at speed
0.35, has reached the box's edge from its centre): patches that died (u = 0 everywhere, about a third
of the box), patches that established and filled the box (u = 1, about half of it), and, between them,
a band of patches still spreading, whose size at t = 60 moves quickly with a and R, fastest near the
critical size, where a patch lingers before it dies or grows.

    python allee.py --out DIR --a A --radius R [--cells 64]
    python allee.py --persistent [--cells 64]   # simulate.persistent: runs on stdin

`--cells` sets the grid (bench/fidelity.py's `--code allee` runs it at 128 and 16 cells): a grid of 16
cells (2 a cell, wider than the front) writes each cell's value onto its 2 x 2 output cells; at a<0.2 its
fronts are slowed by the coarse grid and the patches that fill the box at 128 cells are still spreading at
t = 60 (a cheap level wrong in part of the space).

Writes DIR/allee.h5: params (a, radius: float32[2]) and state (u's final field averaged onto 32 x 32 cells,
float32[32, 32]). py-pde starts in about 10 s in each process, then a run takes about 0.15 s: run it
persistent (docs/ensembles.md, "A simulator that starts slowly").
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

import numpy as np
import pde

sys.path.insert(0, str(Path(__file__).resolve().parent))  # run as a script in the codes' environment
import driver

SIDE, CELLS, OUTPUT_CELLS, T_END, STEP, EDGE = 32.0, 64, 32, 60.0, 0.2, 1.0


def solve(a: float, radius: float, cells: int = CELLS) -> np.ndarray:
    """u's final field on `cells` x `cells`, on OUTPUT_CELLS x OUTPUT_CELLS: a finer grid's blocks' means,
    a coarser one's cells repeated."""
    grid = pde.CartesianGrid([[0.0, SIDE], [0.0, SIDE]], [cells, cells], periodic=True)
    x, y = np.meshgrid(*grid.axes_coords, indexing="ij")
    start = 0.5 * (1.0 - np.tanh((np.hypot(x - SIDE / 2, y - SIDE / 2) - radius) / EDGE))
    equation = pde.PDE({"u": "laplace(u) + u * (1 - u) * (u - a)"}, consts={"a": a})
    final = np.asarray(
        driver.euler(equation, pde.ScalarField(grid, start), T_END, STEP * (SIDE / cells) ** 2).data
    )
    if cells < OUTPUT_CELLS:
        return np.kron(final, np.ones((OUTPUT_CELLS // cells,) * 2))
    return driver.block_means(final, OUTPUT_CELLS)


def main() -> None:
    def write(out: Path, values: dict[str, float], args: argparse.Namespace) -> None:
        if args.cells % OUTPUT_CELLS and OUTPUT_CELLS % args.cells:
            raise SystemExit(f"--cells must be a multiple or a divisor of {OUTPUT_CELLS}")
        a, radius = values["a"], values["radius"]
        driver.write_run(out, "allee", [a, radius], lambda: solve(a, radius, args.cells))

    driver.main(
        __doc__,
        ("a", "radius"),
        write,
        lambda parser: parser.add_argument("--cells", type=int, default=CELLS, help="cells per side"),
    )


if __name__ == "__main__":
    main()

"""The Brusselator reaction-diffusion system, written with py-pde's generic PDE class as its docs' example
does, one run per call or as a persistent simulator:

    du/dt = d0 lap u + a - (b + 1) u + u^2 v
    dv/dt = d1 lap v + b u - u^2 v

on a periodic 32 x 32 box of side 32 with d0 = 1 and d1 = 8, from the steady state (u, v) = (a, b / a)
plus the same small random perturbation (normal, std 0.1, seed 0) for every run, to t = 60 (Euler steps of
0.01, py-pde's numpy backend). Over a in [1, 3] and b in [1, 8], the box around the code's two onsets a
user would pick, it has three regimes: the steady state, where the perturbation decays (b below the Turing
onset (1 + a sqrt(d0 / d1))^2); Turing patterns (spots and stripes, their layout sensitive to the
parameters); and, past the Hopf onset b = 1 + a^2, oscillations (the field at t = 60 is a phase of a
limit cycle, with or without patterns).

    python brusselator.py --out DIR --a A --b B
    python brusselator.py --persistent              # simulate.persistent: runs on stdin

Writes DIR/brusselator.h5: params (a, b: float32[2]) and state (u's final field, float32[32, 32]). py-pde
compiles the equations' operators in each process (about 20 s here), then a run takes about 1.3 s: run it
persistent (docs/ensembles.md, "A simulator that starts slowly").
"""

from __future__ import annotations

import argparse
import sys
import warnings
from pathlib import Path

import numpy as np
import pde

sys.path.insert(0, str(Path(__file__).resolve().parent))  # run as a script in the codes' environment
import driver

SIZE, SIDE, T_END, DT, NOISE, D0, D1 = 32, 32.0, 60.0, 0.01, 0.1, 1.0, 8.0
EQUATIONS = {
    "u": "d0 * laplace(u) + a - (b + 1) * u + u**2 * v",
    "v": "d1 * laplace(v) + b * u - u**2 * v",
}


def solve(a: float, b: float) -> np.ndarray:
    """u's final field of one run."""
    grid = pde.CartesianGrid([[0.0, SIDE], [0.0, SIDE]], [SIZE, SIZE], periodic=True)
    rng = np.random.default_rng(0)
    u = pde.ScalarField(grid, a + NOISE * rng.standard_normal((SIZE, SIZE)))
    v = pde.ScalarField(grid, b / a + NOISE * rng.standard_normal((SIZE, SIZE)))
    equation = pde.PDE(EQUATIONS, consts={"a": a, "b": b, "d0": D0, "d1": D1})
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # py-pde's notes on its own solver choices
        final = equation.solve(
            pde.FieldCollection([u, v]), t_range=T_END, dt=DT, backend="numpy", solver="euler", tracker=None
        )
    return np.asarray(final[0].data)


def write_run(out: Path, a: float, b: float) -> None:
    driver.write_run(out, "brusselator", [a, b], lambda: solve(a, b))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--out", type=Path)
    parser.add_argument("--a", type=float)
    parser.add_argument("--b", type=float)
    parser.add_argument("--persistent", action="store_true", help="runs as JSON lines on stdin")
    args = parser.parse_args()
    if args.persistent:
        driver.serve(lambda run: write_run(Path(run["out"]), run["a"], run["b"]))
    elif args.out is None or args.a is None or args.b is None:
        parser.error("--out, --a and --b are required for one run")
    else:
        write_run(args.out, args.a, args.b)


if __name__ == "__main__":
    main()

"""py-pde's Swift–Hohenberg equation (pde.SwiftHohenbergPDE), one run per call, as a user drives it:

    du/dt = (rate - (kc2 + lap)^2) u + delta u^2 - u^3

on a periodic 32 x 32 box of side 32 (about 5 wavelengths of the critical wave number kc = 1), from the
same small random state (normal, std 0.1, seed 0) for every run, to t = 100 (Euler steps of 0.03, py-pde's
numpy backend: the numbers of its numba backend without its 16 s of compiling per process). Its regimes
over rate in [-0.3, 0.3] and delta in [0, 2]: the flat state wherever rate <= 0 (half that box), stripes
at small delta, spots (hexagons, a skewed field) at large delta, each pattern's orientation and defects
sensitive to the parameters.

    python swift_hohenberg.py --out DIR --rate R --delta D
    python swift_hohenberg.py --persistent [--backend numba]    # simulate.persistent: runs on stdin

Writes DIR/swift_hohenberg.h5 (beside, then renamed): params (rate, delta: float32[2]) and state (the
final field, float32[32, 32]). About 2 s a run on one core. As a persistent simulator it reads a run per
line of JSON (out, rate, delta, ...) and answers `sim2dl-done RUN` (docs/ensembles.md, A simulator that
starts slowly): with --backend numba it compiles once (16 s here) and then runs in about 0.3 s.
"""

from __future__ import annotations

import sys
from pathlib import Path

import numpy as np
import pde

sys.path.insert(0, str(Path(__file__).resolve().parent))  # run as a script in the codes' environment
import driver

SIZE, SIDE, T_END, DT, NOISE = 32, 32.0, 100.0, 0.03, 0.1


def solve(rate: float, delta: float, backend: str = "numpy") -> np.ndarray:
    """The final field of one run."""
    grid = pde.CartesianGrid([[0.0, SIDE], [0.0, SIDE]], [SIZE, SIZE], periodic=True)
    state = pde.ScalarField.random_normal(grid, std=NOISE, rng=np.random.default_rng(0))
    equation = pde.SwiftHohenbergPDE(rate=rate, kc2=1.0, delta=delta)
    final = driver.euler(equation, state, T_END, DT, backend)
    return np.asarray(final.data, np.float32)


def write_run(out: Path, rate: float, delta: float, backend: str) -> None:
    driver.write_run(out, "swift_hohenberg", [rate, delta], lambda: solve(rate, delta, backend))


def main() -> None:
    driver.main(
        __doc__,
        ("rate", "delta"),
        lambda out, values, args: write_run(out, values["rate"], values["delta"], args.backend),
        lambda parser: parser.add_argument("--backend", choices=("numpy", "numba"), default="numpy"),
    )


if __name__ == "__main__":
    main()

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
    python brusselator.py --persistent --cells 16   # a coarser level (bench/fidelity.py)

Writes DIR/brusselator.h5: params (a, b: float32[2]) and state (u's final field, float32[32, 32]). py-pde
compiles the equations' operators in each process (about 20 s here), then a run takes about 1.3 s: run it
persistent (docs/ensembles.md, "A simulator that starts slowly").
"""

from __future__ import annotations

import sys
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


def solve(a: float, b: float, cells: int = SIZE) -> np.ndarray:
    """u's final field of one run on a grid of `cells` x `cells` (the coarser, the larger its time step:
    DT x (SIZE / cells), stable for the diffusion on the coarser grid), written on the SIZE x SIZE grid: a
    coarser run's field resampled onto it by Fourier interpolation (the box is periodic), so every
    resolution writes the same array. Its initial perturbation is the SIZE grid's, averaged over each of its
    own cells."""
    grid = pde.CartesianGrid([[0.0, SIDE], [0.0, SIDE]], [cells, cells], periodic=True)
    rng = np.random.default_rng(0)
    noise = [driver.block_means(NOISE * rng.standard_normal((SIZE, SIZE)), cells) for _ in range(2)]
    u = pde.ScalarField(grid, a + noise[0])
    v = pde.ScalarField(grid, b / a + noise[1])
    equation = pde.PDE(EQUATIONS, consts={"a": a, "b": b, "d0": D0, "d1": D1})
    final = driver.euler(equation, pde.FieldCollection([u, v]), T_END, DT * SIZE / cells)
    return refined(np.asarray(final[0].data), SIZE)


def refined(field: np.ndarray, size: int) -> np.ndarray:
    """A periodic square field on `size` x `size` by Fourier interpolation (its spectrum zero-padded)."""
    cells = field.shape[0]
    if cells == size:
        return field
    spectrum = np.fft.fftshift(np.fft.fft2(field))
    padded = np.zeros((size, size), complex)
    start = (size - cells) // 2
    padded[start : start + cells, start : start + cells] = spectrum
    return np.real(np.fft.ifft2(np.fft.ifftshift(padded))) * (size / cells) ** 2


def structure_factor(field: np.ndarray) -> np.ndarray:
    """The radially averaged power spectrum of a periodic square field's fluctuations, at the integer
    wavenumbers 1..size/2 (per cell): the standard observable of a pattern, whatever its phase."""
    size = field.shape[0]
    power = np.abs(np.fft.fft2(field - field.mean())) ** 2 / size**4
    k = np.fft.fftfreq(size, 1.0 / size)
    radius = np.rint(np.hypot(*np.meshgrid(k, k, indexing="ij"))).astype(int)
    sums = np.bincount(radius.ravel(), power.ravel(), minlength=size)
    return sums[1 : size // 2 + 1]


def write_run(out: Path, a: float, b: float, cells: int = SIZE) -> None:
    driver.write_run(out, "brusselator", [a, b], lambda: solve(a, b, cells))


def main() -> None:
    driver.main(
        __doc__,
        ("a", "b"),
        lambda out, values, args: write_run(out, values["a"], values["b"], args.cells),
        lambda parser: parser.add_argument(
            "--cells", type=int, default=SIZE, help="cells per side (a coarser level)"
        ),
    )


if __name__ == "__main__":
    main()

"""One particle-mesh N-body box: the user's simulator of config/presets/nbody-few.yaml (a real cosmology code,
JaxPM 0.1.6 with jax-cosmo 0.1.0 from PyPI, in its own environment: examples/nbody/setup.sh).

Initial conditions from the linear power spectrum of (Omega_m, sigma8) (Eisenstein-Hu, jax-cosmo),
second-order LPT to a = 0.1, then the particle-mesh equations of motion integrated to a = 1 with a fixed
number of Runge-Kutta steps in the scale factor; the z = 0 matter density (cloud-in-cell, 1 + delta) is
written to OUT/density.h5 with the parameters as attributes.

    python simulate.py --omega-m 0.3 --sigma8 0.8 --seed 7 --out DIR [--cells 32 --box 256 --steps 10]

The compiled program is cached on disk (JAX's compilation cache, SIM2DL_NBODY_JAX_CACHE or beside this
file), so runs after the first skip the ~15 s compilation: the cosmology is an argument, not a constant.
Memory and time: a few (cells^3) float32 grids; about a second per 32^3 box on one core.
"""

from __future__ import annotations

import argparse
import os
from importlib.metadata import version
from pathlib import Path


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--omega-m", type=float, required=True)
    parser.add_argument("--sigma8", type=float, required=True)
    parser.add_argument("--seed", type=int, required=True)
    parser.add_argument("--out", type=Path, required=True)
    parser.add_argument("--cells", type=int, default=32, help="cells (and particles) per side")
    parser.add_argument("--box", type=float, default=256.0, help="side in Mpc/h")
    parser.add_argument("--steps", type=int, default=10, help="Runge-Kutta steps from a = 0.1 to 1")
    args = parser.parse_args()

    cache = os.environ.get("SIM2DL_NBODY_JAX_CACHE", str(Path(__file__).resolve().parent / ".jax-cache"))
    os.environ.setdefault("JAX_PLATFORMS", "cpu")
    import jax

    jax.config.update("jax_compilation_cache_dir", cache)
    jax.config.update("jax_persistent_cache_min_compile_time_secs", 0.0)
    jax.config.update("jax_persistent_cache_min_entry_size_bytes", 0)
    import h5py
    import jax.numpy as jnp
    import jax_cosmo as jc
    import numpy as np
    from jaxpm.painting import cic_paint
    from jaxpm.pm import linear_field, lpt, make_ode_fn

    mesh = (args.cells,) * 3
    box = (args.box,) * 3
    omega_b = 0.0486  # Planck 2015, as jax_cosmo.Planck15

    @jax.jit
    def density(omega_m: jax.Array, sigma8: jax.Array, key: jax.Array) -> jax.Array:
        k = jnp.logspace(-4, 1, 256)
        pk = jc.power.linear_matter_power(jc.Planck15(Omega_c=omega_m - omega_b, sigma8=sigma8), k)
        # a fresh object for the dynamics: jax-cosmo caches background quantities inside it, and one
        # shared with the power spectrum's call fails (KeyError 'h')
        cosmo = jc.Planck15(Omega_c=omega_m - omega_b, sigma8=sigma8)

        def pk_fn(x: jax.Array) -> jax.Array:
            return jnp.interp(x.reshape([-1]), k, pk).reshape(x.shape)

        initial = linear_field(mesh, box, pk_fn, seed=key)
        grid = jnp.stack(
            jnp.meshgrid(*[jnp.arange(n, dtype=jnp.float32) for n in mesh], indexing="ij"), axis=-1
        )
        particles = grid.reshape([-1, 3])
        a0 = 0.1
        dx, p, _ = lpt(cosmo, initial, particles, a=a0, order=2)
        ode = make_ode_fn(mesh)
        scale = jnp.linspace(a0, 1.0, args.steps + 1)

        def rk4(i: int, state: tuple) -> tuple:
            a, h = scale[i], scale[i + 1] - scale[i]

            def f(s: tuple, t: jax.Array) -> tuple:
                return ode(s, t, cosmo)

            def add(s: tuple, d: tuple, c: float) -> tuple:
                return tuple(x + c * y for x, y in zip(s, d, strict=True))

            k1 = f(state, a)
            k2 = f(add(state, k1, h / 2), a + h / 2)
            k3 = f(add(state, k2, h / 2), a + h / 2)
            k4 = f(add(state, k3, h), a + h)
            return tuple(
                s + h / 6 * (d1 + 2 * d2 + 2 * d3 + d4)
                for s, d1, d2, d3, d4 in zip(state, k1, k2, k3, k4, strict=True)
            )

        pos, _ = jax.lax.fori_loop(0, args.steps, rk4, (particles + dx, p))
        return cic_paint(jnp.zeros(mesh), pos)

    field = np.asarray(
        density(jnp.float32(args.omega_m), jnp.float32(args.sigma8), jax.random.PRNGKey(args.seed))
    )
    args.out.mkdir(parents=True, exist_ok=True)
    tmp = args.out / ".density.h5.partial"
    with h5py.File(tmp, "w") as f:
        f.create_dataset("density", data=field.astype(np.float32))
        f.attrs.update(
            {
                "omega_m": args.omega_m,
                "sigma8": args.sigma8,
                "seed": args.seed,
                "box_mpc_h": args.box,
                "code": f"jaxpm {version('jaxpm')}, jax-cosmo {version('jax-cosmo')}",
            }
        )
    tmp.rename(args.out / "density.h5")


if __name__ == "__main__":
    main()

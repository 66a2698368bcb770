"""The demo's cube simulator as a program one ensemble run executes (simulate.command), as a user's own
simulator would be: one run = one set of cosmological parameters, `--samples` density cubes of it (seeded
by --seed and the cube's number), written as HDF5 files (one per cube) or as the steps of an ADIOS2 SST
stream (--write sst), as WarpX or PIConGPU can stream theirs.

    python -m pipeline.simulators.cube_run --out {out} --seed {seed} --sigma-8 {sigma_8} --n-s {n_s}
        --omega-m {omega_m} --samples 8 [--write sst --stream stream --queue-limit 4 --queue-policy Block]

With SST the program writes `written.json` (steps written, seconds) at the end, so the run's directory
records what it did. Memory: one cube. Time: an FFT of size³ per cube (plus --delay-s: a slower simulation).
"""

from __future__ import annotations

import argparse
import json
import os
import time
from collections.abc import Iterator
from pathlib import Path

import numpy as np

from pipeline.simulators.cube import density_cube


def arguments(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--out", type=Path, required=True)
    parser.add_argument("--seed", type=int, required=True)
    parser.add_argument("--sigma-8", type=float, required=True)
    parser.add_argument("--n-s", type=float, required=True)
    parser.add_argument("--omega-m", type=float, required=True)
    parser.add_argument("--samples", type=int, default=8)
    parser.add_argument("--size", type=int, default=32)
    parser.add_argument("--box-size", type=float, default=256.0)
    parser.add_argument("--mean-density", type=float, default=8.0)
    parser.add_argument(
        "--delay-s", type=float, default=0.0, help="sleep after each cube (a slower simulation)"
    )
    parser.add_argument("--write", choices=["hdf5", "sst"], default="hdf5")
    parser.add_argument(
        "--per-run-file",
        action="store_true",
        help="with hdf5: one file of the run's cubes stacked (cubes.h5: density [S, n, n, n], "
        "params [S, 3]) instead of a file per cube",
    )
    parser.add_argument("--stream", default="stream", help="with sst: the stream's name in --out")
    parser.add_argument("--queue-limit", type=int, default=4, help="with sst: steps held for a slow reader")
    parser.add_argument("--queue-policy", choices=["Block", "Discard"], default="Block")
    return parser.parse_args(argv)


def cubes(args: argparse.Namespace) -> Iterator[tuple[np.ndarray, np.ndarray]]:
    params = np.array([args.sigma_8, args.n_s, args.omega_m], np.float32)
    for i in range(args.samples):
        rng = np.random.default_rng([args.seed, i])
        yield params, density_cube(params, args.size, args.box_size, args.mean_density, rng)
        if args.delay_s:
            time.sleep(args.delay_s)


def write_hdf5(args: argparse.Namespace) -> None:
    import h5py

    if args.per_run_file:
        n = args.size
        tmp = args.out / ".cubes.h5.tmp"
        with h5py.File(tmp, "w") as f:
            density = f.create_dataset("density", (args.samples, n, n, n), np.float32)
            params = f.create_dataset("params", (args.samples, 3), np.float32)
            for i, (p, d) in enumerate(cubes(args)):
                density[i], params[i] = d, p
        os.replace(tmp, args.out / "cubes.h5")
        return
    for i, (params, density) in enumerate(cubes(args)):
        path = args.out / f"cube_{i:05d}.h5"
        tmp = path.with_name(f".{path.name}.tmp")
        with h5py.File(tmp, "w") as f:
            f["density"], f["params"] = density, params
        os.replace(tmp, path)


def write_sst(args: argparse.Namespace) -> None:
    import adios2

    start = time.perf_counter()
    adios = adios2.Adios()
    io = adios.declare_io("cube_run")
    io.set_engine("SST")
    io.set_parameters(
        {
            "DataTransport": "WAN",
            "QueueLimit": str(args.queue_limit),
            "QueueFullPolicy": args.queue_policy,
            "RendezvousReaderCount": "1",
        }
    )
    written = 0
    with adios2.Stream(io, str(args.out / args.stream), "w") as stream:
        for params, density in cubes(args):
            stream.begin_step()
            stream.write("density", density, density.shape, [0, 0, 0], density.shape)
            stream.write("params", params, params.shape, [0], params.shape)
            stream.end_step()
            written += 1
    record = {"steps_written": written, "seconds": round(time.perf_counter() - start, 3)}
    (args.out / "written.json").write_text(json.dumps(record) + "\n")


def main(argv: list[str] | None = None) -> None:
    args = arguments(argv)
    (write_sst if args.write == "sst" else write_hdf5)(args)


if __name__ == "__main__":
    main()

"""What every code's driver does around its solver, as a user's script would: write a run's parameters and
final field to an HDF5 file atomically, and serve runs as a persistent simulator (simulate.persistent: a
run per line of JSON on stdin, answered `sim2dl-done RUN` or `sim2dl-failed RUN REASON` on stdout;
docs/ensembles.md, "A simulator that starts slowly"). Runs in the codes' environment (environment.py)."""

from __future__ import annotations

import argparse
import json
import os
import sys
import warnings
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import h5py
import numpy as np


def write_run(out: Path, name: str, params: Sequence[float], state: Callable[[], np.ndarray]) -> None:
    """OUT/NAME.h5: params (float32) and state (the solver's final field, float32), written beside and
    renamed, so an interrupted run leaves no file; a field that is not finite raises (a failed run)."""
    field = np.asarray(state(), np.float32)
    if not np.all(np.isfinite(field)):  # an explicit solver that blew up: a failed run, not data
        raise ValueError(f"{name}: the final field is not finite (the solver diverged)")
    out.mkdir(parents=True, exist_ok=True)
    path = out / f"{name}.h5"
    tmp = path.with_name(f".{path.name}.tmp")
    with h5py.File(tmp, "w") as f:
        f["params"] = np.asarray(params, np.float32)
        f["state"] = field
    os.replace(tmp, path)


def euler(equation: Any, state: Any, t_end: float, dt: float, backend: str = "numpy") -> Any:
    """A py-pde equation solved from `state` to `t_end` by explicit Euler steps of `dt`: the final state."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # py-pde's notes on its own solver choices
        return equation.solve(state, t_range=t_end, dt=dt, backend=backend, solver="euler", tracker=None)


def block_means(field: np.ndarray, cells: int) -> np.ndarray:
    """A square field averaged over square blocks, onto `cells` x `cells`."""
    block = field.shape[0] // cells
    return field.reshape(cells, block, cells, block).mean(axis=(1, 3))


def serve(run_one: Callable[[dict], None]) -> None:
    """simulate.persistent: each line of stdin a run (out, run, seed and each parameter), each answered on
    stdout; a run that raises is answered as failed and the next is served."""
    for line in sys.stdin:
        run = json.loads(line)
        try:
            run_one(run)
        except Exception as e:  # this run failed; the next may not
            print("sim2dl-failed", run["run"], e, flush=True)
            continue
        print("sim2dl-done", run["run"], flush=True)


def main(
    doc: str,
    parameters: Sequence[str],
    write: Callable[[Path, dict[str, float], argparse.Namespace], None],
    options: Callable[[argparse.ArgumentParser], None] | None = None,
) -> None:
    """A code's command line: one run (--out and each parameter) or --persistent (runs on stdin, served);
    `options` adds the code's own (a grid, a backend), which `write` reads from the parsed arguments."""
    parser = argparse.ArgumentParser(description=doc.split("\n\n")[0])
    parser.add_argument("--out", type=Path)
    for name in parameters:
        parser.add_argument(f"--{name}", type=float)
    parser.add_argument("--persistent", action="store_true", help="runs as JSON lines on stdin")
    if options is not None:
        options(parser)
    args = parser.parse_args()
    if args.persistent:
        serve(lambda run: write(Path(run["out"]), {name: run[name] for name in parameters}, args))
    elif args.out is None or any(getattr(args, name) is None for name in parameters):
        parser.error(f"--out and {', '.join('--' + name for name in parameters)} are required for one run")
    else:
        write(args.out, {name: getattr(args, name) for name in parameters}, args)

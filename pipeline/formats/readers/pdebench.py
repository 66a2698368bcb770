"""PDEBench's HDF5 layouts (Takamoto et al., NeurIPS 2022; its generators in pdebench/data_gen), as
`sim2dl inspect` recognises them (`Conventions`) and the HDF5 reader reads them:

- a group per seed (2-D diffusion-reaction, shallow water): groups "0000" ... "0999", each with `data`
  [t, x, y, c] (float32), `grid/x`, `grid/y`, `grid/t`, and the run's settings as a YAML string in the
  group's attribute `config`. The reader gives such a file's groups as one axis: the array `*/data` is every
  numbered group's `data`, in the groups' numeric order, so `source.samples_along: 0` makes a record per
  seed (SEEDS);
- an array per field (compressible Navier-Stokes: `density`, `pressure`, `Vx`, `Vy`[, `Vz`] of [N, T, X,
  Y(, Z)]; 1-D advection, Burgers, reaction-diffusion: `tensor` [N, T, X]) beside `x-coordinate`, ... and
  `t-coordinate` (T + 1 entries); the parameters are in the file's name.

Memory and time: a file's root listing and one group's datasets' headers (the layout is recognised from
the first group; every group is checked to hold the array when it is read).
"""

from __future__ import annotations

import re
from typing import Any

import h5py
import numpy as np
import yaml

from pipeline.formats.readers.base import FIELD_AXIS, Conventions

SEEDS = "*/"  # an array path's prefix: the array in every numbered group, stacked as axis 0
NUMBERED = re.compile(r"\d+")
COORDINATE_SUFFIX = "-coordinate"  # x-coordinate, y-coordinate, t-coordinate


def numbered_groups(f: h5py.File) -> list[str]:
    """The root's groups named by a number (a seed each), in numeric order; [] where there are fewer than
    two (one numbered group is an ordinary group)."""
    names = [name for name, node in f.items() if isinstance(node, h5py.Group) and NUMBERED.fullmatch(name)]
    return sorted(names, key=int) if len(names) >= 2 else []


def fno_model(grid: tuple[int, ...]) -> tuple[dict[str, Any] | None, dict[str, Any]]:
    """A next state's model settings for a 1-D, 2-D or 3-D grid (fno1d, fno2d or fno3d, its modes within
    the grid; None for another) and the task's settings the grid calls for (its spatial_dims)."""
    if not 1 <= len(grid) <= 3:
        return None, {}
    most = min([n // 2 for n in grid[:-1]] + [grid[-1] // 2 + 1])
    name, default = {1: ("fno1d", 16), 2: ("fno2d", 12), 3: ("fno3d", 8)}[len(grid)]
    settings = {} if len(grid) == 2 else {"spatial_dims": len(grid)}
    return {"model": name, "model_args": {"modes": max(1, min(default, most))}}, settings


def settings_text(text: Any) -> str:
    """The parameters of a seed group's YAML `config` (its `sim` section), as one line, or ''."""
    try:
        loaded = yaml.safe_load(text.decode() if isinstance(text, bytes) else str(text))
    except yaml.YAMLError:
        return ""
    sim = loaded.get("sim") if isinstance(loaded, dict) else None
    if not isinstance(sim, dict):
        return ""
    return ", ".join(f"{k} {v}" for k, v in sim.items() if isinstance(v, int | float) and k != "seed")


def seed_conventions(f: h5py.File) -> Conventions | None:
    """A group per seed holding `data` [t, *grid, c]: a record per seed, its whole trajectory of every
    field the feature of a next state (fields last, each normalised on its own), split by seed."""
    groups = numbered_groups(f)
    data = f[groups[0]].get("data") if groups else None
    if not isinstance(data, h5py.Dataset) or not 3 <= data.ndim <= 5:
        return None
    fields_last = data.shape[-1] <= FIELD_AXIS and data.ndim >= 4
    grid = tuple(data.shape[1:-1] if fields_last else data.shape[1:])
    notes = [
        f"PDEBench: a group per seed ({len(groups)}), each `data` {list(data.shape)} (time, "
        f"{' x '.join(map(str, grid))} grid{', fields' if fields_last else ''}); its grid in grid/x, grid/y, "
        "grid/t; a record per seed, split by seed"
    ]
    settings = settings_text(f[groups[0]].attrs.get("config", ""))
    if settings:
        notes.append(f"the runs' settings (the groups' YAML `config`, sim): {settings}")
    model, settings = fno_model(grid)
    if model is None:
        notes.append(
            f"no built-in next-state model for a {len(grid)}-D grid here: give your own (train.model)"
        )
    feature = f"{SEEDS}data"
    return Conventions(
        f"PDEBench's layout, a group per seed: {feature} holds every seed's trajectory: one sample per seed",
        samples_along=0,
        features=(feature,),
        notes=tuple(notes),
        kind="trajectory" if model else None,
        model=model,
        split_by="sample",
        arrays=(feature,),
        per_channel=(feature,) if fields_last else (),
        task_settings=settings,
    )


def field_conventions(f: h5py.File) -> Conventions | None:
    """Arrays per field ([N, T, *grid]) beside `t-coordinate` and `x-coordinate`: a record per trajectory,
    the fields stacked (fields last, each normalised on its own) as a next state's states."""
    if f"t{COORDINATE_SUFFIX}" not in f or f"x{COORDINATE_SUFFIX}" not in f:
        return None
    arrays = {
        name: node
        for name, node in f.items()
        if isinstance(node, h5py.Dataset) and node.ndim >= 3 and not name.endswith(COORDINATE_SUFFIX)
    }
    if not arrays:
        return None
    first = max(arrays.values(), key=lambda node: node.size)
    fields = sorted(name for name, node in arrays.items() if node.shape == first.shape)
    grid = tuple(first.shape[2:])
    stack = {"state": fields} if len(fields) > 1 else {}
    notes = [
        f"PDEBench: {', '.join(fields)} of {list(first.shape)} (trajectories, time, "
        f"{' x '.join(map(str, grid))} grid); a record per trajectory, split by trajectory; the parameters "
        "are in the file's name"
    ]
    model, settings = fno_model(grid)
    if model is None:
        notes.append(
            f"no built-in next-state model for a {len(grid)}-D grid here: give your own (train.model)"
        )
    features = ("state",) if stack else (fields[0],)
    return Conventions(
        f"PDEBench's layout, an array per field: {', '.join(fields)} hold trajectories x time x grid: one "
        "sample per trajectory",
        samples_along=0,
        features=features,
        notes=tuple(notes),
        kind="trajectory" if model else None,
        model=model,
        split_by="sample",
        arrays=tuple(fields),
        stack=stack,
        per_channel=features if stack else (),
        task_settings=settings,
    )


def in_every_group(f: h5py.File, path: str) -> list[h5py.Dataset] | None:
    """The datasets `*/REST` names, one per numbered group in order; None where a group lacks it."""
    rest = path[len(SEEDS) :]
    found = [f[group].get(rest) for group in numbered_groups(f)]
    if not found or any(not isinstance(node, h5py.Dataset) for node in found):
        return None
    return found


def stacked_read(datasets: list[h5py.Dataset], index: tuple[slice, ...]) -> np.ndarray:
    """The groups' arrays as one, the groups along axis 0: index[0] chooses groups, the rest each array."""
    chosen = range(len(datasets))[index[0]] if index else range(len(datasets))
    rest = index[1:]
    parts = [np.asarray(datasets[i][rest] if rest else datasets[i][()]) for i in chosen]
    if len({p.shape for p in parts}) > 1:
        raise ValueError(f"the groups' arrays differ in shape ({sorted({p.shape for p in parts})})")
    return np.stack(parts) if parts else np.empty((0, *datasets[0].shape), datasets[0].dtype)

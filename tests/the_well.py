"""Files of The Well's HDF5 layout (PolymathicAI, NeurIPS 2024; its docs/data_format.md), written as its
specification says, for the tests of sim2dl's reader and inspect. Only numpy and h5py:
scripts/the_well_check.py reads the same files with the-well's own PyTorch dataset (outside the suite: it
needs torch)."""

from __future__ import annotations

from pathlib import Path

import numpy as np


def write_the_well(
    path: Path, alpha: float, trajectories: int = 3, steps: int = 6, side: int = 8
) -> np.ndarray:
    """One file of The Well's HDF5 layout (its data-format document): a parameter setting's trajectories,
    t0_fields (B x T x H x W) and t1_fields (... x D), dimensions, boundary conditions and the root
    attributes naming the parameters. Returns the scalar field written."""
    import h5py

    rng = np.random.default_rng(int(alpha * 100))
    u = rng.normal(size=(trajectories, steps, side, side)).astype(np.float32)
    with h5py.File(path, "w") as f:
        f.attrs.update(
            {
                "dataset_name": "toy_diffusion",
                "grid_type": "cartesian",
                "n_spatial_dims": 2,
                "n_trajectories": trajectories,
                "simulation_parameters": ["alpha"],
            }
        )
        f.attrs["alpha"] = alpha
        dims = f.create_group("dimensions")
        dims.attrs["spatial_dims"] = ["x", "y"]
        dims["time"] = np.linspace(0, 1, steps)
        dims["time"].attrs["sample_varying"] = False  # one time grid for every trajectory
        for axis in ("x", "y"):
            dims[axis] = np.linspace(0, 1, side)
            dims[axis].attrs.update({"sample_varying": False, "time_varying": False})
        conditions = f.create_group("boundary_conditions")
        for axis in ("x", "y"):  # periodic in both: the mask marks the boundary points of the axis
            bc = conditions.create_group(f"{axis}_periodic")
            bc.attrs.update(
                {
                    "bc_type": "PERIODIC",
                    "associated_dims": [axis],
                    "sample_varying": False,
                    "time_varying": False,
                }
            )
            bc["mask"] = np.isin(np.arange(side), [0, side - 1])
        t0 = f.create_group("t0_fields")
        t0.attrs["field_names"] = ["u"]
        t0["u"] = u
        t0["u"].attrs.update({"dim_varying": [True, True], "sample_varying": True, "time_varying": True})
        t1 = f.create_group("t1_fields")
        t1.attrs["field_names"] = ["velocity"]
        t1["velocity"] = rng.normal(size=(trajectories, steps, side, side, 2)).astype(np.float32)
        t1["velocity"].attrs.update(
            {"dim_varying": [True, True], "sample_varying": True, "time_varying": True}
        )
        f.create_group("t2_fields").attrs["field_names"] = []
        f.create_group("scalars").attrs["field_names"] = []
    return u

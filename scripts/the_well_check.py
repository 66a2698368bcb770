"""The files tests/the_well.py writes (The Well's HDF5 layout, as sim2dl's reader and inspect are tested on)
read by The Well's own PyTorch dataset (PyPI `the-well` 1.2.0), once, outside the suite: it needs torch
(about 5 GB installed), which sim2dl does not. Every window it gives (one state in, the next out) must
equal the arrays written, and its metadata the file's fields, trajectories, steps and boundaries.

    python3 -m venv /tmp/wellenv && /tmp/wellenv/bin/pip install the-well==1.2.0
    /tmp/wellenv/bin/python scripts/the_well_check.py

Prints one JSON object; exits 1 where a window or the metadata differs.
"""

from __future__ import annotations

import json
import sys
import tempfile
from pathlib import Path

import h5py
import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from tests.the_well import write_the_well  # the repository's tests, not an installed package


def main() -> int:
    from the_well.data import WellDataset

    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp)
        for alpha in (0.5, 1.5):
            write_the_well(root / f"toy_alpha_{alpha}.hdf5", alpha)
        dataset = WellDataset(path=str(root), n_steps_input=1, n_steps_output=1, use_normalization=False)
        expected = []  # (input, output) per window, in the dataset's order: files sorted, trajectory, time
        for path in sorted(root.glob("*.hdf5")):
            with h5py.File(path) as f:
                u, velocity = f["t0_fields/u"][:], f["t1_fields/velocity"][:]
            fields = np.concatenate([u[..., None], velocity], axis=-1)  # t0 then t1's components
            expected += [
                (fields[b, t], fields[b, t + 1]) for b in range(len(u)) for t in range(u.shape[1] - 1)
            ]
        differ = [
            i
            for i, (x, y) in enumerate(expected)
            if not (
                np.array_equal(dataset[i]["input_fields"][0].numpy(), x)
                and np.array_equal(dataset[i]["output_fields"][0].numpy(), y)
            )
        ]
        meta = dataset.metadata
        bounds = dataset[0]["boundary_conditions"].numpy().tolist()
    figures = {
        "windows": len(dataset),
        "expected_windows": len(expected),
        "windows_differing": len(differ),
        "field_names": {str(k): v for k, v in meta.field_names.items()},
        "trajectories_per_file": list(meta.n_trajectories_per_file),
        "steps_per_trajectory": list(meta.n_steps_per_trajectory),
        "boundary_condition_types": list(meta.boundary_condition_types),
        "boundary_conditions": bounds,  # per axis, (low, high): 2 is PERIODIC in the-well's BoundaryCondition
    }
    ok = (
        len(dataset) == len(expected)
        and not differ
        and figures["field_names"]["0"] == ["u"]
        and figures["boundary_condition_types"] == ["PERIODIC"]
        and bounds == [[2.0, 2.0], [2.0, 2.0]]
    )
    print(json.dumps({**figures, "ok": ok}))
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())

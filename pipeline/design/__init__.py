"""Design of experiments: where the simulator runs next (simulate.adaptive).

A tier below the steps, pure functions on arrays: `space` (a design's parameters <-> the unit cube, and
the candidate pool), `emulator` (the surrogate the rounds choose with: a Gaussian process per principal
component of the runs' outputs, scikit-learn's), `batch` (a batch that does not cluster: kriging believer
and a minimum spacing), `acquisitions/` (one file per way of choosing, behind `Acquisition`). The loop that
runs rounds under MPI is pipeline/simulators/adaptive.py.
"""

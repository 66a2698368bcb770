"""Design of experiments: where the simulator runs next (simulate.adaptive).

The core, pure functions on arrays: `space` (a design's parameters <-> the unit
cube, and the candidate pool), `emulator` (the surrogate the rounds choose with: a Gaussian process per
principal component of the runs' outputs, scikit-learn's), `regimes` (an emulator per regime), `network`
(an ensemble of the decoder a user trains), `batch` (a batch that does not cluster: kriging believer and a
minimum spacing), `share` (the space-filling share of a batch), `acquisitions/` (one file per way of
choosing, behind `Acquisition`).

`loop/`: over the ensemble's farm (pipeline/ensemble/, a tier below), the design run under
MPI, in rounds (`loop/rounds.py`, simulate.adaptive; what the rounds know and write in `loop/history.py`,
their levels in `loop/levels.py`) and online as the runs complete (`loop/online.py`, train.online's
choosing).
"""

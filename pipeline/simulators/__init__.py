"""The built-in simulators (simulate.family), one small file each: NAME and make(config, rng) -> the
sample's arrays by field name, drawn from `rng` alone (seeded by (simulate.seed, sample index)).

Each also names the entries of its samples' `params` array (PARAMETERS), which simulate writes beside it.

    cube.py     3D density cubes and their cosmological parameters (regression; the demo)
    trace.py    variable-length traces and the same parameters (regression on sequences)
    climate.py  2-D multi-channel fields with cyclones and atmospheric rivers, a class per pixel
                (segmentation), and the number of cyclones (classification)
    reaction.py 2-D advection-diffusion-reaction fronts and their parameters (surrogates: parameters to
                the final state, and trajectories of states)

Adding one: a module with NAME, PARAMETERS and make, registered in FAMILIES, and its settings in the schema.
"""

from __future__ import annotations

from types import ModuleType

from pipeline.simulators import climate, cube, reaction, trace

FAMILIES: dict[str, ModuleType] = {m.NAME: m for m in (cube, trace, climate, reaction)}

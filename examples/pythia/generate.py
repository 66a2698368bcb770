#!/usr/bin/env python3
"""Generate proton-proton collision events with Pythia 8 for one point of a parameter design and write
them as a ROOT TTree `events`, one entry per event (uproot): `particles`, the final-state particles'
(px, py, pz, E) in GeV, flattened (4 values per particle, a variable number of particles per event), and
`pid`, their PDG ids. This is the simulator of config/presets/pythia-events.yaml, run by sim2dl's ensemble:

    generate.py --process ttbar --ecm 13000 --alpha-s 0.13 --events 200 --seed 42 --out RUN_DIR

Processes: qcd (hard QCD 2->2, pT-hat > 20 GeV), ttbar (top pairs), zll (Z/gamma* -> e+e- or mu+mu-).
Time: about 0.6 s to initialise, then some 10 ms per event.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

import awkward as ak
import numpy as np
import uproot

PROCESSES = {
    "qcd": ["HardQCD:all = on", "PhaseSpace:pTHatMin = 20."],
    "ttbar": ["Top:gg2ttbar = on", "Top:qqbar2ttbar = on"],
    "zll": [
        "WeakSingleBoson:ffbar2gmZ = on",
        "23:onMode = off",
        "23:onIfAny = 11 13",
        "PhaseSpace:mHatMin = 50.",
    ],
}


def generate(process: str, ecm: float, alpha_s: float, events: int, seed: int) -> tuple[list, list]:
    import pythia8mc

    pythia = pythia8mc.Pythia("", False)  # no banner
    for setting in [
        "Print:quiet = on",
        *PROCESSES[process],
        f"Beams:eCM = {ecm}",
        f"TimeShower:alphaSvalue = {alpha_s}",
        "Random:setSeed = on",
        f"Random:seed = {seed}",
        "Next:numberCount = 0",
    ]:
        if not pythia.readString(setting):
            raise SystemExit(f"Pythia refused the setting '{setting}'")
    if not pythia.init():
        raise SystemExit("Pythia failed to initialise")
    momenta, ids = [], []
    while len(momenta) < events:
        if not pythia.next():
            continue
        final = [p for p in pythia.event if p.isFinal()]
        momenta.append(np.array([[p.px(), p.py(), p.pz(), p.e()] for p in final], np.float32).ravel())
        ids.append(np.array([p.id() for p in final], np.int32))
    return momenta, ids


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--process", choices=sorted(PROCESSES), required=True)
    parser.add_argument("--ecm", type=float, default=13000.0, help="centre-of-mass energy, GeV")
    parser.add_argument("--alpha-s", type=float, default=0.1365, help="TimeShower:alphaSvalue")
    parser.add_argument("--events", type=int, default=100)
    parser.add_argument("--seed", type=int, required=True)
    parser.add_argument("--out", type=Path, required=True, help="the run's directory")
    args = parser.parse_args()
    momenta, ids = generate(args.process, args.ecm, args.alpha_s, args.events, args.seed)
    with uproot.recreate(args.out / "events.root") as f:
        # ak.unflatten keeps float32 (a list of arrays would become float64)
        counts = [len(m) for m in momenta]
        f["events"] = {
            "particles": ak.unflatten(np.concatenate(momenta), counts),
            "pid": ak.unflatten(np.concatenate(ids), [len(i) for i in ids]),
        }
    print(
        f"{len(momenta)} {args.process} events at {args.ecm:g} GeV, alpha_s {args.alpha_s:g}", file=sys.stderr
    )


if __name__ == "__main__":
    main()

"""Adaptive design against the space-filling control: test VRMSE against the number of runs, per
acquisition, at the same budgets, over several seeds.

Every design is made by the product: `sim2dl simulate` under mpiexec (2 ranks) with simulate.adaptive
(config/presets/adaptive-fronts.yaml's simulator and space; each acquisition, and `space_filling`, the
initial Sobol design continued, as the control), seeds 1..3. Each design is scored after every round (its
first `initial + k * batch` runs, as the loop had them) by the emulator the loop chooses with
(pipeline/design/emulator.py, fitted on those runs) on a test set of random runs of the same simulator,
also run by `sim2dl simulate` (a plain ensemble). Two simulators:

- bistable (the preset's): a jump across a band of the space, smooth elsewhere: where adaptive design
  should pay. Goal: the control's error at the full budget N reached with <= 0.5 N runs;
- reaction (the forward surrogate preset's reaction-diffusion code, 4 parameters): of about uniform
  difficulty. Goal: no acquisition worse than 1.05 x the control at any budget.

Figures (last line, JSON): `curves.SIMULATOR.ACQUISITION` (budget -> mean test VRMSE over the seeds, and
`by_seed`), `runs_to_control_error.SIMULATOR.ACQUISITION` (the fewest runs at which its mean error is at
most the control's at N, as a fraction of N; null where it never is), `worst_over_control.SIMULATOR.ACQ`
(the largest ratio to the control at any budget), and `choosing_fraction` (seconds choosing / seconds of
the round: fitting, choosing and running, summed over the rounds of the variance designs).

    python bench/adaptive.py [--quick] [--acquisitions space_filling,integrated_variance]
    (quick: budgets to 40, 96 test runs; full: to 96, 256; --acquisitions: only these, the control always)
"""

from __future__ import annotations

import argparse
import json
import shutil
import sys
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow.parquet as pq
import yaml

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from bench.common import OUT, REPO, sim2dl
from pipeline.design.emulator import Emulator, Outputs
from pipeline.design.space import unit_points
from pipeline.simulators.adaptive import read_outputs
from pipeline.simulators.ensemble import run_paths

SEEDS = (1, 2, 3)
CONTROL = "space_filling"
REACTION = {
    "command": ["python3", "-m", "pipeline.simulators.reaction_run", "--out", "{out}", "--vx", "{vx}", "--vy", "{vy}",
                "--kappa", "{kappa}", "--r", "{r}"],
    "space": {"vx": {"type": "uniform", "low": -0.5, "high": 0.5},
              "vy": {"type": "uniform", "low": -0.5, "high": 0.5},
              "kappa": {"type": "uniform", "low": 0.001, "high": 0.005},
              "r": {"type": "uniform", "low": 0.5, "high": 6.0}},
}  # fmt: skip


def simulators() -> dict[str, dict[str, Any]]:
    preset = yaml.safe_load((REPO / "config" / "presets" / "adaptive-fronts.yaml").read_text())["simulate"]
    return {"bistable": {"command": preset["command"], "space": preset["space"]}, "reaction": REACTION}


def run_simulate(work: Path, simulate: dict[str, Any]) -> Path:
    """`sim2dl simulate` on a config of this simulate section alone; returns the raw directory."""
    work.mkdir(parents=True, exist_ok=True)
    config = {"workdir": str(work), "simulate": {"enabled": True, "max_failed_fraction": 0.0, **simulate}}
    path = work / "config.yaml"
    path.write_text(yaml.safe_dump(config, sort_keys=False))
    sim2dl("simulate", "--config", str(path))
    return work / "raw"


def outputs_of(raw: Path, settings: dict[str, Any]) -> tuple[np.ndarray, np.ndarray]:
    """(unit points, outputs) of every run of the runs table, in run order."""
    table = pq.read_table(raw / "runs.parquet").to_pylist()
    space = settings["space"]
    rows = [read_outputs(run_paths(raw, r["run"], i, 1000)[0], settings) for i, r in enumerate(table)]
    layout = Outputs.of({n: a.shape for n, a in rows[0].items()})
    x = unit_points({n: np.array([r[n] for r in table]) for n in space}, space)
    return x, np.array([layout.row(r) for r in rows])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--quick", action="store_true")
    parser.add_argument("--acquisitions", help="comma-separated: only these (and the control), e.g. for the check")
    args = parser.parse_args()
    initial, batch = 16, 8
    budget, tests = (40, 96) if args.quick else (96, 256)
    acquisitions = ["space_filling", "integrated_variance", "variance", "committee", "breed"]
    only = {CONTROL, *args.acquisitions.split(",")} if args.acquisitions else None
    if only and only - set(acquisitions):
        unknown = ", ".join(sorted(only - set(acquisitions)))
        parser.error(f"--acquisitions: no {unknown} (known: {', '.join(acquisitions)})")
    work = OUT / f"adaptive-{'quick' if args.quick else 'full'}"
    shutil.rmtree(work, ignore_errors=True)
    adaptive_common = {"initial": initial, "batch": batch, "budget": budget, "outputs": ["state"], "files": "*.h5",
                       "pool": 1024}  # fmt: skip
    result: dict[str, Any] = {"budgets": list(range(initial, budget + 1, batch)), "seeds": list(SEEDS),
                              "curves": {}, "runs_to_control_error": {}, "worst_over_control": {}}  # fmt: skip
    choosing, round_seconds = 0.0, 0.0
    for simulator, spec in simulators().items():
        settings = {**spec, "adaptive": {"outputs": ["state"], "files": "*.h5"}}
        test_raw = run_simulate(work / simulator / "test", {**spec, "runs": tests, "design": "random", "seed": 999})
        test_x, test_y = outputs_of(test_raw, settings)
        names = acquisitions if simulator == "bistable" else [CONTROL, "integrated_variance", "variance"]
        names = [n for n in names if only is None or n in only]
        curves: dict[str, Any] = {}
        for name in names:
            by_seed = []
            for seed in SEEDS:
                raw = run_simulate(work / simulator / f"{name}-{seed}", {**spec, "design": "sobol", "seed": seed,
                                   "adaptive": {**adaptive_common, "enabled": True, "acquisition": name}})  # fmt: skip
                x, y = outputs_of(raw, settings)
                layout = Outputs.of({"state": (y.shape[1],)})
                errors = []
                for n in result["budgets"]:
                    emulator = Emulator(layout, seed).fit(x[:n], y[:n])
                    errors.append(float(layout.vrmse(emulator.predict(test_x), test_y)["state"].mean()))
                by_seed.append(errors)
                if name == "variance":
                    for row in json.loads((raw / "adaptive" / "rounds.json").read_text()):
                        if "seconds_choosing" in row and "seconds_simulating" in row:
                            choosing += row["seconds_choosing"]
                            round_seconds += sum(row[k] for k in ("seconds_choosing", "seconds_fitting",
                                                                  "seconds_simulating"))  # fmt: skip
                print(f"{simulator} {name} seed {seed}: {[round(e, 4) for e in errors]}", file=sys.stderr, flush=True)
            mean = np.mean(by_seed, axis=0)
            curves[name] = {"mean": dict(zip(map(str, result["budgets"]), np.round(mean, 4).tolist(), strict=True)),
                            "by_seed": np.round(by_seed, 4).tolist()}  # fmt: skip
        control = np.array(list(curves[CONTROL]["mean"].values()))
        for name in names:
            if name == CONTROL:
                continue
            mean = np.array(list(curves[name]["mean"].values()))
            reached = [n for n, e in zip(result["budgets"], mean, strict=True) if e <= control[-1]]
            result["runs_to_control_error"].setdefault(simulator, {})[name] = (
                round(reached[0] / budget, 3) if reached else None
            )
            result["worst_over_control"].setdefault(simulator, {})[name] = round(float(np.max(mean / control)), 3)
        result["curves"][simulator] = curves
    result["choosing_fraction"] = round(choosing / round_seconds, 4) if round_seconds else None
    shutil.rmtree(work, ignore_errors=True)
    print(json.dumps(result))


if __name__ == "__main__":
    main()

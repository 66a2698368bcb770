"""Adaptive design against the space-filling control: test NRMSE against the number of runs, per design,
at the same budgets, over several seeds, scored by more than the model that chose.

Every design is made by the product: `sim2dl simulate` under mpiexec (2 ranks) with simulate.adaptive
(config/presets/adaptive-fronts.yaml's rounds: 16 Sobol runs, then 4 a round), seeds 1..N (`--seeds`, 3
by default). The designs (`designs`): `space_filling`, the initial Sobol design continued, the control;
`integrated`, integrated_variance with one GP and the space-filling share of 0.5 (the default until
2026-12-05, named `default` in the figures before);
`preset`, the settings docs/ensembles.md gives for a jump in part of the space (error_weighted_variance,
emulator: regimes, the nugget taken off, the share); each of the two also as it chose before the share
and the nugget existed (`integrated_before`, `preset_before`); `boundary`, boundary_variance (runs
where the regimes meet) with one GP and the share, what a user who sets nothing gets; `surrogate`,
surrogate_disagreement (the disagreement of an ensemble of 2 of the network the preset trains, its
decoder, integrated over the space) with the share; without --quick the other acquisitions too.
Each design is scored every 8 runs (its first 16, 24, ... runs, as the loop had them) on a test set of
random runs of the same simulator (also run by `sim2dl simulate`), by two learners fitted on those runs:
one plain Gaussian process (pipeline/design/emulator.py) and the regimes emulator
(pipeline/design/regimes.py). A design's own emulator (the loop's: regimes for the preset's, one GP for
the others) is how it judges itself; the plain GP is a learner that did not choose. With --network,
also by the network a user trains on the design's first 32 and 64 runs (the preset's workflow and decoder
surrogate). Five codes (--quick: the first two, unless --simulators names others):

- bistable (the preset's): a jump in a corner of the space, smooth elsewhere: where choosing should pay.
  Goal: the control's error at the preset's budget N (64) reached with <= 0.5 N runs;
- reaction (the forward surrogate preset's reaction-diffusion code, 4 parameters): of about uniform
  difficulty. Goal: no design worse than 1.05 x the control at any budget;
- swift_hohenberg: py-pde's Swift–Hohenberg equation (bench/codes/swift_hohenberg.py, a code nobody here
  wrote, in its own environment .venv-codes, built on first use), over the box around its onset a user
  would pick: flat for half of it, stripes and spots (hexagons) in the rest, the patterns' orientation
  sensitive to the parameters. Goal: no design worse than 1.05 x the control;
- brusselator: the Brusselator written with py-pde (bench/codes/brusselator.py, persistent: py-pde
  compiles for 20 s per process), over a 1..3, b 1..6: steady for about 40 % of the box, Turing patterns
  in the rest, their amplitude growing with b and their layout sensitive to the parameters. Goal: as
  Swift–Hohenberg's.
- allee: a population with a strong Allee effect written with py-pde (bench/codes/allee.py, persistent),
  a patch's fate at t = 60 over the threshold a 0..0.5 and the patch's radius 1..8: it dies (about a third
  of the box) or establishes and fills the box (half of it), and between them, along the critical size,
  a band of patches still spreading (14 %), whose size moves quickly with the parameters: a threshold in
  a box a user would pick, where choosing should pay. Goals: do no harm, and the control's error at 64
  runs with fewer.

Figures (last line, JSON): `curves.SIMULATOR.LEARNER.DESIGN` (LEARNER gp or regimes; budget -> mean test
NRMSE over the seeds, and `by_seed`), `worst_over_control.SIMULATOR.DESIGN.{emulator,gp,regimes}` (the
largest ratio of the design's mean error to the control's at any budget from 32 runs, by the design's own
emulator, by the plain GP and by the regimes emulator), `runs_to_control_error.SIMULATOR.DESIGN` (by its
own emulator: the fewest runs at which its mean error is at most the control's at N = `goal_budget`, the
preset's (the reaction code's: 40 in --quick), as a fraction of N; null where it never is by N),
`runs_went.SIMULATOR.DESIGN` (the share of the chosen runs, after the initial 16, in each regime of the
code, by its final state; `test_runs`: each regime's share of the space), `budgets.SIMULATOR`,
`choosing_fraction` (seconds choosing / seconds of the round: fitting, choosing and running, over the
integrated_variance designs), `choosing_fraction_preset` (the same over the bistable designs of the
preset's acquisition), `choosing_fraction_boundary` (over the boundary_variance designs) and
`choosing_fraction_surrogate` (over the surrogate_disagreement designs: the networks' training included).

`--online`: instead, online choosing (docs/ensembles.md, "Online: the trainers choose as the runs
complete") against its control, on the bistable preset: `sim2dl online` on 2 ranks (1 simulating, 1
training the preset's forward surrogate) with `acquisition: breed` and with `space_filling`, the same
budget (64 runs quick, 96 full) and seeds, each kept model then called on the test runs' parameters
(physical units in and out, as a user calls it) and scored by VRMSE against their states. Validation runs
(every 5th) are the design's own points either way, and training ends when the runs have ended and every
sample was drawn `max_reuse` times, so both arms train on as many samples for as many steps. Figures:
`online.test_nrmse.{breed,space_filling}` (mean over the seeds, and `by_seed`), `online.breed_over_control`
(goal: <= 1.0), `online.chosen_runs` (mean runs breed chose). Arrivals depend on timing, so the online
figures are not seeded: their spread is in `by_seed`.

`--bound`: instead, the most any choice of runs could gain on the bistable code with this emulator: the
control (Sobol continued) against an oracle that puts every run after the 16 Sobol ones inside the band
|level - a| < BAND, where the code's transition is (Sobol points in the band, known without any run), to
64 runs, scored as above on the same random test runs. Both designs' runs are the simulator's own `solve`
(what each `sim2dl simulate` run calls) in this process. Figures: `bound.test_nrmse.{control,band}` (budget
-> mean over the seeds), `bound.band_area` (its share of the space), `bound.band_error_share` (the share of
the control's summed test error at 64 runs that falls in the band), `bound.band_over_control` (at 32 and
64 runs).

`--bound-network`: instead, the same two designs (the control and the band oracle, 16 + 48 runs each, seeds
1..3) scored by the trained network instead of the emulator: each design's first 32 and all 64 runs (the
simulator's own command line, in this process) go through the preset's workflow (`snakemake`: ingest,
convert, merge, stage, train the `decoder` surrogate for the preset's 100 epochs; the parameters read from
each run's file, as no runs table is made), and the kept model is called on the test runs' parameters.
Figures: `bound_network.test_nrmse.{control,band}.{32,64}` (mean and `by_seed`), `in_band` and
`outside_band` (mean test VRMSE over the test runs inside and outside the band, at 64 runs),
`band_over_control`. About 10 minutes, with or without --quick (which sets 96 test runs, else 256).
With `--simulators CODE` (allee), on that code instead, its band the regime BAND_REGIME names (the Allee
code's patches still spreading), known from runs: per seed `sim2dl simulate` runs the Sobol design's first
64 + BOUND_POOL points; the control is its first 64, `band` its first 16 and then the later points in the
band, `band_shared` rounds of 4 half of which continue the Sobol design (as the default's share does)
and half in the band: what a design that keeps the share could at most place there. Scored by a plain GP
and by the trained network at 32 and 64 runs: `bound_network.test_nrmse.DESIGN.{gp,network}`,
`over_control`, `half_over_control_full` (the design's error at 32 runs over the control's at 64: at most
1 meets the half-budget goal), `runs_in_band`, `band_area`.

`--warm-start`: instead, what train.warm_start gives a continued design: per seed, the preset's workflow
(`snakemake --configfile`, its own seed) to 64 runs, then continued to 96 (`simulate.runs: 96`: the training
starts from the 64 runs' kept model), and the same 96 runs trained afresh (a copy of the workdir,
`warm_start: false`, `--forcerun train`), each for the preset's 100 epochs. Figures:
`warm_start.test_nrmse.{warm,afresh}` and `warm_start.val_loss_at_40.{warm,afresh}` (the validation loss
after 40 of the 100 epochs), means over the seeds and `by_seed`, and `warm_start.warm_over_afresh`. The
same with or without --quick (about 12 minutes on 2 cores).

    python bench/adaptive.py [--quick] [--designs boundary,preset] [--simulators bistable] [--seeds 5]
                             [--online] [--bound] [--bound-network] [--warm-start]
    (quick: budgets to the preset's 64 (the reaction code to 40), 96 test runs; full: to 96, 256;
    --designs: only these, the control always)
"""

from __future__ import annotations

import argparse
import functools
import json
import shutil
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow.parquet as pq
import yaml

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from bench.common import OUT, REPO, sim2dl, workflow
from pipeline.design.emulator import Emulator, Outputs
from pipeline.design.loop.history import read_outputs
from pipeline.design.regimes import make_emulator
from pipeline.design.space import unit_points
from pipeline.ensemble.farm import run_paths

SEEDS = (1, 2, 3)
QUICK_REACTION_BUDGET = 40
SCORED_EVERY = 8  # runs: each design is scored at 16, 24, ... runs (every second round of the preset's 4)
PRESET = REPO / "config" / "presets" / "adaptive-fronts.yaml"
PRESET_ACQUISITION = yaml.safe_load(PRESET.read_text())["simulate"]["adaptive"]["acquisition"]
CONTROL = "space_filling"
REACTION = {
    "command": [
        "python3",
        "-m",
        "pipeline.simulators.reaction_run",
        "--out",
        "{out}",
        "--vx",
        "{vx}",
        "--vy",
        "{vy}",
        "--kappa",
        "{kappa}",
        "--r",
        "{r}",
    ],
    "space": {
        "vx": {"type": "uniform", "low": -0.5, "high": 0.5},
        "vy": {"type": "uniform", "low": -0.5, "high": 0.5},
        "kappa": {"type": "uniform", "low": 0.001, "high": 0.005},
        "r": {"type": "uniform", "low": 0.5, "high": 6.0},
    },
}


# the choosing figures: which designs (simulator, the design's settings) each sums over
CHOOSING_FRACTIONS = {
    "choosing_fraction": lambda simulator, design: design["acquisition"] == "integrated_variance",
    "choosing_fraction_preset": lambda simulator, design: (
        simulator == "bistable" and design["acquisition"] == PRESET_ACQUISITION
    ),
    "choosing_fraction_boundary": lambda simulator, design: design["acquisition"] == "boundary_variance",
    "choosing_fraction_surrogate": lambda simulator, design: (
        design["acquisition"] == "surrogate_disagreement"
    ),
}


def choosing_seconds(raw: Path) -> tuple[float, float]:
    """(seconds choosing, seconds of the rounds: fitting, choosing and running) of a design's rounds."""
    rows = [
        row
        for row in json.loads((raw / "adaptive" / "rounds.json").read_text())
        if "seconds_choosing" in row and "seconds_simulating" in row
    ]
    choosing = sum(row["seconds_choosing"] for row in rows)
    return choosing, choosing + sum(row["seconds_fitting"] + row["seconds_simulating"] for row in rows)


def swift_hohenberg() -> dict[str, Any]:
    """py-pde's Swift–Hohenberg equation (bench/codes/swift_hohenberg.py) in its own environment, over the
    box around the code's onset a user would pick: rate -0.3 to 0.3, delta (the quadratic term) 0 to 2."""
    from bench.codes import environment

    script = REPO / "bench" / "codes" / "swift_hohenberg.py"
    return {
        "command": [
            str(environment.python()),
            str(script),
            "--out",
            "{out}",
            "--rate",
            "{rate}",
            "--delta",
            "{delta}",
        ],
        "space": {
            "rate": {"type": "uniform", "low": -0.3, "high": 0.3},
            "delta": {"type": "uniform", "low": 0.0, "high": 2.0},
        },
    }


def brusselator() -> dict[str, Any]:
    """The Brusselator written with py-pde's generic PDE class (bench/codes/brusselator.py) in the codes'
    environment, over the box around its Turing onset a user would pick: a 1 to 3, b 1 to 6. Persistent
    (simulate.persistent): py-pde compiles its operators for about 20 s in each process, a run takes 1.3 s."""
    from bench.codes import environment

    return {
        "command": [
            str(environment.python()),
            str(REPO / "bench" / "codes" / "brusselator.py"),
            "--persistent",
        ],
        "persistent": True,
        "space": {
            "a": {"type": "uniform", "low": 1.0, "high": 3.0},
            "b": {"type": "uniform", "low": 1.0, "high": 6.0},
        },
    }


# the Allee code's box (bench/fidelity.py's --code allee runs the same code over it at two resolutions)
ALLEE_SPACE = {
    "a": {"type": "uniform", "low": 0.0, "high": 0.5},
    "radius": {"type": "uniform", "low": 1.0, "high": 8.0},
}


def allee() -> dict[str, Any]:
    """A population with a strong Allee effect written with py-pde's generic PDE class
    (bench/codes/allee.py) in the codes' environment, over the box a user asking a patch's fate would
    pick: the threshold a 0 to 0.5, the patch's radius 1 to 8. Persistent: py-pde starts in about 10 s in
    each process, a run takes 0.15 s."""
    from bench.codes import environment

    return {
        "command": [str(environment.python()), str(REPO / "bench" / "codes" / "allee.py"), "--persistent"],
        "persistent": True,
        "space": ALLEE_SPACE,
    }


QUICK_CODES = ("bistable", "reaction")  # --quick's codes unless --simulators names others


def simulators(
    names: Sequence[str] = ("bistable", "reaction", "swift_hohenberg", "brusselator", "allee"),
) -> dict[str, dict[str, Any]]:
    """The codes by name (command and space), each made only when asked for: swift_hohenberg builds its
    environment first."""
    preset = yaml.safe_load(PRESET.read_text())["simulate"]
    makers = {
        "bistable": lambda: {"command": preset["command"], "space": preset["space"]},
        "reaction": lambda: REACTION,
        "swift_hohenberg": swift_hohenberg,
        "brusselator": brusselator,
        "allee": allee,
    }
    unknown = sorted(set(names) - set(makers))
    if unknown:
        raise SystemExit(f"--simulators: no code {', '.join(unknown)} (codes: {', '.join(makers)})")
    return {name: makers[name]() for name in names}


def emulator_settings(simulator: str) -> dict[str, Any]:
    """The emulator each simulator's designs choose and are scored with: the preset's for the bistable code
    (simulate.adaptive.emulator and regimes), the default (gp) for the reaction code."""
    from pipeline import config as cfg

    if simulator != "bistable":
        return {"emulator": "gp"}
    adaptive = cfg.load(PRESET)["simulate"]["adaptive"]  # with the schema's defaults
    return {"emulator": adaptive["emulator"], "regimes": adaptive["regimes"]}


def run_simulate(work: Path, simulate: dict[str, Any]) -> Path:
    """`sim2dl simulate` on a config of this simulate section alone; returns the raw directory."""
    work.mkdir(parents=True, exist_ok=True)
    config = {"workdir": str(work), "simulate": {"enabled": True, "max_failed_fraction": 0.0, **simulate}}
    path = work / "config.yaml"
    path.write_text(yaml.safe_dump(config, sort_keys=False))
    sim2dl("simulate", "--config", str(path))
    return work / "raw"


def run_dirs_of(raw: Path) -> list[Path]:
    """The directory of every run of the runs table, in run order."""
    names = pq.read_table(raw / "runs.parquet").column("run").to_pylist()
    return [run_paths(raw, name, i, 1000)[0] for i, name in enumerate(names)]


def outputs_of(raw: Path, settings: dict[str, Any]) -> tuple[np.ndarray, np.ndarray]:
    """(unit points, outputs) of every run of the runs table, in run order."""
    table = pq.read_table(raw / "runs.parquet").to_pylist()
    space = settings["space"]
    rows = [read_outputs(run_dir, settings) for run_dir in run_dirs_of(raw)]
    layout = Outputs.of({n: a.shape for n, a in rows[0].items()})
    x = unit_points({n: np.array([r[n] for r in table]) for n in space}, space)
    return x, np.array([layout.row(r) for r in rows])


def online_test_nrmse(
    work: Path, seed: int, acquisition: str, budget: int, test_params: np.ndarray, test_y: np.ndarray
) -> tuple[float, int]:
    """`sim2dl online` on the adaptive preset with this acquisition; (the kept model's mean test VRMSE of the
    state, runs chosen)."""
    preset = yaml.safe_load(PRESET.read_text())
    config = {**preset, "workdir": str(work)}
    config.pop("merge")  # online holds out every 5th run, no split
    config["simulate"] = {
        **preset["simulate"],
        "seed": seed,
        "max_failed_fraction": 0.0,
        "runs": budget,
        "adaptive": {
            "enabled": True,
            "acquisition": acquisition,
            "initial": 16,
            "queue": 8,
        },
    }
    config["source"] = {**preset["source"], "glob": "*.h5"}  # a run's own directory
    config["train"] = {
        **preset["train"],
        "seed": seed,
        "online": {
            "enabled": True,
            "producers": 1,
            "optimizer_steps": 2000,
            "validate_every_steps": 20,
            "validation_every_run": 5,
            "statistics_runs": 8,
            "buffer": {"capacity": 1024, "watermark": 16, "max_reuse": 40},
        },
    }
    work.mkdir(parents=True, exist_ok=True)
    path = work / "config.yaml"
    path.write_text(yaml.safe_dump(config, sort_keys=False))
    sim2dl("online", "--config", str(path))
    state = kept_model_states(work / "train", test_params)
    layout = Outputs.of({"state": (state.shape[1],)})
    runs = pq.read_table(work / "raw" / "runs.parquet")  # the control's table has no acquisition column
    chosen = (
        runs.column("acquisition").to_pylist().count("breed") if "acquisition" in runs.column_names else 0
    )
    return layout.nrmse(state, test_y)["state"], chosen


def online_choosing(work: Path, quick: bool) -> dict[str, Any]:
    """Online breed against its space-filling control on the bistable simulator (the module's `--online`)."""
    budget, tests = (64, 96) if quick else (96, 256)
    _, test_y, test_params = bistable_test_runs(work, tests)
    errors: dict[str, list[float]] = {CONTROL: [], "breed": []}
    chosen = []
    for seed in SEEDS:
        for name in errors:
            error, count = online_test_nrmse(
                work / f"online-{name}-{seed}", seed, name, budget, test_params, test_y
            )
            errors[name].append(error)
            if name == "breed":
                chosen.append(count)
            print(f"online {name} seed {seed}: {error:.4f} ({count} chosen)", file=sys.stderr, flush=True)
    mean = {name: float(np.mean(e)) for name, e in errors.items()}
    return {
        "budget": budget,
        "test_runs": tests,
        "seeds": list(SEEDS),
        "test_nrmse": {
            name: {"mean": round(mean[name], 4), "by_seed": np.round(e, 4).tolist()}
            for name, e in errors.items()
        },
        "breed_over_control": round(mean["breed"] / mean[CONTROL], 3),
        "chosen_runs": round(float(np.mean(chosen)), 1),
    }


BAND = 0.12  # |level - a| below this: the bistable code's transition (docs/ensembles.md, "When it pays")


def in_band(unit: np.ndarray) -> np.ndarray:
    """Which points (unit cube) of the bistable code's space lie in its transition band |level - a| < BAND."""
    from pipeline.design.space import parameter_columns

    columns = parameter_columns(unit, simulators(["bistable"])["bistable"]["space"])
    return np.abs(columns["level"] - columns["a"]) < BAND


def bound_designs(seed: int, initial: int, budget: int) -> dict[str, np.ndarray]:
    """The control (Sobol, `budget` points) and the band oracle (its first `initial`, then the next Sobol
    points that fall in the band), unit cube."""
    from pipeline.ensemble.sampling import unit_design

    control = unit_design("sobol", budget, 2, seed)
    later = unit_design("sobol", 4096, 2, seed, start=budget)
    return {
        "control": control,
        "band": np.vstack([control[:initial], later[in_band(later)][: budget - initial]]),
    }


def test_runs(work: Path, spec: dict[str, Any], tests: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """A code's random test runs (seed 999), run by `sim2dl simulate` into work/test: (unit points, final
    states, the parameters from the runs table in the space's order, float32: as a surrogate takes them)."""
    test_raw = run_simulate(work / "test", {**spec, "runs": tests, "design": "random", "seed": 999})
    x, y = outputs_of(test_raw, {**spec, "adaptive": {"outputs": ["state"], "files": "*.h5"}})
    table = pq.read_table(test_raw / "runs.parquet").to_pydict()
    return x, y, np.stack([table[n] for n in spec["space"]], axis=1).astype(np.float32)


def bistable_test_runs(work: Path, tests: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """The bistable code's test runs (test_runs): its parameters level and a, convert.stack's order."""
    return test_runs(work, simulators(["bistable"])["bistable"], tests)


def kept_model_states(train_dir: Path, params: np.ndarray) -> np.ndarray:
    """The final states a trained surrogate's kept model (train_dir/model) predicts at `params`, physical
    units in and out as a user calls it (runs x entries)."""
    import tensorflow as tf

    model = tf.keras.models.load_model(str(train_dir / "model"), compile=False)
    return np.asarray(model(params)["state"]).reshape(len(params), -1)


def allocation_bound(work: Path, quick: bool) -> dict[str, Any]:
    """The control against every run after the initial ones placed in the transition band (`--bound`)."""
    from pipeline.design.space import parameter_columns
    from pipeline.ensemble.sampling import unit_design
    from pipeline.simulators.bistable_run import solve

    initial, budget, tests = 16, 64, (96 if quick else 256)
    spec = simulators(["bistable"])["bistable"]
    test_x, test_y, _ = bistable_test_runs(work, tests)
    layout = Outputs.of({"state": (test_y.shape[1],)})

    def run(unit: np.ndarray) -> np.ndarray:
        columns = parameter_columns(unit, spec["space"])
        return np.array(
            [solve(level, a)[0].ravel() for level, a in zip(columns["level"], columns["a"], strict=True)]
        )

    budgets = list(range(initial, budget + 1, SCORED_EVERY))
    curves: dict[str, list[list[float]]] = {"control": [], "band": []}
    shares = []
    for seed in SEEDS:
        for name, x in bound_designs(seed, initial, budget).items():
            y = run(x)
            errors = [
                layout.errors(Emulator(layout, seed).fit(x[:n], y[:n]).predict(test_x), test_y)["state"]
                for n in budgets
            ]
            curves[name].append([float(np.sqrt(e.mean())) for e in errors])
            if name == "control":
                shares.append(float(errors[-1][in_band(test_x)].sum() / errors[-1].sum()))
            print(
                f"bound {name} seed {seed}: {np.round(curves[name][-1], 4).tolist()}",
                file=sys.stderr,
                flush=True,
            )
    mean = {name: np.mean(c, axis=0) for name, c in curves.items()}
    at = {
        str(n): round(float(mean["band"][i] / mean["control"][i]), 3)
        for i, n in enumerate(budgets)
        if n in (32, 64)
    }
    area = float(in_band(unit_design("sobol", 4096, 2, 0)).mean())
    return {
        "budgets": budgets,
        "seeds": list(SEEDS),
        "band": BAND,
        "test_runs": tests,
        "test_nrmse": {
            name: dict(zip(map(str, budgets), np.round(m, 4).tolist(), strict=True))
            for name, m in mean.items()
        },
        "band_area": round(area, 3),
        "band_error_share": round(float(np.mean(shares)), 3),
        "band_over_control": at,
    }


def network_bound(work: Path, quick: bool) -> dict[str, Any]:
    """`--bound-network`: the bound's two designs, each trained by the preset's workflow (`snakemake`) into
    its forward surrogate, whose kept model is scored on the test runs."""
    from pipeline.design.space import parameter_columns
    from pipeline.simulators.bistable_run import main as run_bistable

    initial, budget, tests = 16, 64, (96 if quick else 256)
    preset = yaml.safe_load(PRESET.read_text())
    space = preset["simulate"]["space"]
    test_x, test_y, test_params = bistable_test_runs(work, tests)
    layout = Outputs.of({"state": (test_y.shape[1],)})
    band = in_band(test_x)
    budgets = (budget // 2, budget)
    errors: dict[str, dict[int, list[np.ndarray]]] = {"control": {}, "band": {}}
    for seed in SEEDS:
        for name, x in bound_designs(seed, initial, budget).items():
            for n in budgets:
                case = work / f"{name}-{seed}-{n}"
                columns = parameter_columns(x[:n], space)
                for i, (level, a) in enumerate(zip(columns["level"], columns["a"], strict=True)):
                    run_bistable(
                        [
                            "--out",
                            str(case / "runs" / f"run-{i:04d}"),
                            "--level",
                            repr(float(level)),
                            "--a",
                            repr(float(a)),
                        ]
                    )
                # the preset's workflow on these runs' files: the parameters from each file (no runs table)
                config = {
                    **preset,
                    "workdir": str(case / "work"),
                    "simulate": {"enabled": False},
                    "source": {
                        "path": str(case / "runs"),
                        "glob": "**/*.h5",
                        "fields": {
                            "params": {"path": "params", "dtype": "float32", "shape": [2]},
                            "state": preset["source"]["fields"]["state"],
                        },
                    },
                    "convert": {
                        "features": ["params"],
                        "labels": ["state"],
                        "normalise": ["params", "state"],
                        "per_channel": ["params"],
                    },
                    "train": {**preset["train"], "seed": seed, "warm_start": False},
                }
                workflow(config, case / "config.yaml")
                predicted = kept_model_states(case / "work" / "train", test_params)
                errors[name].setdefault(n, []).append(layout.errors(predicted, test_y)["state"])
                shown = np.sqrt(errors[name][n][-1].mean())
                print(f"bound network {name} seed {seed} {n} runs: {shown:.4f}", file=sys.stderr, flush=True)
                shutil.rmtree(case)

    def mean(name: str, n: int, where: np.ndarray | None = None) -> float:
        chosen = [e if where is None else e[where] for e in errors[name][n]]
        return round(float(np.mean([np.sqrt(e.mean()) for e in chosen])), 4)

    return {
        "budgets": list(budgets),
        "seeds": list(SEEDS),
        "band": BAND,
        "test_runs": tests,
        "test_nrmse": {
            name: {
                str(n): {
                    "mean": mean(name, n),
                    "by_seed": [round(float(np.sqrt(e.mean())), 4) for e in errors[name][n]],
                }
                for n in budgets
            }
            for name in errors
        },
        "in_band": {name: mean(name, budget, band) for name in errors},
        "outside_band": {name: mean(name, budget, ~band) for name in errors},
        "band_over_control": {str(n): round(mean("band", n) / mean("control", n), 3) for n in budgets},
    }


BOUND_POOL = 480  # --bound-network on a code: Sobol candidates after the budget, searched for its band
BAND_REGIME = {"allee": "spreading"}  # --bound-network on a code: the regime the oracle places runs in


def band_designs(in_band: np.ndarray, initial: int, budget: int, batch: int) -> dict[str, list[int]]:
    """Indices into a Sobol pool whose first `budget` points are the control's design and whose later
    points are candidates, `in_band` marking those in the band: the control; `band`, its first `initial`
    and then band candidates only; `band_shared`, rounds of `batch` half of which continue the control's
    Sobol design (the default's space-filling share) and half band candidates: the most a design that
    keeps the share could place there."""
    candidates = [i for i in range(budget, len(in_band)) if in_band[i]]
    if len(candidates) < budget - initial:
        raise SystemExit(f"--bound-network: {len(candidates)} band candidates, {budget - initial} needed")
    control = list(range(budget))
    shared, sobol, banded = control[:initial], iter(range(initial, budget)), iter(candidates)
    while len(shared) < budget:
        shared += [next(sobol) for _ in range(batch // 2)] + [next(banded) for _ in range(batch - batch // 2)]
    return {
        "control": control,
        "band": control[:initial] + candidates[: budget - initial],
        "band_shared": shared[:budget],
    }


def by_budget(budgets: Sequence[int], values: np.ndarray) -> dict[str, float]:
    return {str(n): float(v) for n, v in zip(budgets, values, strict=True)}


def regime_bound(work: Path, quick: bool, simulator: str) -> dict[str, Any]:
    """`--bound-network --simulators CODE`: the control against oracles that place runs in the code's band
    regime (BAND_REGIME, known from the candidates' own runs), scored by a plain GP and by the network
    the workflow trains, at 32 and 64 runs."""
    initial, budget, batch, tests = 16, 64, 4, (96 if quick else 256)
    spec = simulators([simulator])[simulator]
    of, _ = REGIME_OF[simulator]
    settings = {**spec, "adaptive": {"outputs": ["state"], "files": "*.h5"}}
    test_x, test_y, test_params = test_runs(work, spec, tests)
    budgets = list(NETWORK_BUDGETS)
    errors: dict[str, dict[str, list[list[float]]]] = {}
    went: dict[str, list[float]] = {}
    for seed in SEEDS:
        pool = run_simulate(
            work / f"pool-{seed}", {**spec, "design": "sobol", "seed": seed, "runs": budget + BOUND_POOL}
        )
        x, y = outputs_of(pool, settings)
        run_dirs = run_dirs_of(pool)
        in_band = of(y) == BAND_REGIME[simulator]
        for name, chosen in band_designs(in_band, initial, budget, batch).items():
            learners = errors.setdefault(name, {"gp": [], "network": []})
            learners["gp"].append(scored(x[chosen], y[chosen], test_x, test_y, budgets, seed)["gp"])
            case = work / f"network-{name}-{seed}"
            trained = network_trained([run_dirs[i] for i in chosen], case, seed, test_params, test_y, budgets)
            learners["network"].append(trained)
            went.setdefault(name, []).append(float(in_band[chosen[initial:]].mean()))
            print(
                f"bound {simulator} {name} seed {seed}: gp {np.round(learners['gp'][-1], 4).tolist()} "
                f"network {np.round(trained, 4).tolist()}",
                file=sys.stderr,
                flush=True,
            )
    mean = {
        name: {learner: np.mean(runs, axis=0) for learner, runs in learners.items()}
        for name, learners in errors.items()
    }
    return {
        "simulator": simulator,
        "band": BAND_REGIME[simulator],
        "band_area": round(float(np.mean(of(test_y) == BAND_REGIME[simulator])), 3),
        "budgets": budgets,
        "seeds": list(SEEDS),
        "test_nrmse": {
            name: {
                learner: {
                    "mean": by_budget(budgets, np.round(mean[name][learner], 4)),
                    "by_seed": np.round(runs, 4).tolist(),
                }
                for learner, runs in learners.items()
            }
            for name, learners in errors.items()
        },
        "over_control": {
            name: {
                learner: by_budget(budgets, np.round(mean[name][learner] / mean["control"][learner], 3))
                for learner in learners
            }
            for name, learners in errors.items()
            if name != "control"
        },
        # the design's error at 32 runs over the control's at 64: at most 1 is the half-budget goal
        "half_over_control_full": {
            name: {
                learner: round(float(mean[name][learner][0] / mean["control"][learner][1]), 3)
                for learner in learners
            }
            for name, learners in errors.items()
        },
        "runs_in_band": {name: round(float(np.mean(shares)), 3) for name, shares in went.items()},
    }


def continued_training(work: Path, quick: bool) -> dict[str, Any]:
    """A design continued from 64 to 96 runs, trained on from the 64 runs' model and afresh
    (`--warm-start`)."""
    preset = yaml.safe_load(PRESET.read_text())

    def trained(workdir: Path, budget: int, seed: int, warm: bool, *options: str) -> dict[str, Any]:
        config = {
            **preset,
            "workdir": str(workdir),
            "stage": {"target": str(workdir.parent / f"local-{seed}")},
            "simulate": {**preset["simulate"], "seed": seed, "runs": budget},
            "train": {**preset["train"], "seed": seed, "warm_start": warm},
        }
        workflow(config, workdir.parent / f"{workdir.name}-{budget}.yaml", *options)
        summary = json.loads((workdir / "train" / "summary.json").read_text())
        history = json.loads((workdir / "train" / "metrics.json").read_text())
        return {
            "test_nrmse": summary["nrmse_mean"],
            "val_loss_at_40": history[39]["val_loss"],
            "warm_start": summary["warm_start"],
        }

    by_seed: dict[str, dict[str, list[float]]] = {"warm": {}, "afresh": {}}
    for seed in SEEDS:
        warm_dir, afresh_dir = work / f"warm-{seed}", work / f"afresh-{seed}"
        trained(warm_dir, 64, seed, True)
        warm = trained(warm_dir, 96, seed, True)
        assert warm["warm_start"] is not None, "the continued design's training did not warm-start"
        shutil.copytree(warm_dir, afresh_dir, symlinks=True)
        afresh = trained(afresh_dir, 96, seed, False, "--forcerun", "train")
        for name, result in (("warm", warm), ("afresh", afresh)):
            for figure in ("test_nrmse", "val_loss_at_40"):
                by_seed[name].setdefault(figure, []).append(round(float(result[figure]), 4))
        print(f"warm start seed {seed}: {warm} against {afresh}", file=sys.stderr, flush=True)
    mean = {
        name: {f: round(float(np.mean(v)), 4) for f, v in figures.items()}
        for name, figures in by_seed.items()
    }
    return {
        "runs": [64, 96],
        "seeds": list(SEEDS),
        "epochs": preset["train"]["epochs"],
        "test_nrmse": {
            name: {"mean": mean[name]["test_nrmse"], "by_seed": by_seed[name]["test_nrmse"]}
            for name in by_seed
        },
        "val_loss_at_40": {
            name: {"mean": mean[name]["val_loss_at_40"], "by_seed": by_seed[name]["val_loss_at_40"]}
            for name in by_seed
        },
        "warm_over_afresh": round(mean["warm"]["test_nrmse"] / mean["afresh"]["test_nrmse"], 3),
    }


def runs_to_reach(budgets: list[int], mean: np.ndarray, control: np.ndarray, at: int) -> float | None:
    """The fewest runs at which `mean` (the curve over `budgets`) is at most the control's at `at` runs, as a
    fraction of `at`; None where it never is by then."""
    target = control[budgets.index(at)]
    reached = [n for n, e in zip(budgets, mean, strict=True) if n <= at and e <= target]
    return round(reached[0] / at, 3) if reached else None


# simulate.adaptive as the loop had it before the space-filling share and the nugget existed
CHOOSING_BEFORE = {"space_filling_share": 0.0, "irreducible": "none"}
REGIMES = {"emulator": "regimes", "regimes": 4}


def designs(simulator: str, full: bool) -> dict[str, dict[str, Any]]:
    """The designs compared, by name: simulate.adaptive settings beside the common ones. The control; the
    integrated (integrated_variance, one GP, the schema's space-filling share) and the preset's settings
    (error_weighted_variance with emulator: regimes, the nugget, the share), each also as it chose before
    (`_before`: no share, the whole error); `boundary` (boundary_variance, one GP, the share: the
    default); `surrogate` (surrogate_disagreement: an ensemble of the preset's decoder chooses, with the
    share); without
    --quick the other acquisitions at their defaults."""
    preset = {"acquisition": "error_weighted_variance", **REGIMES}
    out = {
        CONTROL: {"acquisition": CONTROL, "emulator": "gp"},
        "integrated": {"acquisition": "integrated_variance", "emulator": "gp"},
        "integrated_before": {"acquisition": "integrated_variance", "emulator": "gp", **CHOOSING_BEFORE},
        "preset": preset,
        "preset_before": {**preset, **CHOOSING_BEFORE},
        "boundary": {"acquisition": "boundary_variance", "emulator": "gp"},
        # the network a user trains chooses: the preset's decoder, 2 members (the schema's defaults)
        "surrogate": {"acquisition": "surrogate_disagreement", "emulator": "gp"},
    }
    if full:
        out |= {name: {"acquisition": name, **emulator_settings(simulator)} for name in ("variance", "breed")}
        if emulator_settings(simulator)["emulator"] == "gp":
            out["committee"] = {"acquisition": "committee", "emulator": "gp"}
    return out


def scored(
    x: np.ndarray, y: np.ndarray, test_x: np.ndarray, test_y: np.ndarray, budgets: list[int], seed: int
) -> dict[str, list[float]]:
    """A design's test NRMSE at each budget (its first n runs) by each learner: one plain GP, and the
    regimes emulator (the preset's)."""
    layout = Outputs.of({"state": (y.shape[1],)})
    out: dict[str, list[float]] = {"gp": [], "regimes": []}
    for n in budgets:
        for learner, settings in (("gp", {"emulator": "gp"}), ("regimes", REGIMES)):
            fitted = make_emulator(layout, seed, **settings).fit(x[:n], y[:n])
            out[learner].append(layout.nrmse(fitted.predict(test_x), test_y)["state"])
    return out


def bistable_regimes(y: np.ndarray) -> np.ndarray:
    """Each run's regime by its final state: dies out (mean below 0.1), ignites (above 0.85: a front that
    filled the box but its seeds' corners, about 0.92), or between (fronts still moving, patches)."""
    mean = y.mean(axis=1)
    return np.where(mean < 0.1, "dies", np.where(mean > 0.85, "ignites", "between"))


def swift_hohenberg_regimes(y: np.ndarray) -> np.ndarray:
    """Each run's regime by its final field: flat (standard deviation below 0.05: the pattern decayed),
    spots (hexagons: the field skewed, its mean above 0.15 of its spread, as delta's quadratic term makes
    them), or stripes (a symmetric pattern)."""
    spread, mean = y.std(axis=1), y.mean(axis=1)
    return np.where(spread < 0.05, "flat", np.where(mean > 0.15 * spread, "spots", "stripes"))


def brusselator_regimes(y: np.ndarray) -> np.ndarray:
    """Each run's regime by its final field: steady (standard deviation below 0.05: the perturbation
    decayed) or patterns (Turing's spots and stripes)."""
    return np.where(y.std(axis=1) < 0.05, "steady", "patterns")


def allee_regimes(y: np.ndarray) -> np.ndarray:
    """Each run's regime by its final field: died (mean below 0.01), filled the box (above 0.99), or a
    patch still spreading between them."""
    mean = y.mean(axis=1)
    return np.where(mean < 0.01, "died", np.where(mean > 0.99, "filled", "spreading"))


# each code's regimes, from its runs' outputs (where the runs went), and their names; a code of even
# difficulty has none
REGIME_OF = {
    "bistable": (bistable_regimes, ("dies", "between", "ignites")),
    "swift_hohenberg": (swift_hohenberg_regimes, ("flat", "stripes", "spots")),
    "brusselator": (brusselator_regimes, ("steady", "patterns")),
    "allee": (allee_regimes, ("died", "spreading", "filled")),
}


NETWORK_BUDGETS = (32, 64)  # --network: the budgets a design's trained surrogate is scored at
NETWORK_DESIGNS = (CONTROL, "integrated", "preset", "boundary", "surrogate")


def network_scored(
    raw: Path, case: Path, seed: int, test_params: np.ndarray, test_y: np.ndarray, budgets: Sequence[int]
) -> list[float]:
    """A design's test NRMSE by the network a user trains on it, per budget n on its first n runs
    (network_trained)."""
    return network_trained(run_dirs_of(raw), case, seed, test_params, test_y, budgets)


def network_trained(
    run_dirs: Sequence[Path],
    case: Path,
    seed: int,
    test_params: np.ndarray,
    test_y: np.ndarray,
    budgets: Sequence[int],
) -> list[float]:
    """Test NRMSE by the network a user trains: per budget n, the preset's workflow (`snakemake`: ingest to
    train, the decoder surrogate for the preset's epochs, the parameters read from each run's file) on the
    runs in the first n of `run_dirs` (linked, not run again), its kept model called on the test runs'
    parameters in physical units. Any code whose runs write `params` and a 2-D `state`."""
    import h5py

    preset = yaml.safe_load(PRESET.read_text())
    with h5py.File(next(run_dirs[0].glob("*.h5"))) as first:
        state_shape = list(first["state"].shape)
    out = []
    for n in budgets:
        runs = case / f"runs-{n}"
        runs.mkdir(parents=True)
        for run_dir in run_dirs[:n]:
            (runs / run_dir.name).symlink_to(run_dir)
        config = {
            **preset,
            "workdir": str(case / f"work-{n}"),
            "simulate": {"enabled": False},
            "source": {
                "path": str(runs),
                "glob": "**/*.h5",
                "fields": {
                    "params": {"path": "params", "dtype": "float32", "shape": [test_params.shape[1]]},
                    "state": {"path": "state", "dtype": "float32", "shape": state_shape},
                },
            },
            "convert": {
                "features": ["params"],
                "labels": ["state"],
                "normalise": ["params", "state"],
                "per_channel": ["params"],
            },
            "train": {**preset["train"], "seed": seed, "warm_start": False},
        }
        workflow(config, case / f"config-{n}.yaml")
        predicted = kept_model_states(case / f"work-{n}" / "train", test_params)
        out.append(Outputs.of({"state": (test_y.shape[1],)}).nrmse(predicted, test_y)["state"])
    shutil.rmtree(case)
    return out


def where_the_runs_went(y: np.ndarray, initial: int, regime_of: Any) -> dict[str, float] | None:
    """The share of a design's chosen runs (after the initial ones) in each regime of the code."""
    if regime_of is None or len(y) <= initial:
        return None
    of, names = regime_of
    regimes = of(y[initial:])
    return {name: round(float(np.mean(regimes == name)), 3) for name in names}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--quick", action="store_true")
    parser.add_argument("--designs", help="comma-separated: only these (and the control), e.g. for the check")
    parser.add_argument("--simulators", help="comma-separated: only these codes")
    parser.add_argument("--seeds", type=int, default=len(SEEDS), help="seeds 1..N (default 3)")
    parser.add_argument(
        "--network",
        action="store_true",
        help="the designs also scored by the preset's trained surrogate (32 and 64 runs)",
    )
    parser.add_argument("--online", action="store_true", help="online choosing against its control instead")
    parser.add_argument(
        "--bound", action="store_true", help="the control against runs placed in the band instead"
    )
    parser.add_argument(
        "--bound-network", action="store_true", help="the same, scored by the trained surrogate"
    )
    parser.add_argument(
        "--warm-start", action="store_true", help="a continued design trained on against afresh"
    )
    args = parser.parse_args()
    bounded = network_bound  # --bound-network: the bistable code's band, or a code's band regime
    if args.bound_network and args.simulators and args.simulators != "bistable":
        (simulator,) = args.simulators.split(",")  # one code a run
        bounded = functools.partial(regime_bound, simulator=simulator)
    for name, measure in (
        ("bound", allocation_bound),
        ("bound_network", bounded),
        ("online", online_choosing),
        ("warm_start", continued_training),
    ):
        if getattr(args, name):  # another comparison instead of the designs' curves
            work = OUT / f"adaptive-{name}"
            shutil.rmtree(work, ignore_errors=True)
            result = {name: measure(work, args.quick)}
            shutil.rmtree(work, ignore_errors=True)
            print(json.dumps(result))
            return
    preset_simulate = yaml.safe_load(PRESET.read_text())["simulate"]
    preset = preset_simulate["adaptive"]
    initial, batch, preset_budget = preset["initial"], preset["batch"], preset_simulate["runs"]
    budget, tests = (preset_budget, 96) if args.quick else (96, 256)
    seeds = list(range(1, args.seeds + 1))
    if args.simulators:
        codes = simulators(args.simulators.split(","))
    else:
        codes = simulators(QUICK_CODES) if args.quick else simulators()
    work = OUT / f"adaptive-{'quick' if args.quick else 'full'}{'-network' if args.network else ''}"
    shutil.rmtree(work, ignore_errors=True)
    adaptive_common = {
        "initial": initial,
        "batch": batch,
        "outputs": ["state"],
        "files": "*.h5",
        "pool": 1024,
    }
    # the reaction code's goal holds at every budget: --quick scores it to 40 runs, in the check's time
    budget_of = {
        name: QUICK_REACTION_BUDGET if args.quick and name == "reaction" else budget for name in codes
    }
    result: dict[str, Any] = {
        "budgets": {},
        "seeds": seeds,
        "goal_budget": preset_budget,
        "curves": {},
        "runs_to_control_error": {},
        "worst_over_control": {},
        "runs_went": {},
    }
    seconds = {figure: [0.0, 0.0] for figure in CHOOSING_FRACTIONS}  # choosing, the whole rounds
    for simulator, spec in codes.items():
        settings = {**spec, "adaptive": {"outputs": ["state"], "files": "*.h5"}}
        largest = budget_of[simulator]
        budgets = result["budgets"][simulator] = list(range(initial, largest + 1, SCORED_EVERY))
        test_x, test_y, test_params = test_runs(work / simulator, spec, tests)
        network = args.network
        network_budgets = [n for n in NETWORK_BUDGETS if n <= largest]
        regime_of = REGIME_OF.get(simulator)
        chosen = designs(simulator, not args.quick)
        if args.designs:
            chosen = {
                name: d for name, d in chosen.items() if name == CONTROL or name in args.designs.split(",")
            }
        curves: dict[str, Any] = {"gp": {}, "regimes": {}, **({"network": {}} if network else {})}
        for name, design in chosen.items():
            by_seed: dict[str, list[list[float]]] = {"gp": [], "regimes": []}
            if network and name in NETWORK_DESIGNS:
                by_seed["network"] = []
            went = []
            for seed in seeds:
                adaptive = {**adaptive_common, **design, "enabled": True}
                raw = run_simulate(
                    work / simulator / f"{name}-{seed}",
                    {**spec, "design": "sobol", "seed": seed, "runs": largest, "adaptive": adaptive},
                )
                x, y = outputs_of(raw, settings)
                for learner, errors in scored(x, y, test_x, test_y, budgets, seed).items():
                    by_seed[learner].append(errors)
                if "network" in by_seed:
                    by_seed["network"].append(
                        network_scored(
                            raw,
                            work / simulator / f"network-{name}-{seed}",
                            seed,
                            test_params,
                            test_y,
                            network_budgets,
                        )
                    )
                went.append(where_the_runs_went(y, initial, regime_of))
                counted = [
                    figure for figure, counts in CHOOSING_FRACTIONS.items() if counts(simulator, design)
                ]
                if counted:
                    spent = choosing_seconds(raw)
                    for figure in counted:
                        seconds[figure] = [a + b for a, b in zip(seconds[figure], spent, strict=True)]
                print(
                    f"{simulator} {name} seed {seed}: gp {np.round(by_seed['gp'][-1], 4).tolist()} regimes "
                    f"{np.round(by_seed['regimes'][-1], 4).tolist()}"
                    + (
                        f" network {np.round(by_seed['network'][-1], 4).tolist()}"
                        if "network" in by_seed
                        else ""
                    ),
                    file=sys.stderr,
                    flush=True,
                )
            for learner, errors in by_seed.items():
                mean = np.mean(errors, axis=0)
                at = network_budgets if learner == "network" else budgets
                curves[learner][name] = {
                    "mean": dict(zip(map(str, at), np.round(mean, 4).tolist(), strict=True)),
                    "by_seed": np.round(errors, 4).tolist(),
                }
            if went[0] is not None:
                result["runs_went"].setdefault(simulator, {})[name] = {
                    k: round(float(np.mean([w.get(k, 0.0) for w in went])), 3) for k in went[0]
                }
        if regime_of is not None:  # each regime's share of the space: of the random test runs
            result["runs_went"][simulator]["test_runs"] = where_the_runs_went(test_y, 0, regime_of)
        for name, design in chosen.items():
            if name == CONTROL:
                continue
            loop = design["emulator"]  # the learner the design chose with
            ratios = {}
            for learner, label in (
                (loop, "emulator"),
                ("gp", "gp"),
                ("regimes", "regimes"),
                ("network", "network"),
            ):
                if name not in curves.get(learner, {}):
                    continue
                mean = np.array(list(curves[learner][name]["mean"].values()))
                control = np.array(list(curves[learner][CONTROL]["mean"].values()))
                at = np.array([int(n) for n in curves[learner][name]["mean"]])
                ratios[label] = round(float(np.max((mean / control)[at >= 32])), 3)
                if label == "emulator":
                    result["runs_to_control_error"].setdefault(simulator, {})[name] = runs_to_reach(
                        budgets, mean, control, min(preset_budget, largest)
                    )
            result["worst_over_control"].setdefault(simulator, {})[name] = ratios
        result["curves"][simulator] = curves
    for figure, (choosing, whole) in seconds.items():
        result[figure] = round(choosing / whole, 4) if whole else None
    shutil.rmtree(work, ignore_errors=True)
    print(json.dumps(result))


if __name__ == "__main__":
    main()

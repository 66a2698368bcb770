"""What a cheap level saves: designs over two resolutions of a real code against the costly level's plain
Sobol design, at equal cost, scored on the costly level's test runs.

The code is py-pde (a code nobody here wrote) solving Fisher–KPP fronts (bench/codes/fisher.py) in its own
environment, as a persistent simulator per level: the costly level on a 256 x 256 grid, the cheap one on
32 x 32, both writing the final field averaged onto 32 x 32 cells. Over d in [0.05, 1] and r in [0.2, 2]
(the box a user of the equation would pick): a cheap level correlated with the costly one, with a bias.
`--code allee`: the pair whose cheap level is wrong in part of the space. py-pde's Nagumo equation, a
patch's fate under an Allee effect (bench/codes/allee.py, over the threshold a 0..0.5 and the patch's
radius 1..8, to t = 60), the costly level on 128 x 128 cells and the cheap one on 16 x 16, a grid coarser
than the front: where a < 0.2 the patches that fill the box at 128 cells are still spreading at 16
(`cheap_level_rmse_by_half` measures it), elsewhere the levels agree. Every design is made by the product
(`sim2dl simulate` under mpiexec, 2 ranks); each level's cost is what the product measures
(measured_costs: the mean seconds of a level's runs, less each persistent simulator's first run on each
rank, whose seconds hold its start-up), in the costly level's runs:

- `sobol`: the costly level alone, Sobol, scored at 8, 16, 24 and 32 runs (its prefixes) by one Gaussian
  process per principal component (pipeline/design/emulator.py);
- `costly_adaptive`: the costly level alone, chosen in rounds by the default acquisition (8 Sobol runs,
  then rounds of 4) to 32 runs, scored at 16 (`costly_adaptive_16`) and 32 (`costly_adaptive_32`) runs by
  one Gaussian process per principal component, as the Sobol design;
- `nested`: simulate.fidelities without choosing: 64 cheap runs and the first 4 (`nested_4`) or 8
  (`nested_8`) of their points by the costly level, scored by the multi-fidelity emulator
  (pipeline/design/multifidelity.py);
- `adaptive`: simulate.fidelities with simulate.adaptive (round 0: 16 cheap and 4 costly runs, then rounds
  of what 2 costly runs cost, integrated_variance per unit cost), to a budget of what 8 (`adaptive_8`) and
  16 (`adaptive_16`) costly runs cost, scored by the better of the multi-fidelity emulator and one of the
  costly runs alone by their validation over the costly runs (until 2026-12-07: by the one the last round
  trusted, which read 1.25 x at a budget of 8 where the multi-fidelity emulator was 0.57 x).

Each design's test NRMSE on 48 random runs of the costly level (seeds 1..N, `--seeds`, 5 by default), by the
emulator, and with `--network` by the network a user trains (the adaptive preset's workflow and decoder
surrogate, in batches of 4, of 2 on 8 runs; on a design over levels the level is stacked with the
parameters, and the saved model answers for the costly level: the Sobol design trained on its first 8, 16
and 32 runs). Figures (last line, JSON): `sobol.{emulator,network}` (budget -> mean test NRMSE over the
seeds);
`designs.{emulator,network}` per design: its mean `cost` (in costly runs) and `nrmse`, `by_seed`,
`over_sobol_at_equal_cost` (its mean error over the Sobol design's at the same cost, interpolated in log-log
between the Sobol budgets; goal <= 1.05) and `cost_fraction_to_sobol_N` (its cost over N, the largest Sobol
budget, where its mean error is at most the Sobol design's at N, else null; goal <= 0.3);
`families.{emulator,network}` per kind of design (nested, adaptive) over its two budgets:
`cost_fraction_to_sobol_N`, the cost at which its mean error reaches the Sobol design's at N, log-log
interpolated between the budgets that bracket it, over N (goal <= 0.3); `cost_ratio` (the costly level's
measured cost per run over the cheap one's, the median over the designs); `cheap_level_nrmse` (the cheap
run at each test point against the costly one: how far the cheap level is from the costly).

With `--correction` too, each design over levels is also trained with the decoder's costly level a learnt
correction of the cheap one (`model_args: {level_entry: 2}`), scored as `designs.correction` and
`families.correction`: the two ways of learning the levels, on the same runs.

`--designs KIND ...` makes and scores only those kinds (nested, adaptive, costly_adaptive) beside the Sobol
designs. `--reuse FILE` takes the designs that a previous run's JSON (same seeds) scored from it instead
of making them again; the Sobol designs, and the designs it lacks, are made (the nested designs and the
networks are seeded: a design made again scores the same; `reused` lists the designs taken).

    python bench/fidelity.py [--code allee] [--seeds 5] [--quick] [--network [--correction]]
                             [--designs KIND ...] [--reuse FILE]
    (--quick: 3 seeds, 32 test runs)
"""

from __future__ import annotations

import argparse
import json
import shutil
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow.parquet as pq
import yaml

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from bench.adaptive import ALLEE_SPACE, PRESET, kept_model_states, outputs_of, run_simulate
from bench.common import OUT, REPO, sim2dl, workflow
from pipeline.design.emulator import Emulator, Outputs
from pipeline.design.multifidelity import MultiFidelityEmulator
from pipeline.ensemble.farm import run_paths
from pipeline.ensemble.fidelity import Fidelities, measured_costs

SOBOL_BUDGETS = (8, 16, 24, 32)
NETWORK_BUDGETS = (8, 16, 32)  # --network: the costly level alone, trained on its first 8, 16 and 32 runs
NESTED = {"nested_4": (64, 4), "nested_8": (64, 8)}  # cheap runs, costly runs
ADAPTIVE = {"adaptive_8": 8, "adaptive_16": 16}  # budget, in costly runs
# the costly level alone, chosen in rounds as the product's defaults choose (8 Sobol runs, then rounds of
# 4): scored at these prefixes of one design of 32 runs (a design to 32 runs passes through the one to 16)
COSTLY_ADAPTIVE = {"costly_adaptive_16": 16, "costly_adaptive_32": 32}


@dataclass(frozen=True)
class Pair:
    """A code at two resolutions (bench/codes/SCRIPT --cells): its parameters' box and each level's grid."""

    script: str
    space: dict[str, dict[str, Any]]
    costly_cells: int
    cheap_cells: int

    def command(self, cells: int) -> list[str]:
        from bench.codes import environment

        script = REPO / "bench" / "codes" / self.script
        return [str(environment.python()), str(script), "--persistent", "--cells", str(cells)]

    def levels(self, cheap_runs: int, costly_runs: int) -> list[dict[str, Any]]:
        return [
            {"name": "cheap", "command": self.command(self.cheap_cells), "runs": cheap_runs},
            {"name": "costly", "command": self.command(self.costly_cells), "runs": costly_runs},
        ]

    @property
    def costly(self) -> dict[str, Any]:
        """simulate's keys for the costly level alone."""
        return {"command": self.command(self.costly_cells), "persistent": True, "space": self.space}

    @property
    def settings(self) -> dict[str, Any]:
        return {"space": self.space, "adaptive": ADAPTIVE_OUTPUTS}


ADAPTIVE_OUTPUTS = {"outputs": ["state"], "files": "*.h5"}
PAIRS = {
    # fronts the coarse grid slows or speeds everywhere: a cheap level correlated with a bias
    "fisher": Pair(
        "fisher.py",
        {
            "d": {"type": "uniform", "low": 0.05, "high": 1.0},
            "r": {"type": "uniform", "low": 0.2, "high": 2.0},
        },
        256,
        32,
    ),
    # a grid coarser than the front: right where patches die or establish slowly (a > 0.2), wrong where
    # they fill the box at 128 cells (a < 0.2: still spreading at 16)
    "allee": Pair("allee.py", ALLEE_SPACE, 128, 16),
}
KINDS = ("nested", "adaptive", "costly_adaptive")
CORRECTION = {"level_entry": 2}  # --correction: the level after the 2 parameters in the stack


def read_design(raw: Path, pair: Pair) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(unit points, outputs, level index) of every run of a design, in run order."""
    x, y = outputs_of(raw, pair.settings)
    table = pq.read_table(raw / "runs.parquet")
    level = (
        table.column("fidelity_index").to_numpy()
        if "fidelity_index" in table.column_names
        else np.ones(len(x), int)
    )
    return x, y, np.asarray(level, int)


def costs_of(raw: Path) -> tuple[float, float]:
    """Each level's measured cost per run, as the product measures it (pipeline/ensemble/fidelity.py's
    measured_costs: the mean seconds of its runs that succeeded, less those that started its persistent
    simulator)."""
    design = yaml.safe_load((raw.parent / "config.yaml").read_text())
    cheap, costly = measured_costs(raw / "runs.parquet", Fidelities.of(design["simulate"]))
    return float(cheap["mean_seconds"]), float(costly["mean_seconds"])


def data_sections(levels: bool, space: dict[str, Any]) -> tuple[dict[str, Any], dict[str, Any]]:
    """source.fields and convert for the forward surrogate of the runs' files (parameters -> state); over
    levels the parameters and the level are the runs table's columns, stacked, as simulate.fidelities
    asks (a stack joins fields of one shape: scalars here)."""
    fields: dict[str, Any] = {"state": {"path": "state", "dtype": "float32", "shape": [32, 32]}}
    convert: dict[str, Any] = {"labels": ["state"]}
    if levels:
        fields |= {name: {"column": name} for name in space} | {"level": {"column": "fidelity_index"}}
        feature, convert["stack"] = "design", {"design": [*space, "level"]}
    else:
        feature = "params"
        fields["params"] = {"path": "params", "dtype": "float32", "shape": [len(space)]}
    convert |= {"features": [feature], "normalise": [feature, "state"], "per_channel": [feature]}
    return {"glob": "**/*.h5", "fields": fields}, convert


def simulate_levels(work: Path, simulate: dict[str, Any]) -> Path:
    """`sim2dl simulate` of a design over levels (its config has the model's data sections, which the
    levels' config check reads); returns the raw directory."""
    work.mkdir(parents=True, exist_ok=True)
    source, convert = data_sections(True, simulate["space"])
    config = {
        "workdir": str(work),
        "simulate": {"enabled": True, "max_failed_fraction": 0.0, **simulate},
        "source": source,
        "convert": convert,
        "train": {"task": "surrogate", "model": "decoder"},
    }
    (work / "config.yaml").write_text(yaml.safe_dump(config, sort_keys=False))
    sim2dl("simulate", "--config", str(work / "config.yaml"))
    return work / "raw"


def network_error(
    raw: Path,
    case: Path,
    seed: int,
    test: tuple[np.ndarray, np.ndarray],
    runs: int | None,
    model_args: dict[str, Any] | None = None,
) -> float:
    """The test NRMSE of the network a user trains on a design (`--network`): the adaptive preset's
    workflow (`snakemake`: ingest to train, its decoder for its epochs) on the design's runs (the first
    `runs` of a one-level design, linked; every run of a design over levels, read in place with the runs
    table, the level stacked with the parameters), its saved model called on the test runs' parameters
    in physical units: for levels it answers for the costly one (pipeline/training/levels.py)."""
    test_params, test_y = test
    preset = yaml.safe_load(PRESET.read_text())
    design = yaml.safe_load((raw.parent / "config.yaml").read_text())
    source, convert = data_sections(runs is None, design["simulate"]["space"])
    simulate: dict[str, Any] = {"enabled": False}
    if runs is None:  # a design over levels, its levels as the user who ran them keeps them in the config
        source |= {"path": str(raw), "labels_table": {"path": "runs.parquet", "match": "run_directory"}}
        simulate["fidelities"] = design["simulate"]["fidelities"]
    else:
        linked = case / "runs"
        linked.mkdir(parents=True)
        names = pq.read_table(raw / "runs.parquet").column("run").to_pylist()
        for i, name in enumerate(names[:runs]):
            (linked / name).symlink_to(run_paths(raw, name, i, 1000)[0])
        source["path"] = str(linked)
    config = {
        **preset,
        "workdir": str(case / "work"),
        "simulate": simulate,
        "source": source,
        "convert": convert,
        # batches of 4: 16 runs leave 11 to train on, 5 or 6 a rank (every design trains so); 8 runs leave
        # 2 a rank, a batch of 2
        "train": {
            **preset["train"],
            "seed": seed,
            "warm_start": False,
            "batch_size": 2 if runs is not None and runs < 16 else 4,
            **({"model_args": model_args} if model_args else {}),
        },
    }
    workflow(config, case / "config.yaml")
    predicted = kept_model_states(case / "work" / "train", test_params)
    shutil.rmtree(case)
    return Outputs.of({"state": (test_y.shape[1],)}).nrmse(predicted, test_y)["state"]


def interpolated(budgets: list[int], errors: list[float], cost: float) -> float:
    """The Sobol design's error at `cost` runs, interpolated in log-log between its budgets."""
    return float(np.exp(np.interp(np.log(cost), np.log(budgets), np.log(errors))))


@dataclass
class Bench:
    """Where the designs are made, the code's levels, the costly level's test runs, and whether the network
    scores too."""

    work: Path
    pair: Pair
    test_x: np.ndarray
    test_y: np.ndarray
    test_params: np.ndarray
    network: bool
    correction: bool = False

    @property
    def layout(self) -> Outputs:
        return Outputs.of({"state": (self.test_y.shape[1],)})

    def emulator_error(self, model: Any) -> float:
        return self.layout.nrmse(model.predict(self.test_x), self.test_y)["state"]

    def network_error(
        self, raw: Path, seed: int, runs: int | None = None, model_args: dict[str, Any] | None = None
    ) -> float | None:
        if not self.network:
            return None
        case = self.work / f"network-{raw.parent.name}-{runs}-{bool(model_args)}"
        return network_error(raw, case, seed, (self.test_params, self.test_y), runs, model_args)

    def sobol(self, seed: int) -> tuple[list[float], list[float | None]]:
        """The costly level alone: its test NRMSE at each of SOBOL_BUDGETS by the GP, and by the network
        at NETWORK_BUDGETS."""
        raw = run_simulate(
            self.work / f"sobol-{seed}",
            {**self.pair.costly, "runs": max(SOBOL_BUDGETS), "design": "sobol", "seed": seed},
        )
        x, y, _ = read_design(raw, self.pair)
        gp = [self.emulator_error(Emulator(self.layout, seed).fit(x[:n], y[:n])) for n in SOBOL_BUDGETS]
        return gp, [self.network_error(raw, seed, n) for n in NETWORK_BUDGETS]

    def costly_adaptive(self, seed: int) -> dict[str, dict[str, Any]]:
        """The costly level alone, chosen in rounds by the default acquisition: each COSTLY_ADAPTIVE
        prefix's cost (its runs) and test NRMSE by the emulator the rounds fit and by the network."""
        rounds = {"enabled": True, "initial": 8, "batch": 4}
        raw = run_simulate(
            self.work / f"costly_adaptive-{seed}",
            {
                **self.pair.costly,
                "design": "sobol",
                "seed": seed,
                "runs": max(COSTLY_ADAPTIVE.values()),
                "adaptive": {**rounds, **ADAPTIVE_OUTPUTS},
            },
        )
        x, y, _ = read_design(raw, self.pair)
        return {
            name: {
                "cost": float(n),
                "emulator": self.emulator_error(Emulator(self.layout, seed).fit(x[:n], y[:n])),
                "network": self.network_error(raw, seed, n),
                "runs": [0, n],
            }
            for name, n in COSTLY_ADAPTIVE.items()
        }

    def levels(self, name: str, seed: int, simulate: dict[str, Any]) -> dict[str, Any]:
        """A design over the two levels: its cost in costly runs (each level's measured cost), its test NRMSE
        by the emulator (a nested design: the multi-fidelity one; rounds: the better of it and one of the
        costly runs alone by their validation), by the network, and each level's runs."""
        raw = simulate_levels(
            self.work / f"{name}-{seed}",
            {"space": self.pair.space, "persistent": True, "design": "sobol", "seed": seed, **simulate},
        )
        x, y, level = read_design(raw, self.pair)
        cheap_cost, costly_cost = costs_of(raw)
        model: Any = MultiFidelityEmulator(self.layout, seed, 2).fit(x, y, level)
        if (raw / "adaptive" / "rounds.json").exists():
            model = better_by_validation(model, Emulator(self.layout, seed).fit(x[level == 1], y[level == 1]))
        return {
            "cost": float((np.sum(level == 0) * cheap_cost + np.sum(level == 1) * costly_cost) / costly_cost),
            "emulator": self.emulator_error(model),
            "network": self.network_error(raw, seed),
            "correction": self.network_error(raw, seed, None, CORRECTION) if self.correction else None,
            "runs": np.bincount(level, minlength=2).tolist(),
            "cost_ratio": costly_cost / cheap_cost,
        }


def better_by_validation(both: MultiFidelityEmulator, alone: Emulator) -> Any:
    """Of the multi-fidelity emulator and one of the costly runs alone, the one whose validation over the
    costly runs is lower (leave-point-out against leave-one-out; tests/test_fidelity_design.py's
    final_error). Not the last round's `cheaper_levels_chosen`: that also says whether more cheap runs
    still teach (learning progress), and where they stopped it scored the design's 7 costly runs alone
    when its cheap ones helped (py-pde's fronts at a budget of 8: 0.29 to 0.36 against 0.15 to 0.21)."""
    errors = [np.mean(list(e.outputs.nrmse(e.loo(), e.y).values())) for e in (both, alone)]
    return both if errors[0] <= errors[1] else alone


def adaptive_settings(pair: Pair, budget: int) -> dict[str, Any]:
    return {
        "fidelities": pair.levels(16, 4),
        "runs": budget,
        "adaptive": {
            "enabled": True,
            "acquisition": "integrated_variance",
            "batch": 2,
            "outputs": ["state"],
            "files": "*.h5",
        },
    }


def compared(
    rows: list[dict[str, Any]], budgets: list[int], sobol: np.ndarray, learner: str
) -> dict[str, Any]:
    """A design's mean cost and error by one learner over the seeds, against the Sobol design's mean error
    (at `budgets`) at the same cost and at the largest budget."""
    cost = float(np.mean([r["cost"] for r in rows]))
    error = float(np.mean([r[learner] for r in rows]))
    reference = interpolated(budgets, sobol.tolist(), min(max(cost, budgets[0]), budgets[-1]))
    return {
        "cost": round(cost, 3),
        "nrmse": round(error, 4),
        "over_sobol_at_equal_cost": round(error / reference, 3),
        f"cost_fraction_to_sobol_{budgets[-1]}": round(cost / budgets[-1], 3) if error <= sobol[-1] else None,
        "by_seed": [[round(r["cost"], 3), round(r[learner], 4)] for r in rows],
    }


def reached_at(costs: list[float], errors: list[float], target: float) -> float | None:
    """The cost at which a family of designs (one kind at growing budgets) first reaches `target` error:
    log-log interpolated between the two budgets that bracket it, its smallest cost where that one already
    does (an upper bound), None where none does."""
    order = np.argsort(costs)
    cost, error = np.log(np.asarray(costs)[order]), np.log(np.asarray(errors)[order])
    if error[0] <= np.log(target):
        return float(np.exp(cost[0]))
    for i in range(1, len(cost)):
        if error[i] <= np.log(target):
            share = (error[i - 1] - np.log(target)) / (error[i - 1] - error[i])
            return float(np.exp(cost[i - 1] + share * (cost[i] - cost[i - 1])))
    return None


def kind(design: str) -> str:
    """A design's kind: its name less its budget (nested_4 -> nested)."""
    return design.rsplit("_", 1)[0]


def families(compared_designs: dict[str, dict[str, Any]], budgets: list[int], sobol: np.ndarray) -> dict:
    """Each kind of design (nested, adaptive) over its budgets: the cost at which its mean error reaches
    the Sobol design's at the largest budget N, over N (goal <= 0.3)."""
    kinds: dict[str, list[dict[str, Any]]] = {}
    for name, row in compared_designs.items():
        kinds.setdefault(kind(name), []).append(row)
    result = {}
    for name, rows in kinds.items():
        cost = reached_at([r["cost"] for r in rows], [r["nrmse"] for r in rows], float(sobol[-1]))
        result[name] = {
            f"cost_fraction_to_sobol_{budgets[-1]}": None if cost is None else round(cost / budgets[-1], 3)
        }
    return result


def cheap_rmse_by_half(unit: np.ndarray, cheap: np.ndarray, costly: np.ndarray) -> dict[str, float]:
    """The cheap level's RMSE from the costly one over the test runs in the lower and the upper half of the
    first parameter's range."""
    lower = unit[:, 0] < 0.5
    return {
        half: round(float(np.sqrt(np.mean((cheap[rows] - costly[rows]) ** 2))), 4)
        for half, rows in (("lower", lower), ("upper", ~lower))
    }


def reused_rows(previous: dict[str, Any], name: str, seeds: list[int]) -> list[dict[str, Any]]:
    """A design's per-seed cost and error by each learner, as a previous run's JSON recorded them."""
    rows: list[dict[str, Any]] = [{} for _ in seeds]
    for learner, designs in previous["designs"].items():
        for row, (cost, error) in zip(rows, designs[name]["by_seed"], strict=True):
            row |= {"cost": cost, learner: error}
    return rows


def arguments() -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--seeds", type=int, default=5)
    parser.add_argument(
        "--first-seed",
        type=int,
        default=1,
        help="run seeds FIRST..SEEDS only (a long benchmark split over sessions: each seed's lines are "
        "printed as it ends, and every seed's test set is the same)",
    )
    parser.add_argument("--quick", action="store_true")
    parser.add_argument(
        "--code",
        choices=sorted(PAIRS),
        default="fisher",
        help="the code at two resolutions (fisher: a cheap level correlated with a bias; allee: one wrong "
        "in part of the space)",
    )
    parser.add_argument(
        "--network", action="store_true", help="also scored by the network a user trains (Sobol at 8, 16, 32)"
    )
    parser.add_argument(
        "--correction",
        action="store_true",
        help="with --network: each design over levels also trained as a correction (decoder's level_entry)",
    )
    parser.add_argument(
        "--designs",
        nargs="+",
        choices=KINDS,
        default=list(KINDS),
        help="the kinds of design to make and score beside the Sobol designs (all by default)",
    )
    parser.add_argument(
        "--reuse",
        type=Path,
        help="a previous run's JSON (same seeds): its designs are scored from it, not made again; the "
        "Sobol designs and the designs it lacks are made",
    )
    return parser.parse_args()


def main() -> None:
    args = arguments()
    seeds = list(range(args.first_seed, (3 if args.quick else args.seeds) + 1))
    previous = json.loads(args.reuse.read_text()) if args.reuse else None
    if previous and previous["seeds"] != seeds:
        raise SystemExit(f"--reuse {args.reuse}: seeds {previous['seeds']}, not {seeds}")
    if previous and previous.get("code", "fisher") != args.code:
        raise SystemExit(f"--reuse {args.reuse}: code {previous.get('code', 'fisher')}, not {args.code}")
    pair = PAIRS[args.code]
    work = OUT / "fidelity"
    shutil.rmtree(work, ignore_errors=True)
    test = {**pair.costly, "runs": 32 if args.quick else 48, "design": "random", "seed": 999}
    test_raw = run_simulate(work / "test", test)
    test_x, test_y = outputs_of(test_raw, pair.settings)
    table = pq.read_table(test_raw / "runs.parquet").to_pydict()
    test_params = np.stack([table[n] for n in pair.space], axis=1).astype(np.float32)
    bench = Bench(work, pair, test_x, test_y, test_params, args.network, args.correction and args.network)
    cheap_raw = run_simulate(work / "test-cheap", {**test, "command": pair.command(pair.cheap_cells)})
    cheap_y = outputs_of(cheap_raw, pair.settings)[1]
    result: dict[str, Any] = {
        "code": args.code,
        "seeds": seeds,
        "cheap_level_nrmse": round(bench.layout.nrmse(cheap_y, test_y)["state"], 4),
        # where the cheap level is wrong: its RMSE over the test runs of each half of the first parameter
        "cheap_level_rmse_by_half": cheap_rmse_by_half(test_x, cheap_y, test_y),
    }
    designs = {name: {"fidelities": pair.levels(*runs)} for name, runs in NESTED.items()}
    designs |= {name: adaptive_settings(pair, budget) for name, budget in ADAPTIVE.items()}
    designs = {name: simulate for name, simulate in designs.items() if kind(name) in args.designs}
    costly_alone = [name for name in COSTLY_ADAPTIVE if kind(name) in args.designs]
    reused = {n for n in [*designs, *costly_alone] if previous and n in previous["designs"]["emulator"]}
    by_design = {n: reused_rows(previous, n, seeds) if n in reused else [] for n in [*designs, *costly_alone]}
    gp, network = [], []
    for seed in seeds:
        errors, trained = bench.sobol(seed)
        gp.append(errors)
        network.append(trained)
        made = {n: bench.levels(n, seed, simulate) for n, simulate in designs.items() if n not in reused}
        if not set(costly_alone) <= reused:
            made |= bench.costly_adaptive(seed)
        for name, row in made.items():
            by_design[name].append(row)
            print(f"{name} seed {seed}: {row}", file=sys.stderr, flush=True)
        print(
            f"seed {seed}: sobol gp {np.round(errors, 4).tolist()} network {trained}",
            file=sys.stderr,
            flush=True,
        )
    sobol_gp = np.mean(gp, axis=0)
    result["sobol"] = {
        "emulator": dict(zip(map(str, SOBOL_BUDGETS), np.round(sobol_gp, 4).tolist(), strict=True))
    }
    ratios = [r["cost_ratio"] for rows in by_design.values() for r in rows if "cost_ratio" in r]
    result["cost_ratio"] = round(float(np.median(ratios)), 1) if ratios else previous["cost_ratio"]
    result["reused"] = sorted(reused)
    # each learner's designs against its own Sobol curve: the emulator's, and the network's both ways
    learners = [("emulator", list(SOBOL_BUDGETS), sobol_gp)]
    if args.network:
        sobol_network = np.mean(network, axis=0)
        result["sobol"]["network"] = dict(
            zip(map(str, NETWORK_BUDGETS), np.round(sobol_network, 4).tolist(), strict=True)
        )
        learners.append(("network", list(NETWORK_BUDGETS), sobol_network))
        if bench.correction:
            learners.append(("correction", list(NETWORK_BUDGETS), sobol_network))
    result["designs"], result["families"] = {}, {}
    for learner, budgets, sobol in learners:
        result["designs"][learner] = {
            n: compared(rows, budgets, sobol, learner)
            for n, rows in by_design.items()
            if all(learner in r for r in rows)  # the correction: designs over levels only
        }
        result["families"][learner] = families(result["designs"][learner], budgets, sobol)
    shutil.rmtree(work, ignore_errors=True)
    print(json.dumps(result))


if __name__ == "__main__":
    main()

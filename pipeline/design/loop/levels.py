"""The rounds of a design over levels of one simulator (simulate.fidelities with simulate.adaptive), pure:
what rounds.py adds to a round when there are levels.

- Round 0 is the levels' nested design (pipeline/ensemble/fidelity.py): level k runs the first `runs` of
  its points, each point's seed the same at every level. simulate.adaptive.initial is not used.
- Costs per run: each level's declared `cost`, else the mean seconds of its runs that succeeded so far
  (measured again every round, as the runs come).
- The budget (simulate.runs) and a round's batch are counted in runs of the costliest level: 64 runs
  spend what 64 of its runs cost, round 0 included, on any mix of levels, so a design is compared with
  the costliest level's plain design at equal cost.
- The runs table gets `fidelity` and `fidelity_index` as a plain ensemble's; rounds.json each level's runs
  and cost, and the cost spent.

Memory: a level index per run (rank 0, beside the runs' points); time: linear in the runs.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np
import pyarrow as pa

from pipeline import Sim2dlError
from pipeline.ensemble.fidelity import INDEX_COLUMN, NAME_COLUMN, Fidelities, LevelTally, level_tallies
from pipeline.ensemble.plan import run_seeds
from pipeline.ensemble.sampling import unit_design


def nested_start(
    settings: Mapping[str, Any], fidelities: Fidelities
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Round 0: (unit points, level index, design point index) of every level's runs, level by level."""
    _, levels, points = fidelities.columns(0, fidelities.runs)
    unit = unit_design(settings["design"], fidelities.points, len(settings["space"]), settings["seed"])
    return unit[points], levels, points


def with_levels(
    table: pa.Table, fidelities: Fidelities, levels: np.ndarray, seed_points: np.ndarray | None, seed: int
) -> pa.Table:
    """A round's table with each run's level (name and index); with `seed_points` (round 0) each run's seed
    is its design point's, the same at every level (common random numbers)."""
    names = [fidelities.levels[int(k)].name for k in levels]
    table = table.append_column(pa.field(NAME_COLUMN, pa.string()), pa.array(names, pa.string()))
    table = table.append_column(pa.field(INDEX_COLUMN, pa.int64()), pa.array(np.asarray(levels, np.int64)))
    if seed_points is not None:
        seeds = run_seeds(seed, seed_points)
        table = table.set_column(table.schema.get_field_index("seed"), "seed", pa.array(seeds))
    return table


def level_of(table: pa.Table) -> np.ndarray:
    """Each run's level index of a round's runs table (0 where it has none)."""
    if INDEX_COLUMN not in table.column_names:
        return np.zeros(table.num_rows, np.int64)
    return table.column(INDEX_COLUMN).to_numpy(zero_copy_only=False).astype(np.int64)


def level_costs(fidelities: Fidelities, tables: Sequence[pa.Table]) -> list[float]:
    """Each level's cost per run: declared, else the mean seconds of its runs that succeeded so far
    (LevelTally.mean_seconds: a persistent simulator's start-up left out)."""
    tally = LevelTally.empty(len(fidelities.levels))
    for table in tables:  # the tally plain ensembles' measured_costs makes
        tally = tally + level_tallies(table, len(fidelities.levels))
    costs = []
    for level in fidelities.levels:
        mean = tally.mean_seconds(level.index)
        if level.cost is not None:
            costs.append(float(level.cost))
        elif mean:
            costs.append(mean)
        else:
            raise Sim2dlError(
                f"config key 'simulate.fidelities[{level.index}].cost': no run of level '{level.name}' "
                "succeeded to measure its cost from: declare its cost, or see the runs table's reasons"
            )
    return costs


def round_spend(adaptive: Mapping[str, Any], budget: int, costs: Sequence[float], spent: float) -> float:
    """What the next round may spend: a batch of the costliest level's runs, at most what is left of the
    budget (simulate.runs; both counted in its runs)."""
    return max(0.0, min(adaptive["batch"] * costs[-1], budget * costs[-1] - spent))


def level_figures(
    fidelities: Fidelities, levels: np.ndarray, new: np.ndarray, costs: Sequence[float], budget: int
) -> dict[str, Any]:
    """rounds.json's levels: each level's runs so far and this round's, its cost per run; the cost spent
    with this round's runs and the budget, in the costliest level's runs."""
    counts = np.bincount(levels, minlength=len(costs))
    added = np.bincount(new, minlength=len(costs))
    spent = float(counts @ np.asarray(costs) + added @ np.asarray(costs))
    return {
        "levels": {
            level.name: {
                "runs": int(counts[level.index] + added[level.index]),
                "new_runs": int(added[level.index]),
                "cost": round(costs[level.index], 6),
            }
            for level in fidelities.levels
        },
        "spent": round(spent / costs[-1], 3),
        "budget": budget,
    }

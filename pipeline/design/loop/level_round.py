"""What a round over levels decides beyond the one-level round (rounds.py's choose_levels calls it), pure:
the multi-fidelity emulator fitted on every level's runs, and the prices the round chooses by, which keep
the cheaper levels from doing harm: chosen only while they help predict the costliest level's runs and
their last runs lowered the error (learning progress), at most round 0's runs of each a round (and what a
twentieth of the budget pays until the costliest level has the runs to judge them by), the space-filling
share spent on the costliest level.

Memory: the runs' points and outputs (rank 0, as the round's emulator). Time: two or three emulator fits a
round (the multi-fidelity one, the costliest level's alone, and the multi-fidelity one without the last
round's cheaper runs), cubic in the runs.
"""

from __future__ import annotations

import time
from collections.abc import Mapping
from typing import Any

import numpy as np

from pipeline import Sim2dlError
from pipeline.design.emulator import Emulator
from pipeline.design.fidelity_choice import share_points
from pipeline.design.loop.history import History
from pipeline.design.multifidelity import MultiFidelityEmulator
from pipeline.ensemble.fidelity import Fidelities


def fitted_levels(
    settings: Mapping[str, Any], history: History, levels: int, stats: dict[str, Any]
) -> MultiFidelityEmulator:
    """The multi-fidelity emulator fitted on every level's runs that succeeded; its time, the runs and its
    leave-one-out NRMSE over the costliest level's runs (each left out with every run at its point:
    MultiFidelityEmulator.loo) into `stats`."""
    x, y = history.done()
    started = time.perf_counter()
    try:
        emulator = MultiFidelityEmulator(history.layout, settings["seed"], levels)
        emulator = emulator.fit(x, y, history.done_levels())
    except ValueError as e:
        message = f"simulate.adaptive with simulate.fidelities: {e} (see the runs table's reasons)"
        raise Sim2dlError(message) from None
    stats["seconds_fitting"] = round(time.perf_counter() - started, 4)
    stats["fitted_on"] = len(x)
    stats["validation_nrmse"] = emulator.outputs.nrmse(emulator.loo(), emulator.y)
    stats["validation_nrmse_mean"] = float(np.mean(list(stats["validation_nrmse"].values())))
    return emulator


def level_prices(
    settings: Mapping[str, Any],
    history: History,
    fidelities: Fidelities,
    costs: list[float],
    spend: float,
    stats: dict[str, Any],
) -> tuple[list[float], np.ndarray]:
    """Do no harm: the space-filling share spends on the costliest level (its prefix of the nested design
    continued, so that level's runs keep growing as its plain design would), and the cheaper levels are
    chosen only while they help predict the costliest level's runs (the multi-fidelity emulator's
    leave-one-out error on them at most that of an emulator of those runs alone, and lowered by the last
    round's cheaper runs: cheaper_runs_helped); else their cost is infinite (never chosen). The costs the
    round chooses by, and the share's candidates (joined points)."""
    x, y = history.done()
    costliest = history.done_levels() == len(costs) - 1
    stats["costliest_runs"] = int(costliest.sum())
    alone = Emulator(history.layout, settings["seed"]).fit(x[costliest], y[costliest])
    errors = alone.outputs.nrmse(alone.loo(), alone.y)
    helps = stats["validation_nrmse_mean"] <= np.mean(list(errors.values()))
    stats["validation_nrmse_costliest_alone"] = errors
    helps = helps and cheaper_runs_helped(settings, history, len(costs), stats)
    stats["cheaper_levels_chosen"] = bool(helps)
    priced = costs if helps else [np.inf] * (len(costs) - 1) + [costs[-1]]
    level = len(costs) - 1
    filled = history.space_filled(level)  # the share's runs of this level: its prefix continues after them
    start, count = fidelities.levels[level].runs + filled, settings["adaptive"]["space_filling_share"] * spend
    dims = len(settings["space"])
    return priced, share_points(
        settings["design"], settings["seed"], dims, start, int(count // priced[level]), level
    )


UNJUDGED_SHARE = 0.05  # of the budget: the most a round spends on a cheaper level before it can be judged


def cheaper_limits(
    fidelities: Fidelities, costs: list[float], budget: int, costliest_runs: int
) -> list[float]:
    """The most runs of each level a round buys: a cheaper level's runs in round 0 (the nested start), the
    costliest level's without limit. A cheap level can cost next to nothing (py-pde's 32 x 32 grid, 140 to 200
    times cheaper than its 256 x 256): by value per unit cost alone a round bought 180 runs of it and each
    later round's fit, and the training on them, took longer than the runs saved.

    Until the costliest level has twice its round-0 runs (succeeded), the leave-one-out comparison that
    judges a cheaper level rests on too few of them to tell one that misleads in part of the space: a round
    then buys at most what a twentieth of the budget (UNJUDGED_SHARE) pays of each cheaper level. A nearly
    free level is bought as before; one that costs an eighth of the costliest took 2 to 5 costly runs' worth
    of a budget of 16 before it was found out, and the costliest level's test error was 5.6 x its Sobol
    design's at equal cost (3.0 x with the limit; tests/test_fidelity_design.py's pair, 5 seeds)."""
    limits = [float(level.runs) for level in fidelities.levels[:-1]]
    if costliest_runs < 2 * fidelities.levels[-1].runs:
        unjudged = [np.floor(UNJUDGED_SHARE * budget * costs[-1] / cost) for cost in costs[:-1]]
        limits = [min(limit, float(most)) for limit, most in zip(limits, unjudged, strict=True)]
    return [*limits, np.inf]


def cheaper_runs_helped(
    settings: Mapping[str, Any], history: History, levels: int, stats: dict[str, Any]
) -> bool:
    """Learning progress of the cheaper levels: whether the cheaper runs of the last round that bought any
    (after round 0) lowered the multi-fidelity emulator's leave-one-out error on the costliest level's runs
    (the same runs, refitted without them). A cheap level's runs can cost next to nothing while its
    emulator, sure of how the levels relate, still credits each with a little: measured on py-pde's fronts,
    rounds bought 180 cheap runs for each costly one and the error on the costly runs doubled. The refit's
    error into `stats` (`validation_nrmse_without_last_cheaper`)."""
    done_levels = history.done_levels()
    rounds = np.concatenate([np.full(int(k.sum()), r) for r, k in enumerate(history.ok)])
    cheaper = done_levels < levels - 1
    bought = sorted({int(r) for r in rounds[cheaper] if r > 0})
    if not bought:
        return True
    kept = ~(cheaper & (rounds == bought[-1]))
    x, y = history.done()
    without = MultiFidelityEmulator(history.layout, settings["seed"], levels).fit(
        x[kept], y[kept], done_levels[kept]
    )
    error = float(np.mean(list(without.outputs.nrmse(without.loo(), without.y).values())))
    stats["validation_nrmse_without_last_cheaper"] = {"round": bought[-1], "nrmse_mean": error}
    return stats["validation_nrmse_mean"] < error

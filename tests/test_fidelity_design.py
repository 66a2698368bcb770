"""A design over levels of one simulator (simulate.fidelities with simulate.adaptive): the multi-fidelity
emulator, the value of a (point, level) pair against a refit, a cheap level that misleads, and the rounds
under mpiexec (costs, budget, rerun and resume)."""

from __future__ import annotations

import copy
import json
import re

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from scipy.stats import qmc

from pipeline import Sim2dlError
from pipeline.config import validate
from pipeline.design.emulator import Emulator, Outputs
from pipeline.design.fidelity_choice import LevelRound
from pipeline.design.loop.history import History
from pipeline.design.loop.rounds import choose, design_digest
from pipeline.design.multifidelity import JointProcess, MultiFidelityEmulator, joined

from .conftest import SLOW, run_cli, write_config
from .helpers import levels_config

WAVES = np.linspace(0.0, 1.0, 6)
LAYOUT = Outputs.of({"state": (6,)})


def costly(unit: np.ndarray) -> np.ndarray:
    """The code a surrogate is wanted of: smooth, 6 outputs, over 2 parameters."""
    return np.sin(3 * unit[:, [0]] * (1 + WAVES) + 2 * unit[:, [1]]) * (1 + unit[:, [1]])


def cheap(unit: np.ndarray) -> np.ndarray:
    """A cheap version correlated with it everywhere: scaled, with a smooth bias."""
    return 0.8 * costly(unit) + 0.3 * unit[:, [0]]


def misleading(unit: np.ndarray) -> np.ndarray:
    """A cheap version that is right in the left half of the space and unrelated to the code in the right."""
    unrelated = np.cos(17 * unit[:, [0]] * (1 + WAVES) + 11 * unit[:, [1]] ** 2)
    return np.where(unit[:, [0]] > 0.5, unrelated, 0.8 * costly(unit))


TEST = np.random.default_rng(9).random((300, 2))


def sobol(n: int, seed: int = 1) -> np.ndarray:
    """The first n points of a scrambled Sobol design (n a power of 2)."""
    return qmc.Sobol(2, seed=seed).random_base2(int(np.log2(n)))


def test_one_level_is_the_plain_emulator_and_a_correlated_cheap_level_teaches_the_costly_one():
    runs = sobol(32)
    alone = Emulator(LAYOUT, 0).fit(runs[:8], costly(runs[:8]))
    one = MultiFidelityEmulator(LAYOUT, 0, 1).fit(runs[:8], costly(runs[:8]), np.zeros(8, int))
    assert one.predict(TEST) == pytest.approx(alone.predict(TEST), rel=1e-6, abs=1e-9)
    assert one.variance(TEST) == pytest.approx(alone.variance(TEST), rel=1e-5, abs=1e-12)
    # 32 cheap runs and the first 8 of their points by the costly code (nested)
    x = np.vstack([runs, runs[:8]])
    y = np.vstack([cheap(runs), costly(runs[:8])])
    both = MultiFidelityEmulator(LAYOUT, 0, 2).fit(x, y, np.r_[np.zeros(32, int), np.ones(8, int)])
    error = LAYOUT.nrmse(both.predict(TEST), costly(TEST))["state"]
    assert error < 0.5 * LAYOUT.nrmse(alone.predict(TEST), costly(TEST))["state"]
    # the leave-one-out figures are the costliest level's runs as the others predict them
    assert both.y.shape == (8, 6) and both.loo().shape == (8, 6)
    # the posterior over (point, level) pairs is the emulator's own variance at the costliest level
    posterior = both.posterior(joined(TEST[:20], 1))
    assert np.sum(posterior.variances(), axis=0) == pytest.approx(both.variance(TEST[:20]), rel=1e-6)


def test_the_validation_leaves_out_every_run_at_a_costly_runs_point_as_a_refit_without_them_predicts():
    """The leave-one-out that judges a cheap level: each costly run as the runs at the other points
    predict it, the cheap run at its own point left out too (a point to be predicted has none)."""
    runs = sobol(16)
    x = np.vstack([runs, runs[:4], runs[[1]]])  # nested, and one cheap point run twice: a block of 3
    level = np.r_[np.zeros(16, int), np.ones(4, int), 0]
    y = np.where(level[:, None] == 1, costly(x), cheap(x))
    emulator = MultiFidelityEmulator(LAYOUT, 0, 2).fit(x, y, level)
    refits = []
    for i in range(4):  # the costly runs, in order: the points runs[0..3]
        kept = ~np.all(x == runs[i], axis=1)
        assert (~kept).sum() == (3 if i == 1 else 2)
        coefficients = []
        for process in emulator.processes:
            values = process.y_train_ + process.prior_mean[process.X_train_[:, -1].astype(int)]
            refit = JointProcess(process.kernel_, process.prior_mean, process.X_train_[kept], values[kept])
            coefficients.append(refit.predict(joined(runs[i : i + 1], 1))[0])
        refits.append((np.array(coefficients) @ emulator.components) * emulator.scale + emulator.mean)
    assert emulator.loo() == pytest.approx(np.array(refits), rel=1e-6, abs=1e-8)
    # left out alone, beside its cheap run, each costly run is predicted from the cheap value at its point:
    # an error no point to be predicted (no cheap run there) would see
    beside = []
    for process in emulator.processes:
        inverse = np.linalg.inv(process.kernel_(process.X_train_) + 1e-10 * np.eye(len(x)))
        left_out = process.y_train_ - process.alpha_ / np.diag(inverse)
        beside.append((left_out + process.prior_mean[level])[level == 1])
    beside = (np.column_stack(beside) @ emulator.components) * emulator.scale + emulator.mean
    one_out, point_out = (LAYOUT.nrmse(v, emulator.y)["state"] for v in (beside, emulator.loo()))
    assert one_out < 0.5 * point_out


def test_a_pairs_value_is_the_costliest_levels_variance_a_refit_takes_off_per_unit_cost():
    runs = sobol(16)
    x = np.vstack([runs, runs[:4]])
    level = np.r_[np.zeros(16, int), np.ones(4, int)]
    y = np.where(level[:, None] == 1, costly(x), cheap(x))
    emulator = MultiFidelityEmulator(LAYOUT, 0, 2).fit(x, y, level)
    pool = np.random.default_rng(3).random((40, 2))
    costs = [1.0, 6.0]
    points, levels, values = LevelRound(emulator, pool, costs, 6.0, 0.0, joined(x, level)).cost_weighted()
    references = joined(pool, 1)  # the pool's first REFERENCES points, at the costliest level

    def summed_variance(extra: np.ndarray | None) -> float:
        """The costliest level's posterior variance summed over the references, with the hyperparameters
        held and one more run believed (its value does not change a Gaussian process's variance)."""
        total = 0.0
        for process in emulator.processes:
            train = process.X_train_ if extra is None else np.vstack([process.X_train_, extra])
            values = process.y_train_ + process.prior_mean[process.X_train_[:, -1].astype(int)]
            refit = JointProcess(
                process.kernel_,
                process.prior_mean,
                train,
                np.r_[values, 0.0] if extra is not None else values,
            )
            total += float(np.sum(refit.predict(references, return_std=True)[1] ** 2))
        return total

    before = summed_variance(None)
    brute = {
        (i, lv): (before - summed_variance(joined(pool[i : i + 1], lv))) / costs[lv]
        for i in range(len(pool))
        for lv in (0, 1)
    }
    best = max(brute, key=brute.get)
    # the first pair chosen is the brute force's best, at the value the refit gives
    assert (tuple(points[0]), levels[0]) == (tuple(pool[best[0]]), best[1])
    assert values[0] == pytest.approx(brute[best], rel=1e-3)
    # the batch spends at most the round's 6: one costly run, or up to 6 cheap ones
    assert float(np.asarray(costs)[levels].sum()) <= 6.0 + 1e-9


def in_process_rounds(cheap_code, budget: int, seed: int = 1, cheap_cost: float = 1.0) -> History:
    """The rounds' own choosing (rounds.choose, as rank 0 calls it) over a code at two levels run in this
    process: each run's outputs from its level's function, its seconds its level's declared cost (the
    costly level's 8, the cheap one's `cheap_cost`)."""
    settings = {
        "space": {name: {"type": "uniform", "low": 0.0, "high": 1.0} for name in ("a", "b")},
        "seed": seed,
        "design": "sobol",
        "command": ["code", "{fidelity}"],
        "fidelities": [
            {"name": "cheap", "runs": 16, "cost": cheap_cost},
            {"name": "costly", "runs": 4, "cost": 8.0},
        ],
        "files_per_dir": 1000,
        "runs": budget,
        "adaptive": {
            "initial": 16,
            "batch": 4,
            "rounds": None,
            "target_error": None,
            "acquisition": "integrated_variance",
            "space_filling_share": 0.5,
            "irreducible": "nugget",
            "emulator": "gp",
            "regimes": 4,
            "pool": 256,
            "min_spacing": None,
            "outputs": ["state"],
            "files": "*.h5",
            "sigma": 0.05,
            "committee": 8,
        },
    }
    history, digest = History(layout=LAYOUT), design_digest(settings)
    for r in range(100):
        table, stats = choose(settings, history, r, digest)
        if table is None:
            history.rounds.append(stats)
            return history
        unit = np.column_stack([table.column(n).to_numpy() for n in settings["space"]])
        level = table.column("fidelity_index").to_numpy()
        outputs = np.where(level[:, None] == 1, costly(unit), cheap_code(unit))
        table = table.append_column("status", pa.array(["ok"] * len(unit)))
        table = table.append_column("seconds", pa.array(np.where(level == 1, 8.0, cheap_cost)))
        history.add(table, settings["space"], np.ones(len(unit), bool), outputs)
        history.rounds.append(stats)
    raise AssertionError("the design did not end")


def final_error(history: History) -> tuple[float, np.ndarray]:
    """The costliest level's test NRMSE by the better of the design's two emulators (as its last round
    judged them: the multi-fidelity one where the cheap level helped), and each level's runs."""
    x, y = history.done()
    level = history.done_levels()
    both = MultiFidelityEmulator(LAYOUT, 1, 2).fit(x, y, level)
    alone = Emulator(LAYOUT, 1).fit(x[level == 1], y[level == 1])
    trusted = history.rounds[-1]["validation_nrmse_mean"] <= np.mean(
        list(LAYOUT.nrmse(alone.loo(), alone.y).values())
    )
    chosen = both if trusted else alone
    return LAYOUT.nrmse(chosen.predict(TEST), costly(TEST))["state"], np.bincount(level, minlength=2)


@SLOW  # rounds to a budget of 32 costly runs, each fitting both emulators: 20 s a case
@pytest.mark.parametrize("code", ["cheap", "misleading"])
def test_a_cheap_level_pays_where_it_agrees_and_a_misleading_one_stops_being_chosen(code):
    budget = 32  # what 32 costly runs cost, round 0's 16 cheap and 4 costly (6 costly runs' worth) included
    history = in_process_rounds({"cheap": cheap, "misleading": misleading}[code], budget)
    assert history.rounds[-1]["spent"] <= budget + 1e-9
    error, runs = final_error(history)
    control = sobol(32)  # the costliest level's plain design at the same cost
    fitted = Emulator(LAYOUT, 1).fit(control, costly(control))
    control_error = LAYOUT.nrmse(fitted.predict(TEST), costly(TEST))["state"]
    chosen = [row["cheaper_levels_chosen"] for row in history.rounds if "cheaper_levels_chosen" in row]
    # the share keeps the costly level growing as its plain design would, whatever the emulator believes
    assert runs[1] >= 4 + 0.5 * (budget - 6)
    # until the costly level has twice round 0's 4 runs to judge it by, a round buys at most what a
    # twentieth of the budget pays of the cheap level (12 runs here, not round 0's 16)
    bought = [
        (row["costliest_runs"], row["levels"]["cheap"]["new_runs"])
        for row in history.rounds
        if "levels" in row
    ]
    assert all(
        cheap_runs <= int(0.05 * budget * 8.0 / 1.0) for costly_runs, cheap_runs in bought if costly_runs < 8
    )
    if code == "cheap":  # cheap runs chosen in most rounds, and the same error for less than half the cost
        assert chosen[0] and sum(chosen) > len(chosen) / 2 and runs[0] > 16
        assert (
            max(cheap_runs for costly_runs, cheap_runs in bought if costly_runs >= 8) == 16
        )  # judged: lifted
        assert error < 0.5 * control_error
    else:  # found out once the costly runs could judge it: no cheap run chosen after, and no harm done
        assert chosen[0] and not any(chosen[-3:])
        assert error <= 1.05 * control_error


@SLOW
def test_cheap_runs_that_cost_next_to_nothing_are_bought_in_bounded_rounds_while_they_lower_the_error():
    """A cheap level 800 times cheaper than the costly one (py-pde's 32 x 32 grid against its 256 x 256 is
    140 to 200 times): by value per unit cost alone a round bought 180 cheap runs for one costly run. A
    round buys at most round 0's 16 cheap runs; a round whose cheap runs did not lower the error on the
    costly runs (refitted without them) stops the next round buying any. A cheap code that follows the
    costly one is bought in most rounds and beats the costly level's plain design at equal cost 4 times; a
    cheap code that turns to noise after its first 16 runs is bought once, never again."""
    calls = []

    def breaking(unit: np.ndarray) -> np.ndarray:
        calls.append(len(unit))
        noise = np.random.default_rng(len(calls)).normal(0.0, 1.0, (len(unit), 1))
        return cheap(unit) + (len(calls) > 1) * noise * cheap(unit).std()

    control = sobol(16)
    control_error = LAYOUT.nrmse(
        Emulator(LAYOUT, 1).fit(control, costly(control)).predict(TEST), costly(TEST)
    )
    for code in (cheap, breaking):
        history = in_process_rounds(code, 16, cheap_cost=0.01)
        rows = [r for r in history.rounds if "cheaper_levels_chosen" in r]
        assert all(r["levels"]["cheap"]["new_runs"] <= 16 for r in rows)
        judged = [r for r in rows if "validation_nrmse_without_last_cheaper" in r]
        assert (
            rows[0]["cheaper_levels_chosen"] and judged
        )  # round 1 buys; a later round judges what it bought
        for row in judged:  # chosen exactly when the last cheap runs lowered the error
            without = row["validation_nrmse_without_last_cheaper"]["nrmse_mean"]
            assert row["cheaper_levels_chosen"] == (row["validation_nrmse_mean"] < without)
        chosen = [r["cheaper_levels_chosen"] for r in rows]
        if code is cheap:
            assert sum(chosen) > len(chosen) / 2
            assert final_error(history)[0] < 0.5 * control_error["state"]
        else:  # found out by the first round after: never bought again
            assert not any(chosen[1:])


@SLOW
def test_the_rounds_choose_levels_within_the_budget_and_a_rerun_repeats_nothing(tmp_path):
    config = levels_config(tmp_path)
    config["simulate"]["fidelities"] = [
        {"name": "coarse", "runs": 8, "cost": 1.0},
        {"name": "fine", "runs": 3, "cost": 4.0},
    ]
    config["simulate"]["runs"] = 8  # the budget, in what fine runs cost
    config["simulate"]["adaptive"].update(
        enabled=True,
        outputs=["."],  # a .npy file's one array
        files="*.npy",
        acquisition="integrated_variance",
        batch=2,
        pool=128,
    )
    path = write_config(tmp_path, config)
    proc = run_cli(["simulate", "--config", str(path)], ranks=2, timeout=240)
    summary = json.loads(proc.stdout.strip().splitlines()[-1])
    raw = tmp_path / "work" / "raw"
    rows = pq.read_table(raw / "runs.parquet").to_pylist()
    assert summary["runs"] == len(rows) and summary["ok"] == len(rows)
    assert [r["fidelity"] for r in rows[:11]] == ["coarse"] * 8 + ["fine"] * 3
    later = rows[11:]
    assert later and {r["fidelity"] for r in later} <= {"coarse", "fine"}
    assert all(r["fidelity_index"] == (r["fidelity"] == "fine") for r in rows)
    spent = sum(4.0 if r["fidelity"] == "fine" else 1.0 for r in rows)
    assert spent <= 8 * 4.0  # the budget: what 8 fine runs cost
    rounds = json.loads((raw / "adaptive" / "rounds.json").read_text())
    chosen = [row for row in rounds if "levels" in row]
    assert chosen and chosen[-1]["budget"] == 8 and chosen[-1]["spent"] <= 8
    assert set(chosen[0]["levels"]) == {"coarse", "fine"} and chosen[0]["levels"]["fine"]["cost"] == 4.0
    assert all(row["fitted_cost"] <= row["spent"] for row in chosen)
    assert (raw / "adaptive" / "design.png").stat().st_size > 0 and (raw / "adaptive" / "error.png").exists()
    ledger = tmp_path / "ledger" / "runs.txt"
    for row in rows:  # each run ran its level's command
        assert f"{row['run']} {row['fidelity']}" in ledger.read_text().split("\n")
    # a rerun runs nothing; with the last round's results lost (killed after its design was written)
    # it chooses the same points and runs none twice that completed
    before = ledger.read_text()
    run_cli(["simulate", "--config", str(path)], ranks=2, timeout=240)
    assert ledger.read_text() == before
    last = max(int(p.name[6:9]) for p in (raw / "adaptive").glob("round-*.runs.parquet"))
    for suffix in ("runs.parquet", "outputs.npz"):
        (raw / "adaptive" / f"round-{last:03d}.{suffix}").unlink()
    run_cli(["simulate", "--config", str(path)], ranks=2, timeout=240)
    assert ledger.read_text() == before
    again = pq.read_table(raw / "runs.parquet").to_pylist()
    kept = ("run", "x", "fidelity", "acquisition", "status")
    assert [[r[k] for k in kept] for r in again] == [[r[k] for k in kept] for r in rows]
    # the config errors of a design over levels name their key
    for change, key in (
        (
            lambda c: c["simulate"]["adaptive"].update(acquisition="boundary_variance"),
            "simulate.adaptive.acquisition",
        ),
        (lambda c: c["simulate"]["adaptive"].update(emulator="regimes"), "simulate.adaptive.emulator"),
        (lambda c: c["simulate"]["fidelities"][1].update(runs=2), "simulate.fidelities[1].runs"),
    ):
        changed = copy.deepcopy(config)
        change(changed)
        with pytest.raises(Sim2dlError, match=re.escape(f"config key '{key}")):
            validate(changed)

"""Levels of one simulator (simulate.fidelities): the nested design, each run's command from its level, the
levels' costs measured from their runs, their failures retried like any run's, a rerun that keeps what
completed, one persistent simulator per level, and the config errors that name their key."""

from __future__ import annotations

import copy
import json

import numpy as np
import pyarrow.parquet as pq
import pytest

from pipeline import Sim2dlError
from pipeline.config import runs_a_command, validate
from pipeline.ensemble import plan as plan_module
from pipeline.ensemble.fidelity import Fidelities
from pipeline.ensemble.plan import EnsemblePlan

from .conftest import SLOW, run_cli, write_config
from .helpers import LEVELS_SPACE, inspected, levels_config

# ---------------------------------------------------------------- the design


@pytest.mark.parametrize("design", ["sobol", "random", "lhs"])
def test_each_costlier_level_runs_the_first_points_of_the_cheaper_ones_design(design, monkeypatch):
    settings = {
        "runs": 100,  # not used with levels
        "design": design,
        "seed": 5,
        "space": {**LEVELS_SPACE, "n": {"type": "int", "low": 1, "high": 9}},
        "fidelities": [
            {"name": "coarse", "runs": 13},
            {"name": "mid", "runs": 6},
            {"name": "fine", "runs": 2},
        ],
    }
    plan = EnsemblePlan.draw(settings)
    table = pq_table(plan)
    assert len(plan) == 21 and table.num_rows == 21
    rows = table.to_pylist()
    assert [r["fidelity"] for r in rows] == ["coarse"] * 13 + ["mid"] * 6 + ["fine"] * 2
    assert [r["fidelity_index"] for r in rows] == [0] * 13 + [1] * 6 + [2] * 2
    assert len({r["run"] for r in rows}) == 21  # a run per level and point
    coarse, mid, fine = rows[:13], rows[13:19], rows[19:]
    for costlier in (mid, fine):  # nested: the same points, in the same order, with the same seeds
        for run, cheaper in zip(costlier, coarse, strict=False):
            assert (run["x"], run["n"], run["seed"]) == (cheaper["x"], cheaper["n"], cheaper["seed"])
    assert len({r["seed"] for r in coarse}) == 13
    # the cheapest level's points are the design a one-level ensemble of as many runs draws
    alone = pq_table(EnsemblePlan.draw({**settings, "runs": 13, "fidelities": []})).to_pylist()
    assert [(r["x"], r["n"]) for r in alone] == [(r["x"], r["n"]) for r in coarse]
    # made a block at a time, across the levels' boundaries: the same rows
    monkeypatch.setattr(plan_module, "DESIGN_BLOCK", 4)
    assert pq_table(EnsemblePlan.draw(settings)).to_pylist() == rows
    # the levels' names and runs make the design; their commands and costs do not
    other = copy.deepcopy(settings)
    other["fidelities"][2].update(args=["--grid", "64"], cost=12.0)
    assert EnsemblePlan.draw(other).digest == plan.digest
    other["runs"] = 7  # simulate.runs is not used with levels
    assert EnsemblePlan.draw(other).digest == plan.digest
    other["fidelities"][2]["runs"] = 3
    assert EnsemblePlan.draw(other).digest != plan.digest


def pq_table(plan: EnsemblePlan):
    import pyarrow as pa

    return pa.concat_tables(plan.blocks())


def test_a_run_knows_its_level_and_point():
    levels = Fidelities.of(
        {
            "command": ["sim"],
            "fidelities": [{"name": "a", "runs": 5}, {"name": "b", "runs": 2, "args": ["-f"]}],
        }
    )
    assert levels is not None and levels.runs == 7 and levels.points == 5 and levels.levels[-1].name == "b"
    names, indices, points = levels.columns(0, 7)
    assert names == ["a"] * 5 + ["b"] * 2 and indices.tolist() == [0] * 5 + [1] * 2
    assert points.tolist() == [0, 1, 2, 3, 4, 0, 1]
    assert levels.levels[-1].command == ("sim", "-f")
    assert [(lv.name, a, b) for lv, a, b in levels.segments(3, 6)] == [("a", 3, 5), ("b", 0, 1)]


# ---------------------------------------------------------------- config errors


@pytest.mark.parametrize(
    ("change", "key", "words"),
    [
        (lambda c: c["simulate"].update(command=None), "simulate.command", "a level without a command"),
        (
            lambda c: c["simulate"]["fidelities"][1].update(cost=0),
            "simulate.fidelities.1.cost",
            "less than or equal",
        ),
        (
            lambda c: c["simulate"]["fidelities"][1].update(runs=9),
            "simulate.fidelities[1].runs",
            "more than the 8",
        ),
        (
            lambda c: c["simulate"]["fidelities"][1].update(name="coarse"),
            "simulate.fidelities[1].name",
            "two levels",
        ),
        (
            lambda c: c["simulate"]["fidelities"][0].update(command=["sim"], args=["-x"]),
            "simulate.fidelities[0]",
            "not both",
        ),
        (lambda c: c["simulate"].update(design="grid"), "simulate.design", "not nested"),
        (
            lambda c: c["simulate"]["adaptive"].update(enabled=True, outputs=["field"]),
            "simulate.adaptive.acquisition",
            "set acquisition: integrated_variance",
        ),
        (
            lambda c: c["source"]["fields"]["level"].update(column="seed"),
            "convert.features",
            "fidelity_index",
        ),
        (
            lambda c: c["train"].update(model_args={"level_entry": 0}),
            "train.model_args.level_entry",
            "is entry [1]",
        ),
    ],
)
def test_config_errors_of_the_levels_name_their_key(tmp_path, change, key, words):
    config = levels_config(tmp_path)
    validate(copy.deepcopy(config))  # as written: valid
    change(config)
    with pytest.raises(Sim2dlError) as error:
        validate(config)
    assert f"config key '{key}'" in str(error.value) and words in str(error.value)


def test_levels_with_commands_of_their_own_are_an_ensemble_of_the_users_code(tmp_path):
    config = levels_config(tmp_path)
    command = config["simulate"].pop("command")
    config["simulate"]["command"] = None
    for level in config["simulate"]["fidelities"]:
        level["command"] = [c.replace("{fidelity}", level["name"]) for c in command]
    config["source"]["labels_table"] = None
    checked = validate(config)
    assert runs_a_command(checked["simulate"])  # the step runs the levels' commands, not a built-in family
    assert checked["source"]["labels_table"]["path"] == "runs.parquet"  # their runs table labels the data
    assert not runs_a_command({"command": None, "fidelities": []})


def test_a_levels_own_command_is_checked_under_its_own_key(tmp_path):
    config = levels_config(tmp_path)
    config["simulate"]["fidelities"][1]["command"] = ["no-such-fine-code", "{out}"]
    proc = run_cli(["simulate", "--config", str(write_config(tmp_path, config))], ranks=2, check=False)
    assert proc.returncode != 0
    assert proc.stderr.count("config key 'simulate.fidelities[1].command': program 'no-such-fine-code'") == 1


def test_a_levels_cost_leaves_out_the_runs_that_started_a_persistent_simulator(tmp_path):
    """Measured on py-pde (bench/fidelity.py): a 32 x 32 run took 0.04 s, and the run that started the
    simulator 16 s. A level's cost per run is the mean over the runs that started nothing, where it has
    any; a table written before the column counts every run; failed runs count for nothing."""
    import pyarrow as pa

    from pipeline.design.loop.levels import level_costs
    from pipeline.ensemble.fidelity import measured_costs

    table = pa.table(
        {
            "fidelity_index": [0, 0, 0, 0, 1, 1, 1, 1],
            "status": ["ok", "ok", "ok", "failed", "ok", "ok", "ok", "ok"],
            "seconds": [16.0, 0.04, 0.06, 9.0, 30.0, 4.0, 2.0, 22.0],
            "started_simulator": [True, False, False, False, True, False, False, True],
        }
    )
    config = levels_config(tmp_path)["simulate"]
    fidelities = Fidelities.of(config)
    assert level_costs(fidelities, [table]) == pytest.approx([0.05, 3.0])
    pq.write_table(table, tmp_path / "runs.parquet", row_group_size=3)  # a level across row groups
    costs = measured_costs(tmp_path / "runs.parquet", fidelities)
    assert [c["mean_seconds"] for c in costs] == pytest.approx([0.05, 3.0])
    assert [(c["runs"], c["ok"]) for c in costs] == [(4, 3), (4, 4)]
    assert costs[1]["cost_over_cheapest"] == pytest.approx(60.0)
    old = table.drop_columns(["started_simulator"])
    assert level_costs(fidelities, [old]) == pytest.approx([(16.1) / 3, 14.5])
    only_starters = table.filter(
        pa.compute.field("started_simulator") | (pa.compute.field("fidelity_index") == 0)
    )
    assert level_costs(fidelities, [only_starters]) == pytest.approx([0.05, 26.0])


# ---------------------------------------------------------------- the levels run


@SLOW
def test_the_levels_run_their_own_commands_are_costed_retried_resumed_and_trained_on(tmp_path, monkeypatch):
    config = levels_config(tmp_path)
    failing = EnsemblePlan.draw(config["simulate"]).rows(9, 10)[0]  # the fine level's second run
    monkeypatch.setenv("FAIL_SEED", str(failing["seed"]))
    path = write_config(tmp_path, config)
    proc = run_cli(["simulate", "--config", str(path)], ranks=2, timeout=180)
    summary = json.loads(proc.stdout.strip().splitlines()[-1])
    assert (summary["runs"], summary["ok"], summary["failed"]) == (11, 11, 0)
    rows = pq.read_table(tmp_path / "work" / "raw" / "runs.parquet").to_pylist()
    assert [r["fidelity"] for r in rows] == ["coarse"] * 8 + ["fine"] * 3
    retried = rows[9]
    assert (retried["status"], retried["attempts"], retried["fidelity"]) == ("ok", 2, "fine")
    ledger = (tmp_path / "ledger" / "runs.txt").read_text().split("\n")
    for row in rows:  # each run ran its level's command at its point
        assert f"{row['run']} {row['fidelity']}" in ledger
        saved = np.load(next((tmp_path / "work" / "raw").glob(f"*/{row['run']}/out.npy")))
        cells = 4 if row["fidelity"] == "coarse" else 16
        grid = (np.arange(cells) + 0.5) / cells
        expected = np.interp(np.linspace(0, 1, 8), grid, np.sin(row["x"] * 6 * grid))
        assert saved == pytest.approx(expected, abs=1e-6)
    # the costs: measured from the runs that succeeded (the fine level sleeps 0.25 s a run)
    costs = {level["name"]: level for level in summary["fidelities"]}
    assert (costs["coarse"]["runs"], costs["coarse"]["ok"], costs["fine"]["runs"]) == (8, 8, 3)
    assert not costs["fine"]["cost_declared"] and costs["fine"]["mean_seconds"] >= 0.25
    assert costs["fine"]["cost_over_cheapest"] > 1.5 and costs["coarse"]["cost_over_cheapest"] == 1.0
    assert (
        json.loads((tmp_path / "work" / "raw" / "simulate.json").read_text())["fidelities"]
        == summary["fidelities"]
    )
    # a rerun keeps every completed run; a declared cost is the one reported
    before = len([line for line in ledger if line])
    config["simulate"]["fidelities"][1]["cost"] = 20.0
    proc = run_cli(["simulate", "--config", str(write_config(tmp_path, config))], ranks=2, timeout=180)
    again = json.loads(proc.stdout.strip().splitlines()[-1])
    assert (
        len([line for line in (tmp_path / "ledger" / "runs.txt").read_text().split("\n") if line]) == before
    )
    costs = {level["name"]: level for level in again["fidelities"]}
    assert costs["fine"]["cost_declared"] and costs["fine"]["cost"] == 20.0
    assert costs["fine"]["cost_over_cheapest"] == pytest.approx(20.0 / costs["coarse"]["cost"], rel=1e-2)
    # the level's index is a label ingest reads from the runs table, as the surrogate's input
    run_cli(["ingest", "--config", str(path)], ranks=2)
    ingest = json.loads((tmp_path / "work" / "ingest" / "summary.json").read_text())
    assert ingest["accepted"] == 11
    run_cli(["convert", "--config", str(path)], ranks=2)
    run_cli(["merge", "--config", str(path)], ranks=2)
    from pipeline.formats.shards.shard_reader import ShardReader

    by_run = {row["run"]: row for row in rows}
    records = list(ShardReader(tmp_path / "work" / "merged"))
    assert len(records) == 11
    for record in records:  # the model's input: the run's parameter and its level, stacked
        row = by_run[record["sample_id"].split("/")[-2]]
        assert record["design"] == pytest.approx([row["x"], row["fidelity_index"]], rel=1e-6)
    # trained on both levels, the saved model answers for the costliest level from the parameters alone,
    # and model_levels for any level
    config["train"].update(epochs=8, batch_size=4, width=8, dense=32)
    run_cli(["train", "--config", str(write_config(tmp_path, config))], ranks=1, timeout=300)
    import tensorflow as tf

    train = tmp_path / "work" / "train"
    model = tf.keras.models.load_model(str(train / "model"), compile=False)
    levels = tf.keras.models.load_model(str(train / "model_levels"), compile=False)
    x = np.array([[0.1], [0.5], [0.9]], np.float32)
    fine = np.asarray(model(x)["field"])
    assert fine.shape == (3, 8)
    assert fine == pytest.approx(np.asarray(levels(np.hstack([x, np.ones_like(x)]))["field"]), abs=1e-6)
    coarse = np.asarray(levels(np.hstack([x, np.zeros_like(x)]))["field"])
    assert np.abs(coarse - fine).max() > 1e-4  # the level is an input that changes the answer
    # `sim2dl inspect` on the ensemble's output proposes the forward surrogate with the level as an input
    proposed = inspected(tmp_path, tmp_path / "work" / "raw")
    level = [
        name for name, spec in proposed["source"]["fields"].items() if spec == {"column": "fidelity_index"}
    ]
    stacked = {f for fields in proposed["convert"]["stack"].values() for f in fields}
    assert len(level) == 1 and level[0] in stacked and "x" in stacked
    assert not {"fidelity", "seconds", "attempts"} & set(proposed["source"]["fields"])


# A persistent code at two resolutions: started once per rank and level, each run handed as a JSON line.
PERSISTENT_LEVELS = """
import json, os, sys
import numpy as np
ledger, cells = sys.argv[1], int(sys.argv[2])
with open(ledger, "a") as f:
    f.write(f"start {os.getpid()} {cells}\\n")
for line in sys.stdin:
    run = json.loads(line)
    grid = (np.arange(cells) + 0.5) / cells
    field = np.interp(np.linspace(0, 1, 8), grid, np.sin(run["x"] * 6 * grid))
    np.save(os.path.join(run["out"], "out.npy"), field.astype(np.float32))
    with open(ledger, "a") as f:
        f.write(f"run {os.getpid()} {cells} {run['run']} {run['fidelity']}\\n")
    print("sim2dl-done", run["run"], flush=True)
"""


def test_each_level_of_a_persistent_simulator_starts_once_per_rank(tmp_path):
    script = tmp_path / "persistent.py"
    script.write_text(PERSISTENT_LEVELS)
    ledger = tmp_path / "starts.txt"
    config = levels_config(tmp_path)
    config["simulate"].update(
        command=["python3", str(script), str(ledger)],
        persistent=True,
        fidelities=[
            {"name": "coarse", "args": ["4"], "runs": 12},
            {"name": "fine", "args": ["16"], "runs": 5},
        ],
    )
    proc = run_cli(["simulate", "--config", str(write_config(tmp_path, config))], ranks=2, timeout=180)
    assert json.loads(proc.stdout.strip().splitlines()[-1])["ok"] == 17
    lines = [line.split() for line in ledger.read_text().splitlines()]
    starts = [(pid, cells) for kind, pid, cells, *_ in lines if kind == "start"]
    runs = {run: (pid, cells, level) for kind, pid, cells, run, level in (x for x in lines if x[0] == "run")}
    assert len(runs) == 17
    # each level's runs went to its own process (its own command), which knows the level it is
    assert {(cells, level) for _, cells, level in runs.values()} == {("4", "coarse"), ("16", "fine")}
    assert {(pid, cells) for pid, cells, _ in runs.values()} <= set(starts)
    # one process per rank and level, not one per run (at most 2 ranks x 2 levels)
    assert 2 <= len(starts) <= 4 and len(set(starts)) == len(starts)

"""train.population (LBANN's LTFB): the plan every rank computes alike (pairs, truncation, mutation,
lineage, config errors), and real populations of Horovod trainers under mpiexec: pairwise on 2 trainers,
killed mid-run and resumed to the same weights, truncation between 2 trainers of 2 ranks each."""

import json
import time

import numpy as np
import pytest
import yaml

from pipeline import Sim2dlError
from pipeline.training.population import Population, PopulationState, check

from .conftest import SLOW, kill_tree, run_cli, run_snakemake, start_cli, write_config
from .helpers import board_events, doc_blocks


def population_settings(**changes):
    """docs/training.md's population block, at a test's size."""
    [text] = [text for _, mark, text in doc_blocks() if mark == "run" and "population:" in text]
    block = yaml.safe_load(text)["train"]["population"]
    return {**block, "rounds": 3, "steps_per_round": 3, "tournament_fraction": 0.2, **changes}


def plan(trainers=4, ranks=8, exchange="pairwise", **mutate):
    return Population(trainers, ranks, 3, 5, exchange, 0.25, 0.1, mutate or {"learning_rate": [0.8, 1.25]}, 7)


@pytest.mark.unit
def test_pairs_are_the_same_everywhere_cover_the_trainers_and_leave_an_odd_one_out():
    population = plan(trainers=5, ranks=10)
    for round_number in range(6):
        pairs = population.pairs(round_number)
        assert pairs == plan(trainers=5, ranks=10).pairs(round_number)  # no communication to agree
        paired = [t for pair in pairs for t in pair]
        assert len(pairs) == 2 and len(set(paired)) == 4  # one of five keeps its model
        odd = ({0, 1, 2, 3, 4} - set(paired)).pop()
        assert population.partner(odd, round_number) is None
        a, b = pairs[0]
        assert population.partner(a, round_number) == b and population.partner(b, round_number) == a
    assert len({tuple(population.pairs(r)) for r in range(20)}) > 3  # the shuffle changes with the round
    # models move between corresponding ranks of block-assigned trainers
    assert list(population.members(2)) == [4, 5] and population.trainer_of(5) == 2
    assert population.peer(5, 0) == 1 and population.peer(4, 3) == 6


@pytest.mark.unit
def test_truncation_gives_the_worst_quantile_the_best_models():
    population = plan(trainers=8, ranks=8, exchange="truncation")
    losses = [0.5, 0.9, 0.1, 0.7, float("nan"), 0.3, 0.2, 0.8]
    assert population.truncation(losses) == [(4, 2), (1, 6)]  # a loss not finite is the worst
    assert plan(trainers=2, ranks=2, exchange="truncation").truncation([0.4, 0.3]) == [(0, 1)]


@pytest.mark.unit
def test_an_adopter_takes_lineage_and_mutated_hyperparameters_and_the_start_explores():
    population = plan(trainers=3, ranks=3)
    state = PopulationState.start(population, {"learning_rate": 0.01})
    assert state.hyperparameters[0] == {"learning_rate": 0.01}
    assert all(h["learning_rate"] in (0.008, 0.0125) for h in state.hyperparameters[1:])
    # trainer 0 takes 1's model and 1 takes 0's (a swap both ways), 2 keeps its own
    before = [dict(h) for h in state.hyperparameters]
    state.adopt(population, 4, [1, 0, None])
    assert state.lineage[0].to_json() == {"origin": 1, "adoptions": [{"round": 5, "by": 0}]}
    assert state.lineage[1].to_json() == {"origin": 0, "adoptions": [{"round": 5, "by": 1}]}
    assert state.lineage[2].to_json() == {"origin": 2, "adoptions": []}
    ratio = state.hyperparameters[0]["learning_rate"] / before[1]["learning_rate"]
    assert ratio == pytest.approx(0.8) or ratio == pytest.approx(1.25)
    assert state.hyperparameters[2] == before[2]
    again = PopulationState.from_json(json.loads(json.dumps(state.to_json())))
    assert again.to_json() == state.to_json()


def config_for(changes, **train):
    population = {
        "enabled": True,
        "trainers": 2,
        "rounds": 2,
        "steps_per_round": 2,
        "exchange": "pairwise",
        "quantile": 0.25,
        "tournament_fraction": 0.1,
        "mutate": {},
        **changes,
    }
    settings = {
        "seed": 1,
        "batch_size": 8,
        "learning_rate": 0.001,
        "weight_decay": 0.0,
        "validation_fraction": 0.1,
        "spatial": {"ranks_per_sample": 1},
        "population": population,
    }
    return {"train": {**settings, **train}}


@pytest.mark.unit
@pytest.mark.parametrize(
    ("changes", "train", "message"),
    [
        ({"trainers": 3}, {}, "'train.population.trainers': 3 trainers do not divide the job's 4 ranks"),
        (
            {"mutate": {"learning_rte": [2]}},
            {},
            "'train.population.mutate.learning_rte': no such key of train",
        ),
        (
            {"mutate": {"batch_size": [2]}},
            {},
            "'train.population.mutate.batch_size': train.batch_size cannot change",
        ),
        (
            {"mutate": {"weight_decay": [2]}},
            {},
            "'train.population.mutate.weight_decay': train.weight_decay is 0",
        ),
        (
            {},
            {"spatial": {"ranks_per_sample": 2}},
            "'train.population' with 'train.spatial.ranks_per_sample': 2",
        ),
        (
            {"tournament_fraction": 0.05},
            {},
            "'train.population.tournament_fraction': 0.05 of a trainer's share",
        ),
    ],
)
def test_config_errors_name_the_key_before_any_data_is_read(changes, train, message):
    # 180 training records: 9 a trainer's tournament set at 0.1, 4.5 at 0.05
    meta = {"counts": {"records": 200}}
    with pytest.raises(Sim2dlError, match=message.replace("(", r"\(").replace(")", r"\)")):
        check(config_for(changes, **train), 4, meta)
    assert check(config_for({}), 4, meta).ranks_per_trainer == 2


def train(tmp_path, staged, ranks=2, background=False, warm_start=False, **population):
    _, config = staged
    tmp_path.mkdir(parents=True, exist_ok=True)
    config = {
        **config,
        "train": {
            **config["train"],
            "warm_start": warm_start,
            "population": population_settings(**population),
        },
    }
    args = ["train", "--config", str(write_config(tmp_path, config)), "--out", str(tmp_path / "train")]
    if background:
        return start_cli(args, ranks)
    return run_cli(args, ranks=ranks, timeout=600)


def summary_of(tmp_path):
    return json.loads((tmp_path / "train" / "summary.json").read_text())


@SLOW
def test_a_population_of_two_trains_exchanges_and_resumes_after_a_kill_to_the_same_weights(tmp_path, staged):
    whole = train(tmp_path / "whole", staged)
    summary = summary_of(tmp_path / "whole")
    record = summary["population"]
    assert record["trainers"] == 2 and record["ranks_per_trainer"] == 1 and record["rounds_trained"] == 3
    assert summary["weights_identical_across_ranks"]  # every rank saved the kept model
    rounds = record["rounds"]
    assert [r["pairs"] for r in rounds] == [[[0, 1]]] * 3
    for r in rounds:  # each trainer kept the partner's model exactly when it scored lower on its own set
        for t in (0, 1):
            scores = r["tournament_loss"][t]
            assert (r["adopted"][t] == 1 - t) == (scores["partner"] < scores["own"])
            seconds = r["seconds"]
            assert seconds["steps"] > 0 and r["round_cost"] == pytest.approx(
                (seconds["tournament"] + seconds["exchange"]) / seconds["steps"]
            )
    # the lineage is the adoptions' record: every adoption in a row appears in the adopter's lineage, and a
    # trainer that adopted in the last round carries that adoption in its lineage
    adoptions = {(r["round"], t) for r in rounds for t in (0, 1) if r["adopted"][t] is not None}
    last = {(a["round"], a["by"]) for x in record["lineage"] for a in x["adoptions"]}
    assert last <= adoptions
    assert {(3, t) for t in (0, 1) if rounds[-1]["adopted"][t] is not None} <= last
    # the kept model: the lowest validation loss of any trainer in any round, and the summary scores it
    best = min((v, r["round"], t) for r in rounds for t, v in enumerate(r["val_loss"]))
    assert (record["kept"]["round"], record["kept"]["trainer"]) == (best[1], best[2])
    assert summary["val_loss"] == pytest.approx(best[0], rel=1e-5)
    assert "sigma_8" in summary["r2"] and summary["baseline"]["method"]
    assert (tmp_path / "whole" / "train" / "learning_curves.png").stat().st_size > 10_000
    assert '"round": 3' in whole.stderr
    # the summary speaks in rounds (train.epochs is unused), and the history has a row per round
    assert summary["rounds"] == 3 and "epochs" not in summary
    assert summary["kept"]["rounds_trained"] == 3 and summary["kept"]["round"] == record["kept"]["round"]
    history = json.loads((tmp_path / "whole" / "train" / "metrics.json").read_text())
    assert [row["round"] for row in history] == [1, 2, 3]
    # `sim2dl status` reads the unit and the length from the start record, as for every mode
    from pipeline.paths import Layout
    from pipeline.reporting.status import train_step

    state = train_step(Layout(tmp_path / "whole"), time.time())
    assert (state["unit"], state["at"], state["of"], state["state"]) == ("round", 3, 3, "done")
    # TensorBoard: a run per trainer, a point per round (its losses, the rate it carries), adoptions as text
    for t in (0, 1):
        board = board_events(tmp_path / "whole" / "train" / "tensorboard" / f"trainer-{t}")
        assert board["scalars"]["val_loss"] == pytest.approx({r["round"]: r["val_loss"][t] for r in rounds})
        assert board["scalars"]["learning_rate"] == pytest.approx(
            {r["round"]: r["hyperparameters"][t]["learning_rate"] for r in rounds}
        )
        adopted = [r["round"] for r in rounds if r["adopted"][t] is not None]
        assert len(board["text"].get("adoptions", [])) == len(adopted)
        assert all(f"trainer {t} adopted" in line for line in board["text"].get("adoptions", []))
    # the kept model's run: the test split's scores at the last round, the baseline as a line over the rounds
    kept_board = board_events(tmp_path / "whole" / "train" / "tensorboard" / "population")["scalars"]
    line = summary["baseline"].get("validation", summary["baseline"])["r2"]["sigma_8"]
    assert kept_board["baseline/r2/sigma_8"] == pytest.approx({1: line, 3: line})
    if "test_loss" in summary:
        assert kept_board["test/r2/sigma_8"] == pytest.approx({3: summary["r2"]["sigma_8"]})
    # each trainer's records are named, and no record is read by two trainers: a file both list is
    # dealt out (every n-th record from a different k-th)
    shares = [{name: every for files, every in ranks for name in files} for ranks in record["trainer_shares"]]
    for name in set(shares[0]) & set(shares[1]):
        (n, k), (m, j) = shares[0][name], shares[1][name]
        assert n == m and k != j, (name, shares)
    assert sum(record["trainer_records"]) > 0
    # the members' disagreement, as an uncertainty estimate: two members differ after their own steps
    spread = record["disagreement"]
    assert spread["members"] == 2 and spread["records"] > 0 and spread["mean_member_std"] > 0
    assert -1 <= spread["rank_correlation_with_error"] <= 1

    # the same config killed after its first round and run again: the same rounds and the same weights
    out = tmp_path / "killed"
    proc = train(out, staged, background=True)
    state = out / "train" / "population.json"
    deadline = time.monotonic() + 300
    while time.monotonic() < deadline and not (
        state.exists() and json.loads(state.read_text())["round"] >= 1
    ):
        time.sleep(0.05)
    kill_tree(proc)
    done = json.loads(state.read_text())["round"]
    assert 1 <= done < 3 and not (out / "train" / "summary.json").exists()
    # written every round before the state: the rounds the state names, and the next where the kill came
    # between the two writes
    before = json.loads((out / "train" / "metrics.json").read_text())
    assert [row["round"] for row in before][:done] == list(range(1, done + 1)) and len(before) <= done + 1
    rerun = train(out, staged)
    assert f"resumes after round {done}" in rerun.stderr
    resumed = summary_of(out)
    assert [r["adopted"] for r in resumed["population"]["rounds"]] == [r["adopted"] for r in rounds]
    assert resumed["weights_checksum"] == summary["weights_checksum"]
    # the history and the kept record continue across the kill as if it had not happened
    continued = json.loads((out / "train" / "metrics.json").read_text())
    assert continued[:done] == before[:done] and [row["round"] for row in continued] == [1, 2, 3]
    assert resumed["kept"] == summary["kept"] and resumed["population"]["kept"] == record["kept"]

    # train.warm_start: a new population whose trainers all start from the kept model above
    warm = train(tmp_path / "warm", staged, warm_start=str(tmp_path / "whole" / "train"), rounds=1)
    started = summary_of(tmp_path / "warm")["warm_start"]
    assert summary["warm_start"] is None and started["checksum"] == summary["weights_checksum"]
    assert warm.stderr.count("(train.warm_start)") == 2  # each trainer's rank


@SLOW
def test_truncation_between_two_trainers_of_two_ranks(tmp_path, staged):
    train(tmp_path, staged, ranks=4, exchange="truncation", rounds=2, mutate={"learning_rate": [0.5, 2.0]})
    summary = summary_of(tmp_path)
    record = summary["population"]
    assert record["ranks_per_trainer"] == 2 and summary["weights_identical_across_ranks"]
    for r in record["rounds"]:
        own = [s["own"] for s in r["tournament_loss"]]
        worse = max((loss, t) for t, loss in enumerate(own))[1]
        assert r["adopted"] == [None if t != worse else 1 - worse for t in (0, 1)] and r["pairs"] is None
    # the second trainer starts from the base rate times a factor; an adopter takes its source's times one
    before = [h["learning_rate"] for h in record["initial_hyperparameters"]]
    assert before[0] == 0.002 and np.isclose(before[1] / 0.002, [0.5, 2.0]).any()
    for r in record["rounds"]:
        now = [h["learning_rate"] for h in r["hyperparameters"]]
        for t, source in enumerate(r["adopted"]):
            if source is None:
                assert now[t] == before[t]
            else:
                assert np.isclose(now[t] / before[source], [0.5, 2.0]).any()
        before = now


FAILING_MODEL = '''
import os

import tensorflow as tf


class FailAfter(tf.keras.layers.Layer):
    """Raises in the training step after `after` steps (a rank's own count)."""

    def __init__(self, after, **kwargs):
        super().__init__(**kwargs)
        self.after = after

    def build(self, shape):
        self.calls = self.add_weight(
            name="calls", shape=(), initializer="zeros", trainable=False, dtype="int64"
        )

    def call(self, x, training=None):
        if training:
            self.calls.assign_add(1)
            tf.debugging.assert_less(
                self.calls, tf.constant(self.after, tf.int64), message="injected failure"
            )
        return x


def build(input_shape, outputs):
    after = 5 if os.environ.get("PMI_RANK") == "1" else 10**9  # the second rank: trainer 1, in its 2nd round
    inputs = tf.keras.layers.Input(shape=input_shape)
    x = FailAfter(after)(tf.keras.layers.Flatten()(inputs))
    return tf.keras.Model(inputs, tf.keras.layers.Dense(outputs)(x))
'''


@pytest.mark.mpi
def test_a_trainer_that_fails_ends_the_job_with_an_error_naming_it(tmp_path, staged):
    """Trainer 1's step raises in round 2: every rank learns it before the exchange (no partner waits in
    one), and the job ends with an error naming the trainer, its ranks and the round."""
    (tmp_path / "failing.py").write_text(FAILING_MODEL)
    _, config = staged
    settings = {
        **config["train"],
        "model": f"{tmp_path / 'failing.py'}:build",
        "population": population_settings(mutate={}),
    }
    path = write_config(tmp_path, {**config, "train": settings})
    started = time.monotonic()
    proc = run_cli(
        ["train", "--config", str(path), "--out", str(tmp_path / "train")], ranks=2, check=False, timeout=300
    )
    assert proc.returncode != 0 and time.monotonic() - started < 300
    assert "trainer 1 (ranks 1-1) failed in round 2: InvalidArgumentError" in proc.stderr, proc.stderr[-3000:]
    assert "injected failure" in proc.stderr
    assert json.loads((tmp_path / "train" / "population.json").read_text())["round"] == 1


@pytest.mark.parametrize(
    ("other", "message"),
    [
        ({"search": {"enabled": True}}, "config keys 'train.population.enabled' and 'search.enabled'"),
        (
            {"train": {"online": {"enabled": True}}},
            "config keys 'train.population.enabled' and 'train.online.enabled'",
        ),
    ],
)
def test_the_workflow_refuses_a_population_with_a_search_or_online_training(tmp_path, other, message):
    config = {"workdir": str(tmp_path / "w"), "train": {"population": {"enabled": True}}}
    for section, values in other.items():
        config[section] = {**config.get(section, {}), **values}
        if section == "train":
            config["train"] = {"population": {"enabled": True}, **values}
    path = write_config(tmp_path, config)
    proc = run_snakemake(["--cores", "1", "-n", "--configfile", str(path)], timeout=120)
    assert proc.returncode != 0 and message in proc.stdout + proc.stderr


@pytest.mark.unit
def test_independent_trainers_score_their_own_model_and_move_nothing():
    """exchange none (the control of bench/ltfb.py): a trainer's tournament scores its own model, adopts
    nothing and leaves its variables as they were."""
    from types import SimpleNamespace

    from pipeline.training.tournament import _tournament

    trainer = SimpleNamespace(
        population=plan(trainers=2, ranks=2, exchange="none"), number=1, rank=1, world=None
    )
    untouched = [np.arange(3.0)]
    adopted, scores, moved = _tournament(trainer, 0, np.zeros(3), lambda: untouched, lambda: 0.25)
    assert (adopted, scores, moved) == (None, {"own": 0.25}, 0.0) and untouched[0].tolist() == [0.0, 1.0, 2.0]

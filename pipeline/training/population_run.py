"""A population's training from staged shards (train.population, LBANN's LTFB): the settings checked
against the job and the data, a Horovod world per trainer (hvd.init on the trainer's communicator: its
ranks, consecutive), each trainer's model from its own seed, the rounds (pipeline.training.tournament),
then the run's end on the kept model as every mode's (pipeline.training.run: the baseline on the same
split, the summary with the population's record). Memory and time: see pipeline.training.tournament.
"""

from __future__ import annotations

import json
import logging
import socket
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import numpy as np

from pipeline import Sim2dlError
from pipeline.formats.metadata import load_metadata
from pipeline.paths import TrainPaths
from pipeline.reporting.board import Board
from pipeline.runtime.mpi import all_ok
from pipeline.runtime.placement import topology
from pipeline.training.checkpoints import resume_key
from pipeline.training.classical import baseline_start
from pipeline.training.inputs import Staging, rank_data
from pipeline.training.population import Population
from pipeline.training.population import check as check_population
from pipeline.training.run import Ranks, Scores, StagedEnding, Trained, TrainingRun
from pipeline.training.session import Model, prepare, start_horovod
from pipeline.training.spatial.layout import SpatialLayout
from pipeline.training.tasks import Task, data_spec, make_task
from pipeline.training.tournament import Rounds, Trainer

log = logging.getLogger(__name__)

INIT_SEED_STEP = 7919  # trainer t's model starts from weights drawn with train.seed + t x this


def train_population(
    config: Mapping[str, Any],
    merged_dir: Path,
    stage_summary: Path,
    out_dir: Path,
    comm: Any,
    baseline: bool = True,
    trial: Mapping[str, Any] | None = None,
) -> dict[str, Any]:
    """train.population: the settings checked against the job and the data (before any is read), a Horovod
    world per trainer (hvd.init on the trainer's communicator: its ranks, consecutive), each trainer's
    model from its own seed, the rounds (pipeline.training.tournament), then the run's end on the kept
    model (pipeline.training.run: the baseline on the same split, the summary with the population's
    record)."""
    import horovod.tensorflow as hvd  # as the train step does, before Horovod's environment is set

    settings = config["train"]
    meta = load_metadata(merged_dir)
    population = checked_population(config, meta, comm)
    rank, size = comm.Get_rank(), comm.Get_size()
    number, trainer_comm, own, (task, model, device) = trainer_model(config, meta, comm, population, hvd)
    log.info(json.dumps({"rank": rank, "trainer": number, "device": device}))
    paths = TrainPaths(out_dir)
    layout = SpatialLayout(1, size, rank)  # the ranks of a node share out its files: trainers read apart
    per_record = task.samples_per_record()
    staging = Staging(merged_dir, stage_summary, paths.restaged)
    data = rank_data(config, meta, staging, comm, layout, disjoint=True, samples_per_record=per_record)
    # one fit: every trainer's
    model, classical, hybrid = baseline_start(own, meta, task, model, data, comm, 1)
    board = Board.of(settings, paths.tensorboard / "population", rank == 0, trial)
    ranks = Ranks(hvd, rank, size, device, layout, comm)
    run = TrainingRun(config, task, model, paths, ranks, "round", board, hybrid, trial is not None)
    run.announce(
        population.rounds,
        trainers=population.trainers,
        ranks_per_trainer=population.ranks_per_trainer,
        rounds=population.rounds,
        steps_per_round=population.steps_per_round,
        train_records_per_rank=data.records,
    )
    trained = rounds(run, meta, data, Trainer(comm, trainer_comm, population))
    return run.end(trained, StagedEnding(meta, data, classical, asked=baseline))


def rounds(run: TrainingRun, meta: Mapping[str, Any], data: Any, trainer: Trainer) -> Trained:
    """The population's rounds (pipeline.training.tournament), resumed where a checkpoint of the same key
    left them, and what they trained: the kept model's scores, the population's record, its curves."""
    settings, task, model, population = run.settings, run.task, run.model, trainer.population
    key = resume_key(settings, meta["plan_digest"], model.source, "round")
    outcome = Rounds(run, meta, data, trainer, key).run()
    assert outcome.evaluation is not None
    record = population_record(population, settings, outcome, data, run.ranks.comm)

    def curves(path: Path) -> None:
        from pipeline.reporting.plots import population_curves

        population_curves(outcome.state.rounds, outcome.kept.details, task.loss_name, path)

    scores = Scores(outcome.evaluation, outcome.test)
    return Trained(outcome.history, scores, outcome.kept, outcome.warm_start, {"population": record}, curves)


def trainer_model(
    config: Mapping[str, Any], meta: Mapping[str, Any], comm: Any, population: Population, hvd: Any
) -> tuple[int, Any, dict[str, Any], tuple[Task, Model, dict[str, Any]]]:
    """This rank's trainer (its number and communicator, Horovod started on it), the config with the
    trainer's own seed, and its task, model and device (session.prepare), the model from that seed."""
    settings = config["train"]
    number, trainer_comm, local = trainer_world(comm, population, settings)
    own = {**config, "train": {**settings, "seed": settings["seed"] + INIT_SEED_STEP * number}}
    own_layout = SpatialLayout(1, trainer_comm.Get_size(), trainer_comm.Get_rank())
    return number, trainer_comm, own, prepare(own, meta, comm, hvd, (own_layout, None), local)


def trainer_world(
    comm: Any, population: Population, settings: Mapping[str, Any]
) -> tuple[int, Any, tuple[int, int]]:
    """This rank's trainer: its number, its communicator (Horovod initialised on it: the trainer's ranks,
    consecutive) and the rank's (place, count) among its node's ranks, whatever their trainers (a GPU per
    rank of a real node)."""
    rank = comm.Get_rank()
    number = population.trainer_of(rank)
    trainer_comm = comm.Split(number, rank)
    start_horovod(settings, trainer_comm)
    node = topology(comm, 0)
    on_node = node.node_ranks[node.node]
    return number, trainer_comm, (on_node.index(rank), len(on_node))


def checked_population(config: Mapping[str, Any], meta: Mapping[str, Any], comm: Any) -> Population:
    """train.population checked against the job and the data on every rank alike (an error once, all exit)."""
    error, population = None, None
    try:
        # a trajectory's windows
        per_record = make_task(config["train"], data_spec(meta)).samples_per_record()
        population = check_population(config, comm.Get_size(), meta, per_record)
    except Sim2dlError as e:
        error = e
    all_ok(comm, error)
    assert population is not None
    return population


def population_record(
    population: Population, settings: Mapping[str, Any], outcome: Any, data: Any, comm: Any
) -> dict[str, Any]:
    """summary.json's `population`: the plan, every round's record and lineage (the state), the kept
    model, and who trained where on what (every rank's part gathered)."""
    # each rank's files and which of their records it reads ([n, k]: every n-th from the k-th; null: all),
    # so that the trainers' records can be checked disjoint
    shares = _by_trainer(comm.allgather([[f.name for f in data.files], data.shard]), population)
    return {
        "trainers": population.trainers,
        "ranks_per_trainer": population.ranks_per_trainer,
        "exchange": population.exchange,
        "rounds_trained": len(outcome.state.rounds),
        "kept": {**outcome.kept.details, "stopped_after_round": outcome.kept.stopped_after},
        "disagreement": outcome.disagreement,
        "initial_hyperparameters": population.hyperparameters(settings),
        **outcome.state.to_json(),
        "trainer_hosts": [
            sorted(set(h)) for h in _by_trainer(comm.allgather(socket.gethostname()), population)
        ],
        "trainer_files": [sorted({n for files, _ in ranks for n in files}) for ranks in shares],
        "trainer_records": [sum(n) for n in _by_trainer(comm.allgather(data.records), population)],
        "trainer_shares": shares,
        "round_cost": _median([r["round_cost"] for r in outcome.state.rounds if r["pairs"] != []]),
    }


def _by_trainer(values: Sequence[Any], population: Population) -> list[list[Any]]:
    return [[values[r] for r in population.members(t)] for t in range(population.trainers)]


def _median(values: Sequence[float]) -> float | None:
    return float(np.median(values)) if values else None

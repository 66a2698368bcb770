"""The rounds of population training (train.population; LBANN's LTFB): each trainer trains
steps_per_round steps on its own records (data-parallel inside itself: Horovod on the trainer's
communicator), then the population holds its tournament (pipeline.training.population decides who meets
whom, pipeline.training.exchange moves the models), then every trainer's model is scored on the common
validation split, the round is checkpointed, and the next begins.

- Data: a trainer's records are its ranks' staged files (pipeline.training.inputs: the ranks of a node
  share out its files, so trainers read disjoint parts); its tournament set is tournament_fraction of them
  held out by hash, never trained on. A round's input is seeded by (seed, trainer, round), so a resumed
  round reads what it read the first time.
- Pairwise: the paired trainers' corresponding ranks swap models (one Sendrecv); each trainer scores both
  on its tournament set (its ranks' losses combined) and keeps the partner's only if it scores lower, so
  the decision is the trainer's own and the same on all its ranks. Truncation: each trainer scores its own
  model; the worst quantile take the best's models (winner rank sends, loser rank receives).
- An adopted model brings its optimizer state, hyperparameters (then mutated) and lineage.
- Validation: every trainer's model is broadcast from its first rank and every rank scores all T on its
  share of the validation split (the same split and hash as one trainer's), summed over the job: the
  population's losses are comparable and the model kept (train.keep: best over rounds, or the last
  round's best) is chosen by them. A trainer's failure during its steps is agreed on by all ranks before
  the tournament (one allgather), so the job ends with an error naming the trainer instead of a partner
  waiting in an exchange; a rank that dies outright ends the job through the launcher.
- Checkpoints: each trainer's first rank saves its model and optimizer (numbered by round, the last two
  kept) in checkpoints/trainer-T; then rank 0 writes population.json (the state every rank agrees on) and,
  when the kept model changed, its weights. A rerun restores every trainer at the state's round: the same
  winners and final weights as a run that was not interrupted.

Memory: the model, its optimizer and T packed copies of them at validation (plus the kept one), and the
rank's tournament and validation records (serialized, read once) where they total at most 1 GiB; time per
round: steps_per_round steps, two (pairwise) or one tournament pass over the trainer's tournament set, T
passes over the rank's share of the validation split, and the transfers.
"""

from __future__ import annotations

import json
import logging
import math
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from pipeline import Sim2dlError
from pipeline.paths import TrainPaths
from pipeline.storage.fsutil import write_json_atomic
from pipeline.training import exchange
from pipeline.training.checkpoints import discard_foreign_checkpoints
from pipeline.training.inputs import RankData, input_pipeline
from pipeline.training.kernel import (
    Best,
    CounterCheckpoint,
    Window,
    average_unlearned_state,
    best_unit,
    comparable,
    run_steps,  # fmt: skip
    schedule,
)
from pipeline.training.population import Population, PopulationState
from pipeline.training.steps import evaluate, step_functions
from pipeline.training.tasks import Evaluation, Task

log = logging.getLogger(__name__)

CACHE_BYTES = 1 << 30  # held-out sets up to this size per rank are kept in memory after their first read


@dataclass
class Trainer:
    """This rank's place: the job's communicator, its trainer's, and which trainer it is in."""

    world: Any
    comm: Any  # the trainer's ranks (Horovod runs on it)
    population: Population

    @property
    def rank(self) -> int:
        return self.world.Get_rank()

    @property
    def number(self) -> int:
        return self.population.trainer_of(self.rank)

    @property
    def leaders(self) -> list[int]:
        return [self.population.members(t)[0] for t in range(self.population.trainers)]

    def describe(self, trainer: int) -> str:
        members = self.population.members(trainer)
        return f"trainer {trainer} (ranks {members[0]}-{members[-1]})"


@dataclass
class Outcome:
    """What the rounds leave: the kept model loaded into the model on every rank, its validation, the
    state and the per-round rows for the learning curves."""

    evaluation: tuple[float, Evaluation] | None
    kept: dict[str, Any]
    state: PopulationState
    history: list[dict[str, Any]]


def population_paths(paths: TrainPaths) -> tuple[Path, Path]:
    return paths.root / "population.json", paths.checkpoints / "population-kept.npy"


def run_rounds(config: Mapping[str, Any], meta: Mapping[str, Any], task: Task, model: Any, data: RankData,
               trainer: Trainer, paths: TrainPaths, resume_key: str, autograph: bool,
               make_optimizer: Callable[[], Any]) -> Outcome:  # fmt: skip
    """The population's rounds from the last completed one (population.json) to train.population.rounds."""
    import tensorflow as tf

    settings, population = config["train"], trainer.population
    keras_model, shape = model.keras, model.input_shape
    optimizer = make_optimizer()
    state_file, kept_file = population_paths(paths)
    own_dir = paths.checkpoints / f"trainer-{trainer.number}"
    if trainer.rank == 0 and discard_foreign_checkpoints(paths.checkpoints, resume_key):
        state_file.unlink(missing_ok=True)  # a state of other settings or data
    trainer.world.barrier()
    saved = json.loads(state_file.read_text()) if state_file.exists() else None
    start = saved["round"] if saved else 0
    state = PopulationState.from_json(saved["state"]) if saved else PopulationState.start(population, settings)
    best = saved["kept"] if saved else None
    checkpoint = CounterCheckpoint(own_dir, keras_model, optimizer, "round")
    train_step, predict = step_functions(keras_model, optimizer, task.loss(), autograph=autograph)
    if "weight_decay" in population.mutate:  # a variable, so that the compiled step reads each round's value
        optimizer.weight_decay = tf.Variable(float(settings["weight_decay"]), dtype=tf.float32, trainable=False)
    if start and not checkpoint.restore_number(start):
        raise Sim2dlError(f"{own_dir}: no checkpoint of round {start} (population.json's last round): rerun train "
                          f"afresh (remove {paths.checkpoints})")  # fmt: skip
    if start:
        log.info("sim2dl train: %s resumes after round %d", trainer.describe(trainer.number), start)
    kept_weights = np.load(kept_file) if best and kept_file.exists() else None
    variables = lambda: exchange.state_variables(keras_model, optimizer)  # noqa: E731 (slots appear after a step)
    # the held-out sets are read every round (validation T times): kept in memory where they are small
    size = sum(f.stat().st_size for f in data.files)
    validation_size = data.fraction * size if data.fraction is not None else sum(
        f.stat().st_size for f in data.validation_files)  # fmt: skip
    cache = max(trainer.world.allgather(population.tournament_fraction * size + validation_size)) <= CACHE_BYTES
    tournament = input_pipeline(data.files, meta, settings, task, shape, training=False, shard=data.shard,
                                epoch_seed=0, fraction=data.fraction, holdout=False,
                                tournament=(population.tournament_fraction, True), cache=cache)  # fmt: skip
    validation = input_pipeline(data.validation_files, meta, settings, task, shape, training=False,
                                shard=data.validation_shard, epoch_seed=0, fraction=data.fraction,
                                cache=cache)  # fmt: skip

    def score(pipeline: Any, comm: Any) -> float:
        loss, _ = evaluate(pipeline, task, predict, comm)
        return loss

    history = _history(state)
    record = Best(settings["keep"], best_unit(history, "round"))  # the lowest validation loss of any round
    for round_number in range(start, population.rounds):
        hyper = state.hyperparameters[trainer.number]
        clock = {"steps": time.perf_counter()}
        error, window = None, Window([math.nan])
        try:
            window = _train_round(config, meta, task, model, data, trainer, round_number, hyper, optimizer,
                                  train_step, first=round_number == 0)  # fmt: skip
        except Exception as e:  # any failure: every rank must learn of it before the tournament
            error = f"{type(e).__name__}: {e}"
        clock["steps"] = time.perf_counter() - clock["steps"]
        clock["input_wait"] = window.waited
        failed = [(r, m) for r, m in enumerate(trainer.world.allgather(error)) if m is not None]
        if failed:
            culprit, message = population.trainer_of(failed[0][0]), failed[0][1]
            raise Sim2dlError(f"{trainer.describe(culprit)} failed in round {round_number + 1}: {message}")
        # the tournament
        started = time.perf_counter()
        own = exchange.pack(variables())
        adopted, scores, moved = _tournament(trainer, round_number, own, variables, lambda: score(tournament,
                                             trainer.comm))  # fmt: skip
        clock["tournament"] = time.perf_counter() - started - moved
        clock["exchange"] = moved
        reports = trainer.world.allgather({"adopted": adopted, "scores": scores, "loss": float(np.mean(window.losses)),
                                           "clock": clock})  # fmt: skip
        leaders = [reports[r] for r in trainer.leaders]
        state.adopt(population, round_number, [r["adopted"] for r in leaders])
        # validation of every model on the common split
        started = time.perf_counter()
        own = exchange.pack(variables())
        models = exchange.broadcast_models(trainer.world, trainer.leaders, own)
        val_losses = []
        for packed in models:
            exchange.unpack(variables(), packed)
            val_losses.append(score(validation, trainer.world))
        exchange.unpack(variables(), own)
        validation_seconds = time.perf_counter() - started
        # the model kept: the lowest validation loss over rounds (train.keep: best), or this round's best
        leader = min(range(population.trainers), key=lambda t: (comparable(val_losses[t]), t))
        improved = record.consider(round_number + 1, val_losses[leader], lambda: None)
        changed = improved or settings["keep"] == "last" or best is None
        if changed:
            best = {
                "round": round_number + 1,
                "trainer": leader,
                "val_loss": val_losses[leader],
                "lineage": state.lineage[leader].to_json(),
                "hyperparameters": state.hyperparameters[leader],
            }
            kept_weights = models[leader]
        seconds = {k: max(r["clock"][k] for r in reports) for k in ("steps", "tournament", "exchange")}
        wait = float(np.mean([r["clock"]["input_wait"] / max(r["clock"]["steps"], 1e-9) for r in reports]))
        samples = population.steps_per_round * settings["batch_size"] * population.ranks
        row = {"round": round_number + 1, "pairs": population.pairs(round_number) if population.exchange == "pairwise"
               else None, "adopted": [r["adopted"] for r in leaders], "tournament_loss": [r["scores"] for r in leaders],
               "train_loss": [r["loss"] for r in leaders], "val_loss": val_losses,
               "hyperparameters": [dict(h) for h in state.hyperparameters],
               "seconds": {**seconds, "validation": validation_seconds}, "input_wait_fraction": wait,
               "samples_per_s": samples / max(seconds["steps"], 1e-9),
               "round_cost": (seconds["tournament"] + seconds["exchange"]) / max(seconds["steps"], 1e-9)}  # fmt: skip
        state.rounds.append(row)
        history.append(_history_row(row))
        # checkpoints: every trainer's first, then the population's state (a kill between them resumes
        # the previous round, whose checkpoints are still kept)
        if trainer.comm.Get_rank() == 0:
            checkpoint.save(round_number + 1, numbered=True)
        trainer.world.barrier()
        if trainer.rank == 0:
            if changed:
                _save_array(kept_file, kept_weights)
            write_json_atomic(state_file, {"round": round_number + 1, "state": state.to_json(), "kept": best})
            log.info(json.dumps({"round": row["round"], "val_loss": val_losses, "adopted": row["adopted"],
                                 "round_cost": round(row["round_cost"], 4)}))  # fmt: skip
        if record.patience_over(round_number + 1, settings["patience"]):
            best["stopped_after_round"] = round_number + 1
            log.info("sim2dl train: no lower validation loss for %d rounds (train.patience): stopping",
                     settings["patience"])  # fmt: skip
            break
    trainer.world.barrier()
    if best is None:
        raise Sim2dlError("train.population: no round was trained")
    if kept_weights is None:
        kept_weights = np.load(kept_file)
    exchange.unpack(variables(), kept_weights)
    final = evaluate(validation, task, predict, trainer.world)
    return Outcome(final, best, state, history)


def _tournament(trainer: Trainer, round_number: int, own: np.ndarray, variables: Callable[[], list],
                score: Callable[[], float]) -> tuple[int | None, dict[str, float], float]:  # fmt: skip
    """This trainer's tournament: (the trainer whose model it adopted or None, its scores, the seconds the
    transfers took). The model left in `variables` is the one the trainer goes on with."""
    population, number = trainer.population, trainer.number
    if population.exchange == "pairwise":
        partner = population.partner(number, round_number)
        if partner is None:
            return None, {}, 0.0
        started = time.perf_counter()
        theirs = exchange.swap(trainer.world, population.peer(trainer.rank, partner), own)
        moved = time.perf_counter() - started
        own_loss = score()
        exchange.unpack(variables(), theirs)
        their_loss = score()
        if comparable(their_loss) < comparable(own_loss):
            return partner, {"own": own_loss, "partner": their_loss}, moved
        exchange.unpack(variables(), own)
        return None, {"own": own_loss, "partner": their_loss}, moved
    own_loss = score()
    losses = [r for r in trainer.world.allgather(own_loss)]
    by_trainer = [losses[r] for r in trainer.leaders]
    started = time.perf_counter()
    adopted = None
    for loser, winner in population.truncation(by_trainer):
        if number == winner:
            exchange.send(trainer.world, population.peer(trainer.rank, loser), own)
        elif number == loser:
            exchange.unpack(variables(), exchange.receive(trainer.world, population.peer(trainer.rank, winner), own))
            adopted = winner
    return adopted, {"own": own_loss}, time.perf_counter() - started


def _round_input(config: Mapping[str, Any], meta: Mapping[str, Any], task: Task, shape: Any, data: RankData,
                 trainer: Trainer, round_number: int, transforms: Any) -> Any:  # fmt: skip
    """A round's training batches of this rank, seeded by (seed, trainer, round): its tournament set left out."""
    settings = config["train"]
    seed = (settings["seed"] * 1000 + trainer.number) * 10_000 + round_number
    return input_pipeline(data.files, meta, settings, task, shape, training=True, shard=data.shard,
                          epoch_seed=seed, fraction=data.fraction, transforms=transforms,
                          tournament=(trainer.population.tournament_fraction, False))  # fmt: skip


def _train_round(config: Mapping[str, Any], meta: Mapping[str, Any], task: Task, model: Any, data: RankData,
                 trainer: Trainer, round_number: int, hyper: Mapping[str, float], optimizer: Any, train_step: Any,
                 first: bool) -> Window:  # fmt: skip
    """steps_per_round steps at the trainer's hyperparameters (the schedule counts rounds as epochs), a
    window of the training kernel; a diverged trainer (a loss not finite) loses its tournaments: no error."""
    population = trainer.population
    rate = schedule({**config["train"], **hyper}, population.ranks_per_trainer, population.rounds,
                    population.steps_per_round)  # fmt: skip
    if "weight_decay" in hyper:
        optimizer.weight_decay.assign(hyper["weight_decay"])
    batches = iter(_round_input(config, meta, task, model.input_shape, data, trainer, round_number, model.transforms))
    window = run_steps(train_step, optimizer, batches, population.steps_per_round,
                       lambda step: rate(round_number, step), first)  # fmt: skip
    average_unlearned_state(model.keras)  # the trainer's ranks' mean
    return window


def _history(state: PopulationState) -> list[dict[str, Any]]:
    return [_history_row(row) for row in state.rounds]


def _history_row(row: Mapping[str, Any]) -> dict[str, Any]:
    """A round as the learning curves' row: the population's mean training loss, its best validation loss."""
    finite = [v for v in row["val_loss"] if math.isfinite(v)]
    return {"round": row["round"], "loss": float(np.mean(row["train_loss"])),
            "val_loss": min(finite) if finite else math.nan, "samples_per_s": row["samples_per_s"],
            "input_wait_fraction": row["input_wait_fraction"], "seconds": row["seconds"]["steps"]}  # fmt: skip


def _save_array(path: Path, array: np.ndarray) -> None:
    tmp = path.with_name(f".{path.name}.tmp.npy")
    np.save(tmp, array)
    tmp.replace(path)

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
passes over the rank's share of the validation split, and the transfers. At the end, the members'
disagreement (`disagreement`): T + 1 passes over at most DISAGREEMENT_RECORDS test records per rank, whose
outputs it holds (records x outputs x (T + 1) floats; a surrogate's per output in its own units too).
"""

from __future__ import annotations

import json
import logging
import math
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np

from pipeline import Sim2dlError
from pipeline.paths import TrainPaths
from pipeline.reporting.board import Board
from pipeline.storage.fsutil import write_json_atomic
from pipeline.training import exchange
from pipeline.training.checkpoints import (
    CounterCheckpoint,
    claim,
    load_packed,
    save_packed,
    warm_start,
    write_history,
)
from pipeline.training.inputs import RankData, Read, Records, input_pipeline
from pipeline.training.kernel import (
    Kept,
    Window,
    average_unlearned_state,
    comparable,
    history_row,
    run_steps,
    schedule,
)
from pipeline.training.optimizer import make_optimizer
from pipeline.training.population import Population, PopulationState
from pipeline.training.steps import evaluate, step_functions
from pipeline.training.tasks import Evaluation

if TYPE_CHECKING:
    from pipeline.training.run import TrainingRun

log = logging.getLogger(__name__)
DISAGREEMENT_RECORDS = 4096  # per rank: the records the members' disagreement is measured on, at most

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
    """What the rounds leave: the kept model loaded into the model on every rank, its validation (and
    test) evaluation, the state and the per-round rows for the learning curves."""

    evaluation: tuple[float, Evaluation] | None
    kept: Kept  # in rounds; its details: the kept model's round, trainer, lineage and hyperparameters
    state: PopulationState
    history: list[dict[str, Any]]
    test: tuple[float, Evaluation] | None = None  # the kept model on the test split (None: no test split)
    disagreement: dict[str, Any] | None = None  # the members' spread as an uncertainty estimate
    # where every trainer's first weights came from (train.warm_start)
    warm_start: dict[str, str] | None = None


def population_paths(paths: TrainPaths) -> tuple[Path, Path]:
    return paths.root / "population.json", paths.checkpoints / "population-kept.npy"


class Rounds:
    """One rank's part in the population's rounds of a training run: its trainer's model, optimizer and
    checkpoint, the population's state (restored from population.json, unless it was saved under another
    resume_key), and the held-out pipelines every round reads."""

    def __init__(
        self, run: TrainingRun, meta: Mapping[str, Any], data: RankData, trainer: Trainer, resume_key: str
    ) -> None:
        import tensorflow as tf

        self.task, self.model, self.paths = run.task, run.model, run.paths
        self.meta, self.data, self.trainer = meta, data, trainer
        self.settings, self.population = run.settings, trainer.population
        self.optimizer = optimizer = make_optimizer(self.settings, run.ranks.device["precision"])
        model, paths = run.model, run.paths
        self.state_file, self.kept_file = population_paths(paths)
        if claim(paths.checkpoints, resume_key, trainer.world, trainer.rank == 0) and trainer.rank == 0:
            self.state_file.unlink(missing_ok=True)  # a state of other settings or data
        trainer.world.barrier()
        self.checkpoint = CounterCheckpoint(
            paths.checkpoints / f"trainer-{trainer.number}", model.keras, optimizer, "round"
        )
        self.train_step, self.predict = step_functions(
            model.keras,
            optimizer,
            run.task.loss(),
            autograph=model.source.built_in is None,  # a user's model may branch in Python
            averaged_over=model.eval_transforms,
        )
        # a variable, so that the compiled step reads each round's
        if "weight_decay" in self.population.mutate:
            optimizer.weight_decay = tf.Variable(
                float(self.settings["weight_decay"]), dtype=tf.float32, trainable=False
            )
        self.restore()
        self.tournament_set, self.validation = self.held_out()
        self.boards = [
            Board.of(self.settings, paths.tensorboard / f"trainer-{number}", trainer.rank == 0)
            for number in range(self.population.trainers)
        ]  # one run per trainer

    def variables(self) -> list[Any]:
        return exchange.state_variables(self.model.keras, self.optimizer)  # (slots appear after a step)

    def restore(self) -> None:
        """The state of the last completed round (population.json) and this trainer's checkpoint of it, or
        a fresh start."""
        trainer = self.trainer
        saved = json.loads(self.state_file.read_text()) if self.state_file.exists() else None
        self.start = saved["round"] if saved else 0
        self.state = (
            PopulationState.from_json(saved["state"])
            if saved
            else PopulationState.start(self.population, self.settings)
        )
        self.checkpoint.restore(self.start)  # population.json's last round
        # a fresh population: every trainer from the same weights train.warm_start names, if any
        self.warm_start = (
            None if self.start else warm_start(self.settings["warm_start"], self.paths, self.model.keras)
        )
        if self.start:
            log.info("sim2dl train: %s resumes after round %d", trainer.describe(trainer.number), self.start)
        self.history = _history(self.state)
        self.trained: np.ndarray | None = None  # this trainer's model after its last steps (see one_round)
        # the lowest validation loss of any round; details: the kept model (keep: last, the last round's best)
        self.kept = Kept.resumed(self.settings["keep"], self.history, "round")
        self.kept.details = saved["kept"] if saved else {}
        self.kept_weights = (
            load_packed(self.kept_file) if self.kept.details and self.kept_file.exists() else None
        )

    def held_out(self) -> tuple[Any, Any]:
        """The trainer's tournament set and the rank's share of the validation split: read every round
        (validation T times), kept in memory where they are small."""
        data, fraction = self.data, self.population.tournament_fraction
        size = sum(f.stat().st_size for f in data.files)
        validation_size = (
            data.fraction * size
            if data.fraction is not None
            else sum(f.stat().st_size for f in data.validation_files)
        )
        cache = max(self.trainer.world.allgather(fraction * size + validation_size)) <= CACHE_BYTES
        records = self.records()
        read = Read(
            False, data.shard, 0, data.fraction, holdout=False, tournament=(fraction, True), cache=cache
        )
        tournament = input_pipeline(data.files, records, read)
        validation = data.evaluation_input("validation", records, cache=cache)
        return tournament, validation

    def score(self, pipeline: Any, comm: Any) -> float:
        loss, _ = evaluate(pipeline, self.task, self.predict, comm)
        return loss

    def run(self) -> Outcome:
        for round_number in range(self.start, self.population.rounds):
            if not self.one_round(round_number):
                break
        self.trainer.world.barrier()
        if not self.kept.details:
            raise Sim2dlError("train.population: no round was trained")
        for board in self.boards:
            board.close()
        # the members as their last steps left them, before the last tournament made some copies of others
        last = self.trained if self.trained is not None else exchange.pack(self.variables())
        members = exchange.broadcast_models(self.trainer.world, self.trainer.leaders, last)
        kept_weights = self.kept_weights if self.kept_weights is not None else load_packed(self.kept_file)
        exchange.unpack(self.variables(), kept_weights)
        final = evaluate(self.validation, self.task, self.predict, self.trainer.world)
        test = None
        split = "validation"
        if self.data.test_files is not None:  # read once, for the kept model: no tournament or keep saw it
            tested = self.data.evaluation_input("test", self.records())
            test = evaluate(tested, self.task, self.predict, self.trainer.world)
            split = "test"
        spread = self.disagreement(members, kept_weights, split)
        return Outcome(final, self.kept, self.state, self.history, test, spread, self.warm_start)

    def records(self) -> Records:
        """What the trainer's records become: its task's batches, shaped for its model."""
        return Records(self.meta, self.settings, self.task, self.model.input_shape)

    def disagreement(self, members: list[np.ndarray], kept: np.ndarray, split: str) -> dict[str, Any]:
        """The members' disagreement as an uncertainty estimate, on the test split (else validation): per
        record the standard deviation of the members' outputs (normalised units, averaged over the outputs)
        and the kept model's squared error; their means and the rank correlation between them (above 0: the
        population disagrees more where the kept model is wrong); where the task's outputs have units (a
        surrogate's), per output the members' standard deviation beside the kept model's root mean squared
        error in those units. At most DISAGREEMENT_RECORDS per rank."""
        pipeline = self.data.evaluation_input(split, self.records())
        batches = []
        for x, y in pipeline:
            batches.append((x, y.numpy()))
            if sum(len(b[1]) for b in batches) >= DISAGREEMENT_RECORDS:
                break
        outputs = []
        for weights in [*members, kept]:
            exchange.unpack(self.variables(), weights)
            outputs.append(
                np.concatenate([self.predict(x, y)[0].numpy() for x, y in batches]) if batches else None
            )
        exchange.unpack(self.variables(), kept)
        mine, by_output = np.zeros((0, 2)), {}
        if batches:
            labels = np.concatenate([y for _, y in batches]).reshape(len(outputs[-1]), -1)
            flat = np.stack([o.reshape(len(labels), -1) for o in outputs])
            spread = flat[:-1].std(axis=0).mean(axis=1)
            error = ((flat[-1] - labels) ** 2).mean(axis=1)
            mine = np.column_stack([spread, error])
            by_output = self.task.disagreement_by_output(flat[:-1], flat[-1], labels)
        both = np.concatenate(self.trainer.world.allgather(mine))
        gathered = self.trainer.world.allgather(by_output)
        if len(both) < 3:
            return {"split": split, "records": len(both)}
        ranks = np.argsort(np.argsort(both, axis=0), axis=0).astype(np.float64)
        correlation = float(np.corrcoef(ranks[:, 0], ranks[:, 1])[0, 1])
        summary = {
            "split": split,
            "records": len(both),
            "members": len(members),
            "mean_member_std": float(both[:, 0].mean()),
            "kept_mean_squared_error": float(both[:, 1].mean()),
            "rank_correlation_with_error": correlation,
        }
        names = next((list(g) for g in gathered if g), [])
        # in each output's own units: how far apart the members are against how far off the kept one is
        if names:
            summary["by_output"] = {}
            for name in names:
                rows = np.concatenate([g[name] for g in gathered if g])
                std, rmse = float(rows[:, 0].mean()), float(np.sqrt((rows[:, 1] ** 2).mean()))
                summary["by_output"][name] = {
                    "member_std": std,
                    "kept_rmse": rmse,
                    "std_over_rmse": std / rmse if rmse else None,
                }
        return summary

    def one_round(self, round_number: int) -> bool:
        """Steps, tournament, validation of every model, the kept model, the record and the checkpoints of
        one round; False when train.patience stops the rounds."""
        trainer = self.trainer
        window, clock = self.steps(round_number)
        started = time.perf_counter()
        own = exchange.pack(self.variables())
        self.trained = own  # this trainer's model before the tournament: what the members' disagreement uses
        adopted, scores, moved = _tournament(
            trainer, round_number, own, self.variables, lambda: self.score(self.tournament_set, trainer.comm)
        )
        clock["tournament"] = time.perf_counter() - started - moved
        clock["exchange"] = moved
        reports = trainer.world.allgather(
            {"adopted": adopted, "scores": scores, "loss": float(np.mean(window.losses)), "clock": clock}
        )
        self.state.adopt(self.population, round_number, [reports[r]["adopted"] for r in trainer.leaders])
        val_losses, models, validation_seconds = self.validate_all()
        changed = self.keep(round_number, val_losses, models)
        row = self.round_row(round_number, reports, val_losses, validation_seconds)
        self.state.rounds.append(row)
        self.history.append(_history_row(row))
        self.save(round_number, changed, row)
        if self.kept.patience_over(round_number + 1, self.settings["patience"]):
            log.info(
                "sim2dl train: no lower validation loss for %d rounds (train.patience): stopping",
                self.settings["patience"],
            )
            return False
        return True

    def steps(self, round_number: int) -> tuple[Window, dict[str, float]]:
        """The trainer's steps of the round; a failure on any rank is agreed on by all (one allgather) and
        ends the job with an error naming the trainer, before any rank waits in an exchange."""
        trainer = self.trainer
        hyper = self.state.hyperparameters[trainer.number]
        clock = {"steps": time.perf_counter()}
        error, window = None, Window([math.nan])
        try:
            window = self.train_round(round_number, hyper)
        except Exception as e:  # any failure: every rank must learn of it before the tournament
            error = f"{type(e).__name__}: {e}"
        clock["steps"] = time.perf_counter() - clock["steps"]
        clock["input_wait"] = window.waited
        failed = [(r, m) for r, m in enumerate(trainer.world.allgather(error)) if m is not None]
        if failed:
            culprit, message = self.population.trainer_of(failed[0][0]), failed[0][1]
            raise Sim2dlError(f"{trainer.describe(culprit)} failed in round {round_number + 1}: {message}")
        return window, clock

    def train_round(self, round_number: int, hyper: Mapping[str, float]) -> Window:
        """steps_per_round steps at the trainer's hyperparameters (the schedule counts rounds as epochs), a
        window of the training kernel; a diverged trainer (a loss not finite) loses its tournaments: no
        error."""
        population = self.population
        rate = schedule(
            {**self.settings, **hyper},
            population.ranks_per_trainer,
            population.rounds,
            population.steps_per_round,
        )
        if "weight_decay" in hyper:
            self.optimizer.weight_decay.assign(hyper["weight_decay"])
        window = run_steps(
            self.train_step,
            self.optimizer,
            iter(self.round_input(round_number)),
            population.steps_per_round,
            lambda step: rate(round_number, step),
            round_number == 0,
        )
        average_unlearned_state(self.model.keras)  # the trainer's ranks' mean
        return window

    def round_input(self, round_number: int) -> Any:
        """A round's training batches of this rank, seeded by (seed, trainer, round): its tournament set
        left out."""
        seed = (self.settings["seed"] * 1000 + self.trainer.number) * 10_000 + round_number
        records = Records(self.meta, self.settings, self.task, self.model.input_shape, self.model.transforms)
        tournament = (self.population.tournament_fraction, False)
        read = Read(True, self.data.shard, seed, self.data.fraction, tournament=tournament)
        return input_pipeline(self.data.files, records, read)

    def validate_all(self) -> tuple[list[float], list[np.ndarray], float]:
        """Every trainer's model (broadcast from its first rank) scored on the common validation split,
        every rank scoring all on its share: (losses, the packed models, seconds)."""
        started = time.perf_counter()
        own = exchange.pack(self.variables())
        models = exchange.broadcast_models(self.trainer.world, self.trainer.leaders, own)
        val_losses = []
        for packed in models:
            exchange.unpack(self.variables(), packed)
            val_losses.append(self.score(self.validation, self.trainer.world))
        exchange.unpack(self.variables(), own)
        return val_losses, models, time.perf_counter() - started

    def keep(self, round_number: int, val_losses: list[float], models: list[np.ndarray]) -> bool:
        """The model kept: the lowest validation loss over rounds (train.keep: best), or this round's best;
        whether it changed."""
        leader = min(range(self.population.trainers), key=lambda t: (comparable(val_losses[t]), t))
        improved = self.kept.consider(round_number + 1, val_losses[leader], lambda: None)
        changed = improved or self.settings["keep"] == "last" or not self.kept.details
        if changed:
            self.kept.details = {
                "round": round_number + 1,
                "trainer": leader,
                "val_loss": val_losses[leader],
                "lineage": self.state.lineage[leader].to_json(),
                "hyperparameters": self.state.hyperparameters[leader],
            }
            self.kept_weights = models[leader]
        return changed

    def round_row(
        self,
        round_number: int,
        reports: list[dict[str, Any]],
        val_losses: list[float],
        validation_seconds: float,
    ) -> dict[str, Any]:
        """The round's record (summary.json's population.rounds[])."""
        population, leaders = self.population, [reports[r] for r in self.trainer.leaders]
        seconds = {k: max(r["clock"][k] for r in reports) for k in ("steps", "tournament", "exchange")}
        wait = float(np.mean([r["clock"]["input_wait"] / max(r["clock"]["steps"], 1e-9) for r in reports]))
        samples = population.steps_per_round * self.settings["batch_size"] * population.ranks
        return {
            "round": round_number + 1,
            "pairs": population.pairs(round_number) if population.exchange == "pairwise" else None,
            "adopted": [r["adopted"] for r in leaders],
            "tournament_loss": [r["scores"] for r in leaders],
            "train_loss": [r["loss"] for r in leaders],
            "val_loss": val_losses,
            "hyperparameters": [dict(h) for h in self.state.hyperparameters],
            "seconds": {**seconds, "validation": validation_seconds},
            "input_wait_fraction": wait,
            "samples_per_s": samples / max(seconds["steps"], 1e-9),
            "round_cost": (seconds["tournament"] + seconds["exchange"]) / max(seconds["steps"], 1e-9),
            "time": time.time(),
        }

    def save(self, round_number: int, changed: bool, row: Mapping[str, Any]) -> None:
        """Checkpoints: every trainer's first rank, then the history, then the population's state (a kill
        between them resumes the previous round, whose checkpoints are still kept, and rewrites its history
        from the state; a state on disk never names a round whose history row is not)."""
        trainer = self.trainer
        if trainer.comm.Get_rank() == 0:
            self.checkpoint.save(round_number + 1, numbered=True)
        trainer.world.barrier()
        if trainer.rank == 0:
            if changed:
                save_packed(self.kept_file, self.kept_weights)
            write_history(self.paths.root, self.history)  # metrics.json and .csv every round, as every mode
            write_json_atomic(
                self.state_file,
                {"round": round_number + 1, "state": self.state.to_json(), "kept": self.kept.details},
            )
            log.info(
                json.dumps(
                    {
                        "round": row["round"],
                        "val_loss": row["val_loss"],
                        "adopted": row["adopted"],
                        "round_cost": round(row["round_cost"], 4),
                    }
                )
            )
            self.watch(row)

    def watch(self, row: Mapping[str, Any]) -> None:
        """The round in each trainer's TensorBoard run: its losses, the hyperparameters it carries, the
        population's throughput, and an adoption as a text event."""
        shared = {k: row[k] for k in ("samples_per_s", "input_wait_fraction", "round_cost")}
        for number, board in enumerate(self.boards):
            board.row(
                row["round"],
                {
                    "loss": row["train_loss"][number],
                    "val_loss": row["val_loss"][number],
                    **row["hyperparameters"][number],
                    **shared,
                },
            )
            adopted = row["adopted"][number]
            if adopted is not None:
                board.text(
                    row["round"],
                    "adoptions",
                    f"round {row['round']}: trainer {number} adopted the model "
                    f"(weights and optimizer state) of trainer {adopted}",
                )


def _tournament(
    trainer: Trainer,
    round_number: int,
    own: np.ndarray,
    variables: Callable[[], list],
    score: Callable[[], float],
) -> tuple[int | None, dict[str, float], float]:
    """This trainer's tournament: (the trainer whose model it adopted or None, its scores, the seconds the
    transfers took). The model left in `variables` is the one the trainer goes on with."""
    population, number = trainer.population, trainer.number
    if population.exchange == "none":  # independent trainers: scored on their tournament sets, nothing moves
        return None, {"own": score()}, 0.0
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
            exchange.unpack(
                variables(), exchange.receive(trainer.world, population.peer(trainer.rank, winner), own)
            )
            adopted = winner
    return adopted, {"own": own_loss}, time.perf_counter() - started


def _history(state: PopulationState) -> list[dict[str, Any]]:
    return [_history_row(row) for row in state.rounds]


def _history_row(row: Mapping[str, Any]) -> dict[str, Any]:
    """A round as the learning curves' row: the population's mean training loss, its best validation loss."""
    finite = [v for v in row["val_loss"] if math.isfinite(v)]
    loss, best = float(np.mean(row["train_loss"])), min(finite) if finite else math.nan
    return history_row(
        "round",
        row["round"],
        loss,
        best,
        row["samples_per_s"],
        row["input_wait_fraction"],
        row["seconds"]["steps"],
        row.get("time"),
    )

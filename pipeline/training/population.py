"""A population of trainers (train.population; LBANN's LTFB, Jacobs et al. 2019, and PBT's explore): the
plan every rank computes alike, without communicating to agree. The job's ranks form T trainers of R
consecutive ranks (block-assigned); every round each trainer is paired by a shuffle from a generator seeded
by (seed, round), or under truncation the worst quantile of trainers is matched to the best; a trainer that
adopts another's model takes its hyperparameters and lineage, its hyperparameters then mutated by factors
drawn from a generator seeded by (seed, round, trainer). Pure: no MPI, no TensorFlow.

Memory and time: a few numbers per trainer (hyperparameters, lineage of one entry per adoption), a row per
trainer and round of history; nothing grows with the data.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from pipeline import Sim2dlError
from pipeline.training.kernel import comparable

# Hyperparameters a trainer can change between two steps without rebuilding its model or its input: the
# learning rate is assigned every step, AdamW's decay is an attribute of the optimizer.
MUTABLE = ("learning_rate", "weight_decay")


@dataclass(frozen=True)
class Population:
    """train.population for a job of `ranks` ranks."""

    trainers: int
    ranks: int
    rounds: int
    steps_per_round: int
    exchange: str
    quantile: float
    tournament_fraction: float
    mutate: Mapping[str, Sequence[float]]
    seed: int

    @classmethod
    def of(cls, settings: Mapping[str, Any], ranks: int) -> Population:
        p = settings["population"]
        return cls(
            p["trainers"],
            ranks,
            p["rounds"],
            p["steps_per_round"],
            p["exchange"],
            p["quantile"],
            p["tournament_fraction"],
            dict(p["mutate"]),
            settings["seed"],
        )

    @property
    def ranks_per_trainer(self) -> int:
        return self.ranks // self.trainers

    def trainer_of(self, rank: int) -> int:
        return rank // self.ranks_per_trainer

    def members(self, trainer: int) -> range:
        """The job ranks of a trainer."""
        r = self.ranks_per_trainer
        return range(trainer * r, (trainer + 1) * r)

    def peer(self, rank: int, trainer: int) -> int:
        """The rank of `trainer` that holds the same place as `rank` in its own trainer: models move
        between corresponding ranks, each sending the weights it holds (every rank of a trainer holds
        the same)."""
        return self.members(trainer)[rank % self.ranks_per_trainer]

    def pairs(self, round_number: int) -> list[tuple[int, int]]:
        """The round's pairs of trainers: a shuffle of the trainers from a generator of (seed, round),
        taken two by two; an odd one out is in no pair (it keeps its model)."""
        order = np.random.default_rng([self.seed, round_number, 0x17F8]).permutation(self.trainers).tolist()
        return [(min(a, b), max(a, b)) for a, b in zip(order[0::2], order[1::2], strict=False)]

    def partner(self, trainer: int, round_number: int) -> int | None:
        for a, b in self.pairs(round_number):
            if trainer in (a, b):
                return b if trainer == a else a
        return None

    def truncation(self, losses: Sequence[float]) -> list[tuple[int, int]]:
        """(loser, winner) matches: the `quantile` of trainers with the highest loss (at least one) take the
        models of as many with the lowest, the worst the best's; ties by trainer number."""
        if self.trainers < 2:
            return []
        k = max(1, math.floor(self.trainers * self.quantile))
        order = sorted(range(self.trainers), key=lambda t: (comparable(losses[t]), t))
        return list(zip(reversed(order[-k:]), order[:k], strict=True))

    def hyperparameters(self, base: Mapping[str, Any]) -> list[dict[str, float]]:
        """Each trainer's starting values of the mutated hyperparameters: the first trainer's are the
        config's, the others' the config's perturbed once (round -1), so the population explores from the
        start."""
        start = {k: float(base[k]) for k in self.mutate}
        return [start if t == 0 else self.mutated(start, -1, t) for t in range(self.trainers)]

    def mutated(self, values: Mapping[str, float], round_number: int, trainer: int) -> dict[str, float]:
        """The values, each multiplied by one of its factors (train.population.mutate), drawn from a
        generator of (seed, round, trainer)."""
        rng = np.random.default_rng([self.seed, round_number + 1, trainer, 0x5EED])
        return {
            k: float(v) * float(rng.choice(self.mutate[k])) if k in self.mutate else float(v)
            for k, v in values.items()
        }


@dataclass
class Lineage:
    """Where a trainer's model came from: its first trainer, then one (round, trainer) per adoption."""

    origin: int
    adoptions: list[tuple[int, int]] = field(default_factory=list)

    def to_json(self) -> dict[str, Any]:
        return {"origin": self.origin, "adoptions": [{"round": r, "by": t} for r, t in self.adoptions]}

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> Lineage:
        return cls(data["origin"], [(a["round"], a["by"]) for a in data["adoptions"]])


@dataclass
class PopulationState:
    """What every rank knows of the population after a round, updated alike everywhere from the round's
    allgathered decisions: each trainer's hyperparameters and lineage, and the rounds' records."""

    hyperparameters: list[dict[str, float]]
    lineage: list[Lineage]
    rounds: list[dict[str, Any]] = field(default_factory=list)

    @classmethod
    def start(cls, population: Population, base: Mapping[str, Any]) -> PopulationState:
        return cls(population.hyperparameters(base), [Lineage(t) for t in range(population.trainers)])

    def adopt(self, population: Population, round_number: int, adopted: Sequence[int | None]) -> None:
        """Apply the round's decisions (adopted[t]: the trainer whose model t took, None: its own kept):
        the adopter takes the source's lineage (as it was before the round) and its hyperparameters,
        mutated."""
        before_h = [dict(h) for h in self.hyperparameters]
        before_l = [Lineage(x.origin, list(x.adoptions)) for x in self.lineage]
        for t, source in enumerate(adopted):
            if source is None:
                continue
            taken = (round_number + 1, t)  # rounds counted from 1, as in the summary's rows
            self.lineage[t] = Lineage(before_l[source].origin, [*before_l[source].adoptions, taken])
            self.hyperparameters[t] = population.mutated(before_h[source], round_number, t)

    def to_json(self) -> dict[str, Any]:
        return {
            "hyperparameters": self.hyperparameters,
            "lineage": [x.to_json() for x in self.lineage],
            "rounds": self.rounds,
        }

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> PopulationState:
        return cls(
            [dict(h) for h in data["hyperparameters"]],
            [Lineage.from_json(x) for x in data["lineage"]],
            list(data["rounds"]),
        )


def check(
    config: Mapping[str, Any], ranks: int, meta: Mapping[str, Any], samples_per_record: int = 1
) -> Population:
    """train.population against the job and the data, before any data is read: errors name the key.
    samples_per_record: the training samples the task cuts from a record (a trajectory's windows)."""
    settings = config["train"]
    population = Population.of(settings, ranks)
    key = "config key 'train.population"
    if population.trainers > ranks or ranks % population.trainers:
        raise Sim2dlError(
            f"{key}.trainers': {population.trainers} trainers do not divide the job's {ranks} ranks "
            f"(train's ranks must be a multiple of the trainers)"
        )
    for name in population.mutate:
        if name not in settings or name == "population":
            raise Sim2dlError(f"{key}.mutate.{name}': no such key of train (mutable: {', '.join(MUTABLE)})")
        if name not in MUTABLE:
            raise Sim2dlError(
                f"{key}.mutate.{name}': train.{name} cannot change during training without "
                f"rebuilding the model or its input (mutable: {', '.join(MUTABLE)})"
            )
    if "weight_decay" in population.mutate and settings["weight_decay"] == 0:
        raise Sim2dlError(
            f"{key}.mutate.weight_decay': train.weight_decay is 0 (Adam, no decay to perturb): "
            f"set a starting value"
        )
    if settings["spatial"]["ranks_per_sample"] > 1:
        raise Sim2dlError(
            f"{key}' with 'train.spatial.ranks_per_sample': {settings['spatial']['ranks_per_sample']}: "
            "a trainer cannot be spatially split (set one of them off)"
        )
    expected = tournament_records(population, settings, meta)
    if expected is not None and expected * samples_per_record < settings["batch_size"]:
        windows = f" ({samples_per_record} samples each)" if samples_per_record > 1 else ""
        raise Sim2dlError(
            f"{key}.tournament_fraction': {population.tournament_fraction} of a trainer's share of "
            f"the training records is about {expected:.0f} records{windows}, fewer than one batch of "
            f"{settings['batch_size']}: raise it or lower train.batch_size"
        )
    return population


def tournament_records(
    population: Population, settings: Mapping[str, Any], meta: Mapping[str, Any]
) -> float | None:
    """About how many records each trainer's tournament set holds (from merge's counts and the splits'
    fractions; the hash decides the exact number)."""
    splits = meta.get("splits")
    if splits and "train" in splits:
        records = float(splits["train"]["records"])
    else:
        total = meta.get("counts", {}).get("records")
        if total is None:
            return None
        records = total * (1 - settings["validation_fraction"])
    return records * population.tournament_fraction / population.trainers

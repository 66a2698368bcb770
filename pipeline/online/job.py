"""The online job (train.online) below its step: the roles of its ranks, every config check, the producer
ranks' farm and the training ranks' campaign, and the summary every rank returns (pipeline/steps/online.py
is the step's one call).

Memory and time: see pipeline.online.producer and pipeline.online.training_rank.
"""

from __future__ import annotations

import socket
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from pipeline import Sim2dlError
from pipeline.paths import RawPaths
from pipeline.runtime.mpi import all_ok


@dataclass(frozen=True)
class Roles:
    """World ranks [0, producers) run the ensemble; [producers, size) train."""

    producers: int
    size: int

    @property
    def training_ranks(self) -> int:
        return self.size - self.producers

    def is_producer(self, rank: int) -> bool:
        return rank < self.producers


def roles(config: Mapping[str, Any], size: int) -> Roles:
    producers = config["train"]["online"]["producers"]
    if size - producers < 1:
        raise Sim2dlError(
            f"config key 'train.online.producers': {producers} of the job's {size} ranks run "
            f"simulations, which leaves none to train: launch {producers + 1} ranks or more"
        )
    return Roles(producers, size)


def refused_online(train: Mapping[str, Any]) -> None:
    """What online training cannot honour, refused by its key rather than ignored: symmetries drawn per
    sample (the buffer's samples are drawn again and again as they are), test-time averaging, a population."""
    augment = train["augment"]
    asked = [k for k in ("symmetries", "permute", "flips") if augment.get(k)]
    if asked:
        raise Sim2dlError(
            f"config key 'train.augment.{asked[0]}': online training does not augment (train on staged "
            "data for symmetries, or set it off)"
        )
    if train["augment_eval"]:
        raise Sim2dlError("config key 'train.augment_eval': online training does not average over symmetries")
    if train["population"]["enabled"]:
        raise Sim2dlError("config key 'train.population.enabled': online training trains one model")


def check(
    config: Mapping[str, Any], size: int, container: Mapping[str, Any] | None = None
) -> tuple[Roles, dict]:
    """Every config error before any run: the roles, the simulator's command, the fields, the shapes."""
    from pipeline.ensemble.plan import check_command
    from pipeline.online.arrivals import check as check_fields
    from pipeline.online.arrivals import held_fields

    online = config["train"]["online"]
    if not config["simulate"].get("command"):
        raise Sim2dlError(
            "config key 'simulate.command': online training runs the ensemble of your simulator "
            "(train.online needs simulate.command)"
        )
    if config["train"]["spatial"]["ranks_per_sample"] > 1:
        raise Sim2dlError(
            "config key 'train.spatial.ranks_per_sample': online training takes whole samples (split 1)"
        )
    refused_online(config["train"])
    if online["buffer"]["watermark"] > online["buffer"]["capacity"]:
        raise Sim2dlError(
            f"config key 'train.online.buffer.watermark': {online['buffer']['watermark']} is more "
            f"than the buffer's capacity {online['buffer']['capacity']}"
        )
    if online["validation_every_run"] == 1:
        raise Sim2dlError("config key 'train.online.validation_every_run': 1 would hold out every run")
    check_fields(config)
    check_command({**config["simulate"], "container": container or {}})
    return roles(config, size), held_fields(config)


def design_settings(config: Mapping[str, Any]) -> dict[str, Any]:
    """simulate's settings as the producers run them. With simulate.adaptive, simulate.runs is the budget
    and, unless its acquisition is the space-filling control, the trainers choose where
    (pipeline.design.loop.online)."""
    simulate = dict(config["simulate"])
    adaptive = simulate["adaptive"]
    if not adaptive["enabled"]:
        return simulate
    # loaded for a design only, as the step's other modules are (the design's take 0.4 s to import)
    from pipeline.design.acquisitions import check_acquisition
    from pipeline.design.share import SPACE_FILLING

    check_acquisition(
        adaptive, online=True
    )  # (the rest is checked with the config: pipeline.config.check_adaptive)
    if adaptive["acquisition"] != SPACE_FILLING:
        simulate["choosing"] = {
            k: adaptive[k] for k in ("acquisition", "initial", "queue", "sigma", "min_spacing")
        }
    return simulate


def check_supply(config: Mapping[str, Any], runs: int) -> None:
    """A design too small to hold a run out for validation, or to leave one to train on, is a config error
    before any run starts (a smaller campaign than the buffer's watermark trains on what arrived)."""
    every = config["train"]["online"]["validation_every_run"]
    held_out = runs // every if every else 0
    if every and not held_out:
        raise Sim2dlError(
            f"config key 'train.online.validation_every_run': every {every}th run is held out for "
            f"validation, and the design has {runs} runs, so none would be: set it to {runs} or "
            f"fewer (or 0: no validation loss, and train.keep: last)"
        )
    if held_out >= runs:
        raise Sim2dlError(f"config key 'simulate.runs': {runs} runs leave none to train on")


def online_job(
    config: Mapping[str, Any],
    raw_root: Path,
    out_dir: Path,
    comm: Any,
    container: Mapping[str, Any] | None = None,
) -> dict[str, Any]:
    """Run the ensemble on the producer ranks and train on the others; every rank returns the training
    summary (with the ensemble's counts)."""
    from pipeline.design.loop.online import Chooser
    from pipeline.ensemble.plan import EnsemblePlan
    from pipeline.online.training_rank import Campaign, TrainingRank

    rank, size = comm.Get_rank(), comm.Get_size()
    error = None
    try:
        role, held_fields = check(config, size, container)
        simulate = design_settings(config)
        plan = EnsemblePlan.draw(simulate)
        check_supply(config, len(plan))
    except Sim2dlError as e:
        error = e
    all_ok(comm, error)
    sub = comm.Split(0 if role.is_producer(rank) else 1, rank)
    if role.is_producer(rank):
        result = {"ensemble": produce(config, simulate, plan, role, raw_root, comm, sub, container)}
    else:
        chooser = Chooser(simulate, sub, comm, producer=0) if plan.chosen is not None else None
        campaign = Campaign(len(plan), role.producers, RawPaths(raw_root).runs, chooser)
        result = TrainingRank(config, held_fields, comm, sub, campaign, out_dir).run()
    return joined_summary(result, role, comm)


def produce(
    config: Mapping[str, Any],
    simulate: Mapping[str, Any],
    plan: Any,
    role: Roles,
    raw_root: Path,
    comm: Any,
    sub: Any,
    container: Mapping[str, Any] | None,
) -> dict[str, Any]:
    """A producer rank's part: the farm's runs, each run's samples sent to the training ranks (rank 0 also
    takes the trainers' choices when they choose); the ensemble's summary."""
    from pipeline.design.loop.online import DesignQueue
    from pipeline.ensemble.farm import FarmHooks, run_ensemble
    from pipeline.online.producer import Producer

    settings = config["train"]["online"]
    producer = Producer(
        config, comm, role.producers, role.training_ranks, len(plan), lambda run: plan.rows(run, run + 1)[0]
    )
    streamed = settings["source"] == "stream"
    queue = None
    if plan.chosen is not None and comm.Get_rank() == 0:  # the farm's hand-out takes the trainers' choices
        choices = RawPaths(raw_root).online_choices(plan.digest)
        queue = DesignQueue(simulate, comm, role.producers, choices, settings["validation_every_run"])
        queue.restore(plan)
    hooks = FarmHooks(
        max_chunk=1,
        before=producer.before_stream if streamed else None,
        after=producer.after_stream if streamed else producer.after_runs,
        may_be_empty=streamed,
        choose=queue,
    )
    try:
        return run_ensemble(simulate, raw_root, sub, container, hooks, plan)
    finally:
        producer.finish()
        if queue is not None:
            queue.close()


def joined_summary(result: Mapping[str, Any], role: Roles, comm: Any) -> dict[str, Any]:
    """The training ranks' summary on every rank (rank 0, a producer, prints it), with the ensemble's counts
    and where each role ran; an error the training ranks report ends the job on every rank."""
    rank = comm.Get_rank()
    hosts = comm.allgather(socket.gethostname())
    summary = comm.bcast(result if rank == role.producers else None, root=role.producers)
    if "error" in summary:  # on every rank: the job ends with the error, no summary and no model written
        raise Sim2dlError(f"config key 'train.online': {summary['error']}")
    ensemble = comm.bcast(result.get("ensemble") if rank == 0 else None, root=0)
    placed = {"producers": hosts[: role.producers], "training_ranks": hosts[role.producers :]}
    return {**summary, "ensemble": ensemble, "hosts": placed}

"""Benchmark: tournament training (train.population, LBANN's LTFB) against one trainer and against one
data-parallel trainer of the same ranks, on the demo's cubes and model (cosmoflow, batch 16 per rank,
one TensorFlow thread per rank), each variant through `sim2dl train` with the same rounds x steps.

Variants: `single` (1 trainer of 1 rank), `population_2`, `population_4` (T trainers of 1 rank, pairwise,
learning rate mutated by 0.8 / 1.25), `data_parallel_2`, `data_parallel_4` (1 trainer of T ranks: T x the
global batch, the learning rate scaled by T as train does), `independent_2` (population_2 with exchange
none: the same data split and perturbed rates, no tournaments: population_2 against it is what the
exchange itself adds or costs; independent_2 against single is what splitting the data costs). Every
variant scores every model on the same validation split after every round.

- target: the single trainer's best validation loss x 1.05 (a level it reaches late in its budget).
- effective_parallel_efficiency (LBANN's figure; goal >= 1.0 at T = 2 and 4): time for the single trainer
  to reach the target / (T x the population's time to reach it), the population's time being that of its
  first round in which any trainer's model is at or below the target. Given two ways: by samples each
  trainer processed (rounds x steps x batch: what the time would be with a core per trainer; this 2-core
  machine runs 4 trainers on 2 cores) and by seconds (the rounds' summed seconds, steps + tournament +
  transfers + validation; at T = 4 multiplied by 2 cores / 4 ranks to undo the over-subscription). null
  where the population never reaches the target.
- best_val_loss per variant: the population against one data-parallel trainer of T ranks (same ranks,
  T x the global batch).
- exchange_gain: independent_2's best validation loss - population_2's (> 0: the exchange helps; < 0: it
  costs more than the data split explains).
- round_cost: (tournament + transfers) / the steps' time per round, the median over rounds (goal <= 0.05).
- bohb_then_train: the demo's BOHB search (4 trials of 1-3 epochs over learning rate and batch size, 2
  ranks) then one trainer of 2 ranks with its best configuration for the epochs left of population_2's
  sample budget (2 x rounds x steps x batch): the best validation loss, beside population_2's.
"""

from __future__ import annotations

import json
import shutil
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

import yaml
from common import OUT, emit, prepared, sim2dl

REPO = Path(__file__).resolve().parent.parent
CORES = 2


def prepare(work: Path, samples: int) -> dict:
    config = yaml.safe_load((REPO / "config" / "config.yaml").read_text())
    config["simulate"]["runs"] = samples
    config["search"] = {"enabled": False}
    config["train"].update({"threads": 1, "batch_size": 16})
    return yaml.safe_load(prepared(work, config).read_text())


def run(
    work: Path,
    config: dict,
    name: str,
    trainers: int,
    ranks: int,
    rounds: int,
    steps: int,
    exchange: str = "pairwise",
) -> dict:
    population = {
        "enabled": True,
        "trainers": trainers,
        "rounds": rounds,
        "steps_per_round": steps,
        "exchange": exchange,
        "tournament_fraction": 0.15,
        "mutate": {"learning_rate": [0.8, 1.25]} if trainers > 1 else {},
    }
    variant = {**config, "train": {**config["train"], "population": population}}
    path = work / f"{name}.yaml"
    path.write_text(yaml.safe_dump(variant, sort_keys=False))
    out = work / name
    shutil.rmtree(out, ignore_errors=True)
    sim2dl("train", "--config", path, "--out", out, "--no-baseline", ranks=ranks)
    return json.loads((out / "summary.json").read_text())


def bohb_then_train(work: Path, config: dict, budget_samples: int, records: int) -> dict:
    """The demo's search, then training with its best configuration for what is left of the budget."""
    demo = yaml.safe_load((REPO / "config" / "config.yaml").read_text())["search"]
    searched = {**config, "search": {**demo, "enabled": True}}
    path = work / "bohb.yaml"
    path.write_text(yaml.safe_dump(searched, sort_keys=False))
    out = work / "bohb"
    shutil.rmtree(out, ignore_errors=True)
    sim2dl("search", "--config", path, "--out", out / "search", ranks=2)
    trials = [json.loads(line) for line in (out / "search" / "trials.jsonl").read_text().splitlines() if line]
    search_samples = int(sum(max(1, round(t["budget"])) for t in trials) * records)
    epochs = max(1, round((budget_samples - search_samples) / records))
    trained = {**searched, "train": {**config["train"], "epochs": epochs}}
    path.write_text(yaml.safe_dump(trained, sort_keys=False))
    sim2dl(
        "train",
        "--config",
        path,
        "--overrides",
        out / "search" / "best.yaml",
        "--out",
        out / "train",
        "--no-baseline",
        ranks=2,
    )
    summary = json.loads((out / "train" / "summary.json").read_text())
    return {
        "best_val_loss": round(summary["val_loss"], 4),
        "search_trials": len(trials),
        "search_samples": search_samples,
        "train_epochs": epochs,
        "samples": search_samples + epochs * records,
        "best": {k: summary["settings"][k] for k in ("learning_rate", "batch_size")},
    }


def reached(summary: dict, target: float, batch: int, steps: int, ranks: int, trainers: int) -> dict | None:
    """When the population first holds a model at or below the target: its round, the samples each
    trainer processed by then, and the seconds (normalised for over-subscription)."""
    seconds = 0.0
    for row in summary["population"]["rounds"]:
        seconds += sum(row["seconds"].values())
        if min(row["val_loss"]) <= target:
            scale = min(1.0, CORES / ranks)
            per_trainer = row["round"] * steps * batch * (ranks // trainers)
            return {"round": row["round"], "samples_per_trainer": per_trainer, "seconds": seconds * scale}
    return None


def main() -> None:
    import argparse

    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--quick", action="store_true", help="768 cubes, 6 rounds of 16 steps")
    parser.add_argument("--keep", action="store_true")
    args = parser.parse_args()
    # quick: 768 cubes, so that each of population_4's trainers has a tournament set of a batch or more now
    # that the demo holds a tenth out as its test split (512 left it about 15 records)
    samples, rounds, steps = (768, 6, 16) if args.quick else (1024, 10, 48)
    work = OUT / f"ltfb-{samples}"
    config = prepare(work, samples)
    batch = config["train"]["batch_size"]
    summaries = {"single": run(work, config, "single", 1, 1, rounds, steps)}
    for t in (2, 4):
        summaries[f"population_{t}"] = run(work, config, f"population_{t}", t, t, rounds, steps)
        summaries[f"data_parallel_{t}"] = run(work, config, f"data_parallel_{t}", 1, t, rounds, steps)
    # the control: two trainers that never exchange (each on its half of the data, rates perturbed alike)
    summaries["independent_2"] = run(work, config, "independent_2", 2, 2, rounds, steps, exchange="none")
    best = {
        name: round(min(min(r["val_loss"]) for r in s["population"]["rounds"]), 4)
        for name, s in summaries.items()
    }
    target = best["single"] * 1.05
    one = reached(summaries["single"], target, batch, steps, 1, 1)
    efficiency: dict[str, dict] = {}
    for t in (2, 4):
        pop = reached(summaries[f"population_{t}"], target, batch, steps, t, t)
        efficiency[str(t)] = {
            "by_samples": round(one["samples_per_trainer"] / (t * pop["samples_per_trainer"]), 3)
            if pop
            else None,
            "by_seconds": round(one["seconds"] / (t * pop["seconds"]), 3) if pop else None,
            "population_round": pop["round"] if pop else None,
        }
    costs = {f"population_{t}": summaries[f"population_{t}"]["population"]["round_cost"] for t in (2, 4)}
    adoptions = {
        f"population_{t}": sum(
            a is not None for r in summaries[f"population_{t}"]["population"]["rounds"] for a in r["adopted"]
        )
        for t in (2, 4)
    }
    records = summaries["single"]["population"]["trainer_records"][0]
    bohb = bohb_then_train(work, config, 2 * rounds * steps * batch, records)
    if not args.keep:
        shutil.rmtree(work, ignore_errors=True)
    emit(
        {
            "benchmark": "ltfb",
            "samples": samples,
            "rounds": rounds,
            "steps_per_round": steps,
            "batch_per_rank": batch,
            "target_val_loss": round(target, 4),
            "single_round_to_target": one["round"],
            "effective_parallel_efficiency": efficiency,
            "best_val_loss": best,
            "round_cost": {k: round(v, 4) if v is not None else None for k, v in costs.items()},
            "adoptions": adoptions,
            "bohb_then_train": bohb,
            "exchange_gain": round(best["independent_2"] - best["population_2"], 4),
            "population_2_samples": 2 * rounds * steps * batch,
        }
    )


if __name__ == "__main__":
    main()

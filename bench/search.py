"""Benchmark: BOHB (hpbandster, through sim2dl's keyed master/worker stack) against random search with
the same total budget, on the demo problem, over several seeds.

The objective must be cheap enough for many searches in a minute, so it is an in-process learner on the
demo's data rather than the CosmoFlow network: the demo simulator's density cubes (config/config.yaml's
`simulate` section), summarised by their binned power spectrum, and a two-layer perceptron (numpy, Adam,
dropout) that predicts the cosmological parameters. The hyperparameters are the demo's kinds: log-uniform
learning rate, batch size, width, dropout; the budget is epochs; the loss is validation MSE.

- bohb_best_loss, random_best_loss: mean over seeds of each search's best validation loss.
  Target: bohb_best_loss <= random_best_loss.
- bohb_budget_to_match_random: fraction of its budget BOHB had spent (runs in completion order) when it
  first reached random search's final best loss; median over seeds. Target <= 0.33.
"""

from __future__ import annotations

import argparse
import hashlib
import itertools
import json
import logging
import shutil
import sys
import time
from pathlib import Path
from typing import Any

import numpy as np
import yaml

sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from common import OUT, emit

from pipeline.steps.search import (
    config_space,
    install_hmac_key,
    name_server,
    plain,
    register_numpy_serializers,
    run_directory,
)
from pipeline.steps.search import run_master as run_bohb
from pipeline.steps.simulate import make_sample

REPO = Path(__file__).resolve().parent.parent
SPACE = {
    "learning_rate": {"type": "log-uniform", "low": 1e-5, "high": 1.0},
    "batch_size": {"type": "choice", "values": [4, 8, 16, 32, 64, 128]},
    "width": {"type": "int", "low": 2, "high": 64},
    "dropout": {"type": "uniform", "low": 0.0, "high": 0.8},
}


# ---------------------------------------------------------------- the demo problem, small


def power_spectrum_features(cube: np.ndarray, bins: int) -> np.ndarray:
    """log of the radially binned power spectrum of the density contrast."""
    delta = cube / cube.mean() - 1.0
    power = np.abs(np.fft.rfftn(delta)) ** 2
    n = cube.shape[0]
    k = np.sqrt(sum(np.meshgrid(*(np.fft.fftfreq(n) ** 2,) * 2, np.fft.rfftfreq(n) ** 2, indexing="ij")))
    edges = np.linspace(0, 0.5, bins + 1)
    which = np.digitize(k.ravel(), edges) - 1
    ok = (which >= 0) & (which < bins)
    sums = np.bincount(which[ok], power.ravel()[ok], minlength=bins)
    counts = np.bincount(which[ok], minlength=bins)
    return np.log(sums[1:] / np.maximum(counts[1:], 1) + 1e-12)


def demo_dataset(samples: int, bins: int = 16) -> tuple[np.ndarray, ...]:
    sim = yaml.safe_load((REPO / "config" / "config.yaml").read_text())["simulate"]
    from pipeline.config import validate

    sim = validate({"simulate": sim})["simulate"]
    x, y = [], []
    for i in range(samples):
        arrays, _ = make_sample(sim, i)
        x.append(power_spectrum_features(arrays["density"], bins))
        y.append(arrays["params"])
    x, y = np.array(x), np.array(y)
    x = (x - x.mean(0)) / x.std(0)
    y = (y - y.mean(0)) / y.std(0)
    split = int(0.8 * samples)
    return x[:split], y[:split], x[split:], y[split:]


def train_mlp(data: tuple[np.ndarray, ...], config: dict[str, Any], epochs: int) -> float:
    """Train a 2-hidden-layer perceptron for `epochs`; the validation MSE (deterministic per config)."""
    x, y, xv, yv = data
    config = plain(config)
    seed = int.from_bytes(hashlib.sha256(json.dumps(config, sort_keys=True).encode()).digest()[:4], "little")
    rng = np.random.default_rng(seed)
    w, lr, batch = int(config["width"]), float(config["learning_rate"]), int(config["batch_size"])
    drop = float(config["dropout"])
    sizes = [x.shape[1], w, w, y.shape[1]]
    params = []
    for a, b in itertools.pairwise(sizes):
        params += [rng.normal(0, np.sqrt(2 / a), (a, b)), np.zeros(b)]
    m = [np.zeros_like(p) for p in params]
    v = [np.zeros_like(p) for p in params]
    step = 0

    def forward(inputs: np.ndarray, train: bool) -> tuple[np.ndarray, list[np.ndarray]]:
        acts, h = [inputs], inputs
        for i in range(0, len(params) - 2, 2):
            h = np.maximum(h @ params[i] + params[i + 1], 0)
            if train and drop > 0:
                h = h * (rng.random(h.shape) >= drop) / (1 - drop)
            acts.append(h)
        return h @ params[-2] + params[-1], acts

    for _ in range(epochs):
        order = rng.permutation(len(x))
        for start in range(0, len(x), batch):
            idx = order[start : start + batch]
            out, acts = forward(x[idx], True)
            grad = 2 * (out - y[idx]) / out.size
            grads: list[np.ndarray] = [None] * len(params)  # type: ignore[list-item]
            for i in range(len(params) - 2, -1, -2):
                grads[i], grads[i + 1] = acts[i // 2].T @ grad, grad.sum(0)
                if i:
                    grad = (grad @ params[i].T) * (acts[i // 2] > 0)
            step += 1
            for i, g in enumerate(grads):  # Adam
                m[i] = 0.9 * m[i] + 0.1 * g
                v[i] = 0.999 * v[i] + 0.001 * g * g
                params[i] -= lr * (m[i] / (1 - 0.9**step)) / (np.sqrt(v[i] / (1 - 0.999**step)) + 1e-8)
    with np.errstate(all="ignore"):
        loss = float(np.mean((forward(xv, False)[0] - yv) ** 2))
    return loss if np.isfinite(loss) else 1e3  # a diverged run is a (very) bad configuration


# ---------------------------------------------------------------- the two searches


def bohb_search(
    data: tuple[np.ndarray, ...], settings: dict[str, Any], run_dir: Path
) -> list[tuple[float, float]]:
    """(budget, loss) of every BOHB run in completion order, through sim2dl's keyed Pyro4 stack."""
    from hpbandster.core.worker import Worker

    class Objective(Worker):  # type: ignore[misc]
        def compute(self, config_id: Any, config: dict, budget: float, working_directory: Any) -> dict:
            return {"loss": train_mlp(data, dict(config), round(budget)), "info": {}}

    install_hmac_key(run_directory(run_dir), settings["call_timeout_s"])
    with name_server(run_dir, f"bench-{settings['seed']}", settings) as address:
        worker = Objective(
            run_id=address["run_id"], nameserver=address["host"], nameserver_port=address["port"]
        )
        worker.run(background=True)
        result = run_bohb(settings, address, workers=1)
    runs = sorted(result.get_all_runs(), key=lambda r: r.time_stamps["finished"])
    return [(float(r.budget), float(r.loss)) for r in runs]


def random_search(data: tuple[np.ndarray, ...], settings: dict[str, Any], total_budget: float) -> list[float]:
    """Random configurations at the maximum budget until the same total budget is spent."""
    space = config_space(settings["space"], settings["seed"] + 10_000)
    losses, spent = [], 0.0
    while spent < total_budget:
        losses.append(train_mlp(data, dict(space.sample_configuration()), round(settings["max_budget"])))
        spent += settings["max_budget"]
    return losses


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--quick", action="store_true", help="under a minute")
    parser.add_argument("--seeds", type=int, help="searches per method (default 5; quick 3)")
    parser.add_argument("--keep", action="store_true", help="keep bench/out/search")
    args = parser.parse_args()
    seeds = args.seeds or (3 if args.quick else 5)
    samples, iterations = (512, 4) if args.quick else (1024, 8)
    work = OUT / "search"
    register_numpy_serializers()
    logging.basicConfig(level=logging.WARNING)
    for name in ("hpbandster", "Pyro4"):
        logging.getLogger(name).setLevel(logging.WARNING)
    start = time.perf_counter()
    data = demo_dataset(samples)
    print(f"data: {samples} demo cubes -> power spectra in {time.perf_counter() - start:.1f} s", flush=True)
    per_seed = []
    for seed in range(seeds):
        settings = {
            "min_budget": 1,
            "max_budget": 27,
            "eta": 3,
            "iterations": iterations,
            "ping_interval_s": 1,
            "call_timeout_s": 30,
            "interface": "loopback",
            "seed": 100 + seed,
            "space": SPACE,
        }
        t0 = time.perf_counter()
        bohb_runs = bohb_search(data, settings, work / f"seed-{seed}")
        total = sum(b for b, _ in bohb_runs)
        random_losses = random_search(data, settings, total)
        bohb_best, random_best = min(loss for _, loss in bohb_runs), min(random_losses)
        spent, to_match = 0.0, None
        for budget, loss in bohb_runs:
            spent += budget
            if loss <= random_best:
                to_match = spent / total
                break
        per_seed.append(
            {
                "seed": settings["seed"],
                "budget_epochs": total,
                "bohb_runs": len(bohb_runs),
                "random_runs": len(random_losses),
                "bohb_best_loss": round(bohb_best, 5),
                "random_best_loss": round(random_best, 5),
                "bohb_budget_to_match_random": None if to_match is None else round(to_match, 3),
                "seconds": round(time.perf_counter() - t0, 1),
            }
        )
        print(json.dumps(per_seed[-1]), flush=True)
    fractions = [s["bohb_budget_to_match_random"] for s in per_seed]
    if not args.keep:
        shutil.rmtree(work, ignore_errors=True)
    emit(
        {
            "benchmark": "search",
            "quick": args.quick,
            "seeds": seeds,
            "samples": samples,
            "objective": "demo cubes -> power spectrum -> MLP (numpy), budget in epochs",
            "bohb_best_loss": round(float(np.mean([s["bohb_best_loss"] for s in per_seed])), 5),
            "random_best_loss": round(float(np.mean([s["random_best_loss"] for s in per_seed])), 5),
            # a seed where BOHB never matched random search counts as 1.0 (all of its budget and more)
            "bohb_budget_to_match_random": round(
                float(np.median([f if f is not None else 1.0 for f in fractions])), 3
            ),
            "seconds": round(time.perf_counter() - start, 1),
        }
    )


if __name__ == "__main__":
    main()

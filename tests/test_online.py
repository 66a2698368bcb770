"""Online training (train.online): the replay buffer's invariants, the ADIOS2 SST reader against a real
writer (late, dying, stale contact files), and the ensemble training while it runs on real MPI ranks,
from completed runs' files and from SST streams."""

from __future__ import annotations

import json
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pyarrow.parquet as pq
import pytest

from pipeline import Sim2dlError
from pipeline.online.buffer import FieldLayout, ReplayBuffer, replay

from .conftest import env, make_config, run_cli, write_config

SIZE = 8  # cubes of 8³: the network and the FFTs stay small
CUBE_RUN = [sys.executable, "-m", "pipeline.simulators.cube_run"]
CUBE_ARGS = ["--out", "{out}", "--seed", "{seed}", "--sigma-8", "{sigma_8}", "--n-s", "{n_s}",
             "--omega-m", "{omega_m}", "--size", str(SIZE), "--mean-density", "20"]  # fmt: skip


def online_config(tmp_path: Path, source: str = "runs", runs: int = 10, samples: int = 6, **online) -> dict:
    extra = ["--write", "sst"] if source == "stream" else []
    return make_config(
        tmp_path,
        simulate={
            "command": [*CUBE_RUN, *CUBE_ARGS, "--samples", str(samples), *extra],
            "runs": runs,
            "design": "lhs",
            "space": {"sigma_8": {"type": "uniform", "low": 0.6, "high": 1.0},
                      "n_s": {"type": "uniform", "low": 0.9, "high": 1.05},
                      "omega_m": {"type": "uniform", "low": 0.2, "high": 0.4}},  # fmt: skip
            "retries": 1,
            "run_timeout_s": 60,
        },
        source={"glob": "*.h5", "format": "auto", "sample_id": None,
                "fields": {"density": {"path": "density", "dtype": "float32", "shape": [SIZE] * 3},
                           "params": {"path": "params", "dtype": "float32", "shape": [3]}}},  # fmt: skip
        train={"model": "cosmoflow", "batch_size": 4, "depth": 2, "width": 4, "dense": 16,
               "online": {"enabled": True, "source": source, "steps": 12, "validate_every_steps": 4,
                          "validation_every_run": 5, "buffer": {"capacity": 32, "watermark": 8},
                          **online}},  # fmt: skip
    )


# ---------------------------------------------------------------- the buffer


LAYOUT = {"x": FieldLayout((2,), np.dtype(np.float32))}


def sample(k: int) -> dict[str, np.ndarray]:
    return {"x": np.full(2, k, np.float32)}


def test_the_buffer_is_bounded_and_its_memory_fixed_at_creation():
    buffer = ReplayBuffer(LAYOUT, capacity=16, seed=1)
    before = buffer.nbytes
    for k in range(1000):
        buffer.add(sample(k), run=k // 10, number=k % 10)
    assert len(buffer) == 16 and buffer.nbytes == before == 16 * 8 + 4 * 16 * 8
    counts = buffer.counts(100)
    assert counts["added"].sum() == 1000 and counts["added"].sum() - counts["dropped"].sum() == 16
    with pytest.raises(Sim2dlError, match="shape"):
        buffer.add({"x": np.zeros(3, np.float32)}, 0, 0)


def test_a_reservoir_keeps_every_arrival_with_the_same_probability():
    # 200 buffers of 20 from 200 arrivals each: every arrival held with probability 0.1; arrivals
    # bunched in 10 groups of 20 are each held 200 x 20 x 0.1 = 400 times (binomial sd ≈ 19)
    held = np.zeros(200)
    for seed in range(200):
        buffer = ReplayBuffer(LAYOUT, capacity=20, seed=seed)
        for k in range(200):
            buffer.add(sample(k), run=0, number=k)
        for _, number in buffer.held():
            held[number] += 1
    groups = held.reshape(10, 20).sum(axis=1)
    assert np.all(np.abs(groups - 400) < 5 * 19), groups


def test_fifo_keeps_the_newest_and_max_reuse_retires_samples():
    fifo = ReplayBuffer(LAYOUT, capacity=5, policy="fifo", seed=0)
    for k in range(12):
        fifo.add(sample(k), run=0, number=k)
    assert sorted(n for _, n in fifo.held()) == [7, 8, 9, 10, 11]
    worn = ReplayBuffer(LAYOUT, capacity=8, max_reuse=2, seed=0)
    for k in range(8):
        worn.add(sample(k), run=k, number=0)
    drawn = [worn.draw(4, step) for step in range(4)]  # 16 draws of 8 samples used twice each: all gone
    assert worn.exhausted() and worn.retired == 8
    assert sorted(np.concatenate([d["x"][:, 0] for d in drawn]).tolist()) == sorted(list(range(8)) * 2)
    assert worn.counts(8)["drawn"].tolist() == [2] * 8


def test_the_same_arrivals_give_the_same_batches_and_a_recorded_order_replays():
    def run(seed: int, order: list[int]) -> tuple[list[dict], ReplayBuffer]:
        buffer = ReplayBuffer(LAYOUT, capacity=6, seed=seed, rank=1)
        batches = []
        for i, k in enumerate(order):
            buffer.add(sample(k), run=k, number=0, record=True)
            if i % 3 == 2:
                batches.append(buffer.draw(4, i, record=True))
        return batches, buffer

    order = list(range(30))
    first, buffer = run(7, order)
    again, _ = run(7, order)
    other, _ = run(8, order)
    assert all(np.array_equal(a["x"], b["x"]) for a, b in zip(first, again, strict=True))
    assert not all(np.array_equal(a["x"], b["x"]) for a, b in zip(first, other, strict=True))
    settings = {"capacity": 6, "policy": "reservoir", "max_reuse": 0}
    replayed = replay(buffer.log, {(k, 0): sample(k) for k in order}, LAYOUT, settings, 4, seed=7, rank=1)
    assert all(np.array_equal(a["x"], b["x"]) for a, b in zip(first, replayed, strict=True))


# ---------------------------------------------------------------- config checks, before any run


def test_online_config_errors_name_the_key(tmp_path):
    from pipeline.steps.online import check

    config = online_config(tmp_path)
    roles, layouts = check(config, 3)
    assert roles.producers == 1 and roles.trainers == 2
    assert layouts["density"].shape == (SIZE,) * 3 and layouts["params"].shape == (3,)
    with pytest.raises(Sim2dlError, match="'train.online.producers'.*leaves none to train"):
        check(config, 1)
    unshaped = online_config(tmp_path)
    unshaped["source"]["fields"]["density"]["shape"] = [None, SIZE, SIZE]
    with pytest.raises(Sim2dlError, match="'source.fields.density'.*needs every array field's shape"):
        check(unshaped, 2)
    column = online_config(tmp_path)
    column["source"]["fields"]["params"] = {"column": "h0"}
    with pytest.raises(Sim2dlError, match="'source.fields.params'.*'h0' is no parameter"):
        check(column, 2)
    high = online_config(tmp_path, buffer={"capacity": 4, "watermark": 8})
    with pytest.raises(Sim2dlError, match="'train.online.buffer.watermark'"):
        check(high, 2)

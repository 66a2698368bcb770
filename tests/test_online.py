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
from pipeline.online.buffer import BufferField, ReplayBuffer, replay

from .conftest import REPO, SLOW, env, run_cli, write_config
from .helpers import ONLINE_CUBE as SIZE
from .helpers import board_events, online_config

# ---------------------------------------------------------------- the buffer


LAYOUT = {"x": BufferField((2,), np.dtype(np.float32))}


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
    from pipeline.online.job import check

    config = online_config(tmp_path)
    roles, held_fields = check(config, 3)
    assert roles.producers == 1 and roles.training_ranks == 2
    assert held_fields["density"].shape == (SIZE,) * 3 and held_fields["params"].shape == (3,)
    with pytest.raises(Sim2dlError, match=r"'train.online.producers'.*leaves none to train"):
        check(config, 1)
    unshaped = online_config(tmp_path)
    unshaped["source"]["fields"]["density"]["shape"] = [None, SIZE, SIZE]
    with pytest.raises(Sim2dlError, match=r"'source.fields.density'.*needs every array field's shape"):
        check(unshaped, 2)
    column = online_config(tmp_path)
    column["source"]["fields"]["params"] = {"column": "h0"}
    with pytest.raises(Sim2dlError, match=r"'source.fields.params'.*'h0' is no parameter"):
        check(column, 2)
    high = online_config(tmp_path, buffer={"capacity": 4, "watermark": 8})
    with pytest.raises(Sim2dlError, match=r"'train.online.buffer.watermark'"):
        check(high, 2)
    # what online training cannot honour is refused by its key, not ignored
    for key, value, message in [
        ("augment", {"flips": [0]}, r"'train.augment.flips': online training does not"),
        ("augment_eval", True, r"'train.augment_eval'"),
        ("population", {"enabled": True}, r"'train.population.enabled'"),
    ]:
        refused = online_config(tmp_path)
        refused["train"][key] = {**refused["train"][key], **value} if isinstance(value, dict) else value
        with pytest.raises(Sim2dlError, match=message):
            check(refused, 2)


# ---------------------------------------------------------------- the SST reader against a real writer

WRITER = """
import os, sys, time
import numpy as np, adios2
name, policy = sys.argv[1], sys.argv[5]
steps, die_after, delay = int(sys.argv[2]), int(sys.argv[3]), float(sys.argv[4])
io = adios2.Adios().declare_io("w")
io.set_engine("SST")
io.set_parameters(
    {"DataTransport": "WAN", "RendezvousReaderCount": "1", "QueueLimit": "2", "QueueFullPolicy": policy}
)
s = adios2.Stream(io, name, "w")
for i in range(steps):
    s.begin_step()
    s.write("density", np.full((2, 2), i, np.float32), [2, 2], [0, 0], [2, 2])
    s.end_step()
    if i + 1 == die_after:
        os._exit(9)  # a crash: no close, the contact file stays
    time.sleep(delay)
s.close()
"""


def start_writer(
    tmp_path: Path, name: Path, steps: int, die_after: int = -1, delay: float = 0.0, policy: str = "Block"
):
    script = tmp_path / "writer.py"
    script.write_text(WRITER)
    return subprocess.Popen(
        [sys.executable, str(script), str(name), str(steps), str(die_after), str(delay), policy],
        env=env(),
        stderr=subprocess.DEVNULL,
    )


def read_all(name: Path, timeout_s: float = 20, stopped=lambda: False) -> tuple[list[int], object]:
    from pipeline.formats.readers import FieldSpec
    from pipeline.online.stream import StreamCounts, stream_steps

    fields = [FieldSpec.from_config("density", {"path": "density"})]
    counts = StreamCounts()
    settings = {"open_timeout_s": timeout_s, "step_timeout_s": timeout_s, "transport": "WAN"}
    steps = [
        int(arrays["density"][0, 0]) for _, arrays in stream_steps(name, fields, settings, stopped, counts)
    ]
    return steps, counts


def test_sst_a_late_writer_is_waited_for_and_a_dying_one_is_an_error_not_an_end(tmp_path):
    import threading

    from pipeline.online.stream import StreamBroken

    name = tmp_path / "late"
    result: dict = {}
    reader = threading.Thread(
        target=lambda: result.update(zip(("steps", "counts"), read_all(name), strict=True))
    )
    reader.start()
    time.sleep(1.5)  # the reader waits; the writer starts late
    writer = start_writer(tmp_path, name, steps=5, delay=0.02)
    reader.join(60)
    assert writer.wait(30) == 0
    assert result["steps"] == [0, 1, 2, 3, 4] and result["counts"].dropped == 0

    dying = tmp_path / "dying"
    writer = start_writer(tmp_path, dying, steps=6, die_after=3, delay=0.05)
    delivered: list[int] = []
    with pytest.raises(StreamBroken, match="went away after step"):
        from pipeline.formats.readers import FieldSpec
        from pipeline.online.stream import StreamCounts, stream_steps

        fields = [FieldSpec.from_config("density", {"path": "density"})]
        settings = {"open_timeout_s": 20, "step_timeout_s": 20, "transport": "WAN"}
        for step, _ in stream_steps(dying, fields, settings, lambda: False, StreamCounts()):
            delivered.append(step)
    writer.wait(30)
    # the steps that reached the reader before the crash, in order (the last one may be lost with the writer)
    assert delivered == list(range(len(delivered))) and 1 <= len(delivered) <= 3
    assert Path(f"{dying}.sst").exists()  # the crashed writer's stale contact file

    # a rerun beside the stale contact file: no error from it, the new writer's steps arrive
    result.clear()
    reader = threading.Thread(
        target=lambda: result.update(zip(("steps", "counts"), read_all(dying), strict=True))
    )
    reader.start()
    time.sleep(1.0)
    writer = start_writer(tmp_path, dying, steps=3)
    reader.join(60)
    assert writer.wait(30) == 0 and result["steps"] == [0, 1, 2]


def test_sst_discard_never_makes_the_writer_wait_and_the_steps_it_dropped_are_counted(tmp_path):
    """QueueFullPolicy Discard (the writer's choice): a reader slower than the writer loses steps, those
    between two it receives counted from the gaps in the step numbers; Block (the default) loses none."""
    from pipeline.formats.readers import FieldSpec
    from pipeline.online.stream import StreamCounts, stream_steps

    fields = [FieldSpec.from_config("density", {"path": "density"})]
    settings = {"open_timeout_s": 20, "step_timeout_s": 20, "transport": "WAN"}
    for policy in ("Discard", "Block"):
        name = tmp_path / policy
        writer = start_writer(tmp_path, name, steps=40, policy=policy)
        counts, seen = StreamCounts(), []
        for step, arrays in stream_steps(name, fields, settings, lambda: False, counts):
            seen.append(int(arrays["density"][0, 0]))
            assert seen[-1] == step
            time.sleep(0.02)  # a slow trainer
        assert writer.wait(30) == 0
        assert counts.read == len(seen) and counts.read + counts.dropped == counts.last + 1
        if policy == "Discard":  # the writer went on without the reader: most steps never reached it
            assert len(seen) < 40 and seen == sorted(seen)
        else:
            assert counts.dropped == 0 and seen == list(range(40))


def test_sst_no_writer_is_a_time_out_naming_the_stream_and_a_stop_ends_the_wait(tmp_path):
    with pytest.raises(
        Sim2dlError, match=r"SST stream .*nobody: no writer within train.online.open_timeout_s = 1"
    ):
        read_all(tmp_path / "nobody", timeout_s=1)
    began = time.monotonic()
    assert (
        read_all(tmp_path / "nobody", timeout_s=60, stopped=lambda: time.monotonic() - began > 0.5)[0] == []
    )
    assert time.monotonic() - began < 5


# ---------------------------------------------------------------- the ensemble and training in one job

FAILING = """
import os, runpy, sys
run, ledger, fail, die = sys.argv[1:5]
attempt = len(open(os.path.join(ledger, run)).read()) + 1 if os.path.exists(os.path.join(ledger, run)) else 1
open(os.path.join(ledger, run), "a").write("x")
if run == fail:
    sys.exit(3)  # this run never succeeds: a failed run in the runs table
dying = {d.split(":")[0]: (d.split(":") + ["kill"])[1] for d in die.split(",") if d}
how = dying.get(run) if attempt == 1 else None
if how in ("kill", "raise"):  # the first attempt dies after its 2nd cube: killed, or an exception
    import pipeline.simulators.cube_run as cube_run
    original = cube_run.cubes
    def dying_cubes(args):
        for i, cube in enumerate(original(args)):
            if i == 2:
                if how == "kill":
                    os._exit(9)  # no close: the stream breaks
                raise RuntimeError("injected failure")  # `with adios2.Stream` closes the stream cleanly
            yield cube
    cube_run.cubes = dying_cubes
    cube_run.main(sys.argv[5:])
else:
    sys.argv = ["cube_run", *sys.argv[5:]]
    runpy.run_module("pipeline.simulators.cube_run", run_name="__main__")
    if how == "exit":  # everything written and closed, then a failure
        sys.exit(4)
"""


def failing_simulator(tmp_path: Path, config: dict, fail: str, die: str) -> dict:
    """The cube simulator behind a wrapper: run `fail` always fails; each RUN[:HOW] of `die` (comma
    separated) fails its first attempt: kill (after 2 cubes, no close), raise (after 2 cubes, an exception
    inside the stream's `with`), exit (all written and closed, then exit 4)."""
    script = tmp_path / "failing.py"
    script.write_text(FAILING)
    (tmp_path / "ledger").mkdir()
    command = config["simulate"]["command"]
    config["simulate"]["command"] = [
        sys.executable,
        str(script),
        "{run}",
        str(tmp_path / "ledger"),
        fail,
        die,
        *command[3:],
    ]
    return config


def online_record(tmp_path: Path) -> tuple[dict, list[dict]]:
    train = tmp_path / "work" / "train"
    summary = json.loads((train / "summary.json").read_text())
    return summary, pq.read_table(train / "online_runs.parquet").to_pylist()


def test_runs_train_as_they_complete_through_the_workflow_and_nothing_is_lost(tmp_path):
    from .conftest import snakemake_configfile

    config = online_config(tmp_path, runs=10, samples=6)
    config["search"]["enabled"] = False
    config = failing_simulator(tmp_path, config, fail="run-000003", die="")
    # the last validation run arrives after the trainers' last validation (step 12): the summary scores the
    # kept model on it too, as on every validation sample that arrived
    metrics = tmp_path / "work" / "train" / "metrics.json"
    waiting = [sys.executable, str(REPO / "tests" / "programs" / "after_first_validation.py"), str(metrics)]
    config["simulate"]["command"] = [*waiting, "{run}", "9", "12", "--", *config["simulate"]["command"]]
    snakemake_configfile(write_config(tmp_path, config), tmp_path, "--cores", "2")
    summary, runs = online_record(tmp_path)
    work = tmp_path / "work"
    assert not any((work / d).exists() for d in ("ingest", "convert", "merged", "staged"))  # no data step ran
    by_run = {r["run"]: r for r in runs}
    assert by_run["run-000003"]["status"] == "failed" and by_run["run-000003"]["samples_sent"] == 0
    ok = [r for r in runs if r["status"] == "ok"]
    assert len(ok) == 9 and all(r["samples_sent"] == 6 for r in ok)
    validation = [r for r in runs if r["validation_samples"]]
    assert sorted(r["run"] for r in validation) == ["run-000004", "run-000009"]  # every 5th run held out
    assert all(r["samples_buffered"] == 0 and r["times_trained"] == 0 for r in validation)
    online = summary["online"]
    # every sample sent is a validation sample, or entered a buffer, or was dropped by one (counted)
    assert (
        sum(r["samples_sent"] for r in runs) == online["samples"]["arrived"] + online["samples"]["validation"]
    )
    assert sum(r["times_trained"] for r in runs) == online["samples"]["draws"] == 12 * 4
    assert online["steps"] == 12 and online["refused"] == 0 and summary["weights_identical_across_ranks"]
    assert online["statistics"]["density"]["count"] > 0 and set(summary["r2"]) == {
        "params[0]",
        "params[1]",
        "params[2]",
    }
    assert (work / "train" / "model").is_dir() and (work / "train" / "learning_curves.png").stat().st_size
    # as train's summary: the classical baseline (fitted on the training arrivals, scored on the same
    # validation samples as the network), the records scored, each rank's device; the schedule's rates
    assert summary["baseline"]["method"].startswith("ridge") and set(summary["baseline"]["r2"]) == set(
        summary["r2"]
    )
    assert summary["validation_records"] == online["samples"]["validation"] == 12
    assert len(summary["devices"]) == 1 and isinstance(summary["below_baseline"], list)
    history = json.loads((work / "train" / "metrics.json").read_text())
    rates = [row["learning_rate"] for row in history]
    assert rates[-1] < max(rates)  # the cosine after the warm-up
    # TensorBoard: a point per validation, at its step, of the history and of the buffer while it fills
    board = board_events(work / "train" / "tensorboard" / "online")["scalars"]
    steps = [row["step"] for row in history]
    assert board["val_loss"] == pytest.approx({row["step"]: row["val_loss"] for row in history}, rel=1e-5)
    assert board["arrived"] == {row["step"]: row["arrived"] for row in history}
    assert sorted(board["buffer/fill"]) == sorted(board["validation/r2/params[0]"]) == steps
    assert all(0 < v <= 1 for v in board["buffer/fill"].values()) and board["buffer/reuse"][steps[-1]] > 0
    line = summary["baseline"]["r2"]["params[0]"]  # the baseline's line over the run, as the train step's
    assert board["baseline/r2/params[0]"] == pytest.approx({steps[0]: line, steps[-1]: line})
    # every window, as train's
    assert (work / "train" / "metrics.csv").read_text().count("\n") == len(history) + 1
    from pipeline.paths import Layout
    from pipeline.reporting.status import train_step

    state = train_step(Layout(work), time.time())  # `sim2dl status`: the start record's unit and length
    assert (state["unit"], state["at"], state["of"]) == ("step", steps[-1], 12)
    # a longer run continues from the checkpoint: the completed runs are read again from their files, the
    # history goes on from the checkpoint's rows and the best-model record from their best
    config["train"]["online"]["optimizer_steps"] = 16
    resumed = run_cli(["online", "--config", str(write_config(tmp_path, config))], ranks=2, timeout=300)
    again = json.loads(resumed.stdout.strip().splitlines()[-1])["online"]
    assert (again["resumed_from_step"], again["steps"]) == (12, 16) and again["samples"]["arrived"] == 42
    continued = json.loads((work / "train" / "metrics.json").read_text())
    assert [row["step"] for row in continued] == [4, 8, 12, 16] and continued[:3] == history
    kept, _ = online_record(tmp_path)
    best = min(continued, key=lambda row: (row["val_loss"], row["step"]))
    assert (kept["kept"]["unit"], kept["kept"]["best_step"], kept["kept"]["steps_trained"]) == (
        "step",
        best["step"],
        4,
    )
    # one training rank
    assert kept["steps"] == 16 and kept["hosts"] and kept["spatial"] == {"ranks_per_sample": 1, "groups": 1}


@SLOW
def test_a_stream_whose_writer_dies_is_retried_without_duplicates_on_three_ranks(tmp_path):
    config = online_config(
        tmp_path,
        source="stream",
        runs=4,
        samples=4,
        optimizer_steps=6,
        validate_every_steps=3,
        validation_every_run=0,
        buffer={"capacity": 64, "watermark": 4},
    )
    config = failing_simulator(tmp_path, config, fail="", die="run-000002")
    path = write_config(tmp_path, config)
    result = run_cli(["online", "--config", str(path)], ranks=3, timeout=300)
    summary = json.loads(result.stdout.strip().splitlines()[-1])
    _, runs = online_record(tmp_path)
    assert [r["status"] for r in runs] == ["ok"] * 4 and runs[2]["attempts"] == 2
    # the dead attempt's 2 steps were kept, the retry's same steps skipped: 4 samples, not 6
    assert [r["samples_sent"] for r in runs] == [4] * 4
    assert summary["online"]["samples"]["arrived"] == 16 and summary["ensemble"]["ok"] == 4
    assert summary["online"]["source"] == "stream" and summary["online"]["errors"] == []
    assert sorted(p.name for p in (tmp_path / "work" / "raw" / "00000" / "run-000002").iterdir()) == [
        "written.json"
    ]


@SLOW
@pytest.mark.parametrize("source", ["stream", "runs"])
def test_an_attempt_that_fails_cleanly_is_retried_and_read_once(tmp_path, source):
    """A simulator that raises inside its `with adios2.Stream` (the stream ends cleanly) and one that exits
    non-zero after closing its output: both retried, the retry's samples read, nothing twice."""
    config = online_config(
        tmp_path,
        source=source,
        runs=4,
        samples=4,
        optimizer_steps=4,
        validate_every_steps=2,
        validation_every_run=0,
        buffer={"capacity": 64, "watermark": 4},
    )
    config["train"]["keep"] = "last"  # no validation runs
    config["simulate"]["run_timeout_s"] = 40
    config = failing_simulator(tmp_path, config, fail="", die="run-000001:raise,run-000002:exit")
    result = run_cli(["online", "--config", str(write_config(tmp_path, config))], ranks=3, timeout=300)
    summary = json.loads(result.stdout.strip().splitlines()[-1])
    _, runs = online_record(tmp_path)
    assert [r["status"] for r in runs] == ["ok"] * 4 and [r["attempts"] for r in runs] == [1, 2, 2, 1]
    assert [r["samples_sent"] for r in runs] == [4] * 4 and summary["online"]["samples"]["arrived"] == 16
    assert summary["online"]["errors"] == [] and summary["ensemble"]["ok"] == 4


@SLOW
def test_a_campaign_smaller_than_the_watermark_trains_on_what_arrived(tmp_path):
    """6 runs of one sample each never fill the watermark (8): once the simulations end the trainers go on
    with the 5 training samples, in batches of up to 4, each sample drawn max_reuse (2) times, and say so."""
    config = online_config(
        tmp_path,
        runs=6,
        samples=1,
        optimizer_steps=40,
        validate_every_steps=5,
        validation_every_run=5,
        buffer={"capacity": 32, "watermark": 8, "max_reuse": 2},
    )
    run_cli(["online", "--config", str(write_config(tmp_path, config))], ranks=2, timeout=300)
    summary, runs = online_record(tmp_path)
    online = summary["online"]
    assert online["samples"]["arrived"] == 5 and online["samples"]["validation"] == 1
    assert (
        online["stopped"]
        == "the simulations ended and a training rank's buffer has nothing left to draw (max_reuse)"
    )
    # 5 samples x 2 uses = 10 draws: two full batches of 4, then the 2 left in one or two short ones
    assert online["steps"] in (3, 4) and online["samples"]["draws"] == 10
    assert online["short_batches"] == online["steps"] - 2
    history = json.loads((tmp_path / "work" / "train" / "metrics.json").read_text())
    assert history[-1]["step"] == online["steps"] and history[-1]["short_batches"] == online["short_batches"]
    assert (tmp_path / "work" / "train" / "learning_curves.png").exists() and summary["r2"]
    assert sum(r["times_trained"] for r in runs) == 10


def test_a_design_too_small_to_hold_a_run_out_is_a_config_error_before_any_run(tmp_path):
    from pipeline.online.job import check_supply

    config = online_config(tmp_path, validation_every_run=5)
    with pytest.raises(
        Sim2dlError, match=r"'train.online.validation_every_run': every 5th run .* has 3 runs"
    ):
        check_supply(config, 3)
    check_supply(config, 5)  # run-000004 is held out
    check_supply(online_config(tmp_path, validation_every_run=0), 1)


def test_refused_csv_is_keyed_like_the_runs_table(tmp_path):
    """refused.csv names a run as the runs table does (run-000002, not its index 2), in run order, and
    online_runs.parquet adds the per-run counts to the ensemble's table row for row."""
    import pyarrow as pa

    from pipeline.data.tables import read_csv
    from pipeline.online.producer import ProducerCounts
    from pipeline.online.tables import write_online_runs

    runs = pa.table({"run": [f"run-{k:06d}" for k in range(4)], "status": ["ok"] * 4})
    pq.write_table(runs, tmp_path / "runs.parquet")
    produced = ProducerCounts(4)
    produced.sent[:] = [3, 2, 3, 3]
    produced.refused[2] = 1
    produced.reasons += [
        (2, "/raw/00000/run-000002/stream step 1", "field 'density': shape (8,), expected (4,)")
    ]
    counts = {
        "added": np.array([3, 2, 0, 3]),
        "dropped": np.zeros(4, int),
        "drawn": np.array([5, 4, 0, 6]),
        "validation": np.array([0, 0, 3, 0]),
    }
    table = pq.read_table(
        write_online_runs(tmp_path / "runs.parquet", tmp_path, counts, [produced])
    ).to_pylist()
    assert [r["run"] for r in table] == runs.column("run").to_pylist()
    assert [r["samples_sent"] for r in table] == [3, 2, 3, 3] and table[2]["samples_refused"] == 1
    for r in table:  # sent = buffered + dropped + validation
        assert (
            r["samples_sent"]
            == r["samples_buffered"] + r["samples_dropped_by_buffer"] + r["validation_samples"]
        )
    assert read_csv(tmp_path / "refused.csv") == [
        {
            "run": "run-000002",
            "source": "/raw/00000/run-000002/stream step 1",
            "reason": "field 'density': shape (8,), expected (4,)",
        }
    ]

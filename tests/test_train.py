"""train with real Horovod ranks: size, identical weights, learning, resume after a kill, config errors."""

import json
import os
import shutil
import time
from pathlib import Path

import pytest

from pipeline.storage.fsutil import file_checksum

from .conftest import (
    SLOW,
    SMALL_TRAINING,
    kill_tree,
    make_config,
    run_cli,
    small_cube_config,
    start_cli,
    write_config,
)
from .helpers import board_events


def train(tmp_path, staged, ranks=2, check=True, **settings):
    _, config = staged
    tmp_path.mkdir(parents=True, exist_ok=True)
    config = {**config, "train": {**config["train"], **settings}}
    path = write_config(tmp_path, config)
    args = ["train", "--config", str(path), "--out", str(tmp_path / "train")]
    return run_cli(args, ranks=ranks, check=check, timeout=600)


def test_two_ranks_learn_with_identical_weights_and_stage_purged_node_local_files_again(tmp_path, staged):
    # node-local storage purged between the stage job and the train job: train stages again itself
    data, _ = staged
    summary = json.loads((data / "work" / "staged" / "summary.json").read_text())
    node = summary["node_dirs"][0]
    victim = sorted(p for p in os.listdir(node) if p.endswith(".tfrecord"))[0]
    before = file_checksum(os.path.join(node, victim))
    os.remove(os.path.join(node, victim))
    proc = train(tmp_path, staged)
    assert "staging again" in proc.stderr
    assert file_checksum(os.path.join(node, victim)) == before
    restaged = json.loads((tmp_path / "train" / "restaged.json").read_text())
    # all but the victim and staged.json
    assert restaged["skipped_already_staged"] == len(os.listdir(node)) - 2
    assert restaged["bytes_read_shared_fs"] == os.path.getsize(os.path.join(node, victim))
    lines = [json.loads(line) for line in proc.stderr.splitlines() if line.startswith("{")]
    assert next(line for line in lines if "train" in line)["train"]["ranks"] == 2
    assert sorted(line["rank"] for line in lines if "device" in line) == [0, 1]  # each rank logs its device
    out = proc.stdout.strip().splitlines()  # stdout: only the step's summary; progress went to stderr
    assert len(out) == 1 and json.loads(out[0])["step"] == "train"
    summary = json.loads((tmp_path / "train" / "summary.json").read_text())
    assert summary["ranks"] == 2 and summary["weights_identical_across_ranks"]
    # train.device auto on a machine without GPUs: each rank says it used the CPU, and why
    assert [(d["kind"], d["reason"], d["precision"]) for d in summary["devices"]] == [
        ("cpu", "no GPU visible", "float32")
    ] * 2
    history = json.loads((tmp_path / "train" / "metrics.json").read_text())
    assert [h["epoch"] for h in history] == [1, 2, 3]
    assert history[-1]["loss"] < history[0]["loss"]
    assert all(0 <= h["input_wait_fraction"] < 1 and h["samples_per_s"] > 0 for h in history)
    for name in ("metrics.csv", "learning_curves.png", "scores.png", "model/saved_model.pb"):
        assert (tmp_path / "train" / name).exists(), name
    assert set(summary["r2"]) == {"sigma_8", "n_s", "omega_m"} and summary["task"] == "regression"
    # R² against numpy: the saved model on the records train held out (the same hash of the sample id)
    import numpy as np
    import tensorflow as tf

    from pipeline.data.splits import holdout_validation

    from .helpers import tfrecord_dataset

    data, _ = staged
    records = list(tfrecord_dataset(data / "work" / "merged").as_numpy_iterator())
    held = holdout_validation(np.array([r["sample_id"] for r in records], dtype=object), 0.1).numpy()
    x = np.stack([r["density"] for r, h in zip(records, held, strict=True) if h])[..., np.newaxis]
    y = np.stack([r["params"] for r, h in zip(records, held, strict=True) if h]).astype(np.float64)
    predicted = tf.keras.models.load_model(str(tmp_path / "train" / "model"), compile=False).predict(
        x, verbose=0
    )
    r2 = 1 - ((predicted - y) ** 2).sum(0) / ((y - y.mean(0)) ** 2).sum(0)
    assert summary["validation_records"] == len(y)
    # no test split: the scores are on the split that chose the kept epoch, and the summary says so
    assert (
        summary["scored_on"] == "validation"
        and "merge.splits: {train, validation, test}" in summary["scores_note"]
    )
    assert [summary["r2"][name] for name in ("sigma_8", "n_s", "omega_m")] == pytest.approx(
        r2.tolist(), abs=1e-4
    )


@SLOW
def test_killed_after_an_epoch_resumes_from_its_checkpoint(tmp_path, staged):
    _, config = staged
    config = {**config, "train": {**config["train"], "epochs": 6}}
    path = write_config(tmp_path, config)
    out = tmp_path / "train"
    proc = start_cli(["train", "--config", str(path), "--out", str(out)], 2)
    metrics = out / "metrics.json"
    deadline = time.monotonic() + 300
    while time.monotonic() < deadline and not (
        metrics.exists() and len(json.loads(metrics.read_text())) >= 2
    ):
        time.sleep(0.1)
    kill_tree(proc)
    done = len(json.loads(metrics.read_text()))
    assert 2 <= done < 6, "training was not interrupted between epochs"
    assert not (out / "summary.json").exists()
    # `sim2dl status` on the workflow stopped half way: the data steps done (the session's, linked in), no
    # search, training interrupted at its last epoch of 6, its best validation loss, the time it would take
    work = tmp_path / "work"
    work.mkdir()
    for step in ("raw", "ingest", "convert", "merged", "staged"):
        (work / step).symlink_to(Path(config["workdir"]) / step)
    (work / "train").symlink_to(out)
    shown = run_cli(["status", str(work), "--json"], ranks=None)  # no MPI: beside a running job
    steps = {s["step"]: s for s in json.loads(shown.stdout)["steps"]}
    assert [s["state"] for s in steps.values()] == ["done"] * 5 + ["not started", "running"]
    history = json.loads(metrics.read_text())
    assert (
        steps["merge"]["records"]
        == json.loads((work / "merged" / "metadata.json").read_text())["counts"]["records"]
    )
    train_state = steps["train"]
    assert (train_state["unit"], train_state["at"], train_state["of"]) == ("epoch", done, 6)
    assert train_state["best_val_loss"] == min(h["val_loss"] for h in history) and train_state["eta_s"] > 0
    text = run_cli(["status", str(work)], ranks=None).stdout
    assert f"epoch {done}/6, best val_loss" in text and "left" in text and "tensorboard --logdir" in text

    rerun = run_cli(["train", "--config", str(path), "--out", str(out)], ranks=2, timeout=600)
    start = json.loads(next(line for line in rerun.stderr.splitlines() if line.startswith('{"train"')))
    resumed_from = start["train"]["resume_from_epoch"]
    assert resumed_from >= done - 1 >= 1  # a checkpoint per epoch; the last may be cut
    continued = json.loads(metrics.read_text())
    assert [h["epoch"] for h in continued] == [1, 2, 3, 4, 5, 6]
    # the history goes on from the checkpoint's rows
    assert continued[:resumed_from] == history[:resumed_from]
    summary = json.loads((out / "summary.json").read_text())
    best = min(continued, key=lambda h: (h["val_loss"], h["epoch"]))  # the kept record over both runs' epochs
    assert (summary["kept"]["best_epoch"], summary["kept"]["epochs_trained"]) == (best["epoch"], 6)
    assert summary["weights_identical_across_ranks"]
    # another learning rate is another run: its checkpoints (of the old settings) are not resumed
    # (one rank, one epoch: neither is part of what a checkpoint must match, so only the rate differs)
    changed = write_config(
        tmp_path, {**config, "train": {**config["train"], "learning_rate": 0.004, "epochs": 1}}
    )
    afresh = run_cli(["train", "--config", str(changed), "--out", str(out)], ranks=1, timeout=600)
    assert "starting afresh" in afresh.stderr and '"resume_from_epoch": 0' in afresh.stderr


@pytest.mark.parametrize(
    ("change", "message"),
    [
        ({"model": "resnet"}, "config key 'train.model': unknown model 'resnet'"),
        ({"learning_rate": 5.0}, "config key 'train.learning_rate': 5.0 is not in (0, 1)"),
        ({"device": "gpu"}, "config key 'train.device': gpu, but local rank 0 sees no GPU"),
        (
            {"population": {"enabled": True, "trainers": 2, "mutate": {"dropout": [0.5]}}},
            "config key 'train.population.mutate.dropout': train.dropout cannot change during training",
        ),
    ],
)
def test_config_errors_before_training_starts(tmp_path, staged, change, message):
    proc = train(tmp_path, staged, check=False, **change)
    assert proc.returncode != 0 and message in proc.stderr
    assert not (tmp_path / "train").exists()


@SLOW
def test_the_same_config_trains_to_the_same_weights_twice_and_another_seed_does_not(tmp_path, staged):
    """train.deterministic (default): two runs of one config on 2 ranks give bit-identical weights (the
    second with train.device cpu, which hides GPUs and changes nothing else), augmented batches included;
    another train.seed gives other weights, and the same seed warm-started from the first run's kept model
    (train.warm_start) starts from exactly those weights."""

    def trained(name, **settings):
        train(tmp_path / name, staged, epochs=1, **settings)
        return json.loads((tmp_path / name / "train" / "summary.json").read_text())

    # with train.augment (random symmetries of every batch): the draws repeat with the seed too
    augment = {"augment": {"symmetries": True}}
    first, again = trained("a", **augment), trained("b", device="cpu", **augment)
    other = trained("c", seed=7, **augment)
    assert first["weights_checksum"] == again["weights_checksum"]
    assert first["val_loss"] == again["val_loss"]
    assert [d["cuda_visible_devices"] for d in again["devices"]] == ["", ""]
    assert other["weights_checksum"] != first["weights_checksum"]
    assert first["warm_start"] is None and (tmp_path / "a" / "train" / "weights.npz").is_file()
    # train.warm_start: the same seed's run, started from run a's kept model instead of its initialisation
    warm = trained("w", seed=7, warm_start=str(tmp_path / "a" / "train"), **augment)
    assert warm["warm_start"]["checksum"] == first["weights_checksum"]
    assert warm["weights_checksum"] not in (first["weights_checksum"], other["weights_checksum"])


@SLOW
def test_trace_family_trains_a_sequence_model_with_length_buckets(tmp_path):
    config = make_config(
        tmp_path,
        simulate={
            "family": "trace",
            "runs": 96,
            "trace": {"min_length": 10, "max_length": 300, "channels": 4},
        },
        source={
            "fields": {
                "trace": {"path": "trace", "dtype": "float32", "shape": [None, 4]},
                "params": {"path": "params", "dtype": "float32", "shape": [3]},
            }
        },
        convert={
            "features": ["trace"],
            "labels": ["params"],
            "log1p": [],
            "normalise": ["trace", "params"],
            "per_channel": ["params"],
        },
        stage={"target": str(tmp_path / "local")},
        train={**SMALL_TRAINING, "model": "sequence", "epochs": 2, "length_buckets": [32, 128]},
    )
    path = write_config(tmp_path, config)
    for step in ("simulate", "ingest", "convert", "merge", "stage", "train"):
        run_cli([step, "--config", str(path)], ranks=2, timeout=600)
    summary = json.loads((tmp_path / "work" / "train" / "summary.json").read_text())
    assert summary["weights_identical_across_ranks"] and summary["validation_records"] > 0
    history = json.loads((tmp_path / "work" / "train" / "metrics.json").read_text())
    assert len(history) == 2 and all(h["loss"] > 0 for h in history)


def test_cosmoflow_model_refuses_variable_length_records(tmp_path, staged):
    proc = train(tmp_path, staged, check=False, model="sequence")
    assert proc.returncode != 0 and "model 'sequence' needs (length, channels) records" in proc.stderr


@SLOW
@pytest.mark.parametrize("mode", ["replica", "sample"])
def test_splits_train_on_train_validate_on_validation_and_score_on_a_test_split_nothing_selects_on(
    tmp_path, mode
):
    """merge.splits {train, validation, test}: training reads train, keep-best and patience read
    validation, and the headline scores (network and baseline) are the test split's. Changing only the
    test records (replica mode: the staged test shards replaced by a validation shard) changes the test
    scores and nothing else: the same weights, the same kept epoch, the same validation loss."""
    config = small_cube_config(
        tmp_path,
        train={**SMALL_TRAINING, "epochs": 2 if mode == "replica" else 1},
        merge={"splits": {"train": 0.6, "validation": 0.2, "test": 0.2}, "shard_size_mb": 0.1},
        stage={"mode": mode, "samples_per_rank": 40},
    )
    path = write_config(tmp_path, config)
    for step in ("simulate", "ingest", "convert", "merge", "stage"):
        run_cli([step, "--config", str(path)], ranks=2)
    meta = json.loads((tmp_path / "work" / "merged" / "metadata.json").read_text())
    splits = meta["splits"]
    assert sum(splits[name]["records"] for name in ("train", "validation", "test")) == 96
    assert splits["validation"]["shards"] >= 2 and splits["test"]["records"] > 0

    def trained(out):
        proc = run_cli(["train", "--config", str(path), "--out", str(out)], ranks=2, timeout=600)
        start = next(json.loads(line) for line in proc.stderr.splitlines() if line.startswith('{"train"'))[
            "train"
        ]
        return start, json.loads((out / "summary.json").read_text())

    start, summary = trained(tmp_path / "train")
    # every validation and test record once (their shards dealt to the ranks), none held out of the training
    # files
    assert summary["scored_on"] == "test" and "scores_note" not in summary
    assert summary["validation_records"] == splits["validation"]["records"]
    assert summary["test_records"] == splits["test"]["records"]
    assert set(summary["validation"]["r2"]) == set(summary["r2"]) == {"sigma_8", "n_s", "omega_m"}
    assert set(summary["baseline"]["validation"]["r2"]) == set(summary["baseline"]["r2"])
    if mode == "sample":
        assert start["train_records_per_rank"] == 40
        return
    assert 0 < start["train_records_per_rank"] < splits["train"]["records"]
    assert summary["weights_identical_across_ranks"] and (tmp_path / "train" / "scores.png").exists()
    # only the test records change: every staged test shard becomes a copy of a validation shard
    node_dir = Path(json.loads((tmp_path / "work" / "staged" / "summary.json").read_text())["node_dirs"][0])
    staged_files = json.loads((node_dir / "staged.json").read_text())["files"]
    tests = [name for name in staged_files if name.startswith("test/")]
    source = next(name for name in staged_files if name.startswith("validation/"))
    for name in tests:
        shutil.copyfile(node_dir / source, node_dir / name)
    _, changed = trained(tmp_path / "changed")
    for key in ("weights_checksum", "val_loss", "kept", "validation"):
        assert changed[key] == summary[key], key
    assert changed["baseline"]["validation"] == summary["baseline"]["validation"]
    # chosen within the training split
    assert changed["baseline"]["penalty"] == summary["baseline"]["penalty"]
    shard_records = next(s["records"] for s in meta["shards"] if s["file"].endswith(Path(source).name))
    assert changed["test_records"] == len(tests) * shard_records
    assert changed["r2"] != summary["r2"] and changed["baseline"]["r2"] != summary["baseline"]["r2"]


@SLOW
def test_the_best_epoch_is_kept_beside_a_classical_baseline_and_augmented_runs_repeat(tmp_path, staged):
    """train.keep best (the default): the saved model and the summary are the epoch of lowest validation
    loss; keep last, on the same checkpoint, the last epoch's. The ridge baseline stands beside every R²,
    and where the network is below it the log says so. (That augmented runs repeat to the bit: the
    determinism test.)"""
    # a learning rate too high for this small network: the validation loss rises after its best epoch
    # (the runs are deterministic, so this holds every time)
    # train.patience 1: training stops the epoch after the best, when the validation loss first rises
    noisy = {
        "epochs": 6,
        "learning_rate": 0.02,
        "decay": "none",
        "augment": {"symmetries": True},
        "patience": 1,
    }
    proc = train(tmp_path, staged, **noisy)
    history = json.loads((tmp_path / "train" / "metrics.json").read_text())
    summary = json.loads((tmp_path / "train" / "summary.json").read_text())
    best = min(history, key=lambda row: row["val_loss"])
    assert best["epoch"] < history[-1]["epoch"] < 6, history
    assert summary["kept"]["stopped_early_after_epoch"] == len(history) == best["epoch"] + 1
    assert "(train.patience): stopping after epoch" in proc.stderr
    assert summary["kept"]["epoch"] == summary["kept"]["best_epoch"] == best["epoch"], summary["kept"]
    assert summary["val_loss"] == pytest.approx(best["val_loss"], rel=1e-5)
    assert list((tmp_path / "train" / "checkpoints").glob("best-epoch-*.npy")) == [
        tmp_path / "train" / "checkpoints" / f"best-epoch-{best['epoch']:05d}.npy"
    ]
    baseline = summary["baseline"]
    assert baseline["method"].startswith("ridge regression on per-channel mean") and set(
        baseline["r2"]
    ) == set(summary["r2"])
    assert baseline["r2"]["sigma_8"] > 0.5  # the power spectrum knows σ8 of these cubes
    below = [n for n, r2 in summary["r2"].items() if r2 < baseline["r2"][n] - 0.02]  # finish.BELOW_MARGIN
    assert sorted(summary["below_baseline"]) == sorted(below)
    assert below and "the network scores below the classical baseline" in proc.stderr
    # TensorBoard (train.tensorboard, on by default), read back with its own reader: a point per epoch of
    # every history column and of each label's validation R², the baseline as a line over the epochs
    board = board_events(tmp_path / "train" / "tensorboard" / "train")["scalars"]
    epochs = [row["epoch"] for row in history]
    for column in ("loss", "val_loss", "learning_rate", "samples_per_s", "input_wait_fraction"):
        assert board[column] == pytest.approx({row["epoch"]: row[column] for row in history}, rel=1e-5), (
            column
        )
    assert sorted(board["validation/r2/sigma_8"]) == epochs
    # the headline scores are validation's without a test split
    validation = summary.get("validation", summary)
    assert board["validation/r2/sigma_8"][best["epoch"]] == pytest.approx(validation["r2"]["sigma_8"])
    line = baseline.get("validation", baseline)["r2"]["omega_m"]
    assert board["baseline/r2/omega_m"] == pytest.approx({1: line, epochs[-1]: line})
    if "test_loss" in summary:  # the test split's scores once, at the last epoch
        assert board["test/r2/sigma_8"] == pytest.approx({epochs[-1]: summary["r2"]["sigma_8"]})
    # keep: last, the same checkpoint (which epoch is kept is not a training setting; the epochs trained):
    # the last epoch's
    train(tmp_path, staged, **{**noisy, "epochs": len(history)}, keep="last")
    last = json.loads((tmp_path / "train" / "summary.json").read_text())
    assert last["kept"]["epoch"] == history[-1]["epoch"] and last["kept"]["best_epoch"] == best["epoch"]
    assert last["val_loss"] == pytest.approx(history[-1]["val_loss"], rel=1e-5)


def test_an_empty_training_or_validation_split_is_a_config_error_naming_the_key():
    """A few files split by file can leave a split empty: an error before any data is read, not a crash."""
    from pipeline import Sim2dlError
    from pipeline.training.session import check_settings

    meta = {
        "format": "tfrecord",
        "counts": {"records": 150},
        "splits": {"train": {"records": 150}, "validation": {"records": 0}, "test": {"records": 0}},
    }
    with pytest.raises(
        Sim2dlError, match=r"'merge.splits': the validation split holds none of the 150 records"
    ):
        check_settings({"learning_rate": 0.001}, meta, None)

"""Spatial parallelism (train.spatial.split): the layout and its config checks; the split cosmoflow model's
outputs and gradients against the unsplit model on real Horovod ranks (S = 2 and 4, and 2 groups of 2);
training split across 2 ranks against unsplit on 1 (same batches: the same loss curve)."""

from __future__ import annotations

import json
import sys

import pytest

from pipeline import Sim2dlError
from pipeline.training.spatial.layout import SpatialLayout, check_spatial, split_levels

from .conftest import MPIEXEC, REPO, env, make_config, run_cli, write_config

SMALL = {"epochs": 2, "batch_size": 8, "depth": 2, "width": 4, "dense": 16, "learning_rate": 0.002}


def test_layout_groups_slabs_and_neighbours():
    layouts = [SpatialLayout(2, 6, r) for r in range(6)]
    assert [(s.group, s.spatial_rank) for s in layouts] == [(0, 0), (0, 1), (1, 0), (1, 1), (2, 0), (2, 1)]
    assert layouts[0].spatial_sets() == [[0, 1], [2, 3], [4, 5]] and layouts[0].groups == 3
    four = [SpatialLayout(4, 4, r) for r in range(4)]
    assert [s.slab(32) for s in four] == [(0, 8), (8, 16), (16, 24), (24, 32)]
    assert [s.neighbours() for s in four] == [(None, 1), (0, 2), (1, 3), (2, None)]


def test_levels_stay_split_while_slabs_are_even():
    assert split_levels(32, 1, 3) == 0  # no split
    assert split_levels(32, 2, 3) == 3  # 16, 8, 4: all even
    assert split_levels(32, 4, 4) == 3  # 8, 4, 2, then 1 is odd: gathered before the fourth level
    assert split_levels(24, 4, 3) == 1  # 6, then 3


def test_bad_splits_are_config_errors_naming_the_value():
    with pytest.raises(Sim2dlError, match=r"'train.spatial.split': 3 does not divide train's 4 ranks"):
        check_spatial(3, 4, (32, 32, 32, 1), "cosmoflow", True)
    with pytest.raises(Sim2dlError, match=r"'train.spatial.split': 4 does not divide the samples' depth"):
        check_spatial(4, 4, (30, 32, 32, 1), "cosmoflow", True)
    with pytest.raises(Sim2dlError, match=r"slabs of 1 planes are thinner"):
        check_spatial(4, 4, (4, 32, 32, 1), "cosmoflow", True)
    for model in ("unet2d", "my_model.py:build"):
        with pytest.raises(Sim2dlError, match=rf"'train.spatial.split': 2, but model '{model}' cannot be split"):
            make_config_with(model)
    check_spatial(1, 3, (5, 5, 5, 1), "dense", False)  # no split: nothing to check


def make_config_with(model: str) -> None:
    import tempfile
    from pathlib import Path

    with tempfile.TemporaryDirectory() as tmp:
        make_config(Path(tmp), train={"model": model, "spatial": {"split": 2}})


# S = 4 over all 4 ranks (Horovod's global set, both kinds of edge rank) and 2 groups of S = 2 (a process
# set per group, two groups exchanging halos at once)
@pytest.mark.parametrize(("ranks", "split"), [(4, 4), (4, 2)], ids=["S4", "S2x2groups"])
def test_split_model_equals_the_unsplit_model_in_outputs_and_every_gradient(tmp_path, ranks, split):
    """Forward outputs and the gradient of every layer (as Horovod's average hands it to the optimizer)
    against the unsplit model on the same whole samples: within 1e-5, or within twice what float32 itself
    gives when the same terms are summed in another order (the first convolution's bias sums every
    position of the sample)."""
    import subprocess

    out = tmp_path / "report.json"
    program = REPO / "tests" / "programs" / "spatial_equivalence.py"
    cmd = [MPIEXEC, "-n", str(ranks), sys.executable, str(program), str(split), str(out)]
    proc = subprocess.run(cmd, capture_output=True, text=True, env={**env(), "PYTHONPATH": str(REPO)}, timeout=300)
    assert proc.returncode == 0, proc.stderr[-3000:]
    reports = json.loads(out.read_text())
    assert len(reports) == ranks
    for report in reports:
        assert report["split_layers"] >= 2 and report["gathers"] == 1
        assert report["output_error"] <= 1e-5, report
        for name, figures in report["gradients"].items():
            assert figures["error"] <= max(1e-5, 2 * figures["floor"]), (report["rank"], name, figures)
        kernels = [f["error"] for n, f in report["gradients"].items() if "kernel" in n]
        assert max(kernels) <= 1e-5
    assert len({json.dumps(r["gradients"], sort_keys=True) for r in reports}) == 1  # the same update everywhere


@pytest.fixture(scope="module")
def staged_small(small_cubes):
    tmp, config = small_cubes
    return tmp, {**config, "train": {**config["train"], **SMALL}}


def train_run(tmp_path, staged, ranks, check=True, **settings):
    _, config = staged
    tmp_path.mkdir(parents=True, exist_ok=True)
    search = {**config["search"], "enabled": False}  # the demo's search would run trials of 1 rank
    path = write_config(tmp_path, {**config, "train": {**config["train"], **settings}, "search": search})
    return run_cli(["train", "--config", str(path), "--out", str(tmp_path / "train")], ranks=ranks, check=check,
                   timeout=600)  # fmt: skip


def test_training_split_over_two_ranks_follows_the_unsplit_loss_curve(tmp_path, staged_small):
    """One group either way, so both runs see the same batches in the same order: the split run's losses
    equal the unsplit run's to float32 rounding, and the saved model takes whole samples."""
    train_run(tmp_path / "whole", staged_small, ranks=1)
    train_run(tmp_path / "split", staged_small, ranks=2, spatial={"split": 2})
    whole = json.loads((tmp_path / "whole" / "train" / "summary.json").read_text())
    split = json.loads((tmp_path / "split" / "train" / "summary.json").read_text())
    assert split["spatial"] == {"split": 2, "groups": 1} and split["weights_identical_across_ranks"]
    assert split["validation_records"] == whole["validation_records"]  # each record counted once
    curves = [json.loads((tmp_path / run / "train" / "metrics.json").read_text()) for run in ("whole", "split")]
    for a, b in zip(*curves, strict=True):
        assert a["loss"] == pytest.approx(b["loss"], rel=1e-3)
        assert a["val_loss"] == pytest.approx(b["val_loss"], rel=1e-3)
    assert curves[0][-1]["loss"] < curves[0][0]["loss"]  # it learned something
    import tensorflow as tf

    model = tf.keras.models.load_model(str(tmp_path / "split" / "train" / "model"), compile=False)
    assert tuple(model.input_shape[1:]) == (16, 16, 16, 1)


def test_a_split_that_does_not_divide_the_ranks_stops_before_any_data_is_read(tmp_path, staged_small):
    proc = train_run(tmp_path, staged_small, ranks=2, check=False, spatial={"split": 4})
    assert proc.returncode != 0
    assert "config key 'train.spatial.split': 4 does not divide train's 2 ranks" in proc.stderr
    assert not (tmp_path / "train" / "checkpoints").exists()


def test_the_spatial_preset_validates_and_splits_each_sample_over_trains_ranks():
    """config/presets/cosmoflow-spatial.yaml as written (its split training runs in the virtual cluster's
    two-node workflow test, and the same layers in the tests above)."""
    import yaml

    from pipeline import config as cfg

    preset = cfg.validate(yaml.safe_load((REPO / "config" / "presets" / "cosmoflow-spatial.yaml").read_text()))
    assert preset["train"]["spatial"]["split"] == 2 and preset["train"]["model"] == "cosmoflow"
    size = preset["simulate"]["cube"]["size"]
    check_spatial(2, 2, (size, size, size, 1), "cosmoflow", True)  # the depth divides, the slabs are thick


def test_ranks_that_share_samples_share_files_on_a_node_or_across_replicas():
    """data_rank: sets within nodes share out their node's files; a set spanning nodes needs every shard on
    every node (replica) and the groups share them out globally; other placements are config errors."""
    from pipeline.steps.train import data_rank

    nodes = [(0, 1, 2, 3), (4, 5, 6, 7)]
    assert [data_rank(SpatialLayout(2, 8, r), nodes, r // 4, "partition") for r in range(8)] == [
        (0, 2), (0, 2), (1, 2), (1, 2), (0, 2), (0, 2), (1, 2), (1, 2)
    ]  # fmt: skip
    assert [data_rank(SpatialLayout(1, 8, r), nodes, r // 4, "partition")[0] for r in range(8)] == [0, 1, 2, 3] * 2
    spanning = [(0,), (1,)]  # one rank per node, S = 2: the set spans both
    assert [data_rank(SpatialLayout(2, 2, r), spanning, r, "replica") for r in range(2)] == [(0, 1), (0, 1)]
    with pytest.raises(Sim2dlError, match=r"stage.mode: replica, not partition"):
        data_rank(SpatialLayout(2, 2, 0), spanning, 0, "partition")


def test_search_trials_must_have_whole_spatial_sets(tmp_path):
    """Each search trial is a training run: with a split, its ranks must be a multiple of it."""
    with pytest.raises(Sim2dlError, match=r"'search.ranks_per_trial': 1, but each trial trains with"):
        make_config(tmp_path, train={"spatial": {"split": 2}}, search={"enabled": True, "ranks_per_trial": 1})
    config = make_config(tmp_path, train={"spatial": {"split": 2}}, search={"enabled": True, "ranks_per_trial": 2})
    assert config["search"]["ranks_per_trial"] == 2
    make_config(tmp_path, train={"spatial": {"split": 2}}, search={"enabled": False})  # no search, no trials

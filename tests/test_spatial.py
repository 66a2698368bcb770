"""Spatial parallelism (train.spatial.ranks_per_sample): the layout and its config checks; the split
cosmoflow model's outputs and gradients against the unsplit model on real Horovod ranks (S = 2 and 4, and 2
groups of 2); training split across 2 ranks against unsplit on 1 (same batches: the same loss curve); slab
shards (merge.slabs): what they hold, and training from them."""

from __future__ import annotations

import json
import sys

import pytest

from pipeline import Sim2dlError
from pipeline.training.spatial.layout import SpatialLayout, check_spatial, split_levels

from .conftest import MPIEXEC, REPO, SLOW, env, make_config, run_cli, write_config

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
    with pytest.raises(
        Sim2dlError, match=r"'train.spatial.ranks_per_sample': 3 does not divide train's 4 ranks"
    ):
        check_spatial(3, 4, (32, 32, 32, 1), "cosmoflow", True)
    with pytest.raises(
        Sim2dlError, match=r"'train.spatial.ranks_per_sample': 4 does not divide the samples' depth"
    ):
        check_spatial(4, 4, (30, 32, 32, 1), "cosmoflow", True)
    with pytest.raises(Sim2dlError, match=r"slabs of 1 planes are thinner"):
        check_spatial(4, 4, (4, 32, 32, 1), "cosmoflow", True)
    for model in ("unet2d", "my_model.py:build"):
        with pytest.raises(
            Sim2dlError, match=rf"'train.spatial.ranks_per_sample': 2, but model '{model}' cannot be split"
        ):
            make_config_with(model)
    check_spatial(1, 3, (5, 5, 5, 1), "dense", False)  # no split: nothing to check


def make_config_with(model: str) -> None:
    import tempfile
    from pathlib import Path

    with tempfile.TemporaryDirectory() as tmp:
        make_config(Path(tmp), train={"model": model, "spatial": {"ranks_per_sample": 2}})


# S = 4 over all 4 ranks (Horovod's global set, both kinds of edge rank) and 2 groups of S = 2 (a process
# set per group, two groups exchanging halos at once)
@SLOW
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
    proc = subprocess.run(
        cmd, capture_output=True, text=True, env={**env(), "PYTHONPATH": str(REPO)}, timeout=300
    )
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
    # the same update everywhere
    assert len({json.dumps(r["gradients"], sort_keys=True) for r in reports}) == 1


@pytest.fixture(scope="module")
def staged_small(small_cubes):
    tmp, config = small_cubes
    return tmp, {**config, "train": {**config["train"], **SMALL}}


def train_run(tmp_path, staged, ranks, check=True, data=(), **settings):
    """Train on the staged data (`data`: --merged DIR --stage-summary FILE of other shards)."""
    _, config = staged
    tmp_path.mkdir(parents=True, exist_ok=True)
    search = {**config["search"], "enabled": False}  # the demo's search would run trials of 1 rank
    path = write_config(tmp_path, {**config, "train": {**config["train"], **settings}, "search": search})
    return run_cli(
        ["train", "--config", str(path), "--out", str(tmp_path / "train"), *data],
        ranks=ranks,
        check=check,
        timeout=600,
    )


@pytest.fixture(scope="module")
def slab_shards(staged_small, tmp_path_factory):
    """The same converted cubes merged with merge.slabs: 2 and staged apart: --merged/--stage-summary."""
    _, config = staged_small
    out = tmp_path_factory.mktemp("slabs")
    path = write_config(
        out,
        {
            **config,
            "merge": {**config["merge"], "slabs": 2},
            "stage": {**config["stage"], "target": str(out / "local")},
        },
    )
    merged, summary = out / "merged", out / "staged.json"
    run_cli(["merge", "--config", str(path), "--out", str(merged)], ranks=2)
    run_cli(["stage", "--config", str(path), "--merged", str(merged), "--summary", str(summary)], ranks=2)
    return merged, ["--merged", str(merged), "--stage-summary", str(summary)]


def test_slab_shards_hold_each_records_planes_in_order_and_labels_whole(staged_small, slab_shards):
    """Each shard as 2 files of the same records in the same order: the feature's bytes of slab 0 then
    slab 1 are the whole record's, labels and ids whole in both; counts as the whole shards."""
    import tensorflow as tf

    from pipeline.formats.slabs import slab_of

    tmp, _ = staged_small
    merged, _ = slab_shards
    whole_meta = json.loads((tmp / "work" / "merged" / "metadata.json").read_text())
    meta = json.loads((merged / "metadata.json").read_text())
    assert meta["slabs"]["count"] == 2 and meta["slabs"]["fields"] == ["density"]
    assert meta["counts"]["shards"] == whole_meta["counts"]["shards"] == len(whole_meta["shards"])
    assert len(meta["shards"]) == 2 * len(whole_meta["shards"])

    def records(path):
        out = []
        for raw in tf.data.TFRecordDataset(str(path)).as_numpy_iterator():
            f = tf.train.Example.FromString(raw).features.feature
            out.append(
                (
                    f["sample_id"].bytes_list.value[0],
                    f["density"].bytes_list.value[0],
                    f["params"].bytes_list.value[0],
                )
            )
        return out

    for shard in whole_meta["shards"]:
        slabs = sorted(
            (s for s in meta["shards"] if slab_of(s["file"])[0] == shard["file"]), key=lambda s: s["slab"]
        )
        assert [s["slab"] for s in slabs] == [0, 1] and all(s["records"] == shard["records"] for s in slabs)
        whole = records(tmp / "work" / "merged" / "shards" / shard["file"])
        parts = [records(merged / "shards" / s["file"]) for s in slabs]
        assert len(whole) == shard["records"]
        for (sid, density, params), (sid0, d0, p0), (sid1, d1, p1) in zip(whole, *parts, strict=True):
            assert sid == sid0 == sid1 and params == p0 == p1
            assert len(d0) == len(d1) == len(density) // 2 and d0 + d1 == density


def test_readers_of_whole_records_refuse_slab_shards_by_name(slab_shards):
    """The Python reader, raw_records and sample-mode staging take whole records: clear errors, not half
    samples."""
    from pipeline.formats.shards.shard_reader import ShardReader
    from pipeline.staging.plan import sample_sources
    from pipeline.training.tfdata import raw_records

    merged, _ = slab_shards
    with pytest.raises(Sim2dlError, match=r"slab files \(merge.slabs\) for spatially split training"):
        ShardReader(merged)
    with pytest.raises(Sim2dlError, match=r"slab files \(merge.slabs\), whose records are parts of samples"):
        raw_records(merged)
    meta = json.loads((merged / "metadata.json").read_text())
    with pytest.raises(
        Sim2dlError, match=r"'stage.mode': 'sample' draws whole records, but merge wrote each shard"
    ):
        sample_sources(merged, meta, None, 4, True, 0)


def test_the_slab_files_names_and_checks():
    from pipeline.formats.slabs import check_slabs, check_split, sibling, slab_name, slab_of, slabs_read

    assert (
        slab_name("train/shard-00001-of-00004.tfrecord", 3, 4)
        == "train/shard-00001-of-00004.slab-3-of-4.tfrecord"
    )
    assert slab_of("train/shard-00001-of-00004.slab-3-of-4.tfrecord") == (
        "train/shard-00001-of-00004.tfrecord",
        3,
        4,
    )
    assert slab_of("shard-00001-of-00004.tfrecord") == ("shard-00001-of-00004.tfrecord", 0, 1)
    from pathlib import Path

    assert (
        sibling(Path("/n/shard-00001-of-00004.slab-0-of-4.tfrecord"), 2).name
        == "shard-00001-of-00004.slab-2-of-4.tfrecord"
    )
    assert list(slabs_read(4, 2, 1)) == [2, 3] and list(slabs_read(4, 1, 0)) == [0, 1, 2, 3]
    assert list(slabs_read(4, 4, 3)) == [3]
    spec = {
        "density": {"dtype": "float32", "shape": [16, 16, 16], "role": "feature"},
        "params": {"dtype": "float32", "shape": [3], "role": "label"},
    }
    check_slabs(4, spec, "tfrecord")
    with pytest.raises(
        Sim2dlError, match=r"'merge.slabs': 3 does not divide the first axis of feature 'density'"
    ):
        check_slabs(3, spec, "tfrecord")
    with pytest.raises(Sim2dlError, match=r"'merge.slabs': 2, but slab shards are written as TFRecord only"):
        check_slabs(2, spec, "hdf5")
    varying = {**spec, "density": {**spec["density"], "shape": [None, 16]}}
    with pytest.raises(Sim2dlError, match=r"does not divide the first axis of feature 'density'"):
        check_slabs(2, varying, "tfrecord")
    with pytest.raises(
        Sim2dlError, match=r"'train.spatial.ranks_per_sample': 4 does not divide the 2 slab files"
    ):
        check_split(2, 4)
    check_split(4, 2)
    check_split(1, 4)


@SLOW
def test_training_split_over_two_ranks_follows_the_unsplit_loss_curve(tmp_path, staged_small, slab_shards):
    """One group either way, so both runs see the same batches in the same order: the split run's losses
    equal the unsplit run's to float32 rounding, and the saved model takes whole samples. The unsplit run
    reads slab shards (merge.slabs: 2), both files of each shard side by side, so its samples are whole
    only if the slabs join up right; a split run from them, each rank reading only its slab's files, gives
    the split run from whole records to 6 digits (the same computation on the same batches). All three
    augment with the symmetries a split allows (train.augment: axes 1 and 2, the split axis 0 stays): each
    rank transforms its slab as the unsplit run transforms the whole sample, drawing the same. The unsplit
    run is the built-in alone (train.hybrid none), as a split model is: no rank holds a whole sample to
    take the baseline's statistics of."""
    _, slab_data = slab_shards
    augment = {"permute": [1, 2], "flips": [1, 2]}
    train_run(tmp_path / "whole", staged_small, ranks=1, data=slab_data, augment=augment, hybrid="none")
    train_run(tmp_path / "split", staged_small, ranks=2, spatial={"split": 2}, augment=augment)
    train_run(
        tmp_path / "slabs-split", staged_small, ranks=2, data=slab_data, spatial={"split": 2}, augment=augment
    )
    whole = json.loads((tmp_path / "whole" / "train" / "summary.json").read_text())
    split = json.loads((tmp_path / "split" / "train" / "summary.json").read_text())
    assert (
        split["spatial"] == {"ranks_per_sample": 2, "groups": 1} and split["weights_identical_across_ranks"]
    )
    assert split["hybrid"] == {
        "mode": "none",
        "why": "train.spatial.ranks_per_sample: no rank holds a whole sample to take its statistics of",
    }
    assert split["validation_records"] == whole["validation_records"]  # each record counted once
    runs = ("whole", "split", "slabs-split")
    curves = [json.loads((tmp_path / run / "train" / "metrics.json").read_text()) for run in runs]
    for a, b, from_slabs in zip(*curves, strict=True):
        assert a["loss"] == pytest.approx(b["loss"], rel=1e-3)
        assert a["val_loss"] == pytest.approx(b["val_loss"], rel=1e-3)
        assert from_slabs["loss"] == pytest.approx(b["loss"], rel=1e-6)
        assert from_slabs["val_loss"] == pytest.approx(b["val_loss"], rel=1e-6)
    assert curves[0][-1]["loss"] < curves[0][0]["loss"]  # it learned something
    import tensorflow as tf

    model = tf.keras.models.load_model(str(tmp_path / "split" / "train" / "model"), compile=False)
    assert tuple(model.input_shape[1:]) == (16, 16, 16, 1)


def test_a_split_that_does_not_divide_the_ranks_stops_before_any_data_is_read(tmp_path, staged_small):
    proc = train_run(tmp_path, staged_small, ranks=2, check=False, spatial={"split": 4})
    assert proc.returncode != 0
    assert "config key 'train.spatial.ranks_per_sample': 4 does not divide train's 2 ranks" in proc.stderr
    assert not (tmp_path / "train" / "checkpoints").exists()


def test_the_spatial_preset_validates_and_splits_each_sample_over_trains_ranks():
    """config/presets/cosmoflow-spatial.yaml as written (its split training runs in the virtual cluster's
    two-node workflow test, and the same layers in the tests above)."""
    import yaml

    from pipeline import config as cfg

    preset = cfg.validate(
        yaml.safe_load((REPO / "config" / "presets" / "cosmoflow-spatial.yaml").read_text())
    )
    assert preset["train"]["spatial"]["ranks_per_sample"] == 2 and preset["train"]["model"] == "cosmoflow"
    size = preset["simulate"]["cube"]["size"]
    check_spatial(2, 2, (size, size, size, 1), "cosmoflow", True)  # the depth divides, the slabs are thick


def test_ranks_that_share_samples_share_files_on_a_node_or_across_replicas():
    """data_rank: sets within nodes share out their node's files; a set spanning nodes needs every shard on
    every node (replica) and the groups share them out globally; other placements are config errors."""
    from pipeline.training.inputs import data_rank

    nodes = [(0, 1, 2, 3), (4, 5, 6, 7)]
    assert [data_rank(SpatialLayout(2, 8, r), nodes, r // 4, "partition") for r in range(8)] == [
        (0, 2),
        (0, 2),
        (1, 2),
        (1, 2),
        (0, 2),
        (0, 2),
        (1, 2),
        (1, 2),
    ]
    assert [data_rank(SpatialLayout(1, 8, r), nodes, r // 4, "partition")[0] for r in range(8)] == [
        0,
        1,
        2,
        3,
    ] * 2
    spanning = [(0,), (1,)]  # one rank per node, S = 2: the set spans both
    assert [data_rank(SpatialLayout(2, 2, r), spanning, r, "replica") for r in range(2)] == [(0, 1), (0, 1)]
    with pytest.raises(Sim2dlError, match=r"stage.mode: replica, not partition"):
        data_rank(SpatialLayout(2, 2, 0), spanning, 0, "partition")


def test_search_trials_must_have_whole_spatial_sets(tmp_path):
    """Each search trial is a training run: with a split, its ranks must be a multiple of it."""
    with pytest.raises(Sim2dlError, match=r"'search.ranks_per_trial': 1, but each trial trains with"):
        make_config(
            tmp_path,
            train={"spatial": {"ranks_per_sample": 2}},
            search={"enabled": True, "ranks_per_trial": 1},
        )
    config = make_config(
        tmp_path, train={"spatial": {"ranks_per_sample": 2}}, search={"enabled": True, "ranks_per_trial": 2}
    )
    assert config["search"]["ranks_per_trial"] == 2


def test_a_split_that_does_not_divide_the_slab_files_is_a_config_error(tmp_path):
    with pytest.raises(
        Sim2dlError, match=r"'train.spatial.ranks_per_sample': 4 does not divide the 2 slab files per shard"
    ):
        make_config(
            tmp_path,
            train={"spatial": {"ranks_per_sample": 4}},
            merge={"slabs": 2},
            search={"enabled": False},
        )
    config = make_config(
        tmp_path, train={"spatial": {"ranks_per_sample": 2}}, merge={"slabs": 4}, search={"enabled": False}
    )
    assert config["merge"]["slabs"] == 4
    # no search, no trials
    make_config(tmp_path, train={"spatial": {"ranks_per_sample": 2}}, search={"enabled": False})

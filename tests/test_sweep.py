"""sweep: points from a grid and from named sections, each a validated config with its own workdir."""

import pytest

from pipeline import Sim2dlError
from pipeline.steps.sweep import point_configs

from .conftest import make_config


def test_grid_points_are_every_combination_with_their_own_workdir(tmp_path):
    config = make_config(
        tmp_path,
        sweep={
            "name": "s",
            "workdir": str(tmp_path / "sw"),
            "grid": {"train.learning_rate": [0.001, 0.01], "merge.shard_size_mb": [4, 16]},
            "points": {"big-batch": {"train": {"batch_size": 64}}},
        },
    )
    points = point_configs(config)
    assert list(points) == [
        "learning_rate=0.001_shard_size_mb=4",
        "learning_rate=0.001_shard_size_mb=16",
        "learning_rate=0.01_shard_size_mb=4",
        "learning_rate=0.01_shard_size_mb=16",
        "big-batch",
    ]
    p = points["learning_rate=0.01_shard_size_mb=4"]
    assert p["train"]["learning_rate"] == 0.01 and p["merge"]["shard_size_mb"] == 4
    assert p["train"]["epochs"] == config["train"]["epochs"]  # the rest of the section is kept
    assert p["workdir"] == str(tmp_path / "sw" / "learning_rate=0.01_shard_size_mb=4") and "sweep" not in p
    assert points["big-batch"]["train"]["batch_size"] == 64


def test_a_bad_point_is_named(tmp_path):
    config = make_config(tmp_path, sweep={"name": "s", "grid": {"merge.shard_size_mb": [4, -1]}})
    named = r"(?s)sweep point 'shard_size_mb=-1': .*config key 'merge\.shard_size_mb': -1"
    with pytest.raises(Sim2dlError, match=named):
        point_configs(config)
    with pytest.raises(Sim2dlError, match="give 'grid'"):
        point_configs(make_config(tmp_path, sweep={"name": "s"}))

import subprocess

import pytest
import yaml

from pipeline import Sim2dlError
from pipeline import config as cfg

from .conftest import REPO, env, make_config


def test_defaults_are_filled_and_demo_config_is_valid():
    config = cfg.load(REPO / "config" / "config.yaml")
    assert config["merge"]["format"] == "tfrecord"
    assert config["stage"]["chunk_mb"] == 2  # default from the schema
    assert config["simulate"]["trace"]["max_length"] == 1000


@pytest.mark.parametrize(
    ("change", "message"),
    [
        (
            {"merge": {"shard_size_mbb": 4}},
            "config key 'merge.shard_size_mbb': unknown key; did you mean 'merge.shard_size_mb'?",
        ),
        (
            {"source": {"fields": {"x": {"path": "x", "shpe": [3]}}}},
            "config key 'source.fields.x.shpe': unknown key; did you mean 'source.fields.x.shape'?",
        ),
        ({"merge": {"shard_size_mb": -1}}, "config key 'merge.shard_size_mb'"),
        ({"merge": {"format": "parquet"}}, "config key 'merge.format'"),
        ({"convert": {"features": ["densty"]}}, "config key 'convert.features': ['densty'] not declared"),
        ({"merge": {"format": "hdf5", "compression": "zlib"}}, "config key 'merge.compression'"),
        ({"simulatte": {}}, "config key 'simulatte': unknown key; did you mean 'simulate'?"),
        (
            {"convert": {"features": ["density", "params"], "labels": []}},
            "config key 'convert.features': ['density', 'params'] are several inputs, but the built-in model",
        ),
        (
            {"convert": {"stack": {"x": ["density", "mass"]}}},
            "config key 'convert.stack.x': ['mass'] not declared",
        ),
        ({"convert": {"stack": {"params": ["density"]}}}, "config key 'convert.stack.params'"),
        (
            {
                "source": {"fields": {"t": {"path": "t", "missing": "mask"}}},
                "convert": {
                    "features": ["t"],
                    "labels": ["t_mask"],
                    "normalise": ["t_mask"],
                    "log1p": [],
                    "per_channel": [],
                },
            },
            "config key 'convert.normalise': ['t_mask'] are categorical or masks",
        ),
    ],
)
def test_bad_config_names_the_key(tmp_path, change, message):
    with pytest.raises(Sim2dlError) as err:
        make_config(tmp_path, **change)
    assert message in str(err.value)


def test_cli_rejects_config_typo_before_doing_anything(tmp_path):
    config = yaml.safe_load((REPO / "config" / "config.yaml").read_text())
    config["workdir"] = str(tmp_path / "w")
    config["ingest"]["max_reject_fractoin"] = 0.1
    path = tmp_path / "c.yaml"
    path.write_text(yaml.safe_dump(config))
    proc = subprocess.run(
        ["sim2dl", "simulate", "--config", str(path)], capture_output=True, text=True, env=env()
    )
    assert proc.returncode == 2
    assert (
        "config key 'ingest.max_reject_fractoin': unknown key; did you mean 'ingest.max_reject_fraction'?"
        in proc.stderr
    )
    assert not (tmp_path / "w").exists()


def test_snakemake_rejects_config_typo(tmp_path):
    proc = subprocess.run(
        ["snakemake", "-n", "--cores", "1", "--config", f"workdir={tmp_path}/w", "shard_size_mb=4"],
        capture_output=True,
        text=True,
        env=env(),
        cwd=REPO,
        timeout=120,
    )
    assert proc.returncode != 0
    assert "shard_size_mb" in proc.stdout + proc.stderr


def test_strings_from_snakemake_config_are_coerced(tmp_path):
    config = make_config(
        tmp_path,
        merge={"shard_size_mb": "4"},
        convert={"split": ["16", "16", "16"]},
        ingest={"check_finite": "false"},
    )
    assert config["merge"]["shard_size_mb"] == 4
    assert config["convert"]["split"] == [16, 16, 16]
    assert config["ingest"]["check_finite"] is False
    with pytest.raises(Sim2dlError, match=r"merge\.shard_size_mb"):
        make_config(tmp_path, merge={"shard_size_mb": "four"})

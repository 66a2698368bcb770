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


def test_an_old_key_name_works_for_one_release_with_a_warning_naming_the_new(tmp_path, capsys):
    """Each renamed key (pipeline.config.RENAMED): its old name's value lands under the new name, with a
    warning naming both; the old and the new together are an error naming both; the schema knows the new
    names only."""
    from pipeline.config import RENAMED, schema, validate

    config = make_config(
        tmp_path,
        convert={"split": [16, 16, 16]},
        train={"spatial": {"split": 1}, "next_state": {"inputs": 2, "outputs": 3}, "online": {"steps": 7}},
        simulate={"reaction": {"initial": "random", "steps": 9}, "trace": {"features": 3}},
    )
    assert config["convert"]["subvolume"] == [16, 16, 16] and "split" not in config["convert"]
    assert config["train"]["spatial"] == {"ranks_per_sample": 1}
    assert config["simulate"]["reaction"]["blobs"] == "random"
    assert config["simulate"]["trace"]["channels"] == 3
    assert (config["train"]["next_state"]["states_in"], config["train"]["next_state"]["states_out"]) == (2, 3)
    assert (
        config["train"]["online"]["optimizer_steps"] == 7
        and config["simulate"]["reaction"]["time_steps"] == 9
    )
    # an ensemble's size: a built-in family's samples, or an adaptive design's budget (a section above)
    assert validate({"simulate": {"samples": 12}})["simulate"]["runs"] == 12
    adaptive = validate({"simulate": {"adaptive": {"budget": 40}}})["simulate"]
    assert adaptive["runs"] == 40 and "budget" not in adaptive["adaptive"]
    warned = capsys.readouterr().err
    for old, new in RENAMED.items():
        assert f"config key '{old}' is now '{new}'" in warned
    with pytest.raises(Sim2dlError, match=r"config keys 'convert.split' and 'convert.subvolume'"):
        make_config(tmp_path, convert={"split": [16, 16, 16], "subvolume": [16, 16, 16]})
    with pytest.raises(Sim2dlError, match=r"'simulate.adaptive.budget' and 'simulate.runs'"):
        validate({"simulate": {"runs": 64, "adaptive": {"budget": 40}}})

    def known(key: str) -> bool:
        node = schema()["properties"]
        for name in key.split("."):
            if name not in node:
                return False
            node = node[name].get("properties", {})
        return True

    assert all(known(new) and not known(old) for old, new in RENAMED.items())
    table = (REPO / "docs" / "configuration.md").read_text()  # its table of renamed keys
    assert all(f"| `{old}` | `{new}` |" in table for old, new in RENAMED.items())


def test_an_ensembles_size_is_simulate_runs_whatever_runs_it():
    """simulate.runs left null: 1024 of a built-in family, 100 runs of a command, a budget of 64 with
    simulate.adaptive (the old defaults of simulate.samples, simulate.runs and simulate.adaptive.budget);
    an adaptive budget below its initial design names both keys."""
    from pipeline.config import validate

    def runs(**simulate: object) -> int:  # validate fills the dicts it is given: fresh ones each time
        command = ["sim", "{out}", "{a}"]
        space = {"a": {"type": "uniform", "low": 0, "high": 1}}
        if simulate.pop("adaptive", False):
            simulate["adaptive"] = {"enabled": True, "outputs": ["state"]}
        return validate({"simulate": {"command": command, "space": space, **simulate}})["simulate"]["runs"]

    assert validate({})["simulate"]["runs"] == 1024
    assert (runs(), runs(adaptive=True), runs(adaptive=True, runs=24)) == (100, 64, 24)
    with pytest.raises(Sim2dlError, match=r"'simulate.runs': 8 runs, .* below its initial design's 16"):
        runs(adaptive=True, runs=8)


def test_strings_from_snakemake_config_are_coerced(tmp_path):
    config = make_config(
        tmp_path,
        merge={"shard_size_mb": "4"},
        convert={"subvolume": ["16", "16", "16"]},
        ingest={"check_finite": "false"},
    )
    assert config["merge"]["shard_size_mb"] == 4
    assert config["convert"]["subvolume"] == [16, 16, 16]
    assert config["ingest"]["check_finite"] is False
    with pytest.raises(Sim2dlError, match=r"merge\.shard_size_mb"):
        make_config(tmp_path, merge={"shard_size_mb": "four"})

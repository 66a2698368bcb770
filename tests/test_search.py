"""search: hpbandster BOHB with HMAC-protected Pyro4, numpy-safe serialization, real training trials."""

import json
import stat

import numpy as np
import pytest
import yaml

from pipeline.search import config_space, install_hmac_key, listen_host, register_numpy_serializers, run_directory

from .conftest import make_config, run_cli, small_cube_config, write_config


@pytest.fixture
def secured(tmp_path):
    key = run_directory(tmp_path / "run")
    register_numpy_serializers()
    install_hmac_key(key)
    return tmp_path / "run", key


def test_run_directory_is_private(secured):
    run_dir, key = secured
    assert stat.S_IMODE(run_dir.stat().st_mode) == 0o700
    assert stat.S_IMODE((run_dir / "hmac.key").stat().st_mode) == 0o600
    assert len(key) == 64 and run_directory(run_dir) == key  # kept across restarts


def test_bohb_runs_with_configspace_1_and_numpy_2_and_refuses_clients_without_the_key(secured):
    """The real master, dispatcher, worker and name server; an objective cheap enough for a unit test."""
    import hpbandster.core.nameserver as hpns
    import Pyro4
    import Pyro4.errors
    from hpbandster.core.worker import Worker
    from hpbandster.optimizers import BOHB

    run_dir, _ = secured

    class Quadratic(Worker):
        def compute(self, config_id, config, budget, working_directory):
            # numpy values on purpose: serpent must carry them (ConfigSpace 1.x gives numpy scalars too)
            return {"loss": np.float64((np.log10(config["learning_rate"]) + 2.5) ** 2 / budget), "info": {}}

    host = listen_host("loopback")
    ns = hpns.NameServer(run_id="t", host=host, port=0, working_directory=str(run_dir))
    address = ns.start()
    worker = Quadratic(run_id="t", nameserver=address[0], nameserver_port=address[1], host=host)
    worker.run(background=True)
    space = {
        "learning_rate": {"type": "log-uniform", "low": 1e-4, "high": 1e-1},
        "batch_size": {"type": "choice", "values": [8, 16]},
    }
    bohb = BOHB(
        configspace=config_space(space, 1),
        run_id="t",
        host=host,
        nameserver=address[0],
        nameserver_port=address[1],
        min_budget=1,
        max_budget=9,
        eta=3,
        ping_interval=1,
    )
    try:
        result = bohb.run(n_iterations=2)
        runs = result.get_all_runs()
        assert len(runs) > 10 and all(r.loss is not None for r in runs)
        best = result.get_id2config_mapping()[result.get_incumbent_id()]["config"]
        assert 1e-4 <= best["learning_rate"] <= 1e-1
        for wrong in (None, b"not-the-key"):
            intruder = Pyro4.Proxy(f"PYRO:Pyro.NameServer@{address[0]}:{address[1]}")
            intruder._pyroHmacKey = wrong
            with pytest.raises(Pyro4.errors.CommunicationError, match="hmac"):
                intruder.list()
    finally:
        bohb.shutdown(shutdown_workers=True)
        ns.shutdown()


def test_search_space_names_must_be_train_settings(tmp_path):
    from pipeline import Sim2dlError

    with pytest.raises(Sim2dlError, match=r"'search\.space': \['learning_rat'\] are not train settings"):
        make_config(tmp_path, search={"space": {"learning_rat": {"type": "uniform", "low": 0.1, "high": 0.2}}})


def test_search_trains_real_trials_and_writes_the_best_configuration(tmp_path):
    config = small_cube_config(
        tmp_path,
        train={"batch_size": 8, "depth": 2, "width": 4, "dense": 16},
        search={
            "min_budget": 1,
            "max_budget": 3,
            "eta": 3,
            "iterations": 1,
            "ping_interval_s": 1,
            "space": {
                "learning_rate": {"type": "log-uniform", "low": 0.0003, "high": 0.01},
                "width": {"type": "int", "low": 2, "high": 6},
            },
        },
    )
    path = write_config(tmp_path, config)
    for step in ("simulate", "ingest", "convert", "merge", "stage"):
        run_cli([step, "--config", str(path)], ranks=2)
    proc = run_cli(["search", "--config", str(path)], ranks=2, timeout=900)  # rank 0 master, rank 1 worker
    summary = json.loads(proc.stdout.strip().splitlines()[-1])
    out = tmp_path / "work" / "search"
    trials = [json.loads(line) for line in (out / "trials.jsonl").read_text().splitlines()]
    assert summary["trials"] == len(trials) == 4  # 3 configurations at 1 epoch, the best at 3
    assert sorted(t["budget"] for t in trials) == [1, 1, 1, 3]
    best = yaml.safe_load((out / "best.yaml").read_text())["train"]
    assert set(best) == {"learning_rate", "width"} and 2 <= best["width"] <= 6
    assert (out / "search.png").exists()
    assert stat.S_IMODE((out / "run").stat().st_mode) == 0o700

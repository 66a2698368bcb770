"""search: hpbandster BOHB with HMAC-protected Pyro4, numpy-safe serialization, real training trials."""

import contextlib
import json
import stat
import time

import numpy as np
import psutil
import pytest
import yaml

from pipeline.steps.search import (
    config_space,
    install_hmac_key,
    listen_host,
    register_numpy_serializers,
    run_directory,
    trial_key,
)

from .conftest import kill_tree, make_config, run_cli, start_cli, write_config
from .helpers import board_events


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
        make_config(
            tmp_path, search={"space": {"learning_rat": {"type": "uniform", "low": 0.1, "high": 0.2}}}
        )


SEARCH = {
    "min_budget": 1,
    "max_budget": 3,
    "eta": 3,
    "iterations": 1,
    "ping_interval_s": 1,
    "space": {
        "learning_rate": {"type": "log-uniform", "low": 0.0003, "high": 0.01},
        "model_args.width": {"type": "int", "low": 2, "high": 6},  # a builder's argument, nested in best.yaml
    },
}


@pytest.fixture(scope="module")
def dataset(small_cubes):
    """Small cubes merged and staged once for the session; each test gets its own search directory."""
    _, config = small_cubes
    train = {**config["train"], "batch_size": 8, "depth": 2, "width": 4, "dense": 16}
    return {**config, "train": train, "search": SEARCH}


def search_config(tmp_path, dataset, **search):
    return write_config(tmp_path, {**dataset, "search": {**dataset["search"], **search}})


def read_trials(out):
    return [json.loads(line) for line in (out / "trials.jsonl").read_text().splitlines()]


def test_search_trains_real_trials_and_writes_the_best_configuration(tmp_path, dataset):
    # Hyperband's one bracket at eta 2: 2 configurations at 1 epoch, the better at 2
    path = search_config(tmp_path, dataset, max_budget=2, eta=2)
    out = tmp_path / "search"
    # master + worker
    proc = run_cli(["search", "--config", str(path), "--out", str(out)], ranks=2, timeout=900)
    summary = json.loads(proc.stdout.strip().splitlines()[-1])
    trials = read_trials(out)
    assert summary["trials"] == len(trials) == 3
    assert sorted(t["budget"] for t in trials) == [1, 1, 2]
    best = yaml.safe_load((out / "best.yaml").read_text())["train"]
    assert set(best) == {"learning_rate", "model_args"} and 2 <= best["model_args"]["width"] <= 6
    assert (out / "search.png").exists()
    assert stat.S_IMODE((out / "run").stat().st_mode) == 0o700
    assert not (out / "run" / "nameserver.json").exists()  # withdrawn when the master ends
    # a trial is scored by its validation loss: no classical baseline pass in it (sim2dl train --no-baseline)
    trial_summaries = [json.loads(p.read_text()) for p in (out / "trials").glob("*/train/summary.json")]
    assert len(trial_summaries) == 3 and all(t["baseline"]["method"] is None for t in trial_summaries)
    # its weights and summary, no exported model and no figures: the best configuration is trained again
    assert len(list((out / "trials").glob("*/train/weights.npz"))) == 3
    assert not list((out / "trials").glob("*/train/model")) + list((out / "trials").glob("*/train/*.png"))
    # TensorBoard: each trial a run, its curves beside its hyperparameters (the HParams table's row)
    for trial in trials:
        name = "trial-" + "-".join(str(i) for i in trial["config_id"]) + f"-b{trial['budget']:g}"
        board = board_events(out / "trials" / name / "train" / "tensorboard" / "train")
        assert board["hparams"]["values"]["learning_rate"] == pytest.approx(trial["config"]["learning_rate"])
        assert board["hparams"]["values"]["budget"] == trial["budget"]
        assert board["scalars"]["hparams/val_loss"] == pytest.approx({round(trial["budget"]): trial["loss"]})
        assert sorted(board["scalars"]["val_loss"]) == list(range(1, round(trial["budget"]) + 1))
    # The workflow's hand-off (rules/train.smk): train with best.yaml on top trains that configuration.
    args = [
        "train",
        "--config",
        str(path),
        "--overrides",
        str(out / "best.yaml"),
        "--out",
        str(tmp_path / "train"),
    ]
    trained = json.loads(run_cli(args, ranks=1, timeout=600).stdout.strip().splitlines()[-1])
    assert trained["settings"]["learning_rate"] == pytest.approx(best["learning_rate"])
    assert trained["settings"]["model_args"] == best["model_args"]
    assert trained["baseline"]["method"] is not None  # the workflow's own training has its baseline
    assert (tmp_path / "train" / "model").is_dir() and (tmp_path / "train" / "scores.png").is_file()


def descendants_running(job, word):
    """The processes below a launched job whose command line has `word` (ones that end meanwhile are
    skipped)."""
    found = []
    for p in psutil.Process(job.pid).children(recursive=True):
        with contextlib.suppress(psutil.NoSuchProcess):
            if word in p.cmdline():
                found.append(p)
    return found


def test_killed_and_hung_workers_fail_their_trials_and_a_restarted_master_reuses_the_rest(tmp_path, dataset):
    path = search_config(tmp_path, dataset, workers=3, call_timeout_s=10)
    out = tmp_path / "search"
    base = ["search", "--config", str(path), "--out", str(out)]
    master = start_cli([*base, "--role", "master"], ranks=1, log=tmp_path / "master.log")
    workers = [start_cli([*base, "--role", "worker"], ranks=1) for _ in range(3)]
    try:
        deadline = time.monotonic() + 300
        # every worker trains a configuration
        while sum(bool(descendants_running(w, "train")) for w in workers) < 3:
            assert time.monotonic() < deadline and master.poll() is None, (
                tmp_path / "master.log"
            ).read_text()
            time.sleep(0.5)
        killed, hung = workers[:2]  # the third stays healthy
        orphans = descendants_running(killed, "train")
        descendants_running(killed, "search")[0].kill()
        descendants_running(hung, "search")[0].suspend()
        assert master.wait(timeout=600) == 0, (tmp_path / "master.log").read_text()
        # the killed worker's training went with it (parent-death signal), not left running
        _, alive = psutil.wait_procs(orphans, timeout=30)
        assert not alive
    finally:
        for job in (master, *workers):
            kill_tree(job)
    summary = json.loads((tmp_path / "master.log").read_text().strip().splitlines()[-1])
    # 2 at 1 epoch failed; 1 + its 3-epoch run
    assert summary["failed_trials"] == 2 and summary["trials"] == 2
    first = {trial_key(t["config"], t["budget"]): t for t in read_trials(out)}
    assert len(first) == 2 and all(t["loss"] is not None for t in first.values())

    # A restarted master (the same seed proposes the same configurations): completed trials are answered
    # from trials.jsonl, only the failed ones train again.
    proc = run_cli(["search", "--config", str(search_config(tmp_path, dataset)), "--out", str(out)], ranks=2)
    summary = json.loads(proc.stdout.strip().splitlines()[-1])
    assert summary["failed_trials"] == 0 and summary["trials"] == 4
    rows = read_trials(out)
    for key in first:  # not trained (nor logged) a second time
        assert sum(trial_key(t["config"], t["budget"]) == key for t in rows) == 1
    assert len(rows) >= 4  # the two failed configurations were trained this time


def test_trials_over_their_time_limit_fail_and_leave_nothing_running(tmp_path, dataset):
    path = search_config(tmp_path, dataset, trial_timeout_s=1)
    out = tmp_path / "search"
    proc = run_cli(["search", "--config", str(path), "--out", str(out)], ranks=2, check=False, timeout=600)
    assert proc.returncode == 2
    assert f"no trial succeeded (4 failed): see {out}/trials/*/log.txt" in proc.stderr
    assert all("timed out after 1 s" in t["error"] for t in read_trials(out))
    trainings = [
        p
        for p in psutil.process_iter(["cmdline"])
        if "train" in (p.info["cmdline"] or []) and str(out) in " ".join(p.info["cmdline"] or [])
    ]
    _, alive = psutil.wait_procs(trainings, timeout=10)  # (the search's own ranks may still be exiting)
    assert not [p for p in alive if p.status() != psutil.STATUS_ZOMBIE]


def test_a_worker_without_a_master_gives_up_with_a_clear_error(tmp_path, dataset):
    path = search_config(tmp_path, dataset, join_timeout_s=1)
    out = tmp_path / "search"
    (out / "run").mkdir(parents=True)
    proc = run_cli(["search", "--config", str(path), "--out", str(out), "--role", "worker"], check=False)
    assert proc.returncode == 2
    assert f"no search master published {out}/run/nameserver.json within 1 s" in proc.stderr

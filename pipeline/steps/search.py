"""search: hyperparameter search with BOHB (hpbandster), budgets in training epochs.

Security: hpbandster itself uses no authentication, so anyone reaching its Pyro4 ports could list,
stop or feed the workers. Here every Pyro4 daemon, proxy and the name server carry an HMAC key
(`_pyroHmacKey`, Pyro4 4.82), generated per run and kept in a run directory readable only by the user
(0700, key file 0600); daemons listen on loopback unless `search.interface` names the node's interface.
A client without the key is refused.

Compatibility: ConfigSpace 1.x returns numpy scalars, which Pyro4's serpent serializer cannot encode
(the dispatcher thread dies and the master hangs) and numpy 2 prints as `np.float64(...)`; serpent
handlers turn numpy values into plain Python ones in every process.

Each trial runs the normal training (`sim2dl train`, through the same code path as the workflow) in a
subprocess with a time limit; a trial that fails or runs out of time is recorded as failed. Completed
trials are kept in `trials.jsonl`; a restarted search answers repeated (configuration, budget) pairs from
it instead of training again.
"""

from __future__ import annotations

import contextlib
import json
import os
import secrets
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import yaml

from pipeline import Sim2dlError
from pipeline.config import deep_merge
from pipeline.paths import SearchPaths, TrainPaths
from pipeline.reporting.status import headline_scores
from pipeline.runtime.launch import mpi_launcher
from pipeline.runtime.processes import kill_tree, with_parent_death_signal
from pipeline.storage.fsutil import write_text_atomic

RESULT_NAME = "trials.jsonl"
ADDRESS_NAME = "nameserver.json"  # in the run directory: where joining workers find the master


# ---------------------------------------------------------------- Pyro4: numpy values and HMAC keys


def register_numpy_serializers() -> None:
    """Let serpent send numpy scalars and arrays as plain Python values."""
    import serpent

    def plain(obj: Any, serializer: Any, stream: Any, indent: int) -> None:
        serializer._serialize(obj.item() if isinstance(obj, np.generic) else obj.tolist(), stream, indent)

    for kind in (np.generic, np.ndarray):
        serpent.register_class(kind, plain)


def install_hmac_key(key: bytes, call_timeout_s: float = 30.0) -> None:
    """Make every Pyro4 daemon, proxy and name server in this process use `key`.

    The key is set in Daemon/Proxy.__init__ (hpbandster creates both without one); the classes
    themselves are not replaced, because Pyro4.core refers to them by name in super() calls."""
    import Pyro4.core
    import Pyro4.naming

    Pyro4._sim2dl_key = key
    Pyro4._sim2dl_timeout = call_timeout_s
    if getattr(Pyro4, "_sim2dl_patched", False):
        return
    proxy_init, daemon_init = Pyro4.core.Proxy.__init__, Pyro4.core.Daemon.__init__
    base_start, base_locate = Pyro4.naming.startNS, Pyro4.core._locateNS

    def keyed_proxy_init(self: Any, *args: Any, **kwargs: Any) -> None:
        proxy_init(self, *args, **kwargs)
        self._pyroHmacKey = Pyro4._sim2dl_key
        # Every call hpbandster makes is short; without a timeout a hung (stopped) worker would block the
        # master's ping forever, with it the worker counts as dead and its trial as failed.
        self._pyroTimeout = Pyro4._sim2dl_timeout

    def keyed_daemon_init(self: Any, *args: Any, **kwargs: Any) -> None:
        daemon_init(self, *args, **kwargs)
        self._pyroHmacKey = Pyro4._sim2dl_key

    def start(*args: Any, **kwargs: Any) -> Any:
        kwargs["hmac"] = Pyro4._sim2dl_key
        kwargs.setdefault("enableBroadcast", False)  # no broadcast responder on the network
        return base_start(*args, **kwargs)

    def locate(host: Any = None, port: Any = None, broadcast: bool = False, hmac_key: Any = None) -> Any:
        return base_locate(host, port, broadcast=broadcast, hmac_key=Pyro4._sim2dl_key)

    Pyro4.locateNS = Pyro4.core._locateNS = Pyro4.naming.locateNS = locate
    Pyro4.core.Proxy.__init__ = keyed_proxy_init
    Pyro4.core.Daemon.__init__ = keyed_daemon_init
    Pyro4.naming.startNS = start
    Pyro4._sim2dl_patched = True


def run_directory(path: Path) -> bytes:
    """Create (0700) the run directory and its key file (0600); return the key."""
    path.mkdir(parents=True, exist_ok=True)
    path.chmod(0o700)
    key_file = path / "hmac.key"
    if not key_file.exists():
        fd = os.open(key_file, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
        with os.fdopen(fd, "w") as f:
            f.write(secrets.token_hex(32))
    return read_key(path)


def read_key(run_dir: Path) -> bytes:
    """The search's HMAC key (workers authenticate to the master), refused when others can read it."""
    key_file = run_dir / "hmac.key"
    if key_file.stat().st_mode & 0o077:
        raise Sim2dlError(f"{key_file} is readable by others: remove it (a new key is made) or chmod 600 it")
    return key_file.read_text().strip().encode()


def wait_for_master(run_dir: Path, timeout_s: float) -> dict[str, Any]:
    """A joining worker waits (bounded) for the master to publish its name server's address."""
    deadline = time.monotonic() + timeout_s
    address_file = run_dir / ADDRESS_NAME
    while not address_file.exists():
        if time.monotonic() > deadline:
            raise Sim2dlError(
                f"no search master published {address_file} within {timeout_s:g} s "
                "(start `sim2dl search --role master` with the same config; key 'search.join_timeout_s')"
            )
        time.sleep(0.5)
    return json.loads(address_file.read_text())


def listen_host(interface: str) -> str:
    """The address the master and workers listen on: loopback, or this node's interface."""
    return "127.0.0.1" if interface == "loopback" else socket.gethostbyname(socket.gethostname())


# ---------------------------------------------------------------- search space and trials


def config_space(space: Mapping[str, Mapping[str, Any]], seed: int) -> Any:
    """The search space (search.space) as a ConfigSpace, seeded so trials are the same on a rerun."""
    import ConfigSpace as CS

    cs = CS.ConfigurationSpace(seed=seed)
    for name, p in space.items():
        kind = p["type"]
        if kind == "log-uniform":
            hp = CS.UniformFloatHyperparameter(name, lower=p["low"], upper=p["high"], log=True)
        elif kind == "uniform":
            hp = CS.UniformFloatHyperparameter(name, lower=p["low"], upper=p["high"])
        elif kind == "int":
            hp = CS.UniformIntegerHyperparameter(name, lower=p["low"], upper=p["high"])
        else:
            hp = CS.CategoricalHyperparameter(name, choices=list(p["values"]))
        cs.add(hp)
    return cs


def plain(config: Mapping[str, Any]) -> dict[str, Any]:
    """A trial's configuration with numpy scalars as Python values, keys sorted (JSON and YAML)."""
    return {k: (v.item() if isinstance(v, np.generic) else v) for k, v in sorted(config.items())}


def train_settings(config: Mapping[str, Any]) -> dict[str, Any]:
    """A search configuration as train settings: 'model_args.NAME' values nested under model_args."""
    settings: dict[str, Any] = {}
    for key, value in plain(config).items():
        *parents, leaf = key.split(".")
        node = settings
        for parent in parents:
            node = node.setdefault(parent, {})
        node[leaf] = value
    return settings


def trial_key(config: Mapping[str, Any], budget: float) -> str:
    """What identifies a trial across restarts: its configuration and budget."""
    return json.dumps([plain(config), round(float(budget), 6)], sort_keys=True)


def completed_trials(results: Path) -> dict[str, dict[str, Any]]:
    """The trials a killed search finished, by trial key, from its results file (a torn last line is
    skipped)."""
    done = {}
    if results.exists():
        for line in results.read_text().splitlines():
            with contextlib.suppress(json.JSONDecodeError):
                row = json.loads(line)
                done[trial_key(row["config"], row["budget"])] = row
    return done


def trial_environment() -> dict[str, str]:
    """The search job's MPI variables must not leak into a trial's own MPI launch."""
    return {
        k: v for k, v in os.environ.items() if not k.startswith(("PMI_", "PMIX_", "HYDRA_", "MPI_LOCALRANK"))
    }


@dataclass(frozen=True)
class TrialData:
    """What every trial trains from: the merged dataset and the summary of its staged copy."""

    merged: Path
    staged: Path


def run_trial(
    base_config: Mapping[str, Any],
    config: Mapping[str, Any],
    budget: float,
    trial_dir: Path,
    settings: Mapping[str, Any],
    data: TrialData,
) -> dict[str, Any]:
    """Train one configuration for `budget` epochs in a subprocess; returns {'loss', 'info'}."""
    trial_config = json.loads(json.dumps(base_config))
    deep_merge(trial_config["train"], train_settings(config))
    trial_config["train"]["epochs"] = max(1, round(budget))
    trial_dir.mkdir(parents=True, exist_ok=True)
    config_path = trial_dir / "config.yaml"
    config_path.write_text(yaml.safe_dump(trial_config, sort_keys=False))
    launcher = mpi_launcher(settings["launcher"], settings["ranks_per_trial"], nested=True)
    cmd = with_parent_death_signal(
        [
            *launcher,
            sys.executable,
            "-m",
            "pipeline.cli",
            "train",
            "--config",
            str(config_path),
            "--out",
            str(trial_dir / "train"),
            "--merged",
            str(data.merged),
            "--stage-summary",
            str(data.staged),
            "--no-baseline",  # a trial is scored by its validation loss alone
            "--trial",  # its hyperparameters beside its curves, for TensorBoard's HParams table
            json.dumps({"id": trial_dir.name, "hyperparameters": {**plain(config), "budget": budget}}),
        ]
    )
    start = time.perf_counter()
    with open(trial_dir / "log.txt", "w") as log:
        proc = subprocess.Popen(
            cmd,
            stdout=log,
            stderr=subprocess.STDOUT,
            env=trial_environment(),
            start_new_session=True,  # its own process group, so a timeout kills the whole launch
        )
        try:
            proc.wait(timeout=settings["trial_timeout_s"])
        except subprocess.TimeoutExpired:
            kill_tree(proc)
            raise Sim2dlError(
                f"trial timed out after {settings['trial_timeout_s']} s (see {trial_dir}/log.txt)"
            ) from None
    if proc.returncode != 0:
        raise Sim2dlError(f"trial failed with exit code {proc.returncode} (see {trial_dir}/log.txt)")
    summary = json.loads(TrainPaths(trial_dir / "train").summary.read_text())
    metrics = headline_scores(summary)
    return {"loss": float(summary["val_loss"]), "info": {**metrics, "seconds": time.perf_counter() - start}}


# ---------------------------------------------------------------- the master and the workers


def make_worker_class() -> type:
    """hpbandster's Worker subclass that runs a trial as a real `train` on the staged data."""
    from hpbandster.core.worker import Worker

    class TrainingWorker(Worker):  # type: ignore[misc]
        def __init__(
            self, base_config: Mapping[str, Any], out_dir: Path, data: TrialData, **kwargs: Any
        ) -> None:
            super().__init__(**kwargs)
            self.base_config, self.out_dir, self.data = base_config, out_dir, data
            self.settings = base_config["search"]
            self.results = out_dir / RESULT_NAME
            self.lock = threading.Lock()

        def compute(
            self, config_id: Any, config: Mapping[str, Any], budget: float, working_directory: Any
        ) -> dict:
            key = trial_key(config, budget)
            cached = completed_trials(self.results).get(key)
            if cached is not None and cached["loss"] is not None:  # a restarted search: no retraining
                return {"loss": cached["loss"], "info": {**cached.get("info", {}), "cached": True}}
            name = "trial-" + "-".join(str(int(c)) for c in config_id) + f"-b{budget:g}"
            row: dict[str, Any] = {
                "config_id": list(config_id),
                "config": plain(config),
                "budget": float(budget),
            }
            try:
                result = run_trial(
                    self.base_config,
                    config,
                    budget,
                    SearchPaths(self.out_dir).trial(name),
                    self.settings,
                    self.data,
                )
                row.update(loss=result["loss"], info=result["info"])
                return result
            except Sim2dlError as e:
                row.update(loss=None, error=str(e))
                raise
            finally:
                with self.lock, open(self.results, "a") as f:
                    f.write(json.dumps(row) + "\n")

    return TrainingWorker


def search(
    config: Mapping[str, Any], out_dir: Path, merged_dir: Path, staged: Path, comm: Any, role: str = "all"
) -> dict[str, Any]:
    """Run a BOHB search.

    role 'all' (one MPI job): rank 0 runs the name server and the master (and a worker when it is the only
    rank), the other ranks are workers. role 'master': rank 0 only, waiting for `search.workers` workers
    that join later. role 'worker': every rank joins the master named in the run directory."""
    settings = config["search"]
    rank, size = comm.Get_rank(), comm.Get_size()
    paths = SearchPaths(out_dir)
    run_dir = paths.run
    run_id = f"sim2dl-{settings['seed']}"
    register_numpy_serializers()
    data = TrialData(merged_dir, staged)
    if role != "master":  # the trials on this job's nodes read staged data: stage it here if it is not
        from pipeline.runtime.placement import topology
        from pipeline.staging import ensure_staged

        topo = topology(comm, config["stage"]["emulate_nodes"])
        _, restaged = ensure_staged(config, merged_dir, staged, paths.restaged, comm, topo)
        data = TrialData(merged_dir, restaged)
    if role == "worker":
        address = wait_for_master(run_dir, settings["join_timeout_s"])
        install_hmac_key(read_key(run_dir), settings["call_timeout_s"])
        start_worker(config, out_dir, data, address, settings, worker_id=f"r{rank}", background=False)
        return {"role": "worker"}
    if role == "master" and size > 1:
        raise Sim2dlError("--role master runs on one rank; start workers with --role worker")
    key = comm.bcast(run_directory(run_dir) if rank == 0 else None, root=0)
    install_hmac_key(key, settings["call_timeout_s"])
    summary: dict[str, Any] = {}
    if rank == 0:
        with name_server(run_dir, run_id, settings) as address:
            comm.bcast(address, root=0)
            if role == "all" and size == 1:
                start_worker(config, out_dir, data, address, settings, worker_id="r0", background=True)
            workers = settings["workers"] if role == "master" else max(1, size - 1)
            result = run_master(settings, address, workers)
        summary = finish(result, out_dir, config)
    else:
        address = comm.bcast(None, root=0)
        start_worker(config, out_dir, data, address, settings, worker_id=f"r{rank}", background=False)
    comm.barrier()
    return summary


@contextlib.contextmanager
def name_server(run_dir: Path, run_id: str, settings: Mapping[str, Any]) -> Any:
    """A keyed Pyro4 name server; its address is published in the run directory while it runs."""
    import hpbandster.core.nameserver as hpns

    address_file = run_dir / ADDRESS_NAME
    address_file.unlink(missing_ok=True)  # a stale address from an earlier master must not be joined
    ns = hpns.NameServer(
        run_id=run_id, host=listen_host(settings["interface"]), port=0, working_directory=None
    )
    host, port = ns.start()
    address = {"run_id": run_id, "host": host, "port": port}
    write_text_atomic(address_file, json.dumps(address))
    try:
        yield address
    finally:
        address_file.unlink(missing_ok=True)
        ns.shutdown()


def start_worker(
    config: Mapping[str, Any],
    out_dir: Path,
    data: TrialData,
    address: Mapping[str, Any],
    settings: Mapping[str, Any],
    worker_id: str,
    background: bool,
) -> Any:
    """Start this rank's worker in a thread, registered with the master's name server."""
    worker = make_worker_class()(
        config,
        out_dir,
        data,
        run_id=address["run_id"],
        nameserver=address["host"],
        nameserver_port=address["port"],
        host=listen_host(settings["interface"]),
        id=worker_id,
        timeout=settings["worker_idle_timeout_s"],  # a worker whose master died ends by itself
    )
    worker.run(background=background)
    return worker


def run_master(settings: Mapping[str, Any], address: Mapping[str, Any], workers: int) -> Any:
    """Run BOHB on rank 0 with the configured budgets and iterations, seeded; its result."""
    from hpbandster.optimizers import BOHB

    np.random.seed(settings["seed"])  # BOHB's model samples from numpy's global generator
    bohb = BOHB(
        configspace=config_space(settings["space"], settings["seed"]),
        run_id=address["run_id"],
        host=listen_host(settings["interface"]),
        nameserver=address["host"],
        nameserver_port=address["port"],
        min_budget=settings["min_budget"],
        max_budget=settings["max_budget"],
        eta=settings["eta"],
        ping_interval=settings["ping_interval_s"],
    )
    try:
        return bohb.run(n_iterations=settings["iterations"], min_n_workers=workers)
    finally:
        bohb.shutdown(shutdown_workers=True)


def finish(result: Any, out_dir: Path, config: Mapping[str, Any]) -> dict[str, Any]:
    """best.yaml (the incumbent's train settings), the trials' figure and the step's summary."""
    id2config = result.get_id2config_mapping()
    incumbent = result.get_incumbent_id()
    runs = [r for r in result.get_all_runs() if r.loss is not None]
    failed = len(result.get_all_runs()) - len(runs)
    if incumbent is None or not runs:
        raise Sim2dlError(f"no trial succeeded ({failed} failed): see {out_dir}/trials/*/log.txt")
    best = plain(id2config[incumbent]["config"])
    best_runs = [r for r in result.get_runs_by_id(incumbent) if r.loss is not None]
    best_loss = min(r.loss for r in best_runs)
    write_text_atomic(
        SearchPaths(out_dir).best, yaml.safe_dump({"train": train_settings(best)}, sort_keys=True)
    )
    from pipeline.reporting.plots import search_progress

    search_progress(runs, SearchPaths(out_dir).plot)
    return {"best": best, "best_loss": best_loss, "trials": len(runs), "failed_trials": failed}

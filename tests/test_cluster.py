"""The one Slurm of the test suite: a real multi-node cluster on one machine (scripts/vcluster.sh), nodes
as Linux namespaces with their own hostname, network stack and node-local /tmp, one slurmd each, slurmctld
on the head. MPI crosses the virtual network between nodes; the workflow runs as Slurm jobs
(`--profile profiles/slurm`) spanning nodes; jobs are cancelled, runs interrupted, nodes lost.

Snakemake's Slurm executor waits up to 180 s between two status checks (it adds 10 s after each check
that finds no job finished); here that wait is capped at 2 s (tests/slurm_poll/sitecustomize.py), so the
tests wait for sim2dl, not for the next `squeue`. Nothing else about the executor or Slurm changes.

Needs root (network namespaces) and Slurm (installed by the script from apt); on a laptop without them it
skips, under CI=true it never skips. The tests share one cluster and run in file order: the last one
leaves nodes down.
"""

from __future__ import annotations

import csv
import json
import os
import re
import shlex
import shutil
import signal
import subprocess
import time
from pathlib import Path
from typing import Any

import pytest
import yaml

from .conftest import BIN, REPO, env, run_snakemake, small_cube_config, step_summaries
from .helpers import assert_report_holds, online_config

VCLUSTER = REPO / "scripts" / "vcluster.sh"
NODES = 3  # the workflow's nodes; one more is up, for the failures to leave enough
GPUS_PER_NODE = 2
POLL_CAP = {"PYTHONPATH": str(REPO / "tests" / "slurm_poll"), "SIM2DL_TEST_SLURM_POLL_S": "2"}
SMALL_TRAIN = {"epochs": 2, "batch_size": 8, "depth": 2, "width": 4, "dense": 16}


class Cluster:
    def __init__(self, root: Path) -> None:
        self.root = root
        self.shared = root / "shared"  # the same path on every node: the "parallel file system"
        self.extra_env = {"SLURM_CONF": str(root / "etc" / "slurm.conf"), **POLL_CAP}
        self.env = {**env(), **self.extra_env}

    def on(self, node: str, *argv: str, check: bool = True) -> subprocess.CompletedProcess[str]:
        """argv inside a node's namespaces."""
        proc = subprocess.run(
            [str(VCLUSTER), "exec", str(self.root), node, *argv],
            capture_output=True,
            text=True,
            timeout=120,
            env=self.env,
        )
        assert not check or proc.returncode == 0, proc.stdout + proc.stderr
        return proc

    def slurm(self, *argv: str, timeout: float = 300) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            list(argv), capture_output=True, text=True, timeout=timeout, env=self.env, cwd=self.shared
        )

    def job(self, nodes: int, config: Path, *step: str | Path) -> None:
        """A batch job of one rank per node running a sim2dl step as the workflow does: `sim2dl launch`
        (srun with --kill-on-bad-exit, and a launch that fails in MPI start-up started again), under a
        time limit, so a job that hangs ends by itself."""
        launch = [
            BIN / "sim2dl",
            "launch",
            "--mpi",
            "srun --mpi=pmi2 -t 4",
            "--tasks",
            str(nodes),
            "--config",
            config,
        ]
        script = self.shared / "job.sh"
        script.write_text("#!/bin/sh\nexec " + " ".join(shlex.quote(str(c)) for c in [*launch, *step]) + "\n")
        job = self.slurm(
            "sbatch", "--wait", "-t", "5", "-N", str(nodes), "-n", str(nodes), "-o", "job.out", str(script)
        )
        assert job.returncode == 0, job.stderr + (self.shared / "job.out").read_text()[-4000:]

    def jobs(self, *states: str) -> list[str]:
        """Ids of the jobs in these states (all jobs if none given)."""
        args = ["squeue", "-h", "-o", "%i"] + (["-t", ",".join(states)] if states else [])
        return self.slurm(*args).stdout.split()

    def nodes_not_idle(self) -> list[str]:
        """`NODE STATE` of every node that is not idle (allocated, down, drained, not responding)."""
        rows = self.slurm("sinfo", "-h", "-N", "-o", "%N %t").stdout.split("\n")
        return [row for row in rows if row.strip() and row.split()[1] != "idle"]

    def cancel_all(self, timeout: float = 90) -> list[str]:
        """scancel every job, then wait (bounded) until the queue is empty; returns the ids it found."""
        found = self.jobs()
        if found:
            self.slurm("scancel", *found)
        deadline = time.monotonic() + timeout
        while self.jobs() and time.monotonic() < deadline:
            time.sleep(0.5)
        assert not self.jobs(), f"jobs still queued {timeout} s after scancel: {self.jobs()}"
        return found


@pytest.fixture(scope="module")
def cluster():
    if os.geteuid() != 0 or shutil.which("nsenter") is None or shutil.which("ip") is None:
        if os.environ.get("CI") == "true":
            pytest.fail("CI=true: the virtual cluster needs root, nsenter and ip")
        pytest.skip("the virtual cluster needs root (network namespaces), nsenter and ip")
    # each node declares GPUS_PER_NODE GPUs (stand-in device files): Slurm schedules and binds them for real
    up = [str(VCLUSTER), "up", str(NODES + 1), "2g", str(GPUS_PER_NODE)]
    proc = subprocess.run(up, capture_output=True, text=True, timeout=900)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    root = Path(proc.stdout.strip().splitlines()[-1])
    try:
        yield Cluster(root)
    finally:
        subprocess.run([str(VCLUSTER), "down", str(root)], capture_output=True, timeout=120)
        assert not root.exists()


@pytest.fixture(autouse=True)
def idle_cluster(request, cluster):
    """Each test starts on an idle cluster with every node up, and leaves none of its jobs behind, pass or
    fail: one stuck job (a rank hung in MPI start-up) otherwise held the nodes for every later test. A
    cluster that is not idle fails the test at once, saying what it found, instead of the test failing
    later on another's leftovers."""
    deadline = time.monotonic() + 30  # slurmd's node states settle a moment after the last job ends
    while (cluster.jobs() or cluster.nodes_not_idle()) and time.monotonic() < deadline:
        time.sleep(0.5)
    assert not cluster.jobs() and not cluster.nodes_not_idle(), (
        f"the cluster is not idle before {request.node.name}: jobs {cluster.jobs()}, nodes "
        f"{cluster.nodes_not_idle()}"
    )
    yield
    left = cluster.cancel_all()
    if left:
        print(f"{request.node.name} left Slurm jobs {left}: cancelled")


def slurm_args(work: Path, *args: str) -> list[str]:
    """Snakemake's arguments for a run through the repository's Slurm profile, job logs in work."""
    return ["--profile", "profiles/slurm", "--slurm-logdir", str(work / "slurm_logs"), *args]


def slurm_snakemake(cluster: Cluster, work: Path, *args: str, timeout: float = 1500) -> tuple[int, str]:
    """`snakemake --profile profiles/slurm ARGS` from the repository on the cluster."""
    proc = run_snakemake(slurm_args(work, *args), timeout, extra_env=cluster.extra_env)
    return proc.returncode, proc.stdout + proc.stderr


# MPI start-up on these few nodes takes seconds; Slurm 22.05's pmi2 plugin now and then breaks a split
# PMI-1 request and leaves the ranks waiting in MPI_Init instead of aborting (seen in the logs: "request not
# begin with 'cmd='", then no CPU for 10 minutes): killed after this long, the start-up is retried by
# `sim2dl launch` (launch.startup_retries) within the tests' waits, as an operator would. Four retries, not
# the default two: the same plugin also corrupts a request outright, and the ranks abort at once (UCX
# "Destination is unreachable"); three such starts in a row failed a placement job of the fresh-clone run of
# stop 78, each costing seconds.
CLUSTER_LAUNCH = {"startup_timeout_s": 90, "startup_retries": 4}


def small_config(work: Path, **sections: Any) -> Path:
    """The demo, small (96 cubes of 16^3, two epochs of a small network, search off unless given), in a
    directory every node sees."""
    defaults = {
        "merge": {"shard_size_mb": 0.1},
        "train": SMALL_TRAIN,
        "search": {"enabled": False},
        "launch": CLUSTER_LAUNCH,
    }
    config = small_cube_config(work, **{**defaults, **sections})
    work.mkdir(parents=True, exist_ok=True)
    path = work / f"config-{len(list(work.glob('config-*')))}.yaml"
    path.write_text(yaml.safe_dump(config))
    return path


def test_nodes_are_separate_hosts_with_their_own_disks_and_mpi_crosses_the_network(cluster):
    sinfo = cluster.slurm("sinfo", "-h", "-o", "%D %t").stdout.split()
    assert sinfo == [str(NODES + 1), "idle"]
    hostnames = [cluster.on(f"node{i}", "hostname").stdout.strip() for i in range(1, NODES + 1)]
    assert hostnames == [f"node{i}" for i in range(1, NODES + 1)]
    cluster.on("node1", "sh", "-c", "echo mine > /tmp/node-local")
    assert cluster.on("node2", "test", "-e", "/tmp/node-local", check=False).returncode != 0
    (cluster.shared / "seen").write_text("everywhere")
    assert cluster.on("node3", "cat", str(cluster.shared / "seen")).stdout == "everywhere"
    # A batch job of 2 tasks on 2 nodes: srun starts one MPI rank per node (PMI-2 serving MPICH's PMI-1).
    script = cluster.shared / "mpi.sh"
    script.write_text(
        "#!/bin/sh\n"
        f"srun --kill-on-bad-exit=1 -t 2 --mpi=pmi2 {BIN / 'python'} -c "
        '"from mpi4py import MPI; import numpy as np; c = MPI.COMM_WORLD; '
        "s = c.Split_type(MPI.COMM_TYPE_SHARED); a = np.ones(1 << 20); b = np.empty_like(a); c.Allreduce(a, "
        "b); "
        'print(c.rank, MPI.Get_processor_name(), s.size, int(b[0]))"\n'
    )
    job = cluster.slurm("sbatch", "--wait", "-t", "3", "-N", "2", "-n", "2", "-o", "mpi.out", str(script))
    assert job.returncode == 0, job.stdout + job.stderr
    lines = sorted((cluster.shared / "mpi.out").read_text().split("\n"))
    ranks = [line.split() for line in lines if line]
    # one rank per node, summed over both
    assert ranks == [["0", "node1", "1", "2"], ["1", "node2", "1", "2"]]


def staged_on(cluster: Cluster, node: str, target: str) -> dict[str, int]:
    """{file: bytes} below the node's own staging directory."""
    proc = cluster.on(node, "find", target, "-type", "f", "-printf", "%P %s\\n", check=False)
    return {line.split()[0]: int(line.split()[1]) for line in proc.stdout.splitlines() if line}


def test_the_workflow_runs_as_srun_steps_across_nodes_stages_to_each_nodes_disk_and_trains_on_two_nodes(
    cluster,
):
    target = "/tmp/sim2dl-node-local"  # on each node its own tmpfs
    work = cluster.shared / "wf"
    # one GPU per training rank: the train job asks Slurm for them and srun binds one to each rank
    # and the two training ranks, one per node, split every sample between them
    # (train.spatial.ranks_per_sample: a
    # spatial set spanning two nodes, its halos and gradients crossing the network)
    path = small_config(
        work,
        stage={"mode": "replica", "target": target},
        slurm={"gpus_per_task": 1},
        train={**SMALL_TRAIN, "spatial": {"ranks_per_sample": 2}},
    )
    config = yaml.safe_load(path.read_text())
    resources = ["stage:tasks=3", "stage:nodes=3", "train:tasks=2", "train:nodes=2"]
    code, log = slurm_snakemake(cluster, work, "--set-resources", *resources, "--configfile", str(path))
    assert code == 0, log[-6000:]
    workdir = Path(config["workdir"])
    # Every step an srun step of the ranks it asked for, inside one of the batch jobs Snakemake submitted;
    # the four data steps grouped in one job; the figures (a local rule) in the report.
    job_ids = set(re.findall(r"SLURM jobid (\d+)", log))
    assert len(job_ids) >= 3, log  # data group, stage, train
    summaries = step_summaries(workdir / "logs")
    assert "slurm" not in summaries.pop("throughput")[0]  # a figure: a local rule, run where Snakemake runs
    assert set(summaries) == {"simulate", "ingest", "convert", "merge", "stage", "train"}, summaries
    for step, (summary, *_) in summaries.items():
        ranks = {"stage": 3}.get(step, 2)
        assert summary["ranks"] == ranks, (step, summary)
        assert summary["slurm"]["job_id"] in job_ids and summary["slurm"]["step_id"] not in (None, "batch")
        assert summary["slurm"]["ntasks"] == str(ranks)
    assert len({summaries[s][0]["slurm"]["job_id"] for s in ("simulate", "ingest", "convert", "merge")}) == 1
    assert_report_holds(
        work, ["--configfile", str(path)], ["learning_curves.png", "scores.png", "throughput.png"]
    )

    staged = json.loads((workdir / "staged" / "summary.json").read_text())
    merged = json.loads((workdir / "merged" / "metadata.json").read_text())
    dataset_bytes = sum(s["bytes"] for s in merged["shards"])
    assert staged["nodes"] == NODES and sorted(staged["hosts"]) == [f"node{i}" for i in range(1, NODES + 1)]
    assert staged["bytes_read_shared_fs"] == dataset_bytes  # every byte read once from the shared directory
    for i in range(1, NODES + 1):  # every node its own full copy, written there and nowhere else
        files = staged_on(cluster, f"node{i}", target)
        shards = {name: size for name, size in files.items() if name.endswith(".tfrecord")}
        assert sum(shards.values()) == dataset_bytes, (i, files)
    trained = json.loads((workdir / "train" / "summary.json").read_text())
    assert trained["ranks"] == 2 and trained["weights_identical_across_ranks"]
    assert len(set(trained["hosts"])) == 2  # one rank per node: Horovod's collectives crossed the network
    assert trained["spatial"] == {"ranks_per_sample": 2, "groups": 1}
    # Slurm gave each rank a GPU of its node (CUDA_VISIBLE_DEVICES from the GRES binding, in the summary);
    # TensorFlow finds no CUDA device behind the stand-in files, so train.device auto trained on the CPU
    assert [(d["cuda_visible_devices"], d["kind"]) for d in trained["devices"]] == [("0", "cpu")] * 2, trained

    # The other placements on the same nodes, as one stage step of 3 ranks on 3 nodes each.
    shard_bytes = {s["file"]: s["bytes"] for s in merged["shards"]}
    for mode in ("partition", "sample"):
        placed = f"/tmp/sim2dl-{mode}"
        run_config = work / f"{mode}.yaml"
        run_config.write_text(
            yaml.safe_dump({**config, "stage": {"mode": mode, "target": placed, "samples_per_rank": 40}})
        )
        summary = work / f"{mode}.json"
        cluster.job(NODES, run_config, "stage", "--summary", summary)
        staged = json.loads(summary.read_text())
        per_node = [staged_on(cluster, f"node{i}", placed) for i in range(1, NODES + 1)]
        names = [
            {Path(f).name: size for f, size in files.items() if f.endswith(".tfrecord")} for files in per_node
        ]
        if mode == "partition":  # each shard on exactly one node, whole; each byte read and written once
            assert sorted(n for node in names for n in node) == sorted(shard_bytes), names
            assert all(size == shard_bytes[n] for node in names for n, size in node.items())
            assert all(names), names  # every node got a share
            assert staged["bytes_read_shared_fs"] == dataset_bytes
        else:  # one file per rank (one rank per node) of its sampled records, on its own node
            assert [sorted(node) for node in names] == [[f"rank-{r:05d}.tfrecord"] for r in range(NODES)], (
                names
            )
            # every sampled record read once from the shared directory, written once on its rank's node
            assert staged["bytes_read_shared_fs"] == sum(size for node in names for size in node.values())


def kill_node(cluster: Cluster, node: str) -> None:
    """A node failure as slurmctld sees it once SlurmdTimeout has passed: the node's processes gone and the
    node DOWN. Marked at once because the job's own MPI step notices first: with the tests' 2 s status
    polling, Snakemake's retry was otherwise submitted while the node still looked up, placed on it again
    and failed there, using up the profile's one retry (full runs on 2026-11-25). The node's init is
    killed (its PID namespace, slurmd and job steps go with it) and the node marked only once that init
    is gone: the kernel kills the namespace's processes as its init exits, and a slurmd still alive for
    that moment answered slurmctld's registration request to the DOWN node, so ReturnToService=2 put it
    back in service and the retry was placed on it (CI of stop 49: NODE_FAIL instead of 'cannot start').
    Then its network namespace goes (`vcluster.sh kill`; that can take seconds), and the mark is checked
    again. Marked DOWN after the kill, not before: its ranks are gone, so a retry elsewhere finds no copies
    still being written. But drained before it: a drained node takes no new job while its running one goes
    on, and a registration does not undo a drain, so a retry Snakemake submits while the kill is still
    under way (seen under load: the job's MPI step noticed the dying node before the mark, the retry went
    to the node and failed there with NODE_FAIL) waits for other nodes instead. And it stays drained: a
    killed node answered a registration even after its namespace was gone (CI of stop 87: the retry was
    placed on the DOWN, undrained node2 and failed with NODE_FAIL), and a node that failed does not come
    back by itself either. sinfo shows such a node as drained (the drain flag names it before DOWN)."""
    drained = cluster.slurm("scontrol", "update", f"NodeName={node}", "State=DRAIN", "Reason=killed-by-test")
    assert drained.returncode == 0, drained.stderr
    pid = int((cluster.root / "nodes" / f"{node}.pid").read_text())
    os.kill(pid, signal.SIGKILL)
    deadline = time.monotonic() + 60
    while gone_or_zombie(pid) is False:
        assert time.monotonic() < deadline, f"{node}'s init {pid} still runs 60 s after SIGKILL"
        time.sleep(0.05)
    mark_down(cluster, node)
    subprocess.run([str(VCLUSTER), "kill", str(cluster.root), node], check=True, timeout=60)
    assert out_of_service(cluster, node), node_flags(cluster, node)


def gone_or_zombie(pid: int) -> bool:
    try:
        status = Path(f"/proc/{pid}/status").read_text()
    except OSError:
        return True
    return any(line.startswith("State:") and "Z" in line.split()[1] for line in status.splitlines())


def mark_down(cluster: Cluster, node: str) -> None:
    marked = cluster.slurm("scontrol", "update", f"NodeName={node}", "State=DOWN", "Reason=killed-by-test")
    assert marked.returncode == 0, marked.stderr


def node_flags(cluster: Cluster, node: str) -> str:
    """scontrol's full state of the node, e.g. DOWN+DRAIN+NOT_RESPONDING."""
    shown = cluster.slurm("scontrol", "show", "node", node).stdout
    return next((word.split("=", 1)[1] for word in shown.split() if word.startswith("State=")), "")


def out_of_service(cluster: Cluster, node: str) -> bool:
    """The node takes no job: drained, or down."""
    flags = set(node_flags(cluster, node).split("+"))
    return bool(flags & {"DRAIN", "DOWN"})


def epochs_done(workdir: Path) -> int:
    try:
        return len(json.loads((workdir / "train" / "metrics.json").read_text()))
    except (OSError, ValueError):
        return 0


def complete_shards(cluster: Cluster, node: str, target: str, shard_bytes: dict[str, int]) -> set[str]:
    """The shards a node holds whole under their final names (a killed copy leaves only a temporary)."""
    files = staged_on(cluster, node, target)
    return {Path(f).name for f, size in files.items() if shard_bytes.get(Path(f).name) == size}


class Workflow:
    """`snakemake --profile profiles/slurm` in the background, its output in a log, with resources."""

    def __init__(self, cluster: Cluster, work: Path, config: Path, *resources: str) -> None:
        self.log_path = work / f"snakemake-{len(list(work.glob('snakemake-*.log')))}.log"
        set_resources = ["--set-resources", *resources] if resources else []
        cmd = ["snakemake", *slurm_args(work, *set_resources, "--configfile", str(config))]
        self.log = open(self.log_path, "w")  # noqa: SIM115 - closed in wait()
        # Its own process group, as a shell gives a foreground job; not under `timeout`, which would
        # SIGKILL it 30 s after passing on a Ctrl-C (wait() bounds the time instead).
        self.proc = subprocess.Popen(
            cmd, stdout=self.log, stderr=subprocess.STDOUT, env=cluster.env, cwd=REPO, start_new_session=True
        )

    def interrupt(self) -> None:
        """Ctrl-C: SIGINT to the whole foreground process group."""
        os.killpg(self.proc.pid, signal.SIGINT)

    def poll_for(self, seconds: float) -> int | None:
        """Its exit code if it ends within `seconds`, else None (it goes on)."""
        try:
            return self.proc.wait(timeout=seconds)
        except subprocess.TimeoutExpired:
            return None

    def text(self) -> str:
        return self.log_path.read_text()

    def report(self) -> str:
        """Snakemake's last lines and the steps' logs (what a failed job printed), for a failed assertion."""
        steps = sorted(self.log_path.parent.glob("**/logs/*.log")) + sorted(
            self.log_path.parent.glob("slurm_logs/**/*.log")
        )
        tails = "".join(f"\n--- {p}:\n{p.read_text(errors='replace')[-1500:]}" for p in steps)
        return self.text()[-5000:] + tails

    def until(self, condition: Any, what: str, timeout: float = 600) -> None:
        deadline = time.monotonic() + timeout
        while not condition():
            assert self.proc.poll() is None, f"ended before {what}:\n" + self.report()
            assert time.monotonic() < deadline, f"no {what} within {timeout} s:\n" + self.report()
            time.sleep(0.2)

    def wait(self, timeout: float = 600) -> int:
        try:
            return self.proc.wait(timeout=timeout)
        finally:
            self.stop()

    def stop(self) -> None:
        """Kill it if it still runs (a failed test); close its log."""
        if self.proc.poll() is None:
            os.killpg(self.proc.pid, signal.SIGKILL)
            self.proc.wait()
        self.log.close()


def wait_for(condition, what: str, timeout: float = 600) -> None:
    deadline = time.monotonic() + timeout
    while not condition():
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        time.sleep(0.5)


def test_online_training_simulates_on_one_node_and_trains_on_another(cluster):
    """train.online in one Slurm job of 2 nodes: the ensemble's rank on the first node, the training rank on
    the second; each run's samples cross the network by MPI as the run completes."""
    work = cluster.shared / "online"
    config = {**online_config(work, runs=6, samples=3), "launch": CLUSTER_LAUNCH}
    work.mkdir(parents=True, exist_ok=True)
    path = work / "config.yaml"
    path.write_text(yaml.safe_dump(config))
    cluster.job(2, path, "online")
    summary = json.loads((work / "work" / "train" / "summary.json").read_text())
    assert summary["online"]["steps"] == 12 and summary["online"]["samples"]["arrived"] == 15  # 5 runs x 3
    runs = [
        json.loads(line)
        for line in (cluster.shared / "job.out").read_text().splitlines()
        if line.startswith("{") and '"hosts"' in line
    ]
    hosts = runs[-1]["hosts"]
    assert (
        len(hosts["producers"]) == len(hosts["training_ranks"]) == 1
        and hosts["producers"] != hosts["training_ranks"]
    )


def test_a_cancelled_job_is_retried_and_an_interrupted_run_resumes_without_redoing_work(cluster):
    work = cluster.shared / "retry"
    # 4,000 epochs of 0.03 s: long enough to be cancelled and interrupted mid-way (a minute and more: at 400 a
    # fresh-clone run finished before its interruption landed); the rerun trains only a few epochs more than
    # were done
    config = small_config(work, train={**SMALL_TRAIN, "epochs": 4000})
    workdir = work / "work"
    run = Workflow(cluster, work, config)
    try:
        # 1. A failing job (cancelled by Slurm mid-training) is resubmitted and resumes from its checkpoint.
        # three epochs' rows: the second's checkpoint is then surely written (a row comes before its
        # checkpoint, and a cancel landing between them resumed from epoch 1 under load, 2026-11-28)
        run.until(lambda: epochs_done(workdir) >= 3, "three epochs of the first attempt")
        running_jobs = cluster.jobs("R")
        assert len(running_jobs) == 1, running_jobs  # the train job
        cluster.slurm("scancel", running_jobs[0])
        before = epochs_done(workdir)
        run.until(lambda: epochs_done(workdir) >= before + 2, "the retried train job to go on")
        # 2. The run itself is interrupted: Ctrl-C, on which Snakemake cancels its Slurm jobs. Snakemake 9's
        # Slurm executor was seen not to answer a Ctrl-C sent after it resubmitted the cancelled job (three
        # fresh-clone runs, 2026-11-26, not one answered a second Ctrl-C either); then the operator's way:
        # end Snakemake, scancel the jobs, `snakemake --unlock`. What matters is checked below either way: the
        # train job stopped before the end, and the rerun resumes without redoing work.
        run.interrupt()
        # it answers within seconds where it does (60 s waited in vain every CI run), and the train job
        # trains on meanwhile on both cores: either way is checked below
        code = run.poll_for(10)
        if code is None:
            print(
                "snakemake did not answer Ctrl-C within 10 s: it is ended and its jobs cancelled with scancel"
            )
            run.stop()  # first, so that it resubmits nothing
            cluster.cancel_all()
            unlock_code, unlocked = slurm_snakemake(cluster, work, "--unlock", "--configfile", str(config))
            assert unlock_code == 0, unlocked  # a killed Snakemake leaves its lock
        print(f"snakemake exited {code} after Ctrl-C")
    finally:
        run.stop()
    log = run.text()
    assert "Trying to restart job" in log or "retry" in log.lower(), log[-3000:]
    interrupted_at = epochs_done(workdir)
    wait_for(lambda: not cluster.jobs(), "no jobs")
    # the interruption came before the end
    assert not (workdir / "train" / "summary.json").exists(), (interrupted_at, log[-5000:])

    # The rerun trains a few epochs more than were done (a shorter run of the same settings resumes the
    # same checkpoint; only train reads train.epochs), not the rest of the 4,000.
    epochs = interrupted_at + 3
    settings = yaml.safe_load(config.read_text())
    config.write_text(yaml.safe_dump({**settings, "train": {**settings["train"], "epochs": epochs}}))
    code, log = slurm_snakemake(cluster, work, "--configfile", str(config))
    assert code == 0, log
    assert "rule train:" in log
    assert not re.search(r"rule (simulate|ingest|convert|merge|stage):", log)  # finished work is not redone
    trained = json.loads((workdir / "train" / "summary.json").read_text())
    assert trained["epochs"] == epochs and epochs_done(workdir) == epochs
    # every start of training, kept across attempts (each attempt's log replaces the last)
    attempts = (workdir / "train" / "attempts.jsonl").read_text().splitlines()
    resumed = [json.loads(line)["resume_from_epoch"] for line in attempts]
    # three attempts: fresh, resumed after the cancel, resumed after the interruption
    assert sorted(resumed)[0] == 0 and len(resumed) == 3
    assert sorted(resumed)[1] >= 2 and sorted(resumed)[2] >= interrupted_at - 1


def test_a_sweep_of_one_trainer_against_a_population_of_two_on_two_nodes(cluster):
    """A two-point sweep through the Slurm profile, each point in its own directory, compared: one trainer
    against a population of two (train.population), whose trainers each train on their own node from the
    shards staged to that node (stage.mode partition), exchanging models across the network."""
    work = cluster.shared / "sweep"
    target = "/tmp/sim2dl-sweep"
    population = {"trainers": 2, "rounds": 2, "steps_per_round": 3, "tournament_fraction": 0.2}
    base = small_config(
        work, stage={"mode": "partition", "target": target}, train={**SMALL_TRAIN, "population": population}
    )
    sweep = work / "sweep.yaml"
    points = work / "points"
    sweep.write_text(
        yaml.safe_dump(
            {
                "sweep": {
                    "name": "population",
                    "workdir": str(points),
                    "grid": {"train.population.enabled": [False, True]},
                }
            }
        )
    )
    resources = ["stage:tasks=2", "stage:nodes=2", "train:tasks=2", "train:nodes=2"]
    code, log = slurm_snakemake(
        cluster, work, "--set-resources", *resources, "--configfile", str(base), str(sweep)
    )
    assert code == 0, log
    with open(points / "summary.csv") as f:
        rows = list(csv.DictReader(f))
    assert [r["point"] for r in rows] == ["enabled=False", "enabled=True"]
    for row in rows:
        trained = json.loads((points / row["point"] / "train" / "summary.json").read_text())
        assert trained["settings"]["population"]["enabled"] == (row["train.population.enabled"] == "True")
        assert float(row["val_loss"]) == pytest.approx(trained["val_loss"], rel=1e-4)
        assert trained["weights_identical_across_ranks"] and len(set(trained["hosts"])) == 2
    record = json.loads((points / "enabled=True" / "train" / "summary.json").read_text())["population"]
    assert record["rounds_trained"] == 2 and sorted(map(tuple, record["trainer_hosts"])) == [
        ("node1",),
        ("node2",),
    ]
    # the copy the trainers read: the stage step's, or where Slurm gave the training other nodes than the
    # staging (the two points' jobs run side by side), the one the training staged again itself
    restaged = points / "enabled=True" / "train" / "restaged.json"
    read = restaged if restaged.exists() else points / "enabled=True" / "staged" / "summary.json"
    staged = json.loads(read.read_text())
    node_dir = dict(zip(staged["hosts"], staged["node_dirs"], strict=True))
    for host, files in zip(record["trainer_hosts"], record["trainer_files"], strict=True):
        # each trainer read only shards staged on its own node
        on_node = {
            Path(f).name for f in staged_on(cluster, host[0], node_dir[host[0]]) if f.endswith(".tfrecord")
        }
        assert files and set(files) <= on_node, (host, files, on_node)
    assert not set(record["trainer_files"][0]) & set(record["trainer_files"][1])
    assert (points / "summary.png").stat().st_size > 10_000
    assert_report_holds(work, ["--configfile", str(base), str(sweep)], ["summary.png", "throughput.png"])
    # two configurations, two data groups, two stagings, two trainings: all through Slurm
    assert len(set(re.findall(r"SLURM jobid (\d+)", log))) >= 6


def running(cluster: Cluster, rule: str) -> list[str]:
    """Node lists of the running Slurm jobs of a rule (the Slurm executor's comment names it)."""
    rows = [
        line.split() for line in cluster.slurm("squeue", "-h", "-t", "R", "-o", "%k %N").stdout.split("\n")
    ]
    return [row[1] for row in rows if len(row) == 2 and row[0].split("_wildcards_")[0] == f"rule_{rule}"]


def test_nodes_lost_in_staging_and_training_fail_their_jobs_and_reruns_on_fewer_nodes_resume(cluster):
    """Runs last: it leaves nodes down. (1) A node killed while the stage job runs: Slurm reports the node
    failure, Snakemake resubmits (profiles/slurm: retries 1, no Slurm requeue) and the retry, on the
    nodes still up, stages only what they miss. (2) A node lost during 3-node training: the job fails, its
    retry cannot start (2 nodes up) and the workflow reports it and ends instead of
    waiting forever. (3) The rerun on 1 node resumes training from the 3-node job's checkpoint; that node
    killed during training, Snakemake's retry resumes on the last node up."""
    work = cluster.shared / "fault"
    stage = {"mode": "replica", "target": "/tmp/sim2dl-fault"}
    config = small_cube_config(
        work,
        stage=stage,
        search={"enabled": False},
        merge={"shard_size_mb": 0.1},
        train={"epochs": 300, "batch_size": 8, "depth": 2, "width": 4, "dense": 16},
        slurm={"unavailable_nodes_timeout_s": 10},
        launch=CLUSTER_LAUNCH,
    )
    # 300 epochs: more than the jobs below live; the rerun asks for fewer (a longer or shorter run of
    # the same settings resumes the same checkpoint).
    path = work / "config.yaml"
    work.mkdir(parents=True, exist_ok=True)
    path.write_text(yaml.safe_dump(config))
    workdir = Path(config["workdir"])
    start = time.monotonic()

    # (1) + (2): stage on 3 nodes, node3 killed while the stage job runs; train on 3 nodes, node2 killed
    # after 2 epochs.
    run = Workflow(cluster, work, path, "stage:tasks=3", "stage:nodes=3", "train:tasks=3", "train:nodes=3")
    run.until(lambda: running(cluster, "stage"), "running stage job")
    assert running(cluster, "stage") == ["node[1-3]"]
    kill_node(cluster, "node3")
    run.until(lambda: epochs_done(workdir) >= 2, "2 epochs")
    assert running(cluster, "train") == ["node[1-2,4]"]
    kill_node(cluster, "node2")
    assert run.wait() != 0, run.report()
    text = run.text()
    # Each lost node's job fails (NODE_FAIL, or FAILED when its MPI step noticed first) and is retried.
    assert "Error in rule stage" in text and "Error in rule train" in text, run.report()
    assert "(rule train) cannot start" in text and "cancelling Slurm job" in text, run.report()  # no hang
    after_fault = time.monotonic() - start

    merged = json.loads((workdir / "merged" / "metadata.json").read_text())
    shard_bytes = {s["file"]: s["bytes"] for s in merged["shards"]}
    dataset_bytes = sum(shard_bytes.values())
    staged = json.loads((workdir / "staged" / "summary.json").read_text())  # the retried stage job's
    assert sorted(staged["hosts"]) == ["node1", "node2", "node4"], staged
    # The retry staged what the nodes still up missed: node4 everything, node1 and node2 what the killed
    # job had not finished there (whole shards it had are verified and kept); each byte read once.
    assert staged["bytes_read_shared_fs"] == dataset_bytes
    written = dict(zip(staged["hosts"], staged["bytes_written_per_node"], strict=True))
    assert written["node4"] == dataset_bytes and written["node1"] <= dataset_bytes >= written["node2"], (
        written
    )

    # (3) The rerun on the nodes still up, as one node of 2 ranks instead of 3 nodes: training resumes
    # from the 3-node job's checkpoint; that node is killed after 2 more epochs, and Snakemake's retry
    # resumes on the last node up.
    resumed_at = epochs_done(workdir)
    epochs = resumed_at + 6
    path.write_text(yaml.safe_dump({**config, "train": {**config["train"], "epochs": epochs}}))
    rerun = Workflow(cluster, work, path, "stage:tasks=2", "stage:nodes=2", "train:tasks=2", "train:nodes=1")
    rerun.until(lambda: epochs_done(workdir) >= resumed_at + 2, "2 epochs after resuming")
    first = running(cluster, "train")
    assert first in (["node1"], ["node4"]), first
    kill_node(cluster, first[0])
    assert rerun.wait() == 0, rerun.report()
    assert "failed due to a node failure" in rerun.text()
    last = ({"node1", "node4"} - set(first)).pop()
    trained = json.loads((workdir / "train" / "summary.json").read_text())
    assert trained["hosts"] == [last, last] and trained["weights_identical_across_ranks"]
    assert trained["epochs"] == epochs and epochs_done(workdir) == epochs
    resumed = [
        json.loads(line)["resume_from_epoch"]
        for line in (workdir / "train" / "attempts.jsonl").read_text().splitlines()
    ]
    # from scratch on 3 nodes, then from each checkpoint: on one node, then on the other
    # (a kill between an epoch's history and its checkpoint resumes the epoch before)
    assert len(resumed) == 3 and resumed[0] == 0 and resumed_at - 1 <= resumed[1] <= resumed_at, resumed
    assert resumed[2] >= resumed[1] + 1, (resumed, resumed_at)  # killed after 2 more epochs' history: 1 or 2
    assert complete_shards(cluster, last, "/tmp/sim2dl-fault", shard_bytes) == set(shard_bytes)
    # Every node killed stays out of service (kill_node keeps it drained: a registration after the kill
    # once put an undrained one back to idle).
    killed = ("node2", "node3", first[0])
    assert all(out_of_service(cluster, n) for n in killed), {n: node_flags(cluster, n) for n in killed}
    print(
        f"fault scenario: {after_fault:.0f} s until the workflow ended, {time.monotonic() - start:.0f} s in "
        "all"
    )

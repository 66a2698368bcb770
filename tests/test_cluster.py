"""A real multi-node cluster on one machine (scripts/vcluster.sh): nodes as Linux namespaces with their own
hostname, network stack and node-local /tmp, one slurmd each, slurmctld on the head. MPI crosses the
virtual network between nodes; the workflow runs as Slurm jobs spanning nodes.

Needs root (network namespaces) and Slurm (installed by the script from apt); on a laptop without them it
skips, under CI=true it never skips.
"""

from __future__ import annotations

import json
import os
import shlex
import shutil
import subprocess
import time
from pathlib import Path

import pytest
import yaml

from .conftest import BIN, REPO, env, small_cube_config

VCLUSTER = REPO / "scripts" / "vcluster.sh"
NODES = 3


class Cluster:
    def __init__(self, root: Path) -> None:
        self.root = root
        self.shared = root / "shared"  # the same path on every node: the "parallel file system"
        self.env = {**env(), "SLURM_CONF": str(root / "etc" / "slurm.conf")}

    def on(self, node: str, *argv: str, check: bool = True) -> subprocess.CompletedProcess[str]:
        """argv inside a node's namespaces."""
        proc = subprocess.run([str(VCLUSTER), "exec", str(self.root), node, *argv], capture_output=True,
                              text=True, timeout=120, env=self.env)  # fmt: skip
        assert not check or proc.returncode == 0, proc.stdout + proc.stderr
        return proc

    def slurm(self, *argv: str, timeout: float = 300) -> subprocess.CompletedProcess[str]:
        return subprocess.run(list(argv), capture_output=True, text=True, timeout=timeout, env=self.env,
                              cwd=self.shared)  # fmt: skip

    def job(self, nodes: int, *command: str | Path) -> None:
        """A batch job of one task per node: `srun --mpi=pmi2 COMMAND` (an argument vector, quoted)."""
        script = self.shared / "job.sh"
        script.write_text("#!/bin/sh\nexec srun --mpi=pmi2 " + " ".join(shlex.quote(str(c)) for c in command) + "\n")
        job = self.slurm("sbatch", "--wait", "-N", str(nodes), "-n", str(nodes), "-o", "job.out", str(script))
        assert job.returncode == 0, job.stderr + (self.shared / "job.out").read_text()[-4000:]


@pytest.fixture(scope="module")
def cluster():
    if os.geteuid() != 0 or shutil.which("nsenter") is None or shutil.which("ip") is None:
        if os.environ.get("CI") == "true":
            pytest.fail("CI=true: the virtual cluster needs root, nsenter and ip")
        pytest.skip("the virtual cluster needs root (network namespaces), nsenter and ip")
    proc = subprocess.run([str(VCLUSTER), "up", str(NODES)], capture_output=True, text=True, timeout=900)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    root = Path(proc.stdout.strip().splitlines()[-1])
    try:
        yield Cluster(root)
    finally:
        subprocess.run([str(VCLUSTER), "down", str(root)], capture_output=True, timeout=120)
        assert not root.exists()


def test_nodes_are_separate_hosts_with_their_own_disks_and_mpi_crosses_the_network(cluster):
    sinfo = cluster.slurm("sinfo", "-h", "-o", "%D %t").stdout.split()
    assert sinfo == [str(NODES), "idle"]
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
        f'srun --mpi=pmi2 {BIN / "python"} -c "from mpi4py import MPI; import numpy as np; c = MPI.COMM_WORLD; '
        "s = c.Split_type(MPI.COMM_TYPE_SHARED); a = np.ones(1 << 20); b = np.empty_like(a); c.Allreduce(a, b); "
        'print(c.rank, MPI.Get_processor_name(), s.size, int(b[0]))"\n'
    )
    job = cluster.slurm("sbatch", "--wait", "-N", "2", "-n", "2", "-o", "mpi.out", str(script))
    assert job.returncode == 0, job.stdout + job.stderr
    lines = sorted((cluster.shared / "mpi.out").read_text().split("\n"))
    ranks = [line.split() for line in lines if line]
    assert ranks == [["0", "node1", "1", "2"], ["1", "node2", "1", "2"]]  # one rank per node, summed over both


def staged_on(cluster: Cluster, node: str, target: str) -> dict[str, int]:
    """{file: bytes} below the node's own staging directory."""
    proc = cluster.on(node, "find", target, "-type", "f", "-printf", "%P %s\\n", check=False)
    return {line.split()[0]: int(line.split()[1]) for line in proc.stdout.splitlines() if line}


def test_the_workflow_runs_across_nodes_stages_to_each_nodes_disk_and_trains_on_two_nodes(cluster, tmp_path):
    target = "/tmp/sim2dl-node-local"  # on each node its own tmpfs
    work = cluster.shared / "wf"
    config = small_cube_config(work, stage={"mode": "replica", "target": target}, search={"enabled": False},
                               merge={"shard_size_mb": 0.1},
                               train={"epochs": 2, "batch_size": 8, "depth": 2, "width": 4, "dense": 16})  # fmt: skip
    path = work / "config.yaml"
    work.mkdir(parents=True, exist_ok=True)
    path.write_text(yaml.safe_dump(config))
    resources = ["stage:tasks=3", "stage:nodes=3", "train:tasks=2", "train:nodes=2"]
    cmd = ["timeout", "-k", "30", "1500", "snakemake", "--profile", "profiles/slurm", "--slurm-logdir",
           str(work / "slurm_logs"), "--set-resources", *resources, "--configfile", str(path)]  # fmt: skip
    proc = subprocess.run(cmd, capture_output=True, text=True, env=cluster.env, cwd=REPO)
    assert proc.returncode == 0, (proc.stdout + proc.stderr)[-6000:]
    workdir = Path(config["workdir"])
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
    assert len(set(trained["hosts"])) == 2  # one rank per node: Horovod's allreduce crossed the network

    # The other placements on the same nodes, as one stage step of 3 ranks on 3 nodes each.
    shard_bytes = {s["file"]: s["bytes"] for s in merged["shards"]}
    for mode in ("partition", "sample"):
        placed = f"/tmp/sim2dl-{mode}"
        run_config = work / f"{mode}.yaml"
        run_config.write_text(
            yaml.safe_dump({**config, "stage": {"mode": mode, "target": placed, "samples_per_rank": 40}})
        )
        summary = work / f"{mode}.json"
        cluster.job(NODES, BIN / "sim2dl", "stage", "--config", run_config, "--summary", summary)
        staged = json.loads(summary.read_text())
        per_node = [staged_on(cluster, f"node{i}", placed) for i in range(1, NODES + 1)]
        names = [{Path(f).name: size for f, size in files.items() if f.endswith(".tfrecord")} for files in per_node]
        if mode == "partition":  # each shard on exactly one node, whole; each byte read and written once
            assert sorted(n for node in names for n in node) == sorted(shard_bytes), names
            assert all(size == shard_bytes[n] for node in names for n, size in node.items())
            assert all(names), names  # every node got a share
            assert staged["bytes_read_shared_fs"] == dataset_bytes
        else:  # one file per rank (one rank per node) of its sampled records, on its own node
            assert [sorted(node) for node in names] == [[f"rank-{r:05d}.tfrecord"] for r in range(NODES)], names
            # every sampled record read once from the shared directory, written once on its rank's node
            assert staged["bytes_read_shared_fs"] == sum(size for node in names for size in node.values())


def epochs_done(workdir: Path) -> int:
    try:
        return len(json.loads((workdir / "train" / "metrics.json").read_text()))
    except (OSError, ValueError):
        return 0


def test_a_node_failure_in_training_is_reported_and_the_retry_resumes_on_the_remaining_nodes(cluster):
    """Runs last: it leaves a node down. The train job's second node dies after 2 epochs; Slurm reports
    the node failure, Snakemake resubmits (profiles/slurm: retries 1, no Slurm requeue), and the new job
    runs on the nodes still up: it stages what is missing on the new node and resumes from the checkpoint."""
    work = cluster.shared / "fault"
    stage = {"mode": "replica", "target": "/tmp/sim2dl-fault"}
    config = small_cube_config(work, stage=stage, search={"enabled": False}, merge={"shard_size_mb": 0.1},
                               train={"epochs": 30, "batch_size": 8, "depth": 2, "width": 4, "dense": 16})  # fmt: skip
    path = work / "config.yaml"
    work.mkdir(parents=True, exist_ok=True)
    path.write_text(yaml.safe_dump(config))
    workdir = Path(config["workdir"])
    cmd = ["timeout", "-k", "30", "1200", "snakemake", "--profile", "profiles/slurm", "--slurm-logdir",
           str(work / "slurm_logs"), "--set-resources", "stage:tasks=2", "stage:nodes=2", "train:tasks=2",
           "train:nodes=2", "--configfile", str(path)]  # fmt: skip
    log = open(work / "snakemake.log", "w")  # noqa: SIM115 - closed below
    run = subprocess.Popen(cmd, stdout=log, stderr=subprocess.STDOUT, env=cluster.env, cwd=REPO)
    try:
        deadline = time.monotonic() + 600
        while epochs_done(workdir) < 2:
            assert run.poll() is None and time.monotonic() < deadline, (work / "snakemake.log").read_text()[-4000:]
            time.sleep(0.5)
        running = cluster.slurm("squeue", "-h", "-t", "R", "-o", "%N").stdout.split()
        assert running == ["node[1-2]"], running  # the train job
        subprocess.run([str(VCLUSTER), "kill", str(cluster.root), "node2"], check=True, timeout=60)
        assert run.wait(timeout=900) == 0, (work / "snakemake.log").read_text()[-6000:]
    finally:
        if run.poll() is None:
            run.kill()
        log.close()
    text = (work / "snakemake.log").read_text()
    assert "failed due to a node failure" in text, text[-4000:]  # the job's error names the cause
    trained = json.loads((workdir / "train" / "summary.json").read_text())
    assert sorted(set(trained["hosts"])) == ["node1", "node3"] and trained["weights_identical_across_ranks"]
    assert trained["epochs"] == 30 and epochs_done(workdir) == 30
    resumed = [
        json.loads(line)["resume_from_epoch"]
        for line in (workdir / "train" / "attempts.jsonl").read_text().splitlines()
    ]
    assert len(resumed) == 2 and resumed[0] == 0 and resumed[1] >= 2  # from the checkpoint, not from scratch
    # node3 never staged before: the retried job staged the dataset there; node1 kept its copy
    merged = json.loads((workdir / "merged" / "metadata.json").read_text())
    dataset_bytes = sum(s["bytes"] for s in merged["shards"])
    for node in ("node1", "node3"):
        shards = {f: n for f, n in staged_on(cluster, node, "/tmp/sim2dl-fault").items() if f.endswith(".tfrecord")}
        assert sum(shards.values()) == dataset_bytes, (node, shards)
    assert cluster.slurm("sinfo", "-h", "-n", "node2", "-o", "%t").stdout.strip().startswith("down")

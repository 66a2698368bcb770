"""Steps in a real container: the sim2dl image built here (`sim2dl image build`: debootstrap + the
Containerfile's install.sh), run by charliecloud's `ch-run`, one container per rank, with the HOST's MPICH
(Debian's libmpich 4.0.2, not the image's own MPICH 5.0.2 from PyPI) bound in.

Needs root (the build) and the tools (installed from apt when missing). On a laptop without them it skips;
under CI=true it never skips. Shifter and Apptainer cannot be installed here: test_launch checks their
command lines exactly.
"""

from __future__ import annotations

import json
import subprocess

import pytest
import yaml

from pipeline import Sim2dlError
from pipeline.runtime import host_mpi as hostmpi
from pipeline.runtime.container_image import image_environment, run_tool, sandbox_argv, wheel_cache
from pipeline.runtime.launch import container_argv, mpi_launcher

from .conftest import (
    HOST_LAUNCHER,
    REPO,
    VENV,
    charliecloud,
    cli_command,
    host_library_version,
    make_config,
    runtime_env,
    step_summaries,
    unavailable,
    write_config,
)

# The first test also builds the image (about 2.5 min on 2 cores with the host's Horovod wheel; more on a
# busy machine).
pytestmark = pytest.mark.timeout(3000)
# Each rank writes its report to probe-RANK.json in the working directory (the launcher's forwarded
# stdout can run two ranks' lines together).
PROBE = (
    "import json, os, sys\n"
    "from mpi4py import MPI\n"
    "c = MPI.COMM_WORLD\n"
    "report = {'rank': c.rank, 'size': c.size, 'sum': c.allreduce(c.rank + 1),"
    " 'library': MPI.Get_library_version().splitlines()[0], 'python': sys.executable}\n"
    "open(f'probe-{c.rank}.json', 'w').write(json.dumps(report))\n"
)


def test_ranks_in_containers_use_the_host_mpi(tmp_path, image, host_mpi):
    """2 ranks started by the host's mpiexec, one ch-run container each: mpi4py inside reports the HOST
    library (MPICH 4.0.2), not the image's own (MPICH 5.0.2), and the ranks form one communicator."""
    settings = make_config(tmp_path, container=charliecloud(host_mpi))["container"]
    argv = mpi_launcher(HOST_LAUNCHER, 2) + container_argv(
        settings, ["python3", "-c", PROBE], [tmp_path], tmp_path
    )
    proc = subprocess.run(argv, capture_output=True, text=True, env=runtime_env(), timeout=300)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    ranks = [json.loads((tmp_path / f"probe-{r}.json").read_text()) for r in range(2)]
    host = host_library_version()
    assert [r["rank"] for r in ranks] == [0, 1] and {r["size"] for r in ranks} == {2}
    assert {r["sum"] for r in ranks} == {3}  # an allreduce across the two containers
    for r in ranks:
        assert r["python"] == "/opt/venv/bin/python3"  # the image's interpreter, not the host's venv
        assert r["library"].splitlines()[0] == host.splitlines()[0]
    assert "4.0.2" in host.splitlines()[0]

    # The same probe without the bind model: the image's own MPI, which is a different library.
    (tmp_path / "probe-0.json").unlink()
    own = make_config(tmp_path, container=charliecloud(None))["container"]
    proc = subprocess.run(
        container_argv(own, ["python3", "-c", PROBE], [tmp_path], tmp_path),
        capture_output=True,
        text=True,
        env=runtime_env(),
        timeout=300,
    )
    assert proc.returncode == 0, proc.stderr
    inside_own = json.loads((tmp_path / "probe-0.json").read_text())["library"].splitlines()[0]
    assert "5.0.2" in inside_own and inside_own != host.splitlines()[0]


def test_the_image_installs_the_horovod_wheel_that_the_host_built(image):
    """`make env` keeps its Horovod build as a wheel under a key of what it depends on
    (scripts/build_horovod.sh); the image's build binds that cache in and installs the wheel of the same key
    instead of compiling Horovod again (bookworm's Python 3.11, TensorFlow, MPICH and glibc match the
    venv's on this machine class). Horovod working inside is test_ranks_in_containers_use_the_host_mpi's
    and the demo workflow's."""
    key = subprocess.run(
        [str(REPO / "scripts" / "build_horovod.sh"), "--key", str(VENV)],
        capture_output=True,
        text=True,
        check=True,
    ).stdout.strip()
    kept = wheel_cache(runtime_env()) / f"horovod-0.28.1-{key}"
    if not kept.is_dir():
        unavailable(f"no Horovod wheel kept in {kept}: this venv's Horovod was built before wheels were kept")
    if not image["rebuilt"]:
        unavailable("the image was built before this run: its log is not this build's")
    log = image["log"]
    assert f"horovod: installed the wheel built before (/tmp/host{kept})" in log, log[-3000:]
    assert "horovod: built with MPI" not in log


def test_doctor_checks_the_site_and_says_how_to_fix_problems(tmp_path, image, host_mpi):
    good = write_config(tmp_path, make_config(tmp_path, container=charliecloud(host_mpi)))
    proc = subprocess.run(
        cli_command(["doctor", "--config", str(good), "--json"], None),
        capture_output=True,
        text=True,
        env=runtime_env(),
        timeout=600,
        cwd=tmp_path,
    )
    assert proc.returncode == 0, proc.stdout + proc.stderr
    checks = {c["name"]: c for c in json.loads(proc.stdout)}
    assert checks["runtime"]["status"] == "ok" and "ch-run" in checks["runtime"]["detail"]
    assert checks["image"]["status"] == "ok"
    assert checks["host MPI"]["status"] == "ok" and "MPICH ABI" in checks["host MPI"]["detail"]
    assert checks["MPI inside"]["status"] == "ok" and "the host's" in checks["MPI inside"]["detail"]
    assert "4.0.2" in checks["MPI inside"]["detail"]
    assert checks["node-local"]["status"] == "ok" and "GB free" in checks["node-local"]["detail"]
    # TensorFlow inside the image answers the GPU probe (no GPU here: auto trains on the CPU)
    assert checks["GPUs"]["status"] == "ok" and "TensorFlow sees 0 GPU(s)" in checks["GPUs"]["detail"]

    empty = tmp_path / "no-mpi-here"
    empty.mkdir()
    bad = make_config(tmp_path, container=charliecloud(empty, name="sim2dl-missing"))
    proc = subprocess.run(
        cli_command(["doctor", "--config", str(write_config(tmp_path, bad))], None),
        capture_output=True,
        text=True,
        env=runtime_env(),
        timeout=600,
        cwd=tmp_path,
    )
    assert proc.returncode == 1
    assert (
        "FAIL  image" in proc.stdout
        and "does not exist" in proc.stdout
        and "sim2dl image build" in proc.stdout
    )
    assert f"no libmpi.so.12 in host_mpi.paths ['{empty}']" in proc.stdout
    assert "sim2dl image host-mpi --out DIR" in proc.stdout


def test_demo_workflow_runs_every_step_in_the_container(tmp_path, image, host_mpi):
    """`make demo`'s workflow (the default config) with container.runtime: charliecloud: every rule's
    ranks run in the image with the host's MPI, and the model is trained (search off: test_search's). At
    a quarter of the demo's cubes and 3 of its 8 epochs: what runs where is the point here (the demo's
    learning is test_train's)."""
    overrides = tmp_path / "container.yaml"
    demo_config = yaml.safe_load((REPO / "config" / "config.yaml").read_text())
    overrides.write_text(
        yaml.safe_dump(
            {
                "workdir": str(tmp_path / "w"),
                "simulate": {**demo_config["simulate"], "runs": 256},
                "stage": {"target": str(tmp_path / "local")},
                "train": {**demo_config["train"], "epochs": 3},
                "container": charliecloud(host_mpi),
                "search": {"enabled": False},
            }
        )
    )
    demo = str(REPO / "config" / "config.yaml")  # a config file of its own replaces the demo: layer them
    cmd = ["timeout", "-k", "30", "1500", "snakemake", "--cores", "2", "--configfile", demo, str(overrides)]
    proc = subprocess.run(cmd, capture_output=True, text=True, env=runtime_env(), cwd=REPO)
    log = proc.stdout + proc.stderr
    assert proc.returncode == 0, log[-8000:]
    summaries = {step: found[-1] for step, found in step_summaries(tmp_path / "w" / "logs").items()}
    assert set(summaries) == {"simulate", "ingest", "convert", "merge", "stage", "train", "throughput"}
    host = hostmpi.version_line(host_library_version())
    for step, summary in summaries.items():
        assert summary["ranks"] == (1 if step == "throughput" else 2), step  # the figure needs one rank
        assert summary["image"].endswith("sim2dl_0.1.0"), step
        assert summary["mpi_library"] == host, step
    history = (tmp_path / "w" / "train" / "metrics.csv").read_text().splitlines()
    assert len(history) == 1 + 3 and summaries["simulate"]["samples"] == 256


def test_image_environment_matches_the_containerfile():
    """containers/image.env (used by `sim2dl image build`) and the Containerfile's ENV lines agree."""
    lines = (REPO / "containers" / "Containerfile").read_text().splitlines()
    env_lines = dict(line.removeprefix("ENV ").split("=", 1) for line in lines if line.startswith("ENV "))
    assert env_lines == image_environment()


def test_build_tools_print_to_stderr_so_stdout_is_only_the_result(capfd):
    """`sim2dl image build` prints one JSON object on stdout; apt's and pip's output must not mix into it."""
    run_tool(["sh", "-c", "echo from-the-tool"], "a tool", log=lambda s: None)
    out, err = capfd.readouterr()
    assert out == "" and "from-the-tool" in err
    with pytest.raises(Sim2dlError, match=r"image build: a tool failed \(exit 3\)"):
        run_tool(["sh", "-c", "exit 3"], "a tool", log=lambda s: None)


def test_build_sandbox_binds_host_pip_paths_under_its_own_prefix(tmp_path):
    argv = sandbox_argv(tmp_path, ["/bin/true"], {"PIP_CERT": "/tmp/host/ca.crt"}, ["/opt/wheels"])
    assert argv[:3] == ["bwrap", "--bind", str(tmp_path)]
    i = argv.index("/opt/wheels")
    assert argv[i - 1 : i + 2] == ["--ro-bind", "/opt/wheels", "/tmp/host/opt/wheels"]
    assert argv[-1] == "/bin/true" and "--clearenv" in argv

"""launch: the exact argument vectors given to MPI launchers and container runtimes.

Shifter, Apptainer/Singularity, podman-hpc, enroot/pyxis and Sarus cannot run on this machine class: their
command lines are checked here exactly, argument by argument, with the host-MPI bind model each documents.
charliecloud and podman also run for real (test_container, test_registry).
"""

import json
import subprocess
from pathlib import Path

import pytest

from pipeline import Sim2dlError
from pipeline.runtime.container_image import image_reference
from pipeline.runtime.launch import RUNTIMES, container_argv, mpi_launcher, prepare_mount_points, step_argv

from .conftest import REPO, cli_command, env, make_config, write_config

K = "--kill-on-bad-exit=1"  # srun: a rank that dies ends the step
HOSTILE = '/data/it\'s a "dir"; rm -rf ~ $(touch /tmp/pwned) `id`'


def container(tmp_path, **settings):
    return make_config(tmp_path, container=settings)["container"]


def test_launcher_is_srun_inside_slurm_and_mpiexec_elsewhere():
    assert mpi_launcher("auto", 4, {"SLURM_JOB_ID": "17"}) == ["srun", K, "-n", "4"]
    assert mpi_launcher("auto", 2, {}) == ["mpiexec", "-n", "2"]
    assert mpi_launcher("srun --mpi=pmi2", 3, {}) == ["srun", K, "--mpi=pmi2", "-n", "3"]
    assert mpi_launcher("none", 1, {}) == []
    assert mpi_launcher("auto", 1, {"SLURM_JOB_ID": "17"}, nested=True) == ["srun", K, "--overlap", "-n", "1"]
    # inside a job step (a rule of a group job under Snakemake's own srun): share its CPUs too
    assert mpi_launcher("auto", 2, {"SLURM_JOB_ID": "17", "SLURM_STEP_ID": "0"}) == [
        "srun",
        K,
        "--overlap",
        "-n",
        "2",
    ]
    assert mpi_launcher("auto", 2, {"SLURM_JOB_ID": "17", "SLURM_STEP_ID": "batch"}) == ["srun", K, "-n", "2"]
    assert mpi_launcher("auto", 1, {}, nested=True) == ["mpiexec", "-n", "1"]
    with pytest.raises(Sim2dlError, match="mpi 'none' runs one task, 2 were asked for"):
        mpi_launcher("none", 2, {})


def test_shifter_nersc_command_line(tmp_path):
    settings = container(
        tmp_path,
        runtime="shifter",
        image="docker:sim2dl/sim2dl:0.1.0",
        host_mpi={"enabled": True},
        binds=[f"{HOSTILE}:/in"],
        env={"NOTE": HOSTILE},
    )
    argv = container_argv(settings, ["sim2dl", "merge"], [Path("/pscratch/work")], Path("/home/u/run"))
    assert argv == [
        "shifter",
        "--image=docker:sim2dl/sim2dl:0.1.0",
        "--module=mpich",
        "--volume=/home/u/run:/home/u/run",
        "--volume=/pscratch/work:/pscratch/work",
        f"--volume={HOSTILE}:/in",
        "--env=SIM2DL_IMAGE=docker:sim2dl/sim2dl:0.1.0",
        f"--env=NOTE={HOSTILE}",
        "sim2dl",
        "merge",
    ]


@pytest.mark.parametrize("runtime", ["apptainer", "singularity"])
def test_apptainer_generic_bind_model_command_line(tmp_path, runtime):
    settings = container(
        tmp_path,
        runtime=runtime,
        image="/sw/images/sim2dl 0.1.0.sif",
        host_mpi={"enabled": True, "paths": ["/opt/cray/pe/lib64", "/usr/lib64/libfabric"]},
        env={"OMP_NUM_THREADS": 4},
    )
    argv = container_argv(settings, ["sim2dl", "train"], [Path("/scratch/w")], Path("/home/u"))
    assert argv == [
        runtime,
        "exec",
        "--pwd",
        "/home/u",
        "--bind",
        "/home/u:/home/u",
        "--bind",
        "/scratch/w:/scratch/w",
        "--bind",
        "/opt/cray/pe/lib64:/opt/cray/pe/lib64",
        "--bind",
        "/usr/lib64/libfabric:/usr/lib64/libfabric",
        "--env",
        "SIM2DL_IMAGE=/sw/images/sim2dl 0.1.0.sif",
        "--env",
        "MPI4PY_LIBMPI=libmpi.so.12",
        "--env",
        "LD_BIND_NOW=1",
        "--env",
        "LD_LIBRARY_PATH=/opt/cray/pe/lib64:/usr/lib64/libfabric",
        "--env",
        "OMP_NUM_THREADS=4",
        "/sw/images/sim2dl 0.1.0.sif",
        "sim2dl",
        "train",
    ]


def test_charliecloud_and_podman_command_lines(tmp_path):
    ch = container(tmp_path, runtime="charliecloud", image="/var/tmp/sim2dl.sqfs", env={"A": HOSTILE})
    assert container_argv(ch, ["sim2dl", "stage"], [], Path("/w")) == [
        "ch-run",
        "--cd=/w",
        "--set-env",
        "--env-no-expand",
        "-b",
        "/w:/w",
        "--set-env=SIM2DL_IMAGE=/var/tmp/sim2dl.sqfs",
        "--set-env=MPIR_CVAR_CH4_CMA_ENABLE=0",
        "--set-env=UCX_POSIX_USE_PROC_LINK=n",
        "--set-env=UCX_TLS=^cma",
        f"--set-env=A={HOSTILE}",
        "/var/tmp/sim2dl.sqfs",
        "--",
        "sim2dl",
        "stage",
    ]
    pod = container(tmp_path, runtime="podman", image="localhost/sim2dl:0.1.0", podman_timeout_s=60)
    argv = container_argv(pod, ["sim2dl", "stage"], [], Path("/w"))
    assert argv[:11] == [
        "podman",
        "run",
        "--rm",
        "--ipc=host",
        "--network=host",
        "--pid=host",
        "--timeout=60",
        "-w",
        "/w",
        "-v",
        "/w:/w",
    ]
    assert argv[argv.index("PMI_FD") - 1] == "-e" and "SLURM_PROCID" in argv  # PMI wiring passed by name
    assert argv[-3:] == ["localhost/sim2dl:0.1.0", "sim2dl", "stage"]


def test_podman_hpc_nersc_command_line(tmp_path):
    """`srun podman-hpc run --mpi ...` (NERSC Perlmutter): podman's options, plus the site's --mpi module
    (Cray MPICH, PMI) when the bind model is on."""
    settings = container(
        tmp_path,
        runtime="podman-hpc",
        name="registry.nersc.gov/m1/sim2dl",
        host_mpi={"enabled": True},
        env={"NOTE": HOSTILE},
        podman_timeout_s=60,
    )
    argv = container_argv(settings, ["sim2dl", "merge"], [Path("/pscratch/w")], Path("/home/u"))
    assert argv[:12] == [
        "podman-hpc",
        "run",
        "--rm",
        "--mpi",
        "--ipc=host",
        "--network=host",
        "--pid=host",
        "--timeout=60",
        "-w",
        "/home/u",
        "-v",
        "/home/u:/home/u",
    ]
    assert argv[12:14] == ["-v", "/pscratch/w:/pscratch/w"] and f"NOTE={HOSTILE}" in argv
    assert argv[argv.index("MPI4PY_LIBMPI=libmpi.so.12") - 1] == "-e" and not any(
        "LD_LIBRARY_PATH" in a for a in argv
    )
    assert argv[-3:] == ["registry.nersc.gov/m1/sim2dl:0.1.0", "sim2dl", "merge"]


def test_sarus_cscs_command_line(tmp_path):
    """`srun sarus run --mpi --mount=type=bind,... IMAGE` (CSCS): its native MPICH hook swaps in the host
    MPI; variables are set by `env` inside, one argument each."""
    settings = container(
        tmp_path, runtime="sarus", name="ghcr.io/o/sim2dl", host_mpi={"enabled": True}, env={"NOTE": HOSTILE}
    )
    argv = container_argv(settings, ["sim2dl", "train"], [Path("/scratch/w")], Path("/home/u"))
    assert argv == [
        "sarus",
        "run",
        "--mpi",
        "--workdir=/home/u",
        "--mount=type=bind,source=/home/u,destination=/home/u",
        "--mount=type=bind,source=/scratch/w,destination=/scratch/w",
        "ghcr.io/o/sim2dl:0.1.0",
        "env",
        "SIM2DL_IMAGE=ghcr.io/o/sim2dl:0.1.0",
        "MPI4PY_LIBMPI=libmpi.so.12",
        "LD_BIND_NOW=1",
        f"NOTE={HOSTILE}",
        "sim2dl",
        "train",
    ]
    with pytest.raises(Sim2dlError, match="sarus cannot bind '/data/a,b'"):
        container_argv(settings, ["true"], [Path("/data/a,b")], Path("/w"))


def test_enroot_runs_through_pyxis_under_srun_and_enroot_start_elsewhere(tmp_path):
    """NVIDIA's MLPerf path: `srun --container-image=IMAGE.sqsh --container-mounts=...` (pyxis), the host
    MPI directories mounted and loaded as for Apptainer; outside Slurm, `enroot start`."""
    config = make_config(
        tmp_path,
        container={
            "runtime": "enroot",
            "build_dir": "/images",
            "env": {"NOTE": HOSTILE},
            "host_mpi": {"enabled": True, "paths": ["/opt/hpcx/ompi-abi"]},
        },
    )
    image = "/images/sim2dl_0.1.0.sqsh"
    argv = step_argv(config, "srun --mpi=pmix", 4, ["merge"], [Path("/lustre/w")], Path("/home/u"))
    assert argv == [
        "srun",
        K,
        "--mpi=pmix",
        "-n",
        "4",
        f"--container-image={image}",
        "--container-mounts=/home/u:/home/u,/lustre/w:/lustre/w,/opt/hpcx/ompi-abi:/opt/hpcx/ompi-abi",
        "--container-workdir=/home/u",
        "--no-container-mount-home",
        "--no-container-remap-root",
        "env",
        f"SIM2DL_IMAGE={image}",
        "MPI4PY_LIBMPI=libmpi.so.12",
        "LD_BIND_NOW=1",
        "LD_LIBRARY_PATH=/opt/hpcx/ompi-abi",
        f"NOTE={HOSTILE}",
        "sim2dl",
        "merge",
    ]
    argv = step_argv(config, "mpiexec", 2, ["merge"], [Path("/lustre/w")], Path("/home/u"))
    mounts = [
        "--mount=/home/u:/home/u",
        "--mount=/lustre/w:/lustre/w",
        "--mount=/opt/hpcx/ompi-abi:/opt/hpcx/ompi-abi",
    ]
    assert argv[:9] == ["mpiexec", "-n", "2", "enroot", "start", *mounts, image]
    assert argv[9:12] == ["env", "--chdir=/home/u", f"SIM2DL_IMAGE={image}"] and argv[-2:] == [
        "sim2dl",
        "merge",
    ]
    with pytest.raises(Sim2dlError, match="pyxis cannot bind"):
        step_argv(config, "srun", 1, ["merge"], [Path("/w/a,b")], Path("/home/u"))


def test_podman_under_mpich_s_launcher_gets_pmi_over_a_port(tmp_path):
    """hydra hands ranks their PMI connection as an inherited fd, which does not reach a podman container:
    step_argv asks hydra for a port instead (PMI_PORT is passed by name)."""
    config = make_config(tmp_path, container={"runtime": "podman"})
    assert step_argv(config, "mpiexec.mpich", 2, ["merge"], [], Path("/w"))[:4] == [
        "mpiexec.mpich",
        "-pmi-port",
        "-n",
        "2",
    ]
    assert step_argv(config, "srun", 2, ["merge"], [], Path("/w"))[:5] == ["srun", K, "-n", "2", "podman"]
    plain = make_config(tmp_path, container={"runtime": "charliecloud"})
    assert step_argv(plain, "mpiexec", 2, ["merge"], [], Path("/w"))[:3] == ["mpiexec", "-n", "2"]


def test_image_reference_comes_from_name_and_tag_per_runtime(tmp_path):
    """One name/tag in config; each runtime is given the image in its own form (an explicit
    container.image wins)."""
    common = {"name": "docker.io/myorg/sim2dl", "tag": "1.2", "build_dir": str(tmp_path / "images")}
    refs = {rt: image_reference(container(tmp_path, runtime=rt, **common)) for rt in RUNTIMES}
    assert refs == {
        "none": "docker.io/myorg/sim2dl:1.2",
        "shifter": "docker:docker.io/myorg/sim2dl:1.2",
        "podman": "docker.io/myorg/sim2dl:1.2",
        "charliecloud": str(tmp_path / "images" / "docker.io_myorg_sim2dl_1.2"),
        "apptainer": str(tmp_path / "images" / "docker.io_myorg_sim2dl_1.2.sif"),
        "singularity": str(tmp_path / "images" / "docker.io_myorg_sim2dl_1.2.sif"),
        "podman-hpc": "docker.io/myorg/sim2dl:1.2",
        "enroot": str(tmp_path / "images" / "docker.io_myorg_sim2dl_1.2.sqsh"),
        "sarus": "docker.io/myorg/sim2dl:1.2",
    }
    explicit = container(tmp_path, runtime="podman", image="localhost/other:7", **common)
    assert container_argv(explicit, ["true"], [], Path("/w"))[-2:] == ["localhost/other:7", "true"]
    with pytest.raises(Sim2dlError, match=r"container\.tag"):
        container(tmp_path, runtime="podman", tag="1.2; rm -rf /")


def test_charliecloud_mount_points_are_made_in_a_directory_image_once(tmp_path):
    """ch-run 0.31 cannot create bind destinations in a read-only image: launch makes them beforehand in a
    directory image, and names them in an error for a squashfs image."""
    image = tmp_path / "img"
    (image / "tmp").mkdir(parents=True)
    settings = container(
        tmp_path,
        runtime="charliecloud",
        image=str(image),
        binds=["/srv/in:/data/in"],
        host_mpi={"enabled": True, "paths": ["/opt/host mpi/lib"]},
    )
    made = prepare_mount_points(settings, [Path("/scratch/w")], Path("/tmp"))
    assert made == ["/scratch/w", "/data/in", "/opt/host mpi/lib"]
    assert all((image / d.lstrip("/")).is_dir() for d in made)
    assert prepare_mount_points(settings, [Path("/scratch/w")], Path("/tmp")) == []
    squash = tmp_path / "img.sqfs"
    squash.write_bytes(b"hsqs")
    with pytest.raises(
        Sim2dlError, match=r"img.sqfs has no mount point for /tmp, /scratch/other, .*directory image"
    ):
        prepare_mount_points({**settings, "image": str(squash)}, [Path("/scratch/other")], Path("/tmp"))


def test_unknown_runtime_is_rejected_by_the_schema(tmp_path):
    with pytest.raises(Sim2dlError, match=r"container\.runtime"):
        container(tmp_path, runtime="docker-compose")


def test_launch_cli_passes_hostile_config_values_as_single_arguments(tmp_path):
    """The command a rule runs: config values full of shell syntax reach the runtime unchanged, and no
    shell ever interprets them (nothing is created by the embedded command substitution)."""
    canary = tmp_path / "pwned"
    hostile = f"x'; touch {canary}; echo '$(touch {canary})"
    config = make_config(
        tmp_path, container={"runtime": "apptainer", "image": hostile, "env": {"V": hostile}}
    )
    path = write_config(tmp_path, config)
    cmd = cli_command(["launch", "--config", str(path), "--tasks", "3", "--dry-run", "merge"], ranks=None)
    proc = subprocess.run(cmd, capture_output=True, text=True, env=env(), cwd=tmp_path, check=True)
    argv = json.loads(proc.stdout)
    assert argv[:5] == ["mpiexec", "-n", "3", "apptainer", "exec"]
    assert hostile in argv and f"V={hostile}" in argv
    assert argv[-4:] == ["sim2dl", "merge", "--config", str(path)]
    # and for real with runtime none: the step runs and the canary is never created
    config = make_config(tmp_path, container={"env": {"V": hostile}}, workdir=str(tmp_path / f"w {hostile}"))
    path = write_config(tmp_path, config)
    cmd = cli_command(["launch", "--config", str(path), "--tasks", "2", "simulate"], ranks=None)
    subprocess.run(cmd, capture_output=True, text=True, env=env(), cwd=tmp_path, check=True)
    assert (tmp_path / f"w {hostile}" / "raw" / "simulate.json").exists()
    assert not canary.exists()


def test_container_gpus_gives_each_runtime_its_gpu_switch_for_the_training_steps_only(tmp_path):
    """container.gpus: the exact GPU option of every runtime (none of them can run here, and there is no
    GPU), for train and search; merge's command line stays as it was."""
    cwd, data = Path("/home/u"), [Path("/lustre/w")]

    def argv(runtime, step, **extra):
        config = make_config(
            tmp_path, container={"runtime": runtime, "gpus": True, "build_dir": "/img", **extra}
        )
        return step_argv(config, "mpiexec", 2, [step, "--config", "c.yaml"], data, cwd)

    def without_gpus(runtime, step, **extra):
        config = make_config(
            tmp_path, container={"runtime": runtime, "gpus": False, "build_dir": "/img", **extra}
        )
        return step_argv(config, "mpiexec", 2, [step, "--config", "c.yaml"], data, cwd)

    for runtime in ("apptainer", "singularity"):
        assert argv(runtime, "train")[3:6] == [runtime, "exec", "--nv"]
    podman = argv("podman", "search")
    at = podman.index("--device")
    assert podman[at : at + 2] == ["--device", "nvidia.com/gpu=all"]
    for name in ("CUDA_VISIBLE_DEVICES", "SLURM_STEP_GPUS", "SLURM_LOCALID"):  # each rank finds its own GPU
        assert podman[podman.index(name) - 1] == "-e"
    assert "--gpu" in argv("podman-hpc", "train") and "--device" not in argv("podman-hpc", "train")
    shifter = argv("shifter", "train", host_mpi={"enabled": True})
    assert [a for a in shifter if a.startswith("--module")] == ["--module=mpich,gpu"]  # one option, both
    assert [a for a in argv("shifter", "train") if a.startswith("--module")] == ["--module=gpu"]
    enroot = argv("enroot", "train")
    image = enroot.index("/img/sim2dl_0.1.0.sqsh")
    assert enroot[image - 2 : image] == [
        "--env=NVIDIA_VISIBLE_DEVICES=all",
        "--env=NVIDIA_DRIVER_CAPABILITIES=compute,utility",
    ]
    config = make_config(tmp_path, container={"runtime": "enroot", "gpus": True, "build_dir": "/img"})
    pyxis = step_argv(config, "srun", 2, ["train"], data, cwd)  # srun's environment reaches enroot's hook
    assert pyxis[:5] == [
        "env",
        "NVIDIA_VISIBLE_DEVICES=all",
        "NVIDIA_DRIVER_CAPABILITIES=compute,utility",
        "srun",
        K,
    ]
    assert argv("sarus", "train") == without_gpus("sarus", "train")  # Sarus's hook needs no option
    for runtime in ("apptainer", "podman", "podman-hpc", "shifter", "enroot"):
        assert argv(runtime, "merge") == without_gpus(runtime, "merge"), runtime  # data steps: never
        assert argv(runtime, "train") != without_gpus(runtime, "train"), runtime


def test_slurm_gpus_per_task_binds_gpus_to_the_training_ranks_through_srun_only(tmp_path):
    """slurm.gpus_per_task: srun binds that many GPUs to each rank of train and search (explicit options,
    since Snakemake's job-step executor drops the job's SLURM_* variables); the data steps and mpiexec get
    nothing; a batch job's SLURM_NTASKS_PER_GPU (srun refuses --gpus-per-task beside it) is dropped."""
    from pipeline.runtime.launch import srun_environment_conflicts

    assert mpi_launcher("auto", 2, {"SLURM_JOB_ID": "7"}, gpus_per_task=1) == [
        "srun",
        K,
        "--gpus-per-task=1",
        "--gpu-bind=per_task:1",
        "-n",
        "2",
    ]
    assert mpi_launcher("auto", 2, {}, gpus_per_task=1) == ["mpiexec", "-n", "2"]
    config = make_config(tmp_path, slurm={"gpus_per_task": 2})
    for step in ("train", "search"):
        argv = step_argv(config, "srun", 4, [step], [tmp_path], tmp_path)
        assert argv[:6] == ["srun", K, "--gpus-per-task=2", "--gpu-bind=per_task:2", "-n", "4"], argv
        assert srun_environment_conflicts(argv) == ["SLURM_NTASKS_PER_GPU"]
    for step in ("merge", "stage", "simulate"):
        argv = step_argv(config, "srun", 4, [step], [tmp_path], tmp_path)
        assert not any("gpu" in a for a in argv) and srun_environment_conflicts(argv) == [], argv
    plain = step_argv(make_config(tmp_path), "srun", 4, ["train"], [tmp_path], tmp_path)
    assert not any("gpu" in a for a in plain)


def test_simulator_runs_in_their_own_image_never_get_the_gpu_switch(tmp_path):
    """simulate.image runs are the data half: container.gpus leaves them as they were."""
    from pipeline.runtime.launch import simulator_argv

    for runtime in ("apptainer", "podman", "podman-hpc", "shifter", "enroot"):
        plain, gpus = (container(tmp_path, runtime=runtime, gpus=g) for g in (False, True))
        assert simulator_argv(gpus, "sim:1", ["run"], tmp_path) == simulator_argv(
            plain, "sim:1", ["run"], tmp_path
        )


def test_gpu_variant_is_its_own_image_with_cuda_libraries_pinned(tmp_path):
    """container.variant: gpu names a second image (TAG-gpu) in every runtime's form and in the registry
    reference, is built from its own base (the CUDA libraries), and its pins cover every library that
    TensorFlow's `and-cuda` extra asks for, at versions that extra accepts."""
    from importlib.metadata import requires

    from packaging.requirements import Requirement

    from pipeline.runtime.container_image import INSTALL_INPUTS, image_tag, slug
    from pipeline.runtime.oci_registry import configured_reference

    common = {"name": "docker.io/myorg/sim2dl", "tag": "1.2", "build_dir": str(tmp_path / "images")}
    gpu = container(tmp_path, runtime="apptainer", variant="gpu", **common)
    cpu = container(tmp_path, runtime="apptainer", **common)
    assert (image_tag(gpu), image_tag(cpu)) == ("1.2-gpu", "1.2")
    assert image_reference(gpu) == str(tmp_path / "images" / "docker.io_myorg_sim2dl_1.2-gpu.sif")
    assert slug(cpu) == "docker.io_myorg_sim2dl_1.2"
    assert image_reference({**gpu, "runtime": "podman"}) == "docker.io/myorg/sim2dl:1.2-gpu"
    assert str(configured_reference(gpu, None)).endswith("myorg/sim2dl:1.2-gpu")
    assert {"requirements/image-gpu.in", "requirements/constraints-gpu.txt"} <= set(INSTALL_INPUTS)
    with pytest.raises(Sim2dlError, match=r"container\.variant"):
        container(tmp_path, runtime="podman", variant="rocm")

    pins = {}
    for line in (REPO / "requirements" / "constraints-gpu.txt").read_text().splitlines():
        if line and not line.startswith("#"):
            name, _, version = line.partition("==")
            pins[name.lower().replace("_", "-")] = version
    wanted = [Requirement(r) for r in requires("tensorflow") or []]
    cuda = [
        r
        for r in wanted
        if r.marker and r.marker.evaluate({"extra": "and-cuda"}) and r.name.startswith("nvidia")
    ]
    assert len(cuda) >= 10, cuda  # cuBLAS, cuDNN, cuFFT, NCCL, ... : the extra really was read
    for requirement in cuda:
        name = requirement.name.lower().replace("_", "-")
        assert name in pins, f"constraints-gpu.txt does not pin {name}"
        assert requirement.specifier.contains(pins[name]), (name, pins[name], str(requirement.specifier))


def test_install_script_refuses_an_unknown_variant_before_installing_anything(tmp_path):
    """install.sh checks SIM2DL_IMAGE_VARIANT before apt or pip run (here it would otherwise touch the
    host)."""
    env = {"PATH": "/usr/bin:/bin", "SIM2DL_IMAGE_VARIANT": "rocm", "SIM2DL_VENV": str(tmp_path)}
    run = subprocess.run(
        ["bash", str(REPO / "containers" / "install.sh")], capture_output=True, text=True, env=env
    )
    assert run.returncode == 2 and "SIM2DL_IMAGE_VARIANT is 'rocm'" in run.stderr
    assert not any(tmp_path.iterdir())


def test_every_runtime_of_the_schema_is_one_file_of_the_table():
    """Container runtimes are a table (pipeline/runtime/runtimes/, one file each): every runtime the schema
    accepts has its class there, with what doctor looks for, and no module elsewhere branches on a
    runtime's name."""
    import re
    from pathlib import Path

    from pipeline.config import schema
    from pipeline.runtime.runtimes import RUNTIMES as TABLE

    accepted = schema()["properties"]["container"]["properties"]["runtime"]["enum"]
    assert set(accepted) == set(TABLE) == set(RUNTIMES)
    folder = Path(__file__).resolve().parents[1] / "pipeline" / "runtime" / "runtimes"
    for name, runtime in TABLE.items():
        assert runtime.name == name and (name == "none" or (runtime.binary and runtime.install_hint))
        module = type(runtime).__module__.rsplit(".", 1)[1]
        assert (folder / f"{module}.py").exists()
    names = "|".join(re.escape(n) for n in TABLE if n != "none")
    branching = re.compile(rf"""(runtime|\["runtime"\]) (==|!=|in) \(?["']({names})""")
    for path in (folder.parent).glob("*.py"):
        assert not branching.search(path.read_text()), f"{path.name} branches on a runtime's name"

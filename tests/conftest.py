"""Shared helpers: small configs, real MPI launches of the `sim2dl` CLI, the container image and the host's
MPI for the tests of real runtimes (built or collected once per session)."""

from __future__ import annotations

import contextlib
import glob
import json
import os
import shutil
import socket
import ssl
import subprocess
import sys
import time
import urllib.error
import urllib.request
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
import yaml

from pipeline.runtime import host_mpi as hostmpi
from pipeline.runtime.container_image import image_reference
from pipeline.runtime.mpi import SerialComm
from pipeline.steps import validated

pytest_plugins = ["tests.cpu_seconds"]  # --cpu-durations

REPO = Path(__file__).resolve().parent.parent
BIN = Path(sys.executable).parent
VENV = BIN.parent
MPIEXEC = str(BIN / "mpiexec")


def make_config(tmp_path: Path, **sections: Any) -> dict[str, Any]:
    """A validated config rooted in tmp_path, the demo defaults updated section by section. Without the
    demo's merge.splits (train's hash hold-out instead) unless `merge` sets them: a test's few samples go
    further in two parts than in three, and a test that needs a test split says so."""
    config = yaml.safe_load((REPO / "config" / "config.yaml").read_text())
    config["workdir"] = str(tmp_path / "work")
    config["merge"].pop("splits", None)
    config["simulate"]["runs"] = 48
    config["ingest"]["max_reject_fraction"] = 0.5
    for key, value in sections.items():
        if isinstance(value, dict) and isinstance(config.get(key), dict):
            config[key].update(value)
        else:
            config[key] = value
    return validated(config)


def write_config(tmp_path: Path, config: dict[str, Any]) -> Path:
    path = tmp_path / "config.yaml"
    path.write_text(yaml.safe_dump(config, sort_keys=False))
    return path


def env() -> dict[str, str]:
    e = dict(os.environ)
    e["PATH"] = f"{BIN}:{e.get('PATH', '')}"
    e.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")
    return e


def cli_command(args: list[str], ranks: int | None) -> list[str]:
    """`sim2dl ARGS` under `mpiexec -n RANKS` (ranks None: no launcher, e.g. for `sim2dl launch`)."""
    launcher = [] if ranks is None else [MPIEXEC, "-n", str(ranks)]
    return [*launcher, str(BIN / "sim2dl"), *args]


def run_snakemake(
    args: list[str], timeout: float, extra_env: dict[str, str] | None = None
) -> subprocess.CompletedProcess[str]:
    """`snakemake ARGS` in the repository, under `timeout -k` so a stuck executor cannot hang the tests."""
    cmd = ["timeout", "-k", "30", str(timeout), "snakemake", *args]
    return subprocess.run(cmd, capture_output=True, text=True, env={**env(), **(extra_env or {})}, cwd=REPO)


def snakemake_configfile(config: Path, tmp_path: Path, *args: str, timeout: float = 900):
    """`snakemake --cores 2 --configfile CONFIG` from the repository, staging below tmp_path ($TMPDIR is
    stage.target's default)."""
    (tmp_path / "tmp").mkdir(exist_ok=True)
    proc = run_snakemake(
        # targets and --config before --configfile, which takes every file name after it
        ["--cores", "2", *args, "--configfile", str(config)],
        timeout,
        extra_env={"TMPDIR": str(tmp_path / "tmp")},
    )
    assert proc.returncode == 0, (proc.stdout + proc.stderr)[-6000:]
    return proc


def start_cli(args: list[str], ranks: int, log: Path | None = None) -> subprocess.Popen[bytes]:
    """Start `sim2dl ARGS` under `mpiexec -n RANKS` in the background (to be killed by kill_tree);
    stdout and stderr go to `log` if given."""
    with open(log, "wb") if log else contextlib.nullcontext(subprocess.DEVNULL) as out:
        return subprocess.Popen(
            cli_command(args, ranks),
            env=env(),
            stdout=out,
            stderr=subprocess.STDOUT if log else subprocess.DEVNULL,
            start_new_session=True,
        )


def run_cli(
    args: list[str], ranks: int | None = 1, check: bool = True, timeout: float = 300, cwd: Path | None = None
) -> subprocess.CompletedProcess[str]:
    """Run `sim2dl ARGS` under a real `mpiexec -n RANKS` (in `cwd`, default the current directory)."""
    cmd = cli_command(args, ranks)
    proc = subprocess.run(cmd, capture_output=True, text=True, env=env(), timeout=timeout, cwd=cwd)
    if check and proc.returncode != 0:
        raise AssertionError(f"{cmd} failed ({proc.returncode}):\n{proc.stdout}\n{proc.stderr}")
    return proc


@pytest.fixture
def serial() -> SerialComm:
    return SerialComm()


def kill_tree(proc: subprocess.Popen[bytes]) -> None:
    """SIGKILL a launched job and every process below it (MPI proxies may sit in their own process
    groups) at one instant, as Slurm kills a job's cgroup, and wait until all are gone, so the test sees
    the state the kill left behind. The tree is stopped first (SIGSTOP, until no new process appears):
    killed one by one, a process could start another (the next run of a farm) after the list was made."""
    import psutil

    try:
        parent = psutil.Process(proc.pid)
    except psutil.NoSuchProcess:  # ended and already reaped
        return
    victims: dict[int, psutil.Process] = {}
    found = [parent]
    while found:
        for p in found:
            victims[p.pid] = p
            with contextlib.suppress(psutil.NoSuchProcess):
                p.suspend()
        below = []
        for p in list(victims.values()):
            with contextlib.suppress(psutil.NoSuchProcess):
                below += p.children(recursive=True)
        found = [p for p in below if p.pid not in victims]
    for p in victims.values():
        with contextlib.suppress(psutil.NoSuchProcess):
            p.kill()
    proc.wait()
    psutil.wait_procs(list(victims.values()), timeout=30)


# What MPICH leaves behind when a job aborts or is killed, which several tests do on purpose: the
# launcher's topology files, and the ranks' shared-memory segments (MBs each, in RAM-backed /dev/shm).
MPI_LEFTOVERS = ("/tmp/hydra_hwloc_xmlfile_*", "/dev/shm/mpich_shm_*")
# What TensorFlow leaves: autograph writes each function it converts as a module in the temporary directory
# and imports it (compiled to __pycache__ there, as `make test` caches bytecode), then leaves both.
AUTOGRAPH_LEFTOVERS = (
    "/tmp/__autograph_generated_file*.py",
    "/tmp/__pycache__/__autograph_generated_file*.pyc",
)
LEFTOVERS = MPI_LEFTOVERS + AUTOGRAPH_LEFTOVERS


_LEFTOVERS_BEFORE: set[str] = set()


def _is_xdist_worker(config: pytest.Config) -> bool:
    return hasattr(config, "workerinput")


def pytest_report_header(config: pytest.Config) -> str:
    """The machine's speed at the top of the log, so suite times from two machines can be compared: the
    same suite took 34 minutes on this machine class one day and 81 on another (2026-12-02), when the quick
    benchmarks ran 3.2 x slower than recorded (bench/search.py --quick: 52.7 s against 16.5 s) and memory
    touched for the first time came at 0.7 to 2 GB/s (9 GB/s once touched)."""
    import numpy as np

    start = time.perf_counter()
    total = 0
    for i in range(2_000_000):
        total += i
    loop = time.perf_counter() - start
    start = time.perf_counter()
    np.ones(50_000_000)  # 400 MB, each page touched for the first time
    fresh = 0.4 / (time.perf_counter() - start)
    return f"machine speed: 2,000,000 Python additions in {loop:.2f} s; new memory filled at {fresh:.1f} GB/s"


def pytest_sessionstart(session: pytest.Session) -> None:
    _LEFTOVERS_BEFORE.update(p for pattern in LEFTOVERS for p in glob.glob(pattern))


def pytest_sessionfinish(session: pytest.Session) -> None:
    """Remove the MPI and autograph leftovers this session created (those of other jobs, running or not, are
    kept). Under pytest-xdist only the controller does, once every worker has finished: a worker that
    finished first would otherwise remove the segments of the other's job starting up."""
    if _is_xdist_worker(session.config):
        return
    in_use = _mapped_files()
    for leftover in {p for pattern in LEFTOVERS for p in glob.glob(pattern)} - _LEFTOVERS_BEFORE - in_use:
        with contextlib.suppress(OSError):
            os.unlink(leftover)


def _mapped_files() -> set[str]:
    """Every file a live process maps (a job started outside the tests, say, still uses its segments)."""
    mapped = set()
    for maps in glob.glob("/proc/[0-9]*/maps"):
        with contextlib.suppress(OSError), open(maps) as f:
            for line in f:
                fields = line.split(maxsplit=5)  # address, perms, offset, device, inode, [path]
                if len(fields) == 6:
                    mapped.add(fields[5].rstrip("\n"))
    return mapped


def step_summaries(log_dir: Path) -> dict[str, list[dict[str, Any]]]:
    """The JSON summary each step printed, by step, from the steps' logs. A log holds stdout and stderr
    together, forwarded by mpiexec separately: the summary may follow a progress bar's last update on
    the same line, so it is found where it begins in the line."""
    found: dict[str, list[dict[str, Any]]] = {}
    for log in log_dir.rglob("*.log"):
        for line in log.read_text(errors="replace").splitlines():
            at = line.find('{"step"')
            if at >= 0:
                summary = json.loads(line[at:])
                found.setdefault(summary["step"], []).append(summary)
    return found


def small_cube_config(tmp_path: Path, **sections: Any) -> dict[str, Any]:
    """96 cubes of 16^3, staged below tmp_path: small enough to train on in seconds."""
    return make_config(
        tmp_path,
        simulate={"runs": 96, "cube": {"size": 16, "box_size": 128.0, "mean_density": 8.0}},
        source={
            "fields": {
                "density": {"path": "density", "dtype": "float32", "shape": [16, 16, 16]},
                "params": {"path": "params", "dtype": "float32", "shape": [3]},
            }
        },
        **{**sections, "stage": {"target": str(tmp_path / "local"), **sections.get("stage", {})}},
    )


@pytest.fixture(scope="session")
def small_cubes(tmp_path_factory) -> tuple[Path, dict[str, Any]]:
    """small_cube_config's data simulated, ingested, converted, merged and staged once for the session
    (2 ranks): train and search tests read it with their own train and search sections (which no data
    step reads). Returns the directory and the config."""
    tmp = tmp_path_factory.mktemp("small-cubes")
    config = small_cube_config(tmp)
    path = write_config(tmp, config)
    for step in ("simulate", "ingest", "convert", "merge", "stage"):
        run_cli([step, "--config", str(path)], ranks=2)
    return tmp, config


# A small network for the small cubes: what the train and population tests train.
SMALL_TRAINING = {"epochs": 3, "batch_size": 8, "depth": 2, "width": 4, "dense": 16, "learning_rate": 0.002}


@pytest.fixture(scope="module")
def staged(small_cubes):
    """The small cubes, merged and staged once for the session, trained with SMALL_TRAINING."""
    tmp, config = small_cubes
    return tmp, {**config, "train": {**config["train"], **SMALL_TRAINING}}


# ------------------------------------------------------------------- real container runtimes
CI = os.environ.get("CI") == "true"

# The suite's tiers (markers; `make test-fast` runs unit and mpi, `make test` everything):
#   unit      functions and files in one process
#   mpi       real `mpiexec -n 2..4` launches of sim2dl steps
#   workflow  Snakemake runs of the workflow, search, and the bookkeeping of 100,000 files
#   site      what a site has: Slurm (the virtual cluster), container runtimes, a registry
SITE_MODULES = {"test_cluster", "test_container", "test_registry"}
# A test that takes over 20 s on this machine class (a training run of many steps, a kill and resume, a
# docs example end to end) is in the workflow tier, whatever it launches: `make test-fast` keeps the quick
# ones (one short training run, every step's data path) and stays under 10 minutes; `make test` runs all.
SLOW = pytest.mark.workflow
WORKFLOW_MODULES = {"test_workflow", "test_search", "test_scale"}
# What a test runs, found from what it calls: the launches themselves, and every function or fixture of the
# tests that reaches one, through helpers and fixtures (a fixture is reached by naming it as a parameter).
LAUNCHES = {"workflow": ("snakemake",), "mpi": ("MPIEXEC",)}  # the launcher every MPI run of the tests names


def _test_functions() -> dict[str, tuple[set[str], str]]:
    """Every function of tests/*.py (module level and in classes; nested ones belong to theirs), as
    'module:name': the functions it calls, passes on or takes as fixtures (resolved as Python and pytest
    would: its own module's, else the shared conftest's and helpers'), and its source."""
    import ast

    parsed, defined = {}, {}
    for path in sorted(Path(__file__).parent.glob("*.py")):
        source = path.read_text()
        tree = ast.parse(source)
        outer = [n for n in tree.body if isinstance(n, ast.FunctionDef)]
        outer += [
            m
            for c in tree.body
            if isinstance(c, ast.ClassDef)
            for m in c.body
            if isinstance(m, ast.FunctionDef)
        ]
        parsed[path.stem] = (source.splitlines(), outer)
        defined[path.stem] = {f.name for f in outer}
    shared = [m for m in ("conftest", "helpers") if m in defined]

    def resolve(module: str, name: str) -> str | None:
        owner = next((m for m in (module, *shared) if name in defined[m]), None)
        return f"{owner}:{name}" if owner else None

    found: dict[str, tuple[set[str], str]] = {}
    for module, (lines, outer) in parsed.items():
        for function in outer:
            fixtures = {a.arg for a in function.args.args}
            local = {
                n.id for n in ast.walk(function) if isinstance(n, ast.Name) and isinstance(n.ctx, ast.Store)
            }
            names = {getattr(n.func, "attr", "") for n in ast.walk(function) if isinstance(n, ast.Call)}
            # a helper called or passed on (to a fixture's factory, a lambda), unless a local name shadows it
            names |= {
                n.id for n in ast.walk(function) if isinstance(n, ast.Name) and isinstance(n.ctx, ast.Load)
            }
            names = fixtures | (names - local - fixtures)
            called = {r for n in names if (r := resolve(module, n)) and r != f"{module}:{function.name}"}
            # its lines (ast.get_source_segment splits the whole module again for each function: 2 CPU-s a
            # collection, in each worker)
            found[f"{module}:{function.name}"] = (
                called,
                "\n".join(lines[function.lineno - 1 : function.end_lineno]),
            )
    return found


def _reaching(functions: dict[str, tuple[set[str], str]], words: Sequence[str]) -> set[str]:
    """The functions whose own code holds one of `words`, and every function that reaches one of them."""
    reach = {name for name, (_, source) in functions.items() if any(w in source for w in words)}
    while True:
        more = {name for name, (called, _) in functions.items() if called & reach} - reach
        if not more:
            return reach
        reach |= more


_REACH: dict[str, set[str]] = {}


def tier(item: pytest.Item) -> str:
    """A test's tier: site by its module; workflow when marked SLOW; else workflow or mpi when it, its
    fixtures or its helpers (transitively) run snakemake or launch MPI; else unit."""
    module = item.module.__name__.rsplit(".", 1)[-1] if item.module else ""
    if module in SITE_MODULES:
        return "site"
    if item.get_closest_marker("workflow"):  # SLOW
        return "workflow"
    if not _REACH:
        functions = _test_functions()
        _REACH.update({t: _reaching(functions, words) for t, words in LAUNCHES.items()})
    names = {getattr(item, "originalname", item.name), *getattr(item, "fixturenames", ())}
    uses = {f"{m}:{n}" for n in names for m in (module, "conftest", "helpers")}
    if module in WORKFLOW_MODULES or uses & _REACH["workflow"]:
        return "workflow"
    return "mpi" if uses & _REACH["mpi"] else "unit"


# A test's rough cost by its tier, in seconds: to start the longest modules first
TIER_SECONDS = {"site": 0.0, "workflow": 60.0, "mpi": 6.0, "unit": 0.3}


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """Each test's tier as its marker; the site tier first (see pytest_xdist_make_scheduler), then the
    modules longest first, as the tiers of their tests that `-m` selects estimate them: a long module that
    starts last leaves the other worker idle while it runs."""
    from _pytest.mark import MarkMatcher
    from _pytest.mark.expression import Expression

    chosen = Expression.compile(config.option.markexpr) if config.option.markexpr else None
    seconds: dict[str, float] = {}
    for item in items:
        name = tier(item)
        fast = {m.name for m in item.iter_markers()} & {"unit", "mpi"}
        if fast and name in ("workflow", "site"):  # slow tests marked mpi by hand ran in `make test-fast` too
            raise pytest.UsageError(f"{item.nodeid}: marked {sorted(fast)} by hand, and its tier is {name}")
        item.add_marker(getattr(pytest.mark, name))
        module = item.nodeid.split("::", 1)[0]
        if chosen is None or chosen.evaluate(MarkMatcher.from_markers(item.iter_markers())):
            seconds[module] = seconds.get(module, 0.0) - TIER_SECONDS[name]
    # stable: file order among equals
    items.sort(
        key=lambda item: (
            item.get_closest_marker("site") is None,
            seconds.get(item.nodeid.split("::", 1)[0], 0),
        )
    )


def pytest_xdist_make_scheduler(config: pytest.Config, log: Any) -> Any:
    """Under `make test` (pytest-xdist): each test module is one unit of work and the site tier one more,
    sent to a worker first. The site tier shares the image and the cluster, and much of its time waits on
    Slurm, the network and the disk, so one worker runs it from the start while the others take the other
    modules one at a time (two MPI modules at once on one worker's 2 cores only slow each other). A
    scheduler rather than xdist_group marks: pytest-xdist 3.8 renames the grouped tests' node ids in a way
    pytest 9 ignores."""
    from xdist.scheduler import LoadScopeScheduling

    class TierScheduling(LoadScopeScheduling):
        def _split_scope(self, nodeid: str) -> str:
            module = nodeid.split("::", 1)[0]
            return "site" if Path(module).stem in SITE_MODULES else module

    return TierScheduling(config, log)


TOOLS = ["debootstrap=debootstrap", "bwrap=bubblewrap", "ch-run=charliecloud", "mpiexec.mpich=mpich"]
REGISTRY_TOOLS = [
    "docker-registry=docker-registry",
    "skopeo=skopeo",
    "htpasswd=apache2-utils",
    "ch-image=charliecloud-builders",
    "podman=podman",
]
HOST_LAUNCHER = "mpiexec.mpich"  # the host MPI's own launcher (Debian's MPICH hydra)


def unavailable(reason: str) -> None:
    if CI:
        pytest.fail(f"CI=true: {reason}")
    pytest.skip(reason)


def runtime_env() -> dict[str, str]:
    return {**env(), "USER": os.environ.get("USER", "root")}  # ch-run refuses to start without $USER


@pytest.fixture(scope="session")
def image(tmp_path_factory) -> dict:
    """The image in containers/build (built once; a rebuild with unchanged inputs only refreshes sources), as
    `sim2dl image build` reports it, with its build's log under "log"."""
    if os.geteuid() != 0:
        unavailable("building the image needs root (debootstrap, bubblewrap with capabilities)")
    if not all(shutil.which(t.split("=")[0]) for t in TOOLS):
        if shutil.which("apt-get") is None:
            unavailable(f"missing {TOOLS} and no apt-get to install them")
        subprocess.run([str(REPO / "scripts" / "apt_ensure.sh"), *TOOLS], check=True, timeout=1800)
    log = tmp_path_factory.mktemp("image") / "build.log"
    with log.open("w") as err:
        proc = subprocess.run(
            cli_command(["image", "build"], None),
            stdout=subprocess.PIPE,
            stderr=err,
            text=True,
            env=env(),
            timeout=3600,
        )
    assert proc.returncode == 0, log.read_text()[-5000:]
    return {**json.loads(proc.stdout), "log": log.read_text()}


@pytest.fixture(scope="session")
def host_mpi(tmp_path_factory, image) -> Path:
    """Debian's MPICH as one directory (libmpi.so.12 link, UCX, hwloc...), as `sim2dl image host-mpi` makes
    it."""
    out = tmp_path_factory.mktemp("host") / "mpich"
    proc = subprocess.run(
        cli_command(["image", "host-mpi", "--out", str(out)], None),
        capture_output=True,
        text=True,
        env=env(),
        timeout=300,
    )
    assert proc.returncode == 0, proc.stderr
    assert (out / "libmpi.so.12").resolve().name == "libmpich.so.12"
    return out


def charliecloud(host_mpi: Path | None, **extra) -> dict:
    settings = {"runtime": "charliecloud", **extra}
    if host_mpi is not None:
        settings["host_mpi"] = {"enabled": True, "paths": [str(host_mpi)]}
    return settings


def host_library_version() -> str:
    library = hostmpi.system_library()
    assert library is not None and "libmpich" in library.name
    return hostmpi.library_version(library)


def merge_inside_equals_outside(
    tmp_path: Path, container: dict[str, Any], run_env: dict[str, str] | None = None
) -> None:
    """Merge on 2 ranks in the container (the host's MPICH bound in) and outside: the step reports the
    host's MPI library and the image it ran in, and every output file is byte-identical."""
    tmp_path.mkdir(parents=True, exist_ok=True)
    config = make_config(tmp_path, merge={"shard_size_mb": 0.05})
    plain = write_config(tmp_path, config)
    for step in ("simulate", "ingest", "convert"):
        run_cli([step, "--config", str(plain)], ranks=2)
    work = Path(config["workdir"])
    run_cli(["merge", "--config", str(plain), "--out", str(work / "outside")], ranks=2)
    contained = tmp_path / "contained.yaml"
    contained.write_text(yaml.safe_dump({**config, "container": container}))
    cmd = cli_command(
        [
            "launch",
            "--config",
            str(contained),
            "--tasks",
            "2",
            "--mpi",
            HOST_LAUNCHER,
            "merge",
            "--out",
            str(work / "inside"),
        ],
        None,
    )
    proc = subprocess.run(
        cmd, capture_output=True, text=True, env=run_env or runtime_env(), timeout=600, cwd=tmp_path
    )
    assert proc.returncode == 0, proc.stdout + proc.stderr
    summary = json.loads(proc.stdout.strip().splitlines()[-1])
    assert summary["image"] == image_reference(make_config(tmp_path, container=container)["container"])
    assert summary["mpi_library"] == hostmpi.version_line(host_library_version())

    outside = sorted(p.relative_to(work / "outside") for p in (work / "outside").rglob("*") if p.is_file())
    inside = sorted(p.relative_to(work / "inside") for p in (work / "inside").rglob("*") if p.is_file())
    assert inside == outside and len([p for p in inside if p.parts[0] == "shards"]) >= 4
    for rel in outside:
        assert (work / "inside" / rel).read_bytes() == (work / "outside" / rel).read_bytes(), rel


# ------------------------------------------------------------------------- an OCI registry on loopback
@dataclass
class Registry:
    """Debian's docker-registry (the distribution registry) on 127.0.0.1 over HTTPS with a certificate made
    here, optionally requiring a user (htpasswd); stopped by PID."""

    address: str
    ca: Path
    root: Path
    process: subprocess.Popen[bytes]
    user: tuple[str, str] | None = None

    def stop(self) -> None:
        self.process.terminate()
        try:
            self.process.wait(timeout=30)
        except subprocess.TimeoutExpired:
            self.process.kill()
        shutil.rmtree(self.root, ignore_errors=True)


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def self_signed_certificate(out: Path) -> tuple[Path, Path]:
    """A certificate for 127.0.0.1 (subjectAltName IP) and its key; the certificate is its own CA."""
    cert, key = out / "registry.crt", out / "registry.key"
    subprocess.run(
        [
            "openssl",
            "req",
            "-x509",
            "-newkey",
            "rsa:2048",
            "-nodes",
            "-days",
            "2",
            "-subj",
            "/CN=127.0.0.1",
            "-addext",
            "subjectAltName=IP:127.0.0.1",
            "-keyout",
            str(key),
            "-out",
            str(cert),
        ],
        check=True,
        capture_output=True,
        timeout=60,
    )
    return cert, key


def start_registry(root: Path, user: tuple[str, str] | None = None) -> Registry:
    if shutil.which("docker-registry") is None:
        if shutil.which("apt-get") is None or os.geteuid() != 0:
            unavailable("docker-registry is not installed (apt-get install docker-registry)")
        subprocess.run([str(REPO / "scripts" / "apt_ensure.sh"), *REGISTRY_TOOLS], check=True, timeout=1800)
    root.mkdir(parents=True, exist_ok=True)
    cert, key = self_signed_certificate(root)
    port = free_port()
    config: dict[str, Any] = {
        "version": 0.1,
        "log": {"level": "warn"},
        "storage": {"filesystem": {"rootdirectory": str(root / "data")}, "delete": {"enabled": True}},
        "http": {"addr": f"127.0.0.1:{port}", "tls": {"certificate": str(cert), "key": str(key)}},
    }
    if user is not None:
        htpasswd = root / "htpasswd"
        subprocess.run(
            ["htpasswd", "-Bbc", str(htpasswd), *user], check=True, capture_output=True, timeout=60
        )
        config["auth"] = {"htpasswd": {"realm": "sim2dl-test", "path": str(htpasswd)}}
    (root / "config.yml").write_text(yaml.safe_dump(config))
    log = (root / "registry.log").open("wb")
    process = subprocess.Popen(["docker-registry", "serve", str(root / "config.yml")], stdout=log, stderr=log)
    registry = Registry(f"127.0.0.1:{port}", cert, root, process, user)
    context = ssl.create_default_context(cafile=str(cert))
    for _ in range(100):
        try:
            urllib.request.urlopen(f"https://{registry.address}/v2/", timeout=2, context=context)
            return registry
        except urllib.error.HTTPError:  # 401: up, and asking for credentials
            return registry
        except OSError:
            if process.poll() is not None:
                break
            time.sleep(0.1)
    registry.stop()
    raise RuntimeError(f"the registry did not start: {(root / 'registry.log').read_text()[-2000:]}")

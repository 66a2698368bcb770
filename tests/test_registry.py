"""The image through a real OCI registry: Debian's docker-registry on loopback over HTTPS (a certificate made
here), `sim2dl image push` (skopeo), `sim2dl image pull` into podman and into charliecloud (ch-image +
ch-convert), then a 2-rank step in each pulled image with the host's MPICH bound in. Failures (registry
down, unknown tag, missing credentials) must be explained and leave nothing behind.

Shifter, Apptainer, enroot/pyxis, Sarus and podman-hpc cannot run here: their pull commands are checked
as exact argument vectors (test_pull_commands_are_what_each_runtime_s_users_type) and their run commands in
test_launch. Needs root and apt for the tools on a fresh machine; under CI=true it never skips.
"""

from __future__ import annotations

import base64
import gzip
import hashlib
import io
import json
import os
import resource
import shutil
import subprocess
import tarfile
from pathlib import Path
from typing import Any

import pytest
import yaml

from pipeline import Sim2dlError
from pipeline.runtime.container_image import image_environment
from pipeline.runtime.oci_registry import RegistryRef, parse_reference, pull_plan, push_plan, remote_digest

from .conftest import (
    REGISTRY_TOOLS,
    REPO,
    Registry,
    charliecloud,
    cli_command,
    env,
    make_config,
    merge_inside_equals_outside,
    runtime_env,
    start_registry,
    unavailable,
)

pytestmark = pytest.mark.timeout(3000)
USER = ("sim2dl", "pa ss;$(word)")


def tools() -> None:
    if all(shutil.which(t.split("=")[0]) for t in REGISTRY_TOOLS):
        return
    if shutil.which("apt-get") is None or os.geteuid() != 0:
        unavailable(f"missing some of {REGISTRY_TOOLS} and no root/apt-get to install them")
    subprocess.run([str(REPO / "scripts" / "apt_ensure.sh"), *REGISTRY_TOOLS], check=True, timeout=1800)


@pytest.fixture(scope="module")
def registry(tmp_path_factory):
    tools()
    server = start_registry(tmp_path_factory.mktemp("registry"))
    yield server
    server.stop()


@pytest.fixture(scope="module")
def auth_registry(tmp_path_factory):
    tools()
    server = start_registry(tmp_path_factory.mktemp("auth-registry"), USER)
    yield server
    server.stop()


@pytest.fixture(scope="module")
def podman_env(tmp_path_factory) -> dict[str, str]:
    """podman on this VM: runc with cgroupfs, and explicit ulimits (its defaults are above what root may set
    here): a containers.conf of the test's own, as a site would configure podman."""
    nofile = min(resource.getrlimit(resource.RLIMIT_NOFILE)[1], 20000)
    conf = tmp_path_factory.mktemp("podman") / "containers.conf"
    conf.write_text(
        f'[containers]\ndefault_ulimits = ["nofile={nofile}:{nofile}", "nproc=20000:20000"]\n'
        '[engine]\nruntime = "runc"\ncgroup_manager = "cgroupfs"\nevents_logger = "file"\n'
    )
    return {**runtime_env(), "CONTAINERS_CONF": str(conf)}


@pytest.fixture(scope="module")
def oci_archive(image):
    """`sim2dl image build --format oci` (podman import + save), removed after the module (2 GB)."""
    tools()
    proc = subprocess.run(
        cli_command(["image", "build", "--format", "oci"], None),
        capture_output=True,
        text=True,
        env=env(),
        timeout=1800,
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    archive = Path(json.loads(proc.stdout)["outputs"]["oci"])
    yield archive
    image_id = config_digest(archive)  # podman's id of the imported image, and of the same image pulled
    archive.unlink(missing_ok=True)
    archive.with_name(archive.name + ".json").unlink(missing_ok=True)
    subprocess.run(["podman", "rmi", "-f", image_id], capture_output=True, timeout=300)


def config_digest(archive: Path) -> str:
    with tarfile.open(archive) as tar:
        index = json.load(tar.extractfile("index.json"))
        manifest = json.load(tar.extractfile(f"blobs/sha256/{index['manifests'][0]['digest'].split(':')[1]}"))
    return manifest["config"]["digest"].removeprefix("sha256:")


def image_cli(
    args: list[str],
    container: dict[str, Any],
    tmp_path: Path,
    extra_env: dict[str, str] | None = None,
    timeout: float = 1800,
) -> subprocess.CompletedProcess[str]:
    """`sim2dl image ARGS` with the demo config and `container` overrides."""
    overrides = tmp_path / f"container-{len(list(tmp_path.glob('container-*')))}.yaml"
    overrides.write_text(yaml.safe_dump({"container": container}))
    command = cli_command(["image", *args, "--overrides", str(overrides)], None)
    run_env = {**runtime_env(), **(extra_env or {})}
    return subprocess.run(command, capture_output=True, text=True, env=run_env, timeout=timeout, cwd=tmp_path)


def settings(**container: Any) -> dict[str, Any]:
    return make_config(Path("/tmp/unused"), container=container)["container"]


def leftovers(directory: Path) -> list[str]:
    return sorted(p.name for p in directory.glob(".*pull-*")) if directory.exists() else []


# ------------------------------------------------------------------------------------ the real round trip


def test_oci_archive_holds_the_image_with_its_environment(oci_archive):
    """`sim2dl image build --format oci`: an OCI archive whose config carries the image environment and
    whose one layer is the whole root, for a push, podman load or apptainer build."""
    with tarfile.open(oci_archive) as tar:

        def blob(digest: str) -> dict:
            return json.load(tar.extractfile(f"blobs/sha256/{digest.removeprefix('sha256:')}"))

        assert json.load(tar.extractfile("oci-layout"))["imageLayoutVersion"] == "1.0.0"
        manifest = blob(json.load(tar.extractfile("index.json"))["manifests"][0]["digest"])
        config = blob(manifest["config"]["digest"])
    env_lines = config["config"]["Env"]
    assert "TF_USE_LEGACY_KERAS=1" in env_lines and f"PATH={image_environment()['PATH']}" in env_lines
    assert config["config"]["WorkingDir"] == "/opt/sim2dl"
    assert len(manifest["layers"]) == 1 and manifest["layers"][0]["size"] > 3e8


def test_pushed_image_is_pulled_by_podman_and_charliecloud_and_runs_a_step_on_the_host_mpi(
    tmp_path, image, host_mpi, registry: Registry, oci_archive, podman_env
):
    """build -> push -> local copies removed -> pull with podman and with charliecloud -> merge on 2 ranks
    in each pulled image with the host's MPICH bound in, byte-identical to merge outside. The digest the
    push reports is what the registry serves, what podman stored and the manifest charliecloud pulled."""
    tls = {"registry_ca": str(registry.ca)}
    pushed = image_cli(["push", f"{registry.address}/sim2dl"], tls, tmp_path)  # the tag from config: 0.1.0
    assert pushed.returncode == 0, pushed.stderr[-3000:]
    result = json.loads(pushed.stdout)
    ref = parse_reference(result["pushed"], "")
    assert ref == RegistryRef(registry.address, "sim2dl", "0.1.0") and result["archive"] == str(oci_archive)
    digest = result["digest"]
    assert digest.startswith("sha256:") and remote_digest(ref, settings(**tls)) == digest

    image_id = config_digest(oci_archive)
    # every local name of it
    subprocess.run(["podman", "rmi", "-f", image_id], capture_output=True, timeout=300)
    assert subprocess.run(["podman", "image", "exists", image_id], timeout=60).returncode == 1
    name = f"{registry.address}/sim2dl"
    pulled_dir, storage = tmp_path / "pulled", tmp_path / "ch-image"
    try:
        # podman
        pod = {"runtime": "podman", "name": name, **tls}
        proc = image_cli(["pull"], pod, tmp_path, podman_env)
        assert proc.returncode == 0, proc.stderr[-3000:]
        assert json.loads(proc.stdout)["digest"] == digest
        stored = subprocess.run(
            ["podman", "image", "inspect", "--format", "{{.Digest}}", str(ref)],
            capture_output=True,
            text=True,
            timeout=120,
        )
        assert stored.stdout.strip() == digest

        # charliecloud: ch-image pull, ch-convert to a directory image where the config names it
        ch = {"runtime": "charliecloud", "name": name, "image": str(pulled_dir / "sim2dl"), **tls}
        proc = image_cli(["pull"], ch, tmp_path, {"CH_IMAGE_STORAGE": str(storage)})
        assert proc.returncode == 0, proc.stderr[-3000:]
        assert (pulled_dir / "sim2dl" / "opt" / "venv" / "bin" / "python").exists() and not leftovers(
            pulled_dir
        )
        manifests = list((storage / "dlcache").glob("*.manifest.json"))
        assert (
            len(manifests) == 1
            and "sha256:" + hashlib.sha256(manifests[0].read_bytes()).hexdigest() == digest
        )
        assert not list((storage / "img").iterdir())  # the unpacked copy in ch-image's storage is deleted
        again = image_cli(["pull", "--missing"], ch, tmp_path)  # `make demo`: present, so nothing to do
        assert again.returncode == 0 and json.loads(again.stdout)["pulled"] is None

        merge_inside_equals_outside(tmp_path / "in-charliecloud", charliecloud(host_mpi, **ch))
        host = {"host_mpi": {"enabled": True, "paths": [str(host_mpi)]}, "podman_timeout_s": 600}
        merge_inside_equals_outside(tmp_path / "in-podman", {**pod, **host}, podman_env)
    finally:
        subprocess.run(["podman", "rmi", "-f", image_id], capture_output=True, timeout=300)
        shutil.rmtree(pulled_dir, ignore_errors=True)
        shutil.rmtree(storage, ignore_errors=True)


# --------------------------------------------------------------------------------------------- failures


def tiny_oci_archive(path: Path) -> Path:
    """A one-file image as an OCI archive, written here (so the failure tests need no 2 GB image)."""
    layer_tar = io.BytesIO()
    with tarfile.open(fileobj=layer_tar, mode="w") as tar:
        data = b"sim2dl registry test\n"
        info = tarfile.TarInfo("hello.txt")
        info.size = len(data)
        tar.addfile(info, io.BytesIO(data))
    layer = gzip.compress(layer_tar.getvalue(), mtime=0)
    config = json.dumps(
        {
            "architecture": "amd64",
            "os": "linux",
            "config": {"Env": ["PATH=/bin"]},
            "history": [{"created": "2026-01-01T00:00:00Z", "created_by": "tests/test_registry.py"}],
            "rootfs": {
                "type": "layers",
                "diff_ids": ["sha256:" + hashlib.sha256(layer_tar.getvalue()).hexdigest()],
            },
        }
    ).encode()

    def descriptor(media_type: str, blob: bytes) -> dict[str, Any]:
        return {
            "mediaType": media_type,
            "digest": "sha256:" + hashlib.sha256(blob).hexdigest(),
            "size": len(blob),
        }

    oci = "application/vnd.oci.image."
    manifest = json.dumps(
        {
            "schemaVersion": 2,
            "mediaType": oci + "manifest.v1+json",
            "config": descriptor(oci + "config.v1+json", config),
            "layers": [descriptor(oci + "layer.v1.tar+gzip", layer)],
        }
    ).encode()
    index = json.dumps(
        {"schemaVersion": 2, "manifests": [descriptor(oci + "manifest.v1+json", manifest)]}
    ).encode()
    files = {"oci-layout": b'{"imageLayoutVersion": "1.0.0"}', "index.json": index}
    for blob in (layer, config, manifest):
        files[f"blobs/sha256/{hashlib.sha256(blob).hexdigest()}"] = blob
    with tarfile.open(path, "w") as tar:
        for name, blob in files.items():
            info = tarfile.TarInfo(name)
            info.size = len(blob)
            tar.addfile(info, io.BytesIO(blob))
    return path


def test_registry_failures_are_explained_and_leave_nothing_behind(
    tmp_path, registry, auth_registry, podman_env
):
    tiny = tiny_oci_archive(tmp_path / "tiny.oci.tar")
    open_tls = {"registry_ca": str(registry.ca)}
    auth_tls = {"registry_ca": str(auth_registry.ca)}
    authfile = tmp_path / "auth.json"
    user, password = USER  # a password with a space, ';' and '$(...)' travels as data, never through a shell
    token = base64.b64encode(f"{user}:{password}".encode()).decode()
    authfile.write_text(json.dumps({"auths": {auth_registry.address: {"auth": token}}}))
    with_user = {**auth_tls, "registry_auth_file": str(authfile)}
    tiny_ref = RegistryRef(auth_registry.address, "team/tiny", "1")

    # an unauthenticated push to a registry that requires a user: refused, and no tag appears
    proc = image_cli(["push", str(tiny_ref), "--archive", str(tiny)], auth_tls, tmp_path)
    assert (
        proc.returncode == 2 and "requires credentials" in proc.stderr and "registry_auth_file" in proc.stderr
    )
    assert remote_digest(tiny_ref, settings(**with_user)) is None
    # with the credentials file: pushed, and the registry serves the digest the push reported
    proc = image_cli(["push", str(tiny_ref), "--archive", str(tiny)], with_user, tmp_path)
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert remote_digest(tiny_ref, settings(**with_user)) == json.loads(proc.stdout)["digest"]
    # charliecloud pulls with the same credentials (ch-image --auth)
    ch_auth = {
        "runtime": "charliecloud",
        "name": f"{auth_registry.address}/team/tiny",
        "tag": "1",
        "image": str(tmp_path / "ch" / "tiny"),
        **with_user,
    }
    proc = image_cli(["pull"], ch_auth, tmp_path, {"CH_IMAGE_STORAGE": str(tmp_path / "store")})
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert (tmp_path / "ch" / "tiny" / "hello.txt").read_text() == "sim2dl registry test\n"

    # an unknown tag: named, with the tags the registry has; nothing written
    open_ref = f"{registry.address}/team/tiny"
    assert image_cli(["push", f"{open_ref}:1", "--archive", str(tiny)], open_tls, tmp_path).returncode == 0
    for runtime, extra in (
        ("charliecloud", {"CH_IMAGE_STORAGE": str(tmp_path / "store")}),
        ("podman", podman_env),
    ):
        target = tmp_path / "wrong" / "tiny"
        wrong = {"runtime": runtime, "name": open_ref, "tag": "2", "image": str(target), **open_tls}
        proc = image_cli(["pull"], wrong, tmp_path, extra)
        assert proc.returncode == 2, runtime
        assert (
            f"{open_ref}:2: no such image or tag in registry {registry.address}; it has 1" in proc.stderr
        ), runtime
        assert not target.exists() and not leftovers(target.parent), runtime
    exists = subprocess.run(["podman", "image", "exists", f"{open_ref}:2"], capture_output=True, timeout=60)
    assert exists.returncode == 1

    # a registry that is down: said so, for pull and push, and nothing written
    port = registry.address.rpartition(":")[2]
    down = f"127.0.0.1:{int(port) + 1 if int(port) < 65535 else 1024}"
    for args, container in (
        (
            ["pull"],
            {"runtime": "charliecloud", "name": f"{down}/tiny", "image": str(tmp_path / "down" / "t")},
        ),
        (["pull"], {"runtime": "podman", "name": f"{down}/tiny"}),
        (["push", f"{down}/tiny:1", "--archive", str(tiny)], {}),
    ):
        proc = image_cli(
            args,
            {**container, **open_tls},
            tmp_path,
            {"CH_IMAGE_STORAGE": str(tmp_path / "store"), **podman_env},
        )
        assert proc.returncode == 2 and f"registry {down} is not reachable" in proc.stderr, (
            args,
            proc.stderr[-1500:],
        )
    assert not (tmp_path / "down" / "t").exists() and not leftovers(tmp_path / "down")
    shutil.rmtree(tmp_path / "store", ignore_errors=True)


# ----------------------------------------------------------------------- argument vectors, without tools


def test_references_name_their_registry_and_take_the_configured_tag():
    assert parse_reference("ghcr.io/org/sim2dl", "0.1.0") == RegistryRef("ghcr.io", "org/sim2dl", "0.1.0")
    assert parse_reference("127.0.0.1:5000/sim2dl:v2", "x") == RegistryRef("127.0.0.1:5000", "sim2dl", "v2")
    assert parse_reference("localhost/a/b:1", "x").enroot_uri == "docker://localhost#a/b:1"
    for bad, why in (
        ("sim2dl:0.1.0", "names no registry"),
        ("org/sim2dl", "names no registry"),
        ("ghcr.io/org/x@sha256:ab", "not a digest"),
    ):
        with pytest.raises(Sim2dlError, match=why):
            parse_reference(bad, "0.1.0")


def test_pull_commands_are_what_each_runtime_s_users_type(tmp_path):
    """One plan per runtime, exact: the runtimes that cannot be installed here get the commands their
    documentation gives; file-writing runtimes write under a temporary name renamed on success."""
    ref = RegistryRef("ghcr.io", "org/sim2dl", "1.0")
    common = {"name": "ghcr.io/org/sim2dl", "tag": "1.0", "build_dir": str(tmp_path / "img")}
    pid = os.getpid()

    def plan(runtime: str, **extra: Any):
        return pull_plan(settings(runtime=runtime, **common, **extra), ref)

    assert plan("podman").commands == [["podman", "pull", "docker://ghcr.io/org/sim2dl:1.0"]]
    assert plan("podman-hpc").commands == [
        ["podman-hpc", "pull", "docker://ghcr.io/org/sim2dl:1.0"],
        ["podman-hpc", "migrate", "ghcr.io/org/sim2dl:1.0"],
    ]
    assert plan("shifter").commands == [["shifterimg", "pull", "docker:ghcr.io/org/sim2dl:1.0"]]
    assert plan("sarus").commands == [["sarus", "pull", "ghcr.io/org/sim2dl:1.0"]]
    sif = tmp_path / "img" / "ghcr.io_org_sim2dl_1.0.sif"
    apptainer = plan("apptainer")
    assert (
        apptainer.commands
        == [
            [
                "apptainer",
                "pull",
                str(sif.with_name(f".{sif.name}.pull-{pid}.sif")),
                "docker://ghcr.io/org/sim2dl:1.0",
            ]
        ]
        and apptainer.target == sif
    )
    assert plan("singularity", registry_tls_verify=False).commands[0][2] == "--nohttps"
    assert plan("apptainer", registry_tls_verify=False).commands[0][2] == "--no-https"
    sqsh = tmp_path / "img" / "ghcr.io_org_sim2dl_1.0.sqsh"
    enroot = plan("enroot", registry_tls_verify=False)
    assert enroot.commands == [
        [
            "enroot",
            "import",
            "-o",
            str(sqsh.with_name(f".{sqsh.name}.pull-{pid}.sqsh")),
            "docker://ghcr.io#org/sim2dl:1.0",
        ]
    ]
    assert enroot.target == sqsh and enroot.env == {"ENROOT_ALLOW_HTTP": "yes"}
    ch = plan("charliecloud", registry_ca="/etc/my ca.pem")
    directory = tmp_path / "img" / "ghcr.io_org_sim2dl_1.0"
    assert ch.commands == [
        ["ch-image", "pull", "--no-cache", "ghcr.io/org/sim2dl:1.0"],
        [
            "ch-convert",
            "-i",
            "ch-image",
            "-o",
            "dir",
            "ghcr.io/org/sim2dl:1.0",
            str(directory.with_name(f".{directory.name}.pull-{pid}")),
        ],
        ["ch-image", "delete", "ghcr.io/org/sim2dl:1.0"],
    ]
    assert ch.env == {"REQUESTS_CA_BUNDLE": "/etc/my ca.pem"} and ch.target == directory
    # container.gpus: the host's NVIDIA libraries go into the directory image before it gets its name
    assert plan("charliecloud", gpus=True).commands == [
        *ch.commands,
        ["ch-fromhost", "--nvidia", ch.commands[1][-1]],
    ]
    with pytest.raises(Sim2dlError, match=r"container\.gpus.*directory image"):
        plan("charliecloud", gpus=True, image=str(tmp_path / "x.sqfs"))
    squash = plan("charliecloud", image=str(tmp_path / "x.sqfs"), registry_tls_verify=False)
    assert squash.commands[0][3] == "--tls-no-verify" and squash.commands[1][4] == "squash"
    assert squash.env == {"REQUESTS_CA_BUNDLE": None}  # it would win over --tls-no-verify
    # a pulled name other than the configured one: podman tags it so steps find it
    other = pull_plan(settings(runtime="podman", name="sim2dl", tag="1.0"), ref)
    assert other.commands[1] == ["podman", "tag", "ghcr.io/org/sim2dl:1.0", "sim2dl:1.0"]
    with pytest.raises(Sim2dlError, match="nothing to pull an image into"):
        plan("none")
    push = push_plan(
        settings(registry_tls_verify=False, registry_auth_file="/a b/auth.json"),
        ref,
        Path("/b/x.oci.tar"),
        Path("/t/digest"),
        None,
    )
    assert push.commands == [
        [
            "skopeo",
            "copy",
            "--digestfile=/t/digest",
            "--dest-tls-verify=false",
            "--dest-authfile=/a b/auth.json",
            "oci-archive:/b/x.oci.tar",
            "docker://ghcr.io/org/sim2dl:1.0",
        ]
    ]

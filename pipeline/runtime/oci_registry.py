"""registry: publish the sim2dl image to an OCI registry and pull it into what each runtime runs.

    sim2dl image push [REF]    the built image's OCI archive -> REF (skopeo copy; prints the digest)
    sim2dl image pull [REF]    REF -> the configured runtime, the way its users pull:
        podman          podman pull docker://REF (tagged as the configured name when REF differs)
        podman-hpc      podman-hpc pull docker://REF; podman-hpc migrate (squashed for the compute nodes)
        charliecloud    ch-image pull REF; ch-convert -i ch-image -o dir|squash REF build_dir/NAME_TAG
        apptainer       apptainer pull build_dir/NAME_TAG.sif docker://REF (singularity likewise)
        shifter         shifterimg pull docker:REF
        enroot          enroot import -o build_dir/NAME_TAG.sqsh docker://HOST#PATH:TAG (pyxis runs the file)
        sarus           sarus pull REF

REF is HOST[:PORT]/PATH[:TAG]; without it, `container.name:container.tag` (the name then has to start with
the registry, e.g. ghcr.io/ORG/sim2dl). A REF without a tag gets `container.tag`.

Each pull is planned first (`pull_plan`: the argument vectors, the environment they need and the file or
directory they write), then run. A runtime that writes a file or directory writes it under a temporary
name that is renamed only when the pull completed, so a failed pull leaves nothing behind; a registry
makes a tag visible only after its manifest arrived, so a failed push leaves no tag either. Failures are
explained from the tool's output: registry not reachable, name or tag unknown (with the tags it has),
credentials missing, certificate not trusted.

TLS and credentials (config `container:`): `registry_tls_verify: false` for plain HTTP or an unverified
certificate (a registry on loopback), `registry_ca` for a registry with a private CA, `registry_auth_file`
for the containers-auth.json that `podman login` / `skopeo login --authfile` write (podman, podman-hpc and
skopeo read it; the other runtimes log in their own way: `ch-image --auth`, `apptainer registry login`,
`shifterimg login`, enroot's credentials file, `sarus pull --login`).

Memory is constant; time is the transfer of the image (about 0.7 GB compressed) plus, for charliecloud,
unpacking it.
"""

from __future__ import annotations

import base64
import json
import os
import shutil
import ssl
import sys
import tempfile
import urllib.error
import urllib.request
from collections.abc import Callable, Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from pipeline import Sim2dlError
from pipeline.runtime.container_image import image_reference, image_tag, replace_dir, run_logged
from pipeline.runtime.runtimes import Plan, runtime_of
from pipeline.runtime.runtimes.base import containers_options, registry_credentials

DEFAULT_REGISTRY_HINT = "e.g. ghcr.io/ORG/sim2dl:0.1.0, or set container.name: ghcr.io/ORG/sim2dl"


@dataclass(frozen=True)
class RegistryRef:
    """An image in a registry: HOST[:PORT] / PATH : TAG."""

    registry: str
    repository: str
    tag: str

    def __str__(self) -> str:
        return f"{self.registry}/{self.repository}:{self.tag}"

    @property
    def docker_uri(self) -> str:
        return f"docker://{self}"

    @property
    def enroot_uri(self) -> str:
        # enroot separates the registry from the path with '#'
        return f"docker://{self.registry}#{self.repository}:{self.tag}"


def parse_reference(text: str, default_tag: str) -> RegistryRef:
    """HOST[:PORT]/PATH[:TAG] -> RegistryRef; the host must be explicit (a name with a dot or a port, or
    localhost), so an image never goes to a registry by accident of a short name."""
    if "@" in text:
        raise Sim2dlError(f"image reference '{text}': push and pull take a tag, not a digest")
    head, _, last = text.rpartition("/")
    name, tag = (
        (f"{head}/{last}", default_tag)
        if ":" not in last
        else (f"{head}/{last.partition(':')[0]}", last.partition(":")[2])
    )
    host, _, path = name.partition("/")
    if not head or not path or not ("." in host or ":" in host or host == "localhost"):
        raise Sim2dlError(
            f"image reference '{text}' names no registry: write HOST[:PORT]/NAME[:TAG], "
            f"{DEFAULT_REGISTRY_HINT}"
        )
    if not tag or any(c.isspace() for c in text):
        raise Sim2dlError(f"image reference '{text}': empty tag or white space")
    return RegistryRef(host, path, tag)


def configured_reference(settings: Mapping[str, Any], given: str | None) -> RegistryRef:
    """REF from the command line, or the configured name:tag."""
    return parse_reference(given or f"{settings['name']}:{image_tag(settings)}", image_tag(settings))


# ---------------------------------------------------------------------------------------------- plans


def push_plan(
    settings: Mapping[str, Any], ref: RegistryRef, archive: Path, digest_file: Path, cert_dir: Path | None
) -> Plan:
    argv = [
        "skopeo",
        "copy",
        f"--digestfile={digest_file}",
        *containers_options(settings, cert_dir, "dest-"),
        f"oci-archive:{archive}",
        ref.docker_uri,
    ]
    return Plan("skopeo", [argv])


def pull_plan(settings: Mapping[str, Any], ref: RegistryRef, cert_dir: Path | None = None) -> Plan:
    """The commands that bring `ref` into the configured runtime, as its users would type them (the
    runtime's own, pipeline/runtime/runtimes/)."""
    return runtime_of(settings).pull(settings, ref, image_reference(settings), cert_dir)


# ------------------------------------------------------------------------------------------ execution


@contextmanager
def _cert_dir(settings: Mapping[str, Any]) -> Iterator[Path | None]:
    """podman and skopeo want a directory of *.crt files: one holding a link to registry_ca."""
    ca = settings["registry_ca"]
    if not ca or not settings["registry_tls_verify"]:
        yield None
        return
    ca = Path(ca).expanduser()
    if not ca.is_file():
        raise Sim2dlError(f"container.registry_ca: {ca} is not a file (the registry's CA certificate, PEM)")
    with tempfile.TemporaryDirectory(prefix="sim2dl-certs-") as d:
        (Path(d) / "ca.crt").symlink_to(ca.resolve())
        yield Path(d)


def _tool_environment(changes: Mapping[str, str | None]) -> dict[str, str]:
    env = dict(os.environ)
    env.setdefault("USER", os.environ.get("LOGNAME", "root"))  # ch-image refuses to start without it
    for key, value in changes.items():
        if value is None:
            env.pop(key, None)
        else:
            env[key] = value
    return env


def explain(output: str, ref: RegistryRef, action: str, settings: Mapping[str, Any]) -> str:
    """One sentence a person can act on, from a registry tool's output."""
    low = output.lower()
    last = next((line.strip() for line in reversed(output.splitlines()) if line.strip()), "no output")
    if any(
        s in low for s in ("certificate verify failed", "x509:", "sslerror", "certificate signed by unknown")
    ):
        return (
            f"{action} {ref}: the TLS certificate of {ref.registry} is not trusted ({last}); set "
            "container.registry_ca to its CA certificate, or container.registry_tls_verify: false for a "
            "registry on loopback"
        )
    if any(
        s in low
        for s in (
            "connection refused",
            "no such host",
            "network is unreachable",
            "i/o timeout",
            "failed to establish a new connection",
            "could not resolve host",
            "name or service not known",
            "connection reset",
            "max retries exceeded",
        )
    ):
        return (
            f"{action} {ref}: registry {ref.registry} is not reachable ({last}); is it running, is the "
            "address right, and can this node reach it?"
        )
    denied = any(
        s in low for s in ("unauthorized", "authentication required", "401", "access denied", "denied:")
    )
    missing = any(
        s in low
        for s in ("manifest unknown", "not found", "404", "name unknown", "does not exist", "not in registry")
    )
    if denied or missing:
        # tools word these alike ("unauthorized or not in registry"): ask the registry which it is
        state = tag_state(ref, settings)
        if state == "unauthorized" or (denied and (action == "push" or state != "absent")):
            return (
                f"{action} {ref}: registry {ref.registry} requires credentials that were not given or not "
                f"accepted ({last}); log in (podman login --authfile FILE {ref.registry}) and set "
                "container.registry_auth_file: FILE"
            )
        if state == "absent" and action == "pull":
            tags = remote_tags(ref, settings)
            have = f"; it has {', '.join(sorted(tags))}" if tags else ""
            return f"{action} {ref}: no such image or tag in registry {ref.registry}{have}"
    return f"{action} {ref} failed: {last}"


def _open(
    url: str, settings: Mapping[str, Any], method: str = "GET", headers: Mapping[str, str] | None = None
):
    context = ssl.create_default_context(cafile=settings["registry_ca"] or None)
    if not settings["registry_tls_verify"]:
        context.check_hostname, context.verify_mode = False, ssl.CERT_NONE
    request = urllib.request.Request(url, method=method, headers=dict(headers or {}))
    return urllib.request.urlopen(request, timeout=10, context=context)


def _registry_get(
    ref: RegistryRef,
    path: str,
    settings: Mapping[str, Any],
    method: str = "GET",
    headers: Mapping[str, str] | None = None,
):
    """The registry API over HTTPS, or plain HTTP when verification is off and HTTPS fails."""
    schemes = ["https"] if settings["registry_tls_verify"] else ["https", "http"]
    auth = _basic_auth(ref, settings)
    error: Exception | None = None
    for scheme in schemes:
        try:
            return _open(
                f"{scheme}://{ref.registry}/v2/{path}", settings, method, {**(headers or {}), **auth}
            )
        except urllib.error.HTTPError:
            raise
        except (urllib.error.URLError, OSError) as e:
            error = e
    raise error if error else OSError("no scheme")


def _basic_auth(ref: RegistryRef, settings: Mapping[str, Any]) -> dict[str, str]:
    user = registry_credentials(ref, settings)
    return (
        {"Authorization": "Basic " + base64.b64encode(f"{user[0]}:{user[1]}".encode()).decode()}
        if user
        else {}
    )


def remote_tags(ref: RegistryRef, settings: Mapping[str, Any]) -> list[str]:
    """The tags the registry has for ref's repository ([] when it cannot say)."""
    try:
        with _registry_get(ref, f"{ref.repository}/tags/list", settings) as response:
            return list(json.load(response).get("tags") or [])
    except (OSError, ValueError, urllib.error.HTTPError):
        return []


MANIFEST_TYPES = ", ".join(
    [
        "application/vnd.oci.image.manifest.v1+json",
        "application/vnd.oci.image.index.v1+json",
        "application/vnd.docker.distribution.manifest.v2+json",
        "application/vnd.docker.distribution.manifest.list.v2+json",
    ]
)


def _manifest_head(ref: RegistryRef, settings: Mapping[str, Any]):
    """HEAD of ref's manifest (HTTPError 404: no such tag, 401/403: credentials wanted)."""
    return _registry_get(
        ref, f"{ref.repository}/manifests/{ref.tag}", settings, "HEAD", {"Accept": MANIFEST_TYPES}
    )


def tag_state(ref: RegistryRef, settings: Mapping[str, Any]) -> str:
    """'present', 'absent', 'unauthorized' (the registry wants credentials it was not given) or 'unknown'."""
    try:
        with _manifest_head(ref, settings):
            return "present"
    except urllib.error.HTTPError as e:
        return {401: "unauthorized", 403: "unauthorized", 404: "absent"}.get(e.code, "unknown")
    except (OSError, Sim2dlError):
        return "unknown"


def remote_digest(ref: RegistryRef, settings: Mapping[str, Any]) -> str | None:
    """The digest of ref's manifest as the registry serves it (None when it has no such tag)."""
    try:
        with _manifest_head(ref, settings) as response:
            return response.headers.get("Docker-Content-Digest")
    except urllib.error.HTTPError as e:
        if e.code == 404:
            return None
        raise Sim2dlError(f"registry {ref.registry} answered {e.code} for {ref}") from e


def _run_plan(
    plan: Plan, ref: RegistryRef, action: str, settings: Mapping[str, Any], log: Callable[[str], None]
) -> None:
    env = _tool_environment(plan.env)
    try:
        for argv in plan.commands:
            log("image: " + " ".join(argv))
            code, output = run_logged(argv, env)
            if code != 0:
                raise Sim2dlError(explain(output, ref, action, settings))
        if plan.target is not None and plan.partial is not None:
            if not plan.partial.exists():
                raise Sim2dlError(
                    f"{action} {ref}: {plan.commands[-1][0]} finished but wrote no {plan.partial}"
                )
            if plan.partial.is_dir():
                replace_dir(plan.partial, plan.target)
            else:
                os.replace(plan.partial, plan.target)
    finally:
        if plan.partial is not None and plan.partial.exists():
            (shutil.rmtree if plan.partial.is_dir() else Path.unlink)(plan.partial)


def push(
    settings: Mapping[str, Any],
    ref: RegistryRef,
    archive: Path,
    log: Callable[[str], None] = lambda s: print(s, file=sys.stderr, flush=True),
) -> dict[str, Any]:
    """Copy the OCI archive to the registry; returns the reference and the manifest digest."""
    if not archive.is_file():
        raise Sim2dlError(f"image push: no OCI archive at {archive} (sim2dl image build --format oci)")
    with tempfile.TemporaryDirectory(prefix="sim2dl-push-") as tmp, _cert_dir(settings) as certs:
        digest_file = Path(tmp) / "digest"
        _run_plan(push_plan(settings, ref, archive, digest_file, certs), ref, "push", settings, log)
        digest = digest_file.read_text().strip()
    return {
        "pushed": str(ref),
        "digest": digest,
        "archive": str(archive),
        "archive_bytes": archive.stat().st_size,
    }


def pull(
    settings: Mapping[str, Any],
    ref: RegistryRef,
    log: Callable[[str], None] = lambda s: print(s, file=sys.stderr, flush=True),
) -> dict[str, Any]:
    """Bring ref into the configured runtime; returns what the runtime now runs."""
    with _cert_dir(settings) as certs:
        plan = pull_plan(settings, ref, certs)
        if plan.target is not None:
            plan.target.parent.mkdir(parents=True, exist_ok=True)
            # an interrupted earlier pull
            for stale in plan.target.parent.glob(f".{plan.target.name}.pull-*"):
                shutil.rmtree(stale) if stale.is_dir() else stale.unlink()
        _run_plan(plan, ref, "pull", settings, log)
    for note in plan.notes:
        log(f"image: note: {note}")
    try:
        digest = remote_digest(ref, settings)
    except (Sim2dlError, OSError):  # the pull succeeded; the registry's API may be out of this node's reach
        digest = None
    return {
        "pulled": str(ref),
        "digest": digest,
        "runtime": plan.runtime,
        "image": plan.image,
        "commands": [list(c) for c in plan.commands],
    }

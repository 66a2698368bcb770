"""image: build the sim2dl container image on a machine with no container registry, and name it per runtime.

`sim2dl image build` makes a Debian root with `debootstrap` from the apt mirror, runs the same
containers/install.sh that the Containerfile runs (inside a bubblewrap sandbox, so nothing is mounted on
the host afterwards), and writes, under container.build_dir:

    NAME_TAG/          the image as a directory (charliecloud `ch-run`, bubblewrap, chroot)
    NAME_TAG.sqfs      the same as squashfs (`ch-run` on clusters; `--format squashfs`)
    NAME_TAG.oci.tar   an OCI archive (`--format oci`, needs podman): `podman load`, `apptainer build
                       NAME.sif oci-archive://NAME_TAG.oci.tar`, or push to a registry for Shifter

The expensive part (system packages, TensorFlow, Horovod) depends only on the install inputs; a rebuild
after a source change copies the new sources into the existing image (sim2dl is installed editable at
/opt/sim2dl). Each output is written under a temporary name and renamed when complete. Horovod comes from
the wheel `make env` built and kept (wheel_cache) when its key matches the image's; otherwise the image
compiles its own.

`container.variant: gpu` builds the GPU variant, tagged TAG-gpu: the same install plus the CUDA libraries
that TensorFlow's CUDA build loads on a GPU node (requirements/image-gpu.in, pinned in constraints-gpu.txt);
the host's driver comes in through the runtime's GPU switch (container.gpus).
"""

from __future__ import annotations

import collections
import fnmatch
import hashlib
import json
import os
import shutil
import subprocess
import sys
from collections.abc import Callable, Iterable, Mapping, Sequence
from pathlib import Path
from typing import Any

from pipeline import Sim2dlError
from pipeline.config import REPO
from pipeline.runtime.runtimes import runtime_of

SRC_IN_IMAGE = "/opt/sim2dl"
# What the heavy install depends on: a change here rebuilds the image from debootstrap on.
INSTALL_INPUTS = (
    "containers/install.sh",
    "containers/image.env",
    "requirements/image.in",
    "requirements/image-gpu.in",
    "requirements/constraints-gpu.txt",
    "requirements/constraints.txt",
    "scripts/build_horovod.sh",
    "scripts/patches",
    "pyproject.toml",
)
FORMATS = ("dir", "squashfs", "oci")
STAMP = ".sim2dl-image.json"


def variant(settings: Mapping[str, Any]) -> str:
    """container.variant: cpu, or gpu (the CUDA libraries of tensorflow[and-cuda] in the image too)."""
    return str(settings.get("variant", "cpu"))


def image_tag(settings: Mapping[str, Any]) -> str:
    """The image's tag: container.tag, with `-gpu` for the GPU variant (both variants of one release
    live side by side in a registry and a build directory)."""
    return f"{settings['tag']}-gpu" if variant(settings) == "gpu" else str(settings["tag"])


def slug(settings: Mapping[str, Any]) -> str:
    """File name of the built or pulled image: NAME_TAG with the registry's slashes and port colon
    flattened."""
    return f"{settings['name'].replace('/', '_').replace(':', '_')}_{image_tag(settings)}"


def build_dir(settings: Mapping[str, Any]) -> Path:
    return (
        Path(settings["build_dir"]).expanduser() if settings["build_dir"] else REPO / "containers" / "build"
    )


def image_reference(settings: Mapping[str, Any]) -> str:
    """What the runtime is given as the image: `container.image` if set, otherwise the one named by
    container.name/tag in the form each runtime wants."""
    if settings["image"]:
        return str(settings["image"])
    return runtime_of(settings).image(
        settings["name"], image_tag(settings), build_dir(settings), slug(settings)
    )


def image_environment(repo: Path = REPO) -> dict[str, str]:
    """containers/image.env: the environment every container of the image starts with."""
    env = {}
    for line in (repo / "containers" / "image.env").read_text().splitlines():
        if line.strip() and not line.lstrip().startswith("#"):
            key, _, value = line.partition("=")
            env[key.strip()] = value.strip()
    return env


def _files(paths: Iterable[Path]) -> Iterable[Path]:
    for p in sorted(paths):
        if p.is_dir():
            yield from _files(p.iterdir())
        elif p.is_file():
            yield p


def inputs_digest(repo: Path, names: Iterable[str | Path]) -> str:
    """Digest of the named files (relative to repo, or absolute), directories walked, in sorted order."""
    digest = hashlib.sha256()
    for f in _files(repo / n for n in names):
        digest.update(str(f.relative_to(repo)).encode() + b"\0" + f.read_bytes() + b"\0")
    return digest.hexdigest()[:16]


def ignore_patterns(repo: Path) -> list[str]:
    """.containerignore, which `podman build` reads too: a pattern with a slash matches a path from the
    repository root, one without matches a name at any depth (`**/` is implied)."""
    lines = (repo / ".containerignore").read_text().splitlines()
    return [line.strip().removeprefix("**/") for line in lines if line.strip() and not line.startswith("#")]


def source_files(repo: Path) -> list[Path]:
    """The files that go to /opt/sim2dl: the repository without what .containerignore leaves out."""
    patterns = ignore_patterns(repo)

    def ignored(p: Path) -> bool:
        rel = str(p.relative_to(repo))
        return any(fnmatch.fnmatchcase(rel if "/" in pattern else p.name, pattern) for pattern in patterns)

    def walk(d: Path) -> Iterable[Path]:
        for p in sorted(d.iterdir()):
            if ignored(p):
                continue
            if p.is_dir() and not p.is_symlink():
                yield from walk(p)
            else:
                yield p

    return list(walk(repo))


def copy_source(repo: Path, dest: Path) -> None:
    """Replace dest's contents with the repository's source files."""
    if dest.exists():
        shutil.rmtree(dest)
    for f in source_files(repo):
        target = dest / f.relative_to(repo)
        target.parent.mkdir(parents=True, exist_ok=True)
        shutil.copy2(f, target, follow_symlinks=False)


# host paths the build needs appear under here (never over the image's own files)
HOST_IN_SANDBOX = "/tmp/host"


def host_pip_settings(environ: Mapping[str, str]) -> tuple[dict[str, str], list[str]]:
    """The host's pip configuration as PIP_* variables for the build, and the host paths it refers to
    (local wheel directories, file:// indexes, the CA bundle), which the sandbox binds under
    HOST_IN_SANDBOX and the variables are rewritten to: machines behind a mirror or a TLS-inspecting
    proxy need the same settings inside the build."""
    env = {k: v for k, v in environ.items() if k.startswith("PIP_")}
    try:
        listing = subprocess.run(
            [sys.executable, "-m", "pip", "config", "list"], capture_output=True, text=True, check=True
        ).stdout
    except (OSError, subprocess.CalledProcessError):
        listing = ""
    for line in listing.splitlines():
        key, _, value = line.partition("=")
        option = key.rpartition(".")[2].strip()
        if option and key.split(".")[0] in ("global", "install", ":env:"):
            env.setdefault("PIP_" + option.upper().replace("-", "_"), value.strip().strip("'\""))
    paths: set[str] = set()
    for name, value in env.items():
        words = []
        for word in value.split():
            scheme = "file://" if word.startswith("file://") else ""
            path = word.removeprefix(scheme)
            if path.startswith("/") and Path(path).exists():
                # an index's pages link to files beside it (../../files/...): bind its parent
                paths.add(str(Path(path).parent) if scheme else path)
                word = f"{scheme}{HOST_IN_SANDBOX}{path}"
            words.append(word)
        env[name] = " ".join(words)
    return env, sorted(paths)


def wheel_cache(environ: Mapping[str, str]) -> Path:
    """Where scripts/build_horovod.sh keeps the wheels it built (SIM2DL_WHEEL_CACHE, or sim2dl/wheels in the
    user's cache directory): bound read-only into the image's build, which installs a wheel of the same key
    (Python, TensorFlow, MPICH, C library and the patch alike) instead of compiling Horovod again."""
    if environ.get("SIM2DL_WHEEL_CACHE"):
        return Path(environ["SIM2DL_WHEEL_CACHE"])
    cache = environ.get("XDG_CACHE_HOME") or str(Path(environ.get("HOME", "~")).expanduser() / ".cache")
    return Path(cache) / "sim2dl" / "wheels"


def sandbox_argv(
    root: Path, command: Sequence[str], env: Mapping[str, str], host_paths: Sequence[str]
) -> list[str]:
    """bubblewrap over `root` as /, with the host's network and DNS, and `host_paths` read-only under
    HOST_IN_SANDBOX. Capabilities are kept (apt drops privileges to its _apt user); the sandbox's mounts
    disappear with it."""
    argv = [
        "bwrap",
        "--bind",
        str(root),
        "/",
        "--dev",
        "/dev",
        "--proc",
        "/proc",
        "--perms",
        "1777",
        "--tmpfs",
        "/tmp",
        "--ro-bind",
        "/etc/resolv.conf",
        "/etc/resolv.conf",
        "--unshare-pid",
        "--die-with-parent",
        "--cap-add",
        "ALL",
        "--clearenv",
    ]
    for p in host_paths:
        argv += ["--ro-bind", p, HOST_IN_SANDBOX + p]
    base_env = {"PATH": "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin", "HOME": "/root"}
    for k, v in {**base_env, **env}.items():
        argv += ["--setenv", k, v]
    return [*argv, *command]


def run_tool(argv: Sequence[str], what: str, log: Callable[[str], None]) -> None:
    log(f"image: {what}")
    code, _ = run_logged(argv)
    if code != 0:
        raise Sim2dlError(f"image build: {what} failed (exit {code}): {' '.join(argv[:4])} ...")


def run_logged(argv: Sequence[str], env: Mapping[str, str] | None = None) -> tuple[int, str]:
    """Run a tool with its output going to stderr as it comes; returns (exit code, its last lines)."""
    env = dict(os.environ if env is None else env)
    found = shutil.which(argv[0], path=env.get("PATH"))
    if found:
        # the tool's own directory first: a script with `#!/usr/bin/env python3` (ch-image, also when
        # ch-convert calls it) must run on the python3 installed beside it, which has its modules
        env = {**env, "PATH": os.pathsep.join([str(Path(found).parent), env.get("PATH", "")])}
    tail: collections.deque[str] = collections.deque(maxlen=40)
    try:
        proc = subprocess.Popen(
            argv,
            stdin=subprocess.DEVNULL,
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            env=dict(env),
            text=True,
            errors="replace",
        )
    except OSError as e:
        raise Sim2dlError(
            f"cannot run {argv[0]} ({e.strerror}): install it (apt-get install "
            f"{_PACKAGE.get(argv[0], argv[0])}) or put it on PATH"
        ) from e
    assert proc.stdout is not None
    for line in proc.stdout:
        sys.stderr.write(line)
        tail.append(line.rstrip())
    return proc.wait(), "\n".join(tail)


_PACKAGE = {
    "bwrap": "bubblewrap",
    "mksquashfs": "squashfs-tools",
    "debootstrap": "debootstrap",
    "podman": "podman",
    "skopeo": "skopeo",
    "ch-image": "charliecloud-builders",
    "ch-convert": "charliecloud-builders",
}


def _stamp(path: Path) -> dict[str, Any]:
    try:
        return json.loads((path / STAMP).read_text()) if path.is_dir() else json.loads(path.read_text())
    except (OSError, ValueError):
        return {}


def replace_dir(tmp: Path, final: Path) -> None:
    """Put a complete directory in place; the old one is moved aside first, then removed."""
    if final.exists():
        old = final.with_name(f".{final.name}.old")
        shutil.rmtree(old, ignore_errors=True)
        final.rename(old)
        tmp.rename(final)
        shutil.rmtree(old, ignore_errors=True)
    else:
        tmp.rename(final)


def build(
    settings: Mapping[str, Any],
    formats: Sequence[str] = ("dir",),
    repo: Path = REPO,
    log: Callable[[str], None] = lambda s: print(s, file=sys.stderr, flush=True),
) -> dict[str, Any]:
    """Build (or bring up to date) the image named by container.name/tag in the requested formats."""
    unknown = set(formats) - set(FORMATS)
    if unknown:
        raise Sim2dlError(
            f"image build: unknown format(s) {sorted(unknown)}; choose from {', '.join(FORMATS)}"
        )
    out = build_dir(settings)
    out.mkdir(parents=True, exist_ok=True)
    image = out / slug(settings)
    base_key = inputs_digest(repo, INSTALL_INPUTS) + (
        "" if variant(settings) == "cpu" else f"-{variant(settings)}"
    )
    source_key = inputs_digest(repo, source_files(repo))
    stamp = _stamp(image)
    rebuilt = stamp.get("base") != base_key
    if rebuilt:
        _build_root(settings, repo, out, image, base_key, log)
        stamp = _stamp(image)
    if stamp.get("source") != source_key:
        log(f"image: copying the sources to {image}{SRC_IN_IMAGE}")
        copy_source(repo, image / SRC_IN_IMAGE.lstrip("/"))
        stamp = {**stamp, "source": source_key}
        (image / STAMP).write_text(json.dumps(stamp, indent=1) + "\n")
    key = f"{base_key}-{source_key}"
    ref = f"{settings['name']}:{image_tag(settings)}"
    outputs = {"dir": str(image)}
    if "squashfs" in formats:
        sqfs = _derived_file(out / f"{slug(settings)}.sqfs", key, lambda tmp: _squashfs(image, tmp, log))
        outputs["squashfs"] = str(sqfs)
    if "oci" in formats:
        env = image_environment(repo)
        oci = _derived_file(
            out / f"{slug(settings)}.oci.tar", key, lambda tmp: _oci_archive(ref, env, image, tmp, log)
        )
        outputs["oci"] = str(oci)
    return {"image": ref, "key": key, "rebuilt": rebuilt, "outputs": outputs}


def _build_root(
    settings: Mapping[str, Any], repo: Path, out: Path, image: Path, base_key: str, log: Callable[[str], None]
) -> None:
    for tool in ("debootstrap", "bwrap"):
        if shutil.which(tool) is None:
            raise Sim2dlError(f"image build needs {tool}: apt-get install {_PACKAGE[tool]}")
    tmp = out / f".{image.name}.tmp-{os.getpid()}"
    shutil.rmtree(tmp, ignore_errors=True)
    for stale in out.glob(f".{image.name}.tmp-*"):  # an interrupted earlier build
        shutil.rmtree(stale, ignore_errors=True)
    try:
        run_tool(
            ["debootstrap", "--variant=minbase", settings["build_suite"], str(tmp), settings["build_mirror"]],
            f"debootstrap {settings['build_suite']} from {settings['build_mirror']}",
            log,
        )
        copy_source(repo, tmp / SRC_IN_IMAGE.lstrip("/"))
        pip_env, host_paths = host_pip_settings(os.environ)
        install_env = {**pip_env, "SIM2DL_IMAGE_VARIANT": variant(settings)}
        wheels = wheel_cache(os.environ)
        if wheels.is_dir():
            install_env["SIM2DL_WHEEL_CACHE"] = HOST_IN_SANDBOX + str(wheels)
            host_paths = [*host_paths, str(wheels)]
        run_tool(
            sandbox_argv(tmp, [f"{SRC_IN_IMAGE}/containers/install.sh"], install_env, host_paths),
            f"containers/install.sh (system packages, Python environment, Horovod; {variant(settings)} "
            "variant)",
            log,
        )
        (tmp / "ch").mkdir(exist_ok=True)
        # charliecloud reads the image's environment from /ch/environment (ch-run --set-env)
        env_lines = "".join(f"{k}={v}\n" for k, v in image_environment(repo).items())
        (tmp / "ch" / "environment").write_text(env_lines)
        (tmp / STAMP).write_text(json.dumps({"base": base_key}, indent=1) + "\n")
        replace_dir(tmp, image)
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise


def _derived_file(target: Path, key: str, make: Callable[[Path], None]) -> Path:
    """`target` made from the image by `make(temporary path)`, unless it is already there for `key`."""
    stamp = target.with_name(target.name + ".json")
    if target.exists() and _stamp(stamp).get("key") == key:
        return target
    tmp = target.with_name(f".{target.name}.tmp-{os.getpid()}")
    try:
        make(tmp)
        os.replace(tmp, target)
    finally:
        tmp.unlink(missing_ok=True)
    stamp.write_text(json.dumps({"key": key}) + "\n")
    return target


def _squashfs(image: Path, tmp: Path, log: Callable[[str], None]) -> None:
    run_tool(
        ["mksquashfs", str(image), str(tmp), "-noappend", "-quiet", "-no-progress", "-e", STAMP],
        "mksquashfs",
        log,
    )


def _oci_archive(
    ref: str, env: Mapping[str, str], image: Path, tmp: Path, log: Callable[[str], None]
) -> None:
    """podman imports the root as a one-layer image with the image environment, then saves an OCI archive."""
    changes = [f"--change=ENV {k}={v}" for k, v in env.items()]
    changes += [f"--change=WORKDIR {SRC_IN_IMAGE}", '--change=CMD ["sim2dl", "--help"]']
    tar = subprocess.Popen(
        ["tar", "-C", str(image), "--exclude=./dev/*", f"--exclude=./{STAMP}", "-c", "."],
        stdout=subprocess.PIPE,
    )
    try:
        log(f"image: podman import -> {ref}")
        imported = subprocess.run(
            ["podman", "import", *changes, "-", ref], stdin=tar.stdout, stdout=subprocess.DEVNULL
        )
        tar.stdout.close()
        if tar.wait() != 0 or imported.returncode != 0:
            raise Sim2dlError(f"image build: podman import of {image} failed")
        run_tool(["podman", "save", "--format", "oci-archive", "-o", str(tmp), ref], "podman save", log)
    finally:
        if tar.poll() is None:
            tar.kill()

"""hostmpi: what the host's MPI library is, and a self-contained directory of it to bind into containers.

The bind model needs the host's MPICH-ABI `libmpi.so.12` (Cray MPICH, MPICH, Intel MPI, MVAPICH) and the
libraries it depends on, visible inside the container. Cray's modules are self-contained directories;
a distribution's MPICH is spread over /usr/lib and named libmpich.so.12, so `collect` copies it and its
non-base dependencies (UCX and its plugin directory, hwloc, numa, ...) into one directory with a
`libmpi.so.12` link: that directory is what `container.host_mpi.paths` names.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
from collections.abc import Iterable
from pathlib import Path

from pipeline import Sim2dlError

MPICH_ABI_SONAME = "libmpi.so.12"
OPENMPI_SONAMES = ("libmpi.so.40", "libmpi.so.20")
# Present in every image with the same or newer glibc: never copied (the image's own must be used).
BASE_LIBRARIES = re.compile(
    r"^(linux-vdso|ld-linux.*|libc|libm|libdl|librt|libpthread|libresolv|libutil|libgcc_s"
    r"|libstdc\+\+|libz)\.so"
)
# Asks a library for MPI_Get_library_version (allowed before MPI_Init) in a fresh interpreter, so two
# MPI libraries never meet in one process.
_VERSION_PROBE = """
import ctypes, sys
lib = ctypes.CDLL(sys.argv[1], mode=ctypes.RTLD_GLOBAL)
buf, n = ctypes.create_string_buffer(8192), ctypes.c_int(0)
failed = lib.MPI_Get_library_version(buf, ctypes.byref(n))
sys.exit(failed or print(buf.value.decode(errors="replace").strip()))
"""


def library_version(library: Path | str, python: str = sys.executable) -> str:
    """MPI_Get_library_version of a library file or soname, e.g. "MPICH Version: 4.0.2 ..."."""
    try:
        done = subprocess.run(
            [python, "-c", _VERSION_PROBE, str(library)], capture_output=True, text=True, timeout=60
        )
    except (OSError, subprocess.TimeoutExpired) as e:
        raise Sim2dlError(f"cannot ask {library} for its MPI version: {e}") from e
    if done.returncode != 0 or not done.stdout.strip():
        reason = done.stderr.strip().splitlines()[-1:] or ["no output"]
        raise Sim2dlError(f"{library} did not report an MPI library version: {reason[0]}")
    return done.stdout.strip()


def version_line(version: str) -> str:
    """The first line of an MPI library version, whitespace collapsed: "MPICH Version: 4.0.2"."""
    return " ".join(version.splitlines()[0].split()) if version.strip() else "?"


def flavour(version: str) -> tuple[str, str]:
    """(implementation, ABI) from an MPI library version string."""
    lowered = version.lower()
    if "open mpi" in lowered:
        return "Open MPI", "Open MPI"
    for name in ("cray mpich", "intel(r) mpi", "mvapich", "mpich"):
        if name in lowered:
            return {"intel(r) mpi": "Intel MPI"}.get(name, name.upper().replace("CRAY ", "Cray ")), "MPICH"
    return "unknown", "unknown"


def find_library(paths: Iterable[Path | str], names: Iterable[str]) -> Path | None:
    for directory in paths:
        for name in names:
            candidate = Path(directory) / name
            if candidate.exists():
                return candidate
    return None


def system_library() -> Path | None:
    """The host's MPICH-ABI library known to the dynamic linker (libmpi.so.12, or Debian's libmpich.so.12)."""
    try:
        cache = subprocess.run(["ldconfig", "-p"], capture_output=True, text=True, check=True).stdout
    except (OSError, subprocess.CalledProcessError):
        return None
    found = {}
    for line in cache.splitlines():
        name, _, path = line.strip().partition(" => ")
        found.setdefault(name.split(" ")[0], path.strip())
    for name in (MPICH_ABI_SONAME, "libmpich.so.12"):
        if name in found:
            return Path(found[name])
    return None


def dependencies(library: Path) -> dict[str, Path]:
    """soname -> path of what `ldd` resolves for `library`, without the base libraries."""
    try:
        out = subprocess.run(["ldd", str(library)], capture_output=True, text=True, check=True).stdout
    except (OSError, subprocess.CalledProcessError) as e:
        raise Sim2dlError(f"ldd {library} failed: {e}") from e
    deps = {}
    for line in out.splitlines():
        name, arrow, rest = line.strip().partition(" => ")
        if not arrow or BASE_LIBRARIES.match(name):
            continue
        path = rest.split(" (")[0].strip()
        if path == "not found":
            raise Sim2dlError(f"{library} needs {name}, which the host's dynamic linker cannot find")
        deps[name] = Path(path)
    return deps


def collect(library: Path, out: Path) -> dict[str, object]:
    """Copy `library`, its non-base dependencies and the UCX plugin directory into `out` (replaced whole,
    atomically), with a libmpi.so.12 link to the library."""
    library = Path(library).resolve()
    version = library_version(library)
    _, abi = flavour(version)
    if abi != "MPICH":
        raise Sim2dlError(f"{library} is {version.splitlines()[0]!r}: the image needs an MPICH-ABI library")
    tmp = out.with_name(f".{out.name}.tmp-{os.getpid()}")
    shutil.rmtree(tmp, ignore_errors=True)
    tmp.mkdir(parents=True)
    try:
        soname = _soname(library)
        shutil.copy2(library, tmp / soname)
        pending, copied = [tmp / soname], {soname}
        ucx_dirs = set()
        while pending:
            for name, path in dependencies(pending.pop()).items():
                if name.startswith("libucs"):
                    ucx_dirs.add(path.resolve().parent / "ucx")  # UCX loads its transports from here
                if name not in copied:
                    shutil.copy2(path.resolve(), tmp / name)
                    copied.add(name)
                    pending.append(tmp / name)
        for plugins in (d for d in ucx_dirs if d.is_dir()):
            target = tmp / "ucx"
            target.mkdir(exist_ok=True)
            for module in plugins.glob("*.so.*"):
                if module.is_file() and not module.is_symlink():
                    shutil.copy2(module, target / _soname(module))
        if soname != MPICH_ABI_SONAME:
            (tmp / MPICH_ABI_SONAME).symlink_to(soname)
        info = {"source": str(library), "version": version, "files": sorted(p.name for p in tmp.iterdir())}
        (tmp / "sim2dl-host-mpi.json").write_text(json.dumps(info, indent=1) + "\n")
        if out.exists():
            shutil.rmtree(out)
        tmp.rename(out)
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise
    return {"out": str(out), **info}


def _soname(library: Path) -> str:
    """The name the dynamic linker looks for (DT_SONAME), e.g. libmpich.so.12 for libmpich.so.12.2.2."""
    try:
        dynamic = subprocess.run(["readelf", "-d", str(library)], capture_output=True, text=True).stdout
        found = re.search(r"\(SONAME\)\s+Library soname: \[([^\]]+)\]", dynamic)
    except OSError:
        found = None
    if found:
        return found.group(1)
    match = re.match(r"(.+?\.so\.\d+)", library.name)
    return match.group(1) if match else library.name

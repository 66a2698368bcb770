#!/usr/bin/env bash
# Build Horovod 0.28.1 (its last release; sdist only) against the venv's TensorFlow and MPI.
# The patch makes it build and work with CPU-only TF 2.21 + tf_keras and MPICH's hydra
# (see ../shared/notes/platform.md, "Route A"). Idempotent: does nothing if Horovod already imports.
#
# The build is kept as a wheel in SIM2DL_WHEEL_CACHE (default ~/.cache/sim2dl/wheels), under a key of what
# the compiled library depends on: this script, the patch, the Python minor version and platform, the
# TensorFlow and MPICH versions, and the C library (glibc). A venv with the same key installs the wheel
# instead of compiling again: `sim2dl image build` binds the host's cache into the image's build, so the
# image reuses the build `make env` made. The library finds libmpi.so.12 through a RUNPATH relative to
# itself ($ORIGIN, the venv's lib/), so the wheel works in any venv (the compiler wrapper adds its own
# absolute path after it). A cache that cannot be written (read-only in the image's build) is only read.
# `build_horovod.sh --key VENV_DIR` prints the key and builds nothing.
set -euo pipefail
print_key=false
if [ "${1:-}" = --key ]; then print_key=true; shift; fi
venv=${1:?usage: build_horovod.sh [--key] VENV_DIR}
venv=$(cd "$venv" && pwd)
here=$(cd "$(dirname "$0")" && pwd)
patch_file="$here/patches/horovod-0.28.1-tf2.21-cpu.patch"
cache=${SIM2DL_WHEEL_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/sim2dl/wheels}
export TF_USE_LEGACY_KERAS=1

depends_on=$("$venv/bin/python" - <<'EOF'
import importlib.metadata as metadata, sys, sysconfig
def version(*names):
    for name in names:
        try:
            return metadata.version(name)
        except metadata.PackageNotFoundError:
            pass
    sys.exit(f"build_horovod.sh: none of {names} is installed in {sys.prefix}")
print(f"python {sys.version_info[0]}.{sys.version_info[1]} {sysconfig.get_platform()}")
print(f"tensorflow {version('tensorflow', 'tensorflow-cpu')} mpich {version('mpich')}")
EOF
)
key=$({ cat "$0" "$patch_file"; echo "$depends_on"; getconf GNU_LIBC_VERSION; } | sha256sum | cut -c1-16)
kept="$cache/horovod-0.28.1-$key"
if $print_key; then echo "$key"; exit 0; fi
if "$venv/bin/python" -c 'import horovod.tensorflow.keras as h; h.mpi_built() or exit(1)' 2>/dev/null; then
    echo "horovod: already built in $venv"
    exit 0
fi
install_wheel() {
    "$venv/bin/pip" install --quiet --no-cache-dir -c "$here/../requirements/constraints.txt" "$1"
    "$venv/bin/python" -c 'import horovod.tensorflow.keras as h; assert h.mpi_built()'
}
found=("$kept"/horovod-0.28.1-*.whl)
if [ -f "${found[0]}" ]; then
    install_wheel "${found[0]}"
    echo "horovod: installed the wheel built before ($kept)"
    exit 0
fi

work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
"$venv/bin/pip" download --quiet --no-deps --no-binary :all: -d "$work" horovod==0.28.1
tar -C "$work" -xzf "$work/horovod-0.28.1.tar.gz"
patch -d "$work/horovod-0.28.1" -p1 < "$patch_file"
# The venv's MPI compiler wrappers must win over any system MPI (Debian may point mpicc at Open MPI).
# The library lands in site-packages/horovod/tensorflow/: four levels up is the venv's lib/.
PATH="$venv/bin:$PATH" LDFLAGS='-Wl,-rpath,$ORIGIN/../../../..' \
HOROVOD_WITH_TENSORFLOW=1 HOROVOD_WITH_MPI=1 HOROVOD_WITHOUT_GLOO=1 \
HOROVOD_WITHOUT_PYTORCH=1 HOROVOD_WITHOUT_MXNET=1 HOROVOD_CPU_OPERATIONS=MPI \
MAKEFLAGS="-j$(nproc)" \
    "$venv/bin/pip" wheel --quiet --no-cache-dir --no-deps --no-build-isolation \
        -w "$work/wheel" "$work/horovod-0.28.1"
wheel=$(ls "$work"/wheel/horovod-0.28.1-*.whl)
install_wheel "$wheel"
echo "horovod: built with MPI"
# Kept for the next venv with the same key: written under a temporary name, then renamed.
if mkdir -p "$cache" 2>/dev/null && staging=$(mktemp -d "$cache/.horovod-tmp.XXXXXX" 2>/dev/null); then
    if chmod 755 "$staging" && cp "$wheel" "$staging/" && mv -T "$staging" "$kept" 2>/dev/null; then
        echo "horovod: wheel kept in $kept"
    else
        rm -rf "$staging"  # another build kept the same key first, or the cache is full
    fi
fi

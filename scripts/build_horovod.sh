#!/usr/bin/env bash
# Build Horovod 0.28.1 (its last release; sdist only) against the venv's TensorFlow and MPI.
# The patch makes it build and work with CPU-only TF 2.21 + tf_keras and MPICH's hydra
# (see ../shared/notes/platform.md, "Route A"). Idempotent: does nothing if Horovod already imports.
set -euo pipefail
venv=${1:?usage: build_horovod.sh VENV_DIR}
venv=$(cd "$venv" && pwd)
here=$(cd "$(dirname "$0")" && pwd)
export TF_USE_LEGACY_KERAS=1

if "$venv/bin/python" -c 'import horovod.tensorflow.keras as h; h.mpi_built() or exit(1)' 2>/dev/null; then
    echo "horovod: already built in $venv"
    exit 0
fi
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
"$venv/bin/pip" download --quiet --no-deps --no-binary :all: -d "$work" horovod==0.28.1
tar -C "$work" -xzf "$work/horovod-0.28.1.tar.gz"
patch -d "$work/horovod-0.28.1" -p1 < "$here/patches/horovod-0.28.1-tf2.21-cpu.patch"
# The venv's MPI compiler wrappers must win over any system MPI (Debian may point mpicc at Open MPI).
PATH="$venv/bin:$PATH" \
HOROVOD_WITH_TENSORFLOW=1 HOROVOD_WITH_MPI=1 HOROVOD_WITHOUT_GLOO=1 \
HOROVOD_WITHOUT_PYTORCH=1 HOROVOD_WITHOUT_MXNET=1 HOROVOD_CPU_OPERATIONS=MPI \
MAKEFLAGS="-j$(nproc)" \
    "$venv/bin/pip" install --no-cache-dir --no-build-isolation -c "$here/../requirements/constraints.txt" "$work/horovod-0.28.1"
"$venv/bin/python" -c 'import horovod.tensorflow.keras as h; assert h.mpi_built(); print("horovod: built with MPI")'

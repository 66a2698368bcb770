#!/usr/bin/env bash
# Installs sim2dl into a Debian bookworm root: run by the Containerfile (RUN) and, on machines without a
# registry, by `sim2dl image build` inside a sandbox over a debootstrap root. The source is already at
# $SIM2DL_SRC; the pinned Python environment goes to $SIM2DL_VENV with Horovod built against its MPI
# (the MPICH-ABI libmpi.so.12 from PyPI, which the bind model replaces with the host's at run time).
# What only the build needs is removed at the end: the compiler and headers (Horovod's build),
# TensorFlow's and pyarrow's C++ headers, symbol tables of the large libraries, test suites, docs.
set -euo pipefail
src=${SIM2DL_SRC:-/opt/sim2dl}
venv=${SIM2DL_VENV:-/opt/venv}
# cpu, or gpu: the CUDA libraries TensorFlow loads on a GPU node as well (requirements/image-gpu.in).
variant=${SIM2DL_IMAGE_VARIANT:-cpu}
case $variant in cpu|gpu) ;; *) echo "install.sh: SIM2DL_IMAGE_VARIANT is '$variant', not cpu or gpu" >&2; exit 2;; esac
export DEBIAN_FRONTEND=noninteractive
build_packages="python3-dev g++ make cmake patch binutils"

apt-get update -q
# util-linux: setpriv for search trials; procps: ps for the doctor.
apt-get install -y -q --no-install-recommends ca-certificates python3 python3-venv util-linux procps $build_packages
python3 -m venv "$venv"
"$venv/bin/pip" install --quiet --no-cache-dir -r "$src/requirements/image.in" -c "$src/requirements/constraints.txt"
if [ "$variant" = gpu ]; then
    "$venv/bin/pip" install --quiet --no-cache-dir -r "$src/requirements/image-gpu.in" \
        -c "$src/requirements/constraints.txt" -c "$src/requirements/constraints-gpu.txt"
fi
"$src/scripts/build_horovod.sh" "$venv"
"$venv/bin/pip" install --quiet --no-cache-dir --no-deps -e "$src"
# Nothing linked to Open MPI may be in the image (the bind model swaps in the host's MPICH-ABI library).
if find / -xdev -name 'libmpi.so.40*' -print -quit | grep -q .; then
    echo "install.sh: an Open MPI library is in the image; the MPICH-ABI bind model needs none" >&2
    exit 1
fi

site=$("$venv/bin/python" -c 'import sysconfig; print(sysconfig.get_paths()["purelib"])')
# libclang: a TensorFlow dependency for its source generators, never loaded at run time.
"$venv/bin/pip" uninstall --quiet -y libclang
rm -rf "$site/tensorflow/include" "$site/pyarrow/include"
find "$site" -type d -name tests -prune -exec rm -rf {} +
# Symbol tables (.symtab) only serve debuggers: TensorFlow's libraries lose 700 MB. The dynamic symbols
# that loading and Horovod need stay (--strip-unneeded).
find "$site/tensorflow" "$site/pyarrow" "$site/horovod" -name '*.so*' -type f -size +1M -exec strip --strip-unneeded {} +
"$venv/bin/python" -c 'import tensorflow, pyarrow.parquet, horovod.tensorflow.keras as h; assert h.mpi_built()'
if [ "$variant" = gpu ]; then
    # TensorFlow's CUDA build finds these through the nvidia packages' own paths (no driver is needed here).
    "$venv/bin/python" -c 'import tensorflow as tf, nvidia.cudnn, nvidia.cublas, nvidia.nccl; assert tf.test.is_built_with_cuda()'
fi
apt-get purge -y -q --auto-remove $build_packages
apt-get clean
rm -rf /var/lib/apt/lists/* /root/.cache /usr/share/doc/* /usr/share/man/* /usr/share/info/* /usr/share/locale/*

#!/usr/bin/env bash
# Installs sim2dl into a Debian bookworm root: run by the Containerfile (RUN) and, on machines without a
# registry, by `sim2dl image build` inside a sandbox over a debootstrap root. The source is already at
# $SIM2DL_SRC; the pinned Python environment goes to $SIM2DL_VENV with Horovod built against its MPI
# (the MPICH-ABI libmpi.so.12 from PyPI, which the bind model replaces with the host's at run time).
set -euo pipefail
src=${SIM2DL_SRC:-/opt/sim2dl}
venv=${SIM2DL_VENV:-/opt/venv}
export DEBIAN_FRONTEND=noninteractive

apt-get update -q
# python3-dev, g++, cmake, make, patch: Horovod's build. util-linux: setpriv for search trials.
apt-get install -y -q --no-install-recommends \
    ca-certificates python3 python3-venv python3-dev g++ make cmake patch util-linux procps
python3 -m venv "$venv"
"$venv/bin/pip" install --quiet --no-cache-dir -r "$src/requirements/base.in" -c "$src/requirements/constraints.txt"
"$src/scripts/build_horovod.sh" "$venv"
"$venv/bin/pip" install --quiet --no-cache-dir --no-deps -e "$src"
# Nothing linked to Open MPI may be in the image (the bind model swaps in the host's MPICH-ABI library).
if find / -xdev -name 'libmpi.so.40*' -print -quit | grep -q .; then
    echo "install.sh: an Open MPI library is in the image; the MPICH-ABI bind model needs none" >&2
    exit 1
fi
apt-get clean
rm -rf /var/lib/apt/lists/* /root/.cache

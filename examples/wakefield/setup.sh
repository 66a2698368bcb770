#!/usr/bin/env bash
# The laser-wakefield example's own environment (examples/wakefield/.venv): FBPIC, a spectral quasi-3D
# particle-in-cell code, with numba (its CPU kernels) and pyFFTW, from PyPI, pinned. The simulator runs in it
# as a user's simulator would in theirs: sim2dl only calls it (simulate.command). About 30 s. Safe to repeat.
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
[ -x "$here/.venv/bin/python" ] || python3 -m venv "$here/.venv"
"$here/.venv/bin/pip" install --quiet --disable-pip-version-check \
  fbpic==0.27.1 numba==0.68.1 pyfftw==0.15.1 numpy==2.4.6 scipy==1.17.1 h5py==3.16.0
echo "$here/.venv/bin/python"

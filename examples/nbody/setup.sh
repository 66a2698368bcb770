#!/usr/bin/env bash
# The N-body example's own environment (examples/nbody/.venv): JaxPM and jax-cosmo from PyPI, pinned. The
# simulator runs in it as a user's simulator would in theirs: sim2dl only calls it (simulate.command), so
# JAX's numpy and sim2dl's never meet. About 35 s and 640 MB. Safe to repeat.
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
[ -x "$here/.venv/bin/python" ] || python3 -m venv "$here/.venv"
"$here/.venv/bin/pip" install --quiet --disable-pip-version-check \
  jaxpm==0.1.6 jax-cosmo==0.1.0 jax==0.10.2 jaxlib==0.10.2 jaxdecomp==0.3.1 h5py==3.16.0 packaging
echo "$here/.venv/bin/python"

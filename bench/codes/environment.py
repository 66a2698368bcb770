"""The codes' own environment, .venv-codes at the repository's top: a venv with requirements/codes.in
(py-pde and h5py), built on first use and rebuilt when that file changes. sim2dl never imports these
packages; a run's command calls the venv's python, as a user's simulator runs in its own environment.
Building it takes about 30 s (wheels from PyPI)."""

from __future__ import annotations

import hashlib
import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
REQUIREMENTS = REPO / "requirements" / "codes.in"
VENV = REPO / ".venv-codes"


def python() -> Path:
    """The codes' interpreter, the environment built first where it is missing or out of date."""
    stamp = VENV / ".requirements-sha256"
    wanted = hashlib.sha256(REQUIREMENTS.read_bytes()).hexdigest()
    if not stamp.exists() or stamp.read_text() != wanted:
        subprocess.run([sys.executable, "-m", "venv", "--clear", str(VENV)], check=True)
        pip = [str(VENV / "bin" / "python"), "-m", "pip", "install", "--quiet", "--disable-pip-version-check"]
        subprocess.run([*pip, "-r", str(REQUIREMENTS)], check=True)
        stamp.write_text(wanted)
    return VENV / "bin" / "python"


if __name__ == "__main__":  # python3 -m bench.codes.environment: build it, print its interpreter
    print(python())

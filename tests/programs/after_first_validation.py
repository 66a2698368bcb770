"""A simulator that is slow until the trainers have validated once: `python after_first_validation.py FLAG
RUN INITIAL -- COMMAND...` runs COMMAND at once for runs before INITIAL (run-NNNNNN), and for later runs
only once FLAG exists (online training's metrics.json, written at its first validation), at most 120 s
later. So the runs after the space-filling start are not all done before the trainers' first choice
arrives, whatever the machine's speed: a real campaign's runs take minutes, not the test's milliseconds."""

from __future__ import annotations

import os
import sys
import time
from pathlib import Path

flag, run, initial = Path(sys.argv[1]), int(sys.argv[2].rsplit("-", 1)[1]), int(sys.argv[3])
command = sys.argv[sys.argv.index("--") + 1 :]
deadline = time.monotonic() + 120
while run >= initial and not flag.exists() and time.monotonic() < deadline:
    time.sleep(0.2)
os.execv(command[0], command)

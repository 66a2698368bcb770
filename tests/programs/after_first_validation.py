"""A simulator that is slow until the trainers have validated: `python after_first_validation.py FLAG RUN
INITIAL [STEP] -- COMMAND...` runs COMMAND at once for runs before INITIAL (run-NNNNNN), and for later runs
only once FLAG exists (online training's metrics.json, written at each validation; with STEP, once it holds
the validation at that optimizer step), at most 120 s later. So the runs after the space-filling start are
not all done before the trainers' first choice arrives, whatever the machine's speed (a real campaign's runs
take minutes, not the test's milliseconds), or a run arrives after the trainers' last validation."""

from __future__ import annotations

import json
import os
import sys
import time
from pathlib import Path

flag, run, initial = Path(sys.argv[1]), int(sys.argv[2].rsplit("-", 1)[1]), int(sys.argv[3])
split = sys.argv.index("--")
step = int(sys.argv[4]) if split > 4 else None
command = sys.argv[split + 1 :]


def validated() -> bool:
    try:
        rows = json.loads(flag.read_text())
    except (OSError, ValueError):  # not written yet (it is written atomically, whole)
        return False
    return step is None or any(row.get("step", 0) >= step for row in rows)


deadline = time.monotonic() + 120
while run >= initial and not validated() and time.monotonic() < deadline:
    time.sleep(0.2)
os.execv(command[0], command)

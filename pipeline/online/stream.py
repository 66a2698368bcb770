"""Reading an ADIOS2 SST stream (train.online.source: stream): the simulator writes its samples as steps
of an SST stream instead of files, and online training reads them from memory over the network (SST's
TCP transport, `DataTransport: WAN`, which the PyPI wheel has; RDMA where ADIOS2 is built with it).

The reader opens the stream at `NAME` (the writer's contact file is `NAME.sst`, beside it), waiting for a
writer that starts late: it retries short opens until `open_timeout_s` has passed, then raises an error
naming the stream (ADIOS2's own open fails at once on a contact file whose writer is gone, #691, and its
single long time-out cannot be stopped). Each step's variables named by the fields' paths are read whole
(global arrays, start/count over the whole shape); a step missing a field is refused with the reason.

Flow control is the writer's: SST's `QueueLimit` bounds the steps it holds for slow readers, and
`QueueFullPolicy` says what happens when they are full: `Block` (the simulation waits: nothing lost) or
`Discard` (the step is dropped: the simulation never waits). Dropped steps show as gaps in the step
numbers the reader sees; they are counted (steps dropped after the last one delivered leave no gap: the
writer's own record of the steps it wrote says how many there were). A writer that dies mid-stream ends
the stream with an error (ADIOS2's StepStatus.OtherError), not a clean end: `StreamBroken`, with the steps
delivered before it.
A step that does not come within `step_timeout_s` is an error naming the stream (never a silent end).

Memory: one step's arrays. Time: the writer's pace; a step's bytes once over the transport.
"""

from __future__ import annotations

import contextlib
import math
import time
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from pipeline import Sim2dlError
from pipeline.formats.readers import FieldSpec

StepArrays = dict[str, np.ndarray] | str  # a step's arrays, or the reason it is refused
OPEN_TRY_S = 1  # each open waits this long for the contact file: short, so a stop is seen soon


class StreamBroken(Sim2dlError):
    """The writer went away before ending its stream (it died, or its node did)."""


@dataclass
class StreamCounts:
    """What a stream delivered: steps read, steps the writer dropped (gaps), and the last step number."""

    read: int = 0
    dropped: int = 0
    last: int = -1
    refused: list[tuple[int, str]] = field(default_factory=list)


def sst_parameters(settings: dict[str, Any]) -> dict[str, str]:
    """The reader's SST engine parameters."""
    return {"DataTransport": settings.get("transport", "WAN"), "OpenTimeoutSecs": str(OPEN_TRY_S)}


def open_reader(
    name: Path, settings: dict[str, Any], stopped: Callable[[], bool], patient: bool = False
) -> tuple[Any, Any, Any] | None:
    """(adios, io, engine) of the stream, waiting up to open_timeout_s for its writer (patient: until
    `stopped`, for a retry's writer); None when `stopped` says to give up first (the run ended without
    a stream)."""
    import adios2

    deadline = time.monotonic() + (math.inf if patient else settings["open_timeout_s"])
    last_error = ""
    while True:
        if stopped():
            return None
        contact = Path(f"{name}.sst")
        if contact.exists():
            adios = adios2.Adios()
            io = adios.declare_io(f"sim2dl-{name.name}-{time.monotonic_ns()}")
            io.set_engine("SST")
            io.set_parameters(sst_parameters(settings))
            try:
                return adios, io, io.open(str(name), adios2.bindings.Mode.Read)
            except (RuntimeError, ValueError) as e:  # a contact file whose writer is gone, or not yet ready
                last_error = str(e).strip().splitlines()[-1] if str(e).strip() else type(e).__name__
        if time.monotonic() > deadline:
            why = f" (last: {last_error})" if last_error else " (no contact file appeared)"
            raise Sim2dlError(
                f"SST stream {name}: no writer within train.online.open_timeout_s = "
                f"{settings['open_timeout_s']} s{why}"
            )
        time.sleep(0.1 if contact.exists() else 0.05)


def read_step(io: Any, engine: Any, fields: Sequence[FieldSpec]) -> dict[str, np.ndarray]:
    """The fields' arrays of the current step."""
    import adios2

    arrays, pending = {}, []
    for f in fields:
        variable = io.inquire_variable(f.path)
        if variable is None:
            raise KeyError(f.path)
        shape = tuple(variable.shape())
        out = np.zeros(shape, adios2.type_adios_to_numpy(variable.type()))
        if shape:
            variable.set_selection([[0] * len(shape), list(shape)])
        engine.get(variable, out)
        pending.append((f.name, out))
    engine.perform_gets()
    for name, out in pending:
        arrays[name] = out
    return arrays


def stream_steps(
    name: Path,
    fields: Sequence[FieldSpec],
    settings: dict[str, Any],
    stopped: Callable[[], bool],
    counts: StreamCounts,
    patient: bool = False,
) -> Iterator[tuple[int, StepArrays]]:
    """(step number, arrays or the reason the step is refused) for each step of the stream, until its
    writer ends it; nothing when `stopped` before a writer came (patient: wait for one until then).
    StreamBroken when the writer dies."""
    import adios2

    opened = open_reader(name, settings, stopped, patient)
    if opened is None:
        return
    _, io, engine = opened
    status_ok, end = adios2.bindings.StepStatus.OK, adios2.bindings.StepStatus.EndOfStream
    try:
        while True:
            status = engine.begin_step(adios2.bindings.StepMode.Read, float(settings["step_timeout_s"]))
            if status == end:
                return
            if status == adios2.bindings.StepStatus.NotReady:
                raise Sim2dlError(
                    f"SST stream {name}: no step within train.online.step_timeout_s = "
                    f"{settings['step_timeout_s']} s after step {counts.last}"
                )
            if status != status_ok:
                raise StreamBroken(
                    f"SST stream {name}: the writer went away after step {counts.last} ({status})"
                )
            step = int(engine.current_step())
            counts.dropped += max(0, step - counts.last - 1)  # steps the writer discarded (QueueFullPolicy)
            counts.last = step
            try:
                arrays: dict[str, np.ndarray] | str = read_step(io, engine, fields)
            except KeyError as e:
                arrays = f"step {step} has no variable {e}"
            engine.end_step()
            counts.read += 1
            yield step, arrays
    finally:
        with contextlib.suppress(RuntimeError, ValueError):  # a dead writer: nothing to close cleanly
            engine.close()

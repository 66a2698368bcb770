"""ADIOS2 BP files (BP4 and BP5 directories, and BP3 `.bp` files) via the `adios2` package, in random
access (`adios2.FileReader`). An input is one BP file; a field's `path` is a variable's name. Every
variable has the file's steps as its first axis, named `step`, so `source.samples_along: step` makes
each step of each file a sample (the way XGC, E3SM/SCORPIO, LAMMPS and the Gray-Scott tutorial write
one step per output time). Global arrays are read by start/count over a range of steps; a variable whose
shape changes between steps is read a step at a time (a range spanning two shapes is refused, and ingest
reads it again a step at a time). Local (per-writer-block) arrays, which have no global shape, are
refused with an error naming the variable: join them in the writer, or write a global array.

Global attributes are the file's (`{attr: NAME}` fields, sample ids); a variable's attributes
(`VAR/units`) are its own, so CF `units` and `_FillValue` apply as for NetCDF.

Memory: the steps asked for of the fields read, never a whole variable's steps; time: one read per field
per range of steps, plus the file's metadata once per open (linear in its steps and variables).
"""

from __future__ import annotations

import contextlib
import os
from dataclasses import replace
from pathlib import Path
from typing import Any

import numpy as np

from pipeline.formats.readers.base import (
    Contents,
    Conventions,
    MissingArray,
    OpenFile,
    Reader,
    SampleError,
    array_info,
    check_complete,
    one_line,
    scalar_text,
)
from pipeline.formats.readers.cf import cf_attributes

STEP = "step"  # the name of every variable's first axis (source.samples_along)
# ADIOS2's type names -> numpy
DTYPES = {
    "int8_t": "int8",
    "int16_t": "int16",
    "int32_t": "int32",
    "int64_t": "int64",
    "uint8_t": "uint8",
    "uint16_t": "uint16",
    "uint32_t": "uint32",
    "uint64_t": "uint64",
    "float": "float32",
    "double": "float64",
    "char": "int8",
    "long double": "longdouble",
    "float complex": "complex64",
    "double complex": "complex128",
}


def _open(path: Path) -> Any:
    import adios2

    check_complete(path)
    try:
        return adios2.FileReader(str(path))
    except Exception as e:  # adios2 raises RuntimeError/ValueError for files it cannot read
        raise SampleError(f"cannot open as ADIOS2 BP: {type(e).__name__}: {one_line(e)}") from None


def forget_profile(path: Path) -> None:
    """Remove the profile an ADIOS2 2.12 BP5 reader writes as it closes, unconditionally, to
    /tmp/NAME_PID_profiling.json (BP5Reader::FlushProfiler; no parameter turns it off): else every open
    of every rank of every run leaves one in /tmp."""
    with contextlib.suppress(OSError):
        os.remove(f"/tmp/{Path(path).name}_{os.getpid():x}_profiling.json")


def _dtype(type_name: str, name: str) -> np.dtype:
    if type_name == "string":
        return np.dtype(object)
    if type_name not in DTYPES:
        raise SampleError(f"variable '{name}': ADIOS2 type '{type_name}' is not a numeric array type")
    return np.dtype(DTYPES[type_name])


class BPFile(OpenFile):
    def __init__(self, path: Path) -> None:
        super().__init__(path)
        self.reader = _open(path)
        self.variables: dict[str, dict[str, str]] = self.reader.available_variables()
        self.attrs: dict[str, dict[str, str]] = self.reader.available_attributes()
        self._shapes: dict[str, tuple[int, ...]] = {}

    def _variable(self, array: str) -> Any:
        if array not in self.variables:
            raise MissingArray(f"no variable '{array}'")
        variable = self.reader.inquire_variable(array)
        if str(variable.shape_id()).endswith("LocalArray"):
            raise SampleError(
                f"variable '{array}' is a local array (one block per writer, no global shape): sim2dl reads "
                "global arrays; write it as one (a global shape and each writer's start/count)"
            )
        return variable

    def step_shape(self, array: str, step: int) -> tuple[int, ...]:
        variable = self._variable(array)
        variable.set_step_selection([step, 1])
        return tuple(int(n) for n in variable.shape())

    def shape(self, array: str) -> tuple[int, ...]:
        if array not in self._shapes:
            variable = self._variable(array)
            steps = int(variable.steps())
            self._shapes[array] = (
                (steps, *self.step_shape(array, int(variable.steps_start()))) if steps else (0,)
            )
        return self._shapes[array]

    def dims(self, array: str) -> tuple[str, ...]:
        return (STEP, *(f"{array}_{k}" for k in range(1, len(self.shape(array)))))

    def attributes(self, array: str) -> dict[str, Any]:
        prefix = array + "/"
        found = {k[len(prefix) :]: self.reader.read_attribute(k) for k in self.attrs if k.startswith(prefix)}
        return cf_attributes(found)

    def stored_dtype(self, array: str) -> np.dtype:
        return (
            _dtype(self.variables[array]["Type"], array) if array in self.variables else np.dtype("float64")
        )

    def read(self, array: str, index: tuple[slice, ...]) -> np.ndarray:
        shape = self.shape(array)
        first = int(self._variable(array).steps_start())
        steps = (index[0] if index else slice(None)).indices(shape[0])
        start_step, stop_step = steps[0], max(steps[0], steps[1])
        count_steps = stop_step - start_step
        if count_steps == 0:
            return np.zeros((0, *shape[1:]), _dtype(self.variables[array]["Type"], array))
        step_shape = self.step_shape(array, first + start_step)
        if count_steps > 1 and self.step_shape(array, first + stop_step - 1) != step_shape:
            raise SampleError(
                f"variable '{array}' changes shape between steps {start_step} and {stop_step - 1}"
            )
        ranges = [s.indices(n)[:2] for s, n in zip(index[1:], step_shape, strict=False)]
        ranges += [(0, n) for n in step_shape[len(ranges) :]]
        start = [a for a, _ in ranges]
        count = [max(0, b - a) for a, b in ranges]
        try:
            if step_shape:
                data = self.reader.read(array, start, count, step_selection=[first + start_step, count_steps])
            else:
                data = self.reader.read(array, step_selection=[first + start_step, count_steps])
        except Exception as e:  # a step with no data, a corrupt block
            where = f"variable '{array}' steps [{start_step}, {stop_step})"
            raise SampleError(f"cannot read {where}: {one_line(e)}") from None
        return np.asarray(data).reshape(count_steps, *count)

    def attribute(self, name: str) -> Any:
        if name not in self.attrs:
            raise SampleError(f"no global attribute '{name}'")
        return self.reader.read_attribute(name)

    def close(self) -> None:
        self.reader.close()
        forget_profile(self.path)


class BPReader(Reader):
    name = "adios2"
    suffixes = (".bp", ".bp4", ".bp5")
    directories = True  # BP4/BP5 write a directory; a BP3 `.bp` is a file (both are one input)

    def open(self, path: Path) -> BPFile:
        return BPFile(path)

    def describe(self, path: Path) -> Contents:
        with BPFile(path) as f:
            infos = []
            for name, info in sorted(f.variables.items()):
                if info["Type"] == "string":
                    continue
                try:
                    shape = f.shape(name)
                except SampleError:
                    continue  # a local array: refused, with the reason, when a field names it
                found = array_info(name, shape, _dtype(info["Type"], name), f.attributes(name), f.dims(name))
                last = int(f.reader.inquire_variable(name).steps_start()) + shape[0] - 1
                if shape[0] > 1 and f.step_shape(name, last) != shape[1:]:  # its last step's shape differs
                    found = replace(found, kind="jagged")
                infos.append(found)
            texts = {name: scalar_text(f.reader.read_attribute(name)) for name in f.attrs if "/" not in name}
            texts = {name: text for name, text in texts.items() if text is not None}
            return Contents(
                tuple(infos), texts, Conventions("ADIOS2 BP: one sample per step", samples_along=STEP)
            )

"""`sim2dl inspect`: a first look at existing simulation output, and a starter config for it.

Opens a few files spread over the matching ones (HDF5, NetCDF-4, .npy/.npz, ROOT, Zarr stores, ADIOS2 BP,
openPMD series, through each reader's `describe`; a reader may claim a file of another's suffix, as openPMD
does HDF5 files with its root attribute), lists every array with its shape and dtype, says which arrays differ
in shape or dtype between the files (those axes become `null`: any length), and writes a config that
validates: the simulator off, `source.path`/`glob`, every numeric array mapped as a field, the large arrays as
features, the small vectors as labels, and the sample id from an id attribute whose value differs between
files (else the file's relative path).

It reads real output as it comes (`decide`, each decision with its reason, printed a line each):
coordinate variables (NetCDF/Zarr coordinates, CF `bounds`, 1-D arrays named as their dimension, HDF5
dimension scales, `*_bnds`) are left out of features and labels; a leading axis that the data arrays
share is proposed as `source.samples_along` (a dimension whose length differs between files or that is
named like one (time, event, sample, member), axis 0 of HDF5/NumPy arrays that all share it within each
file, a ROOT tree's entries), with each field's shape then that of ONE sample; and the global attributes
whose values differ between files are listed as candidate categorical labels (the one with the fewest
values becomes the label when no array is one). What a format's conventions say (a `Conventions` from its
reader: ROOT's entries, ADIOS2's steps and openPMD's iterations as samples, openPMD's `source.format`, a
Gadget snapshot's particles deposited onto a grid with its Header's cosmology as labels) decides where
it speaks, event-indexed tables are proposed by the events reader (readers/events.py), and the model by
the built-in models themselves (each one's `proposed_depth`, asked in turn: training/models); inspect
itself has no branch per format or model.

Memory and time: listing stops after `MAX_LISTED` matches (a directory of millions of files is not
walked whole; the files inspected are spread over those listed), and only the files inspected are
opened, their data not read where the format allows.
"""

from __future__ import annotations

import glob
import os
import re
from collections import Counter
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import yaml

from pipeline import Sim2dlError
from pipeline import config as cfg
from pipeline.ensemble.fidelity import INDEX_COLUMN
from pipeline.formats.fields.column import DESIGN_METADATA, RUN_DIRECTORY, RUNS_TABLES, run_directory
from pipeline.formats.readers import BY_SUFFIX, READERS, SampleError, is_input_directory
from pipeline.formats.readers.base import (
    FIELD_AXIS,
    ArrayInfo,
    Contents,
    Conventions,
    Reader,
    fields_last_shape,
)
from pipeline.formats.readers.events import TableField, propose_tables, starter_tables
from pipeline.storage.fsutil import write_text_atomic
from pipeline.training.models import propose
from pipeline.training.models.fno import proposed_for_states
from pipeline.training.tasks import task_for

MAX_LISTED = 10_000  # matches listed before the files to open are chosen
# Dimension names that say "one sample per index" (lowercase)
SAMPLE_AXIS_WORDS = (
    "time",
    "event",
    "events",
    "entry",
    "entries",
    "sample",
    "samples",
    "member",
    "ensemble",
    "realization",
    "realisation",
    "record",
    "records",
)
# the last name of a 1-D array that is a run's time coordinate (its length a trajectory's leading axis)
TIME_WORDS = ("time", "times", "t", "tsteps", "step", "steps", "snapshot", "snapshots", "t-coordinate")
SMALL_VECTOR = 64  # an array of at most this many values, one axis at most, is a label
ID_WORDS = ("sample_id", "id", "uuid", "name", "key")  # attribute names tried first, in this order


@dataclass(frozen=True)
class InputFiles:
    """Where the files are: a directory and a glob below it (the config's source.path and source.glob)."""

    root: Path
    pattern: str


@dataclass(frozen=True)
class Field:
    """One array as seen across the inspected files."""

    path: str  # in the file
    dtype: str | None  # None: differs between files
    shape: tuple[int | None, ...] | None  # None entries: the axis differs; None: the rank differs
    in_files: int  # how many of the inspected files hold it
    values: int  # elements in the first file that holds it
    dims: tuple[str, ...] | None = None  # dimension names (NetCDF, Zarr), as in the first file
    coordinate: bool = False  # a coordinate variable (never a feature or label)
    # array | jagged | table | objects | unsupported (ArrayInfo.kind, as in the first file)
    kind: str = "array"
    columns: tuple[tuple[str, str], ...] | None = None  # a table's columns and their dtypes
    encoding: str = ""  # CF fill values, packing and units found (ArrayInfo.encoding)

    @property
    def numeric(self) -> bool:
        """Numbers sim2dl reads as a field: an array or a jagged branch of a numeric dtype."""
        if self.dtype is None or self.kind not in ("array", "jagged"):
            return False
        try:
            return np.dtype(self.dtype).kind in "biuf"
        except TypeError:
            return False

    @property
    def is_label(self) -> bool:
        """A small vector (a few parameters): a regression target."""
        fixed = self.shape is not None and None not in self.shape
        return fixed and len(self.shape) <= 1 and self.values <= SMALL_VECTOR


@dataclass(frozen=True)
class Survey:
    source: InputFiles
    files: tuple[Path, ...]  # the inspected files
    listed: int  # matches listed (at most MAX_LISTED)
    complete: bool  # False: listing stopped at MAX_LISTED
    fields: tuple[Field, ...]
    sample_id: str | None  # the id attribute, or None: the relative path
    unreadable: dict[str, str]  # file -> reason
    contents: tuple[Contents, ...] = ()  # what each inspected file holds


def locate(spec: str) -> InputFiles:
    """A directory (its most common known suffix, at any depth), a glob, or one file (its siblings of the
    same suffix)."""
    if glob.has_magic(spec):
        parts = Path(spec).parts
        fixed = next(i for i, part in enumerate(parts) if glob.has_magic(part))
        root = Path(*parts[:fixed]) if fixed else Path(".")
        return InputFiles(root.resolve(), str(Path(*parts[fixed:])))
    path = Path(spec)
    if path.is_file() or is_input_directory(path):
        return InputFiles(path.parent.resolve(), f"*{path.suffix}")
    if not path.is_dir():
        raise Sim2dlError(f"{spec}: no such file or directory")
    suffixes = Counter(p.suffix.lower() for p in _walk(path) if p.suffix.lower() in BY_SUFFIX)
    if not suffixes:
        raise Sim2dlError(f"{spec}: no files of a known format ({', '.join(sorted(BY_SUFFIX))}) below it")
    return InputFiles(path.resolve(), f"**/*{suffixes.most_common(1)[0][0]}")


def _walk(root: Path) -> Iterator[Path]:
    """Files below root, at most MAX_LISTED, depth first in name order."""
    count = 0
    for directory, subdirs, names in os.walk(root):
        subdirs.sort()
        stores = [name for name in subdirs if is_input_directory(Path(directory) / name)]
        subdirs[:] = [name for name in subdirs if name not in stores]  # an input directory is not walked into
        for name in sorted(names + stores):
            yield Path(directory) / name
            count += 1
            if count >= MAX_LISTED:
                return


def list_matches(source: InputFiles) -> tuple[list[Path], bool]:
    """Up to MAX_LISTED files matching the source, sorted; and whether that is all of them."""
    found = []
    for name in glob.iglob(str(source.root / source.pattern), recursive=True):
        if os.path.isfile(name) or is_input_directory(name):
            found.append(Path(name))
            if len(found) > MAX_LISTED:
                return sorted(found[:MAX_LISTED]), False
    return sorted(found), True


def spread(items: Sequence[Path], count: int) -> list[Path]:
    """`count` items spread evenly from the first to the last."""
    if len(items) <= count:
        return list(items)
    return (
        [items[round(i * (len(items) - 1) / (count - 1))] for i in range(count)] if count > 1 else [items[0]]
    )


def merge_fields(contents: Sequence[Contents]) -> list[Field]:
    """The arrays of all files, in first-seen order; axes or dtypes that differ become None."""
    seen: dict[str, list[tuple[tuple[int, ...], str]]] = {}
    infos: dict[str, ArrayInfo] = {}
    for c in contents:
        for a in c.arrays:
            seen.setdefault(a.path, []).append((a.shape, a.dtype))
            infos.setdefault(a.path, a)
    fields = []
    for path, found in seen.items():
        shapes = {s for s, _ in found}
        dtypes = {d for _, d in found}
        first = found[0][0]
        if len({len(s) for s in shapes}) > 1:
            shape = None
        else:
            shape = tuple(axis if all(s[i] == axis for s in shapes) else None for i, axis in enumerate(first))
        values = int(np.prod(first)) if first else 1
        info = infos[path]
        coordinate = info.coordinate or path.endswith(("_bnds", "_bounds"))
        dtype = dtypes.pop() if len(dtypes) == 1 else None
        fields.append(
            Field(
                path,
                dtype,
                shape,
                len(found),
                values,
                info.dims,
                coordinate,
                info.kind,
                info.columns,
                info.encoding,
            )
        )
    return fields


def choose_sample_id(contents: Sequence[Contents]) -> str | None:
    """An attribute every file has, with a different value in each, preferring id-like names."""
    if not contents:
        return None
    common = set.intersection(*(set(c.attributes) for c in contents))
    if len(contents) < 2:  # one file cannot show that a value differs: only an attribute named as an id
        candidates = [name for name in common if name.lower() in ID_WORDS]
    else:
        candidates = [name for name in common if len({c.attributes[name] for c in contents}) == len(contents)]

    def rank(name: str) -> tuple[int, str]:
        lower = name.lower()
        exact = [i for i, word in enumerate(ID_WORDS) if lower == word]
        partial = [i for i, word in enumerate(ID_WORDS) if word in lower]
        return (exact[0] if exact else len(ID_WORDS) + (partial[0] if partial else len(ID_WORDS)), name)

    named = [name for name in candidates if any(word in name.lower() for word in ID_WORDS)]
    return min(named, key=rank) if named else None


def survey(spec: str, files: int = 8) -> Survey:
    """Open `files` files spread over the matches of `spec` and describe them."""
    source = locate(spec)
    matches, complete = list_matches(source)
    if not matches:
        raise Sim2dlError(f"no files match {source.pattern!r} below {source.root}")
    contents, opened, unreadable = [], [], {}
    for path in spread(matches, files):
        reader = reader_of(path)
        if reader is None:
            unreadable[str(path)] = f"unknown file suffix '{path.suffix}'"
            continue
        try:
            contents.append(reader.describe(path))
            opened.append(path)
        except SampleError as e:
            unreadable[str(path)] = str(e)
        except Exception as e:  # a library's own failure on a file it cannot read: reported, never raised
            unreadable[str(path)] = f"{type(e).__name__}: {e}"
    if not contents:
        raise Sim2dlError(f"none of the files inspected could be read: {unreadable}")
    fields = tuple(merge_fields(contents))
    sample_id = choose_sample_id(contents)
    return Survey(
        source, tuple(opened), len(matches), complete, fields, sample_id, unreadable, tuple(contents)
    )


def reader_of(path: Path) -> Reader | None:
    """The reader that claims the file (an openPMD series in an HDF5 file), else its suffix's."""
    return next((r for r in READERS.values() if r.claims(path)), None) or BY_SUFFIX.get(path.suffix.lower())


def common_conventions(result: Survey) -> Conventions | None:
    """The conventions every inspected file's reader recognised (the first file's), or None."""
    found = [c.conventions for c in result.contents]
    if not found or any(conventions is None for conventions in found):
        return None
    return found[0]


def field_names(fields: Sequence[Field]) -> dict[str, str]:
    """path -> a logical name: the last path component as an identifier, with its group where two clash."""

    def identifier(text: str) -> str:
        name = re.sub(r"\W+", "_", text).strip("_") or "field"
        return f"f_{name}" if name[0].isdigit() else name

    last = {f.path: identifier(f.path.rstrip("/").split("/")[-1]) for f in fields}
    clashes = {n for n, k in Counter(last.values()).items() if k > 1}
    return {path: identifier(path) if name in clashes else name for path, name in last.items()}


@dataclass(frozen=True)
class Decisions:
    """What the starter config makes of a survey, each with its reason (`lines`)."""

    usable: tuple[Field, ...]  # numeric arrays in every inspected file, coordinates left out
    samples_along: int | str | None
    sample_shapes: dict[str, tuple[int | None, ...] | None]  # field path -> the shape of ONE sample
    candidates: dict[str, list[str]]  # global attribute -> its values, where they differ between files
    class_label: str | None  # the attribute made the categorical label
    sample_id: str | None  # the id attribute, or None: the file's relative path
    lines: tuple[str, ...]
    tables: tuple[TableField, ...] = ()  # event-indexed tables proposed (readers/events.py)
    trajectory: str | None = None  # a file is one run's trajectory: this array (time first), a next state


def _lengths_along(result: Survey, path: str, position: int) -> list[int]:
    """The length of one axis of an array in each inspected file."""
    return [
        a.shape[position]
        for c in result.contents
        for a in c.arrays
        if a.path == path and len(a.shape) > position
    ]


def choose_samples_along(
    result: Survey, usable: Sequence[Field]
) -> tuple[int | str | None, dict[str, int], str]:
    """The sample axis (or None), the position of that axis in each array along it, and why."""
    shaped = [f for f in usable if f.shape is not None and len(f.shape) >= 1]
    conventions = common_conventions(result)
    if conventions is not None and conventions.file_is_sample:
        return None, {}, conventions.why
    if conventions is not None and conventions.samples_along is not None:
        return conventions.samples_along, {f.path: 0 for f in shaped}, conventions.why
    large = [f for f in shaped if not f.is_label] or shaped
    if not large:
        return None, {}, "no array has an axis"
    if all(f.dims for f in large):
        firsts = {f.dims[0] for f in large if f.dims}
        if len(firsts) != 1:
            return None, {}, f"the data arrays start with different dimensions ({', '.join(sorted(firsts))})"
        name = firsts.pop()
        lengths = sorted(set(_lengths_along(result, large[0].path, 0)))
        if len(lengths) < 2 and name.lower() not in SAMPLE_AXIS_WORDS:
            return (
                None,
                {},
                f"dimension '{name}' has the same length in every file and is not named like a sample axis",
            )
        along = {f.path: f.dims.index(name) for f in shaped if f.dims and name in f.dims}
        why = (
            f"lengths {', '.join(map(str, lengths))} differ between files" if len(lengths) > 1 else "its name"
        )
        return name, along, f"the first dimension of {', '.join(f.path for f in large)} ({why})"
    per_file = [
        {a.shape[0] for a in c.arrays if a.path in {f.path for f in shaped} and len(a.shape) >= 1}
        for c in result.contents
    ]
    shared = (
        len(shaped) >= 2 and len(shaped) == len(usable) and all(len(lengths) == 1 for lengths in per_file)
    )
    lengths = sorted({n for lengths in per_file for n in lengths})
    if shared and len(lengths) > 1:
        why = (
            "every array's first axis, its length the same within a file and differing between files "
            f"({lengths})"
        )
        return 0, {f.path: 0 for f in shaped}, why
    if shared:
        return (
            None,
            {},
            (
                f"axis 0 (length {lengths[0]}) is shared by every array but has the same length in every "
                "file: if it indexes samples, set source.samples_along: 0"
            ),
        )
    return None, {}, "the arrays do not share a leading axis of varying length (a file is one sample)"


def trajectory(result: Survey, usable: Sequence[Field]) -> tuple[Field, Field] | None:
    """A file that holds one run's trajectory: the largest array's leading axis is the run's time (a 1-D
    coordinate named like time, TIME_WORDS, or the dimension they share, of the same length), the same in
    every inspected file, with a 2-D or 3-D grid (and maybe fields) after it; not calendar time (CF units
    "... since DATE": a climate archive's time steps are its samples). The array and the time coordinate."""
    times = [
        f
        for f in result.fields
        if f.shape is not None
        and len(f.shape) == 1
        and f.shape[0] is not None
        and f.path.rsplit("/", 1)[-1].lower() in TIME_WORDS
        and "since" not in f.encoding
    ]
    if not times or common_conventions(result) is not None:
        return None
    grids = [f for f in usable if f.shape is not None and None not in f.shape and 3 <= len(f.shape) <= 5]
    for f in sorted(grids, key=lambda f: -f.values):
        for t in times:
            if f.shape[0] == t.shape[0] and (f.dims is None or t.dims is None or f.dims[0] == t.dims[0]):
                return f, t
    return None


def sample_layout(
    result: Survey, usable: tuple[Field, ...], run: tuple[Field, Field] | None
) -> tuple[tuple[Field, ...], int | str | None, dict[str, int], str]:
    """The arrays that hold samples, the sample axis (None: a file is one sample), the axis's position in
    each array along it, and the line that says why: a run's trajectory per file (its time coordinate is
    then the states' axis, not a label), else choose_samples_along's choice."""
    if run is not None:
        states, time = run
        said = (
            f"samples_along: none, a file is one run's trajectory: {states.path} {list(states.shape)} has "
            f"{time.path}'s {time.shape[0]} steps first, then its grid, in every file: a next state (one "
            "sample per step instead: source.samples_along: 0)"
        )
        return tuple(f for f in usable if f.path != time.path), None, {}, said
    axis, along, why = choose_samples_along(result, usable)
    said = (
        f"samples_along: none, a file is one sample: {why}"
        if axis is None
        else f"samples_along: {axis!r}, one sample per index: {why}"
    )
    return usable, axis, along, said


def fields_before_grid(shape: Sequence[int], axis: int) -> bool:
    """Whether `axis` of a fixed shape is a short field axis standing before a grid's longer axes: (field,
    y, x) at 0, (time, field, y, x[, z]) at 1."""
    return len(shape) - axis >= 3 and shape[axis] <= FIELD_AXIS < min(shape[axis + 1 :])


def move_fields_last(chosen: StarterChoice, name: str, shape: Sequence[int], axis: int) -> tuple[int, ...]:
    """Map `name`'s axis `axis` (its fields, stored before the grid) to be moved last (channel_axis), with
    a note; the shape of a sample as sim2dl then holds it."""
    chosen.fields[name]["channel_axis"] = axis
    chosen.notes.append(
        f"{name}: its axis {axis} (length {shape[axis]}) holds fields, stored before the grid: "
        "channel_axis moves it last"
    )
    return fields_last_shape(shape, axis)


def label_candidates(result: Survey, sample_id: str | None) -> dict[str, list[str]]:
    """Global attributes in every inspected file whose values differ between them (fewest values first)."""
    if len(result.contents) < 2:
        return {}
    common = set.intersection(*(set(c.attributes) for c in result.contents)) - {sample_id}
    values = {name: sorted({c.attributes[name] for c in result.contents}) for name in common}
    differing = {name: v for name, v in values.items() if len(v) > 1}
    return dict(sorted(differing.items(), key=lambda item: (len(item[1]), item[0])))


def field_dtypes() -> set[str]:
    """The dtypes a field may declare (the schema's list: float128 or complex numbers are not among them)."""
    spec = cfg.schema()["properties"]["source"]["properties"]["fields"]["additionalProperties"]
    return {dtype for dtype in spec["properties"]["dtype"]["enum"] if dtype}


def sample_arrays(result: Survey, usable: tuple[Field, ...], lines: list[str]) -> tuple[Field, ...]:
    """The arrays that hold samples: all usable ones, unless the format's conventions name them (The Well's
    fields, not its grid's axes); the others are said in `lines`."""
    conventions = common_conventions(result)
    if conventions is None or conventions.arrays is None:
        return usable
    others = [f.path for f in usable if f.path not in conventions.arrays]
    if others:
        lines.append(f"left out: {', '.join(others)}: not samples by the format's layout")
    return tuple(f for f in usable if f.path in conventions.arrays)


def decide(result: Survey) -> Decisions:
    """What the inspected files make: the fields kept, how samples lie in the files, their shapes, the
    label candidates and the sample id, with a line of why for each choice."""
    lines: list[str] = []
    usable = usable_fields(result, lines)
    tables = tuple(propose_tables([f for f in result.fields if f.in_files == len(result.files)]))
    if tables:
        used = {path for table in tables for path in table.uses}
        usable = tuple(f for f in usable if f.path not in used)
        lines += [f"table field {t.name}: {t.why}" for t in tables]
        shapes = {f.path: f.shape for f in usable}  # per-file arrays: the same for each event
        lines.append("sample id: FILEID#EVENT, the file id its relative path")
        return Decisions(usable, None, shapes, {}, None, None, tuple(lines), tables)
    if not usable:
        return Decisions(usable, None, {}, {}, None, result.sample_id, tuple(lines))
    run = trajectory(result, usable)
    usable, axis, along, said = sample_layout(result, usable, run)
    lines.append(said)
    shapes = sample_shapes(usable, along)
    # Many samples per file: the file's id only prefixes its samples' ids, and the path is unique for sure
    # (an attribute unique in the files inspected may repeat in others: CMIP6's tracking_id, source_id).
    sample_id = result.sample_id if axis is None else None
    candidates, class_label = labels(
        result, sample_id, [f for f in usable if is_small(shapes[f.path], f)], lines
    )
    lines.append(sample_id_line(axis, sample_id))
    if run is not None:
        # a run's attributes are its parameters, given to the next state (follow_trajectory)
        class_label = None
    return Decisions(
        usable,
        axis,
        shapes,
        candidates,
        class_label,
        sample_id,
        tuple(lines),
        trajectory=None if run is None else run[0].path,
    )


def usable_fields(result: Survey, lines: list[str]) -> tuple[Field, ...]:
    """The numeric fields of a supported dtype in every inspected file that are samples by the format's
    layout; coordinate variables are left out, and said so in lines."""
    coordinates = [f.path for f in result.fields if f.coordinate]
    dtypes = field_dtypes()
    usable = tuple(
        f
        for f in result.fields
        if f.numeric and f.dtype in dtypes and f.in_files == len(result.files) and not f.coordinate
    )
    if coordinates:
        lines.append(
            f"left out: {', '.join(coordinates)}: coordinate variables (named as their dimension, "
            "CF bounds or coordinates, dimension scales)"
        )
    return sample_arrays(result, usable, lines)


def sample_shapes(
    usable: Sequence[Field], along: Mapping[str, int]
) -> dict[str, tuple[int | None, ...] | None]:
    """One sample's shape of each field: without the axis the samples lie along (`along`), and None for
    a jagged field's rows."""
    shapes: dict[str, tuple[int | None, ...] | None] = {}
    for f in usable:
        if f.kind == "jagged":  # a variable number of rows per entry, each of the array's trailing axes
            shapes[f.path] = (None, *f.shape[2:]) if f.shape is not None and f.path in along else (None,)
        elif f.path in along and f.shape is not None:
            shapes[f.path] = tuple(n for k, n in enumerate(f.shape) if k != along[f.path])
        else:
            shapes[f.path] = f.shape
    return shapes


def labels(
    result: Survey, sample_id: str | None, small: Sequence[Field], lines: list[str]
) -> tuple[dict[str, list[str]], str | None]:
    """The label candidates (global attributes that differ between files) and, where no array is a small
    per-sample vector (`small`), the first of them as a categorical class."""
    candidates = label_candidates(result, sample_id)
    if candidates:
        told = "; ".join(
            f"{name} ({len(v)} values: {', '.join(v[:4])}{', ...' if len(v) > 4 else ''})"
            for name, v in candidates.items()
        )
        lines.append(f"label candidates, global attributes that differ between files: {told}")
    class_label = None
    if candidates and not small:
        class_label = next(iter(candidates))
        lines.append(
            f"label: attribute {class_label!r} as a categorical class (no array is a small per-sample vector)"
        )
    return candidates, class_label


def sample_id_line(axis: int | str | None, sample_id: str | None) -> str:
    """How samples are named: by file and index (many per file), by the file, or by an id attribute."""
    if axis is not None:
        return (
            "sample id: FILEID#INDEX, the file id its relative path (unique, where an attribute may repeat "
            "in files not inspected)"
        )
    if sample_id is None:
        return "sample id: the file's relative path (no id attribute has a different value in every file)"
    return f"sample id: attribute {sample_id!r} (a different value in every file)"


def is_small(shape: tuple[int | None, ...] | None, field: Field) -> bool:
    """A small vector of ONE sample (a few parameters): a regression target."""
    if shape is None or None in shape or len(shape) > 1:
        return False
    return int(np.prod(shape)) <= SMALL_VECTOR if shape else field.values <= SMALL_VECTOR


@dataclass
class StarterChoice:
    """What the starter config maps: every field, the feature(s) and labels chosen, what is left unused,
    the first feature's shape (the model is chosen for it), grids to deposit, and notes for its header."""

    fields: dict[str, Any]
    names: dict[str, str]
    features: list[str]
    labels: list[str]
    class_labels: list[str]
    unused: list[str]
    first_shape: tuple[int, ...] | None
    task: str = ""  # train.task: the task proposed for what the files hold (tasks.task_for)
    deposit: dict[str, Any] = field(default_factory=dict)
    notes: list[str] = field(default_factory=list)
    plane: bool = False  # the first feature is a plane with channels last (Conventions.planes)
    model: dict[str, Any] = field(default_factory=dict)  # the format's model settings (Conventions.model)
    labels_table: dict[str, Any] | None = None  # source.labels_table: an ensemble's runs table
    # more fields normalised per channel (a state's fields)
    per_channel: list[str] = field(default_factory=list)
    stack: dict[str, list[str]] = field(default_factory=dict)  # convert.stack: a state's fields as channels
    task_settings: dict[str, Any] = field(default_factory=dict)  # train.<task>'s own section
    from_design: bool = False  # a forward surrogate: the design's parameters in, each run's arrays out


def starter_config(result: Survey, workdir: str) -> tuple[str, dict[str, Any]]:
    """The starter config's YAML text (with comments) and its content; raises if it would not validate."""
    decided = decide(result)
    if decided.tables:
        return table_config(result, decided, workdir)
    if not decided.usable:
        found = (
            "; ".join(f"{f.path}: {why_left_out(f, len(result.files))}" for f in result.fields) or "nothing"
        )
        raise Sim2dlError(
            "no numeric array that is not a coordinate is in every inspected file below "
            f"{result.source.root} (found: {found})"
        )
    chosen, candidates = chosen_arrays(decided), []
    attribute_names = {}
    for attribute in decided.candidates:
        name = re.sub(r"\W+", "_", attribute).strip("_") or "attribute"
        attribute_names[attribute] = name if name not in chosen.names.values() else f"{name}_attr"
    for attribute, name in attribute_names.items():
        spec = {"attr": attribute, "categorical": True}
        if attribute == decided.class_label:
            chosen.fields[name] = spec
        else:
            candidates.append(f"{name}: {flow(spec)}   (a candidate label)")
    chosen.class_labels = [attribute_names[decided.class_label]] if decided.class_label else []
    chosen.task = task_for("classes" if decided.class_label and not chosen.labels else "values")
    conventions = common_conventions(result)
    # what the format says of itself (readers' describe): it decides where it speaks
    if conventions is not None:
        follow_conventions(chosen, conventions, decided.sample_shapes)
    follow_runs_table(chosen, result, decided)
    if decided.trajectory is not None:
        follow_trajectory(chosen, decided, run_parameters(result))
        candidates = [c for c in candidates if c.split(":")[0] not in chosen.labels]  # mapped as parameters
    elif conventions is None:
        follow_fields_first(chosen)
    skipped = [
        f"{f.path} ({why_left_out(f, len(result.files))})" for f in result.fields if f not in decided.usable
    ]
    return emit(
        result, decided, starter_sections(result, decided, chosen, conventions, workdir, candidates, skipped)
    )


def chosen_arrays(decided: Any) -> StarterChoice:
    """Every usable array mapped (with its shape, and `missing: reject` said outright where the file
    declares fill values); the largest array is the feature (a built-in model takes one input: the
    other large ones are mapped but unused), the small ones the labels."""
    usable, shapes = decided.usable, decided.sample_shapes
    names = field_names(usable)
    labels = [names[f.path] for f in usable if is_small(shapes[f.path], f)]
    large = [f for f in usable if names[f.path] not in labels]
    if not large:  # only small arrays: the largest is the input
        largest = max((f for f in usable if names[f.path] in labels), key=lambda f: f.values)
        large = [largest]
        labels.remove(names[largest.path])
    feature = max(large, key=lambda f: f.values)
    fields: dict[str, Any] = {}
    for f in usable:
        shape = shapes[f.path]
        fields[names[f.path]] = {
            "path": f.path,
            "dtype": f.dtype,
            "shape": None if shape is None else list(shape),
        }
        if any(marker in f.encoding for marker in ("_FillValue", "missing_value", "valid_")):
            fields[names[f.path]]["missing"] = "reject"  # said outright: fill or mask keep such samples
    unused = [names[f.path] for f in large if f is not feature]
    return StarterChoice(fields, names, [names[feature.path]], labels, [], unused, shapes[feature.path])


def follow_conventions(chosen: StarterChoice, conventions: Conventions, shapes: Mapping[str, Any]) -> None:
    """The format's conventions decide where they speak: more fields, the features (grids deposited from
    particles among them), the labels, and notes; grids it allows but the config does not use are said."""
    names = chosen.names
    chosen.fields.update(conventions.fields)
    deposit = conventions_deposit(conventions, names)
    chosen.stack = {
        name: [names[m] for m in members]
        for name, members in conventions.stack.items()
        if all(m in names for m in members)
    }
    made = {**deposit, **chosen.stack}
    picked = [f if f in made else names[f] for f in conventions.features if f in made or f in names]
    if picked:
        chosen.unused = [n for n in chosen.unused + chosen.features if n not in picked]
        chosen.unused = [
            n for n in chosen.unused if not any(n in members for members in chosen.stack.values())
        ]
        chosen.features = picked
        first_path = next((path for path, name in names.items() if name == picked[0]), None)
        if picked[0] in chosen.stack:  # the members' shape, their fields last
            member = next(path for path, name in names.items() if name == chosen.stack[picked[0]][0])
            chosen.first_shape = (*shapes[member], len(chosen.stack[picked[0]]))
        else:
            chosen.first_shape = (
                tuple(deposit[picked[0]]["shape"]) if picked[0] in deposit else shapes[first_path]
            )
    chosen.per_channel = [names.get(p, p) for p in conventions.per_channel]
    if conventions.labels:
        known = conventions.fields.keys() | names.keys()
        chosen.labels = [names.get(label, label) for label in conventions.labels if label in known]
        chosen.class_labels = []
    # a trajectory: the targets are its own later states (labels: its parameters)
    if conventions.kind is not None:
        chosen.task, chosen.model = task_for(conventions.kind), dict(conventions.model or {})
        chosen.task_settings = dict(conventions.task_settings)
        chosen.labels = chosen.labels if conventions.labels and chosen.task_settings.get("condition") else []
        chosen.class_labels = []
    chosen.notes = list(conventions.notes)
    chosen.plane = any(names.get(path) == chosen.features[0] for path in conventions.planes)
    offered = {name: spec for name, spec in deposit.items() if name not in chosen.features}
    if offered:  # grids the format allows but the config does not use: said, not computed
        chosen.notes.append(f"particles onto a grid, to use as a feature: convert.deposit: {flow(offered)}")
    chosen.deposit = {name: spec for name, spec in deposit.items() if name in chosen.features}


def starter_sections(
    result: Survey,
    decided: Any,
    chosen: StarterChoice,
    conventions: Conventions | None,
    workdir: str,
    candidates: list[str],
    skipped: list[str],
) -> Sections:
    """The starter config's sections, each with the comment lines above it."""
    model, depth = propose(chosen.first_shape, chosen.plane)
    shape = chosen.first_shape
    features, labels, deposit = chosen.features, chosen.labels, chosen.deposit
    # statistics per channel
    vectors = [label for label in labels if chosen.fields.get(label, {}).get("shape")]
    if chosen.from_design:  # a forward surrogate's per-channel fields are chosen already
        vectors = []
    return [
        ([], {"workdir": workdir}),
        (["existing output, below source.path: the simulator is off"], {"simulate": {"enabled": False}}),
        source_section(result, decided, chosen, conventions, candidates, skipped),
        (
            [
                *convert_comments(chosen),
                "log1p: e.g. the features, for particle counts; "
                "normalise: standardised with the data's statistics",
                "split: cut the features into sub-volumes, e.g. [32, 32, 32]",
                *chosen.notes,
            ],
            {
                "convert": {
                    **({"deposit": deposit} if deposit else {}),
                    **({"stack": chosen.stack} if chosen.stack else {}),
                    "features": features,
                    "labels": labels + chosen.class_labels,
                    "log1p": list(deposit) if deposit else [],
                    "normalise": features + labels,
                    "per_channel": chosen.per_channel + vectors,
                    "subvolume": None,
                }
            },
        ),
        merge_section(decided, conventions),
        (
            [f"model: for the feature's shape {flow(None if shape is None else list(shape))}"],
            {
                "train": {
                    "task": chosen.task,
                    "model": model,
                    "depth": depth,
                    **chosen.model,
                    **({chosen.task: chosen.task_settings} if chosen.task_settings else {}),
                }
            },
        ),
    ]


def convert_comments(chosen: StarterChoice) -> list[str]:
    """What the convert section's features and labels are, and the arrays mapped but not used."""
    if chosen.from_design:
        return ["features: the design's parameters; labels: what each run wrote (a forward surrogate)"]
    return [
        "features: the largest array, the network's input; labels: the small vectors (and a class)",
        *(
            [
                f"also large, mapped but not used: {', '.join(chosen.unused)} (a mask to segment: labels "
                "with train.task: segmentation; more inputs: convert.stack, or your own model)"
            ]
            if chosen.unused
            else []
        ),
    ]


def merge_section(decided: Any, conventions: Conventions | None) -> tuple[list[str], dict[str, Any]]:
    """The starter config's merge section: three splits, by file where files hold several samples, or as
    the format's layout says (The Well's: by trajectory)."""
    split_by = (conventions and conventions.split_by) or (
        "file" if decided.samples_along is not None else "sample"
    )
    why = {
        "file": "split_by file: every sample of a file in one split",
        "sample": "split_by sample: each sample on its own"
        if decided.samples_along is not None
        else "split_by sample: each file is one sample",
    }[split_by]
    return (
        [
            "splits: train, validation (chooses the kept epoch) and test (scored on, chosen on by nothing);",
            why,
        ],
        {"merge": {"splits": {"train": 0.8, "validation": 0.1, "test": 0.1}, "split_by": split_by}},
    )


def source_section(
    result: Survey,
    decided: Any,
    chosen: StarterChoice,
    conventions: Conventions | None,
    candidates: list[str],
    skipped: list[str],
) -> tuple[list[str], dict[str, Any]]:
    """The starter config's source section: where the files are, how samples lie in them, the fields."""
    shapes = decided.sample_shapes
    varying = [
        chosen.names[f.path]
        for f in decided.usable
        if shapes[f.path] is None or None in (shapes[f.path] or ())
    ]
    return (
        [
            "samples_along: "
            + ("a file is one sample" if decided.samples_along is None else "one sample per index"),
            "sample_id null: the file's relative path",
            "fields: the shape of ONE sample (null: any length)"
            + (f"; {', '.join(varying)} differ between the files inspected" if varying else ""),
            *(["more fields you could map:", *candidates] if candidates else []),
            *(["not mapped:", *skipped] if skipped else []),
        ],
        {
            "source": {
                "path": str(result.source.root),
                "glob": result.source.pattern,
                **({"format": conventions.format} if conventions is not None and conventions.format else {}),
                "samples_along": decided.samples_along,
                "sample_id": None if decided.sample_id is None else {"attr": decided.sample_id},
                **({"labels_table": chosen.labels_table} if chosen.labels_table else {}),
                "fields": chosen.fields,
            }
        },
    )


@dataclass(frozen=True)
class RunsTable:
    """An ensemble's runs table: its file's name, the design's parameters (a run's inputs), and whether
    sim2dl wrote it (a design whose outputs a forward surrogate learns)."""

    name: str
    parameters: list[str]
    by_sim2dl: bool


def runs_table(result: Survey) -> RunsTable | None:
    """An ensemble's runs table at the inspected directory's top (RUNS_TABLES) when every inspected file
    lies in a run's directory; None where there is none. The parameters of a table sim2dl wrote (its
    schema's DESIGN_METADATA) are the columns between `run` and `seed`, as the ensemble writes them, and a
    run's level (`fidelity_index`) where simulate.fidelities made several: the bookkeeping after them
    (round, acquisition, attempts, seconds, exit_code, ...) is not science. Of another table: its numeric
    columns other than the run's key and seed."""
    import pyarrow as pa
    import pyarrow.csv as pacsv
    import pyarrow.parquet as pq

    root = result.source.root
    found = next((root / name for name in RUNS_TABLES if (root / name).is_file()), None)
    if found is None or any(run_directory(f.relative_to(root)) is None for f in result.files):
        return None
    try:
        # not its rows
        schema = pq.read_schema(found) if found.suffix == ".parquet" else pacsv.open_csv(found).schema
    except (OSError, pa.ArrowInvalid):
        return None
    numeric = [f.name for f in schema if pa.types.is_integer(f.type) or pa.types.is_floating(f.type)]
    names = schema.names
    if DESIGN_METADATA in (schema.metadata or {}) and "run" in names and "seed" in names:
        design = names[names.index("run") + 1 : names.index("seed")]
        if INDEX_COLUMN in names:  # levels of one simulator: a surrogate takes the level as an input
            design.append(INDEX_COLUMN)
        return RunsTable(found.name, [name for name in design if name in numeric], True)
    return RunsTable(found.name, [name for name in numeric if name not in ("run", "seed")], False)


def follow_runs_table(chosen: StarterChoice, result: Survey, decided: Any) -> None:
    """An ensemble's parameters, from its runs table (source.labels_table, each row matched by the run's
    directory). A design sim2dl ran is run for a forward surrogate (its parameters to its outputs), unless
    each file is a trajectory (a next state conditioned on them: follow_trajectory); another table's
    columns become the labels a network learns back from the output."""
    table = runs_table(result)
    if table is None or not table.parameters:
        return
    name, columns = table.name, table.parameters
    chosen.labels_table = {"path": name, "key": "run", "match": RUN_DIRECTORY}
    for column in columns:
        chosen.fields[column if column not in chosen.fields else f"{column}_run"] = {"column": column}
    chosen.labels = [
        column if chosen.fields.get(column) == {"column": column} else f"{column}_run" for column in columns
    ]
    chosen.class_labels = []
    chosen.task = task_for("values")
    chosen.notes.append(
        f"labels: the ensemble's parameters, the columns {', '.join(columns)} of {name} (a row per "
        "run, matched by the run's directory in each file's path)"
    )
    if table.by_sim2dl and decided.trajectory is None:
        forward_surrogate(chosen, result, table)


def forward_surrogate(chosen: StarterChoice, result: Survey, table: RunsTable) -> None:
    """The design's parameters (stacked into one vector, `params`) in, every array a run wrote out but a
    copy of its own parameters: what a design is run for. Each parameter and each vector output normalised
    per entry."""
    parameters = list(chosen.labels)
    arrays = [n for n, spec in chosen.fields.items() if "path" in spec and spec.get("shape") is not None]
    copies = [n for n in arrays if echoes_the_design(result, table, chosen.fields[n])]
    outputs = [n for n in arrays if n not in copies]
    name = "params" if "params" not in chosen.fields else "design_params"
    chosen.stack = {name: parameters}
    chosen.features, chosen.labels, chosen.unused = [name], outputs, []
    chosen.per_channel = [name] + [n for n in outputs if len(chosen.fields[n]["shape"]) == 1]
    chosen.first_shape = (len(parameters),)
    chosen.task, chosen.from_design = task_for("design"), True
    chosen.model = {"model": "decoder", "depth": 3, "width": 16, "dense": 128}
    chosen.notes[-1] = (
        f"a forward surrogate: the design's parameters ({', '.join(parameters)}, the columns of the "
        f"runs table, stacked as {name}) in, each run's {', '.join(outputs)} out"
    )
    if copies:
        chosen.unused = copies
        chosen.notes.append(f"not an output: {', '.join(copies)} (each run's copy of its own parameters)")


def echoes_the_design(result: Survey, table: RunsTable, spec: Mapping[str, Any]) -> bool:
    """Whether an array of as many values as the design has parameters holds, in the first inspected file,
    that run's parameters as the runs table gives them (a simulator that writes its inputs beside its
    outputs)."""
    import pyarrow.parquet as pq

    if list(spec.get("shape") or ()) != [len(table.parameters)] or not table.name.endswith(".parquet"):
        return False
    path = result.files[0]
    run = run_directory(path.relative_to(result.source.root))
    reader = reader_of(path)
    if run is None or reader is None:
        return False
    row = pq.read_table(
        result.source.root / table.name, columns=["run", *table.parameters], filters=[("run", "=", run)]
    )
    if row.num_rows != 1:
        return False
    given = np.array([row.column(p)[0].as_py() for p in table.parameters], np.float64)
    with reader.open(path) as opened:
        written = np.asarray(opened.read(spec["path"], ()), np.float64).ravel()
    return written.shape == given.shape and bool(np.allclose(written, given, rtol=1e-5, atol=1e-8))


def follow_fields_first(chosen: StarterChoice) -> None:
    """A feature stored fields first, (field, y, x[, z]): a short axis before a grid's longer ones is moved
    last (channel_axis 0), as sim2dl keeps fields."""
    shape = chosen.first_shape
    if shape is not None and None not in shape and 3 <= len(shape) <= 4 and fields_before_grid(shape, 0):
        chosen.first_shape = move_fields_last(chosen, chosen.features[0], shape, 0)


def run_parameters(result: Survey) -> list[str]:
    """The numeric global attributes in every inspected file whose values differ between them: a run's
    parameters (Du, alpha, a Reynolds number)."""
    if len(result.contents) < 2:
        return []
    common = set.intersection(*(set(c.numbers) for c in result.contents))
    return sorted(name for name in common if len({c.numbers[name] for c in result.contents}) > 1)


def follow_trajectory(chosen: StarterChoice, decided: Any, attributes: Sequence[str]) -> None:
    """A file is one run's trajectory: its states the feature of a next state (a short field axis before
    the grid moved last, each field normalised on its own), and what differs per run (the runs table's
    columns, numeric attributes that differ between files) its parameters, given as a conditioning vector."""
    name = chosen.names[decided.trajectory]
    shape = tuple(decided.sample_shapes[decided.trajectory])
    if len(shape) >= 4 and fields_before_grid(shape, 1):
        shape = move_fields_last(chosen, name, shape, 1)
    fields_last = len(shape) == 5 or (len(shape) == 4 and shape[-1] <= FIELD_AXIS)
    grid = shape[1:-1] if fields_last else shape[1:]
    parameters = [label for label in chosen.labels if chosen.fields.get(label, {}).get("column")]
    for attribute in attributes:
        field_name = re.sub(r"\W+", "_", attribute).strip("_") or "attribute"
        field_name = field_name if field_name not in chosen.fields else f"{field_name}_attr"
        chosen.fields.pop(field_name, None)
        chosen.fields[field_name] = {"attr": attribute}
        parameters.append(field_name)
    chosen.unused = [
        n for n in chosen.unused + chosen.features + chosen.labels if n != name and n not in parameters
    ]
    chosen.features, chosen.labels, chosen.class_labels = [name], parameters, []
    chosen.first_shape = tuple(shape)
    chosen.per_channel = [name] if fields_last else []
    chosen.task = task_for("trajectory")
    own: dict[str, Any] = {"states_in": 1, "states_out": 1, "horizon": 0}
    if parameters:
        own["condition"] = "vector"
    if len(grid) == 3:
        own["spatial_dims"] = 3
    chosen.model, chosen.task_settings = proposed_for_states(grid), own
    chosen.notes.append(
        f"a next state of {name}: windows of each run's states, split by run"
        + (f"; each run's {', '.join(parameters)} given as a conditioning vector" if parameters else "")
    )


def conventions_deposit(conventions: Conventions, names: dict[str, str]) -> dict[str, Any]:
    """The conventions' deposits with their arrays' paths as field names (a deposit of arrays not mapped is
    left out)."""
    deposit = {}
    for name, spec in conventions.deposit.items():
        arrays = [spec.get(key) for key in ("positions", "weights") if spec.get(key) is not None]
        if all(path in names for path in arrays):
            deposit[name] = {
                key: names[value] if key in ("positions", "weights") else value
                for key, value in spec.items()
                if value is not None
            }
    return deposit


Sections = list[tuple[list[str], dict[str, Any]]]  # (comment lines, top-level keys) in the order written


def emit(result: Survey, decided: Decisions, sections: Sections) -> tuple[str, dict[str, Any]]:
    """The config's YAML: the decisions as a header comment, then each section with its comments (PyYAML
    writes the values); checked to read back as written and to validate."""
    header = [
        f"Written by `sim2dl inspect` from {len(result.files)} of "
        f"{result.listed}{'' if result.complete else '+'} files. Check it, then run:",
        "  snakemake --cores 2 --configfile THIS_FILE",
        "Every key, with its default: pipeline/schema.yaml (config/schema.yaml in the repository).",
        *decided.lines,
    ]
    parts = [comment(header)]
    for notes, section in sections:
        parts.append(comment(notes) + "".join(block(key, value) for key, value in section.items()))
    text = "".join(parts)
    content = yaml.safe_load(text)
    expected = {key: value for _, section in sections for key, value in section.items()}
    if content != expected:
        raise Sim2dlError("the starter config does not read back as written (please report this)")
    try:
        cfg.validate(yaml.safe_load(text))
    except Sim2dlError as e:
        raise Sim2dlError(f"the starter config would not validate (please report this): {e}") from None
    return text, content


def table_config(result: Survey, decided: Decisions, workdir: str) -> tuple[str, dict[str, Any]]:
    """A starter config for event-indexed tables (readers/events.py's starter_tables: its fields, the
    feature and the labels), per-file arrays mapped beside them."""
    fields, feature, labels = starter_tables(decided.tables)
    skipped = [
        f"{f.path} ("
        + ("per file, not per event" if f in decided.usable else why_left_out(f, len(result.files)))
        + ")"
        for f in result.fields
        if not any(f.path in t.uses for t in decided.tables)
    ]
    sections: Sections = [
        ([], {"workdir": workdir}),
        (["existing output, below source.path: the simulator is off"], {"simulate": {"enabled": False}}),
        (
            [
                "one sample per event of the tables (readers/events.py); "
                "sample_id null: the file's relative path",
                *(["not mapped:", *skipped] if skipped else []),
            ],
            {
                "source": {
                    "path": str(result.source.root),
                    "glob": result.source.pattern,
                    "samples_along": None,
                    "sample_id": None,
                    "fields": fields,
                }
            },
        ),
        (
            ["features: the table with the most rows; labels: per-event values of the other tables"],
            {
                "convert": {
                    "features": [feature],
                    "labels": labels,
                    "log1p": [],
                    "normalise": [],
                    "per_channel": [],
                }
            },
        ),
        (["sequence: a 1-D network over each event's rows"], {"train": {"model": "sequence", "depth": 2}}),
    ]
    return emit(result, decided, sections)


def flow(value: Any) -> str:
    """A value as one line of YAML (flow style)."""
    text = yaml.safe_dump(value, default_flow_style=True, width=1_000_000, sort_keys=False)
    return " ".join(text.removesuffix("...\n").split())


def block(key: str, value: Any) -> str:
    """A top-level key in block style, the collections inside it that hold only scalars in flow style."""
    if not isinstance(value, dict) or not value:
        return f"{key}: {flow(value)}\n"
    inner = yaml.safe_dump(value, sort_keys=False, default_flow_style=None, width=110)
    if inner.startswith("{"):  # only scalars inside: PyYAML would write the whole mapping in flow style
        inner = "".join(f"{name}: {flow(item)}\n" for name, item in value.items())
    return f"{key}:\n" + "".join(f"  {line}\n" for line in inner.splitlines())


def comment(lines: Sequence[str]) -> str:
    """YAML comment lines: any text (an attribute's value with newlines, ': ', '#') stays inside them."""
    return "".join(
        f"# {line}\n" if line else "#\n" for text in lines for line in str(text).splitlines() or [""]
    )


def why_left_out(f: Field, files: int) -> str:
    if f.coordinate:
        return "a coordinate"
    if f.kind == "table":
        return "a table (compound dataset)"
    if f.kind == "objects":
        return "objects, not numbers"
    if f.kind == "unsupported":
        return "a type numpy cannot read"
    if f.in_files < files:
        return f"in {f.in_files} of {files} files"
    if f.numeric:
        return f"dtype {f.dtype}: not one a field holds"
    return "not numeric" if f.dtype is not None else "dtype differs between files"


def report(result: Survey) -> str:
    """What a person reads: the arrays, their shapes and dtypes, what differs, what is unreadable."""
    n = len(result.files)
    lines = [
        f"{result.source.root}: {result.listed}{'' if result.complete else '+'} files match "
        f"{result.source.pattern!r}; inspected {n}:",
        *(f"  {p}" for p in result.files),
        "",
    ]
    width = max((len(f.path) for f in result.fields), default=5)
    lines.append(f"  {'array':<{width}}  {'dtype':<8}  {'shape':<24}  notes")
    for f in result.fields:
        axes = "rank differs" if f.shape is None else ", ".join("*" if a is None else str(a) for a in f.shape)
        shape = axes if f.shape is None else f"({axes}{',' if len(f.shape) == 1 else ''})"
        notes = []
        if f.shape is None or None in f.shape:
            notes.append("shape differs between files (*: any length)")
        if f.dtype is None:
            notes.append("dtype differs between files")
        elif f.kind == "table":
            columns = ", ".join(f"{name} {dtype}" for name, dtype in f.columns or ())
            notes.append(f"a table, columns: {columns}")
        elif f.kind == "objects":
            notes.append(f"objects ({f.encoding or 'a class'}), not numbers: left out")
        elif f.kind == "unsupported":
            notes.append(f"a type numpy cannot read: {f.encoding}")
        elif f.kind == "jagged":
            notes.append("jagged: a variable number of values per entry")
        elif not f.numeric:
            notes.append("not numeric")
        if f.encoding and f.kind in ("array", "jagged"):
            notes.append(f.encoding)
        if f.in_files < n:
            notes.append(f"in {f.in_files} of {n} files")
        lines.append(f"  {f.path:<{width}}  {f.dtype or '?':<8}  {shape:<24}  {'; '.join(notes)}".rstrip())
    lines.append("")
    conventions = common_conventions(result)
    if conventions is not None:  # what the format says of itself: its layout, its mesh's geometry
        lines += [f"layout: {conventions.why}", *(f"  {note}" for note in conventions.notes)]
    lines += decide(result).lines
    for path, reason in result.unreadable.items():
        lines.append(f"unreadable: {path}: {reason}")
    return "\n".join(lines)


def inspect(spec: str, files: int = 8, write: Path | None = None) -> tuple[str, dict[str, Any] | None]:
    """The report, and with `write` the starter config written there (atomically)."""
    result = survey(spec, files)
    text = report(result)
    if write is None:
        return text, None
    # The workdir beside the config file, so that the run writes nowhere else whatever directory it starts in.
    config_text, content = starter_config(result, str(write.resolve().parent / "results" / write.stem))
    write_text_atomic(write, config_text)
    return text + f"\n\nwrote {write}; next: snakemake --cores 2 --configfile {write}", content

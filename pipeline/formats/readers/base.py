"""The interface every input format implements: read the declared fields of one file (a file is one
sample), open a file to read ranges of its samples along an axis (`OpenFile`: many samples per file,
hyperslab reads), and describe what a file holds (for `sim2dl inspect`)."""

from __future__ import annotations

import errno
import hashlib
import os
from abc import ABC, abstractmethod
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from pipeline import Sim2dlError
from pipeline.config import MASK_SUFFIX
from pipeline.formats.readers import cf


class SampleError(Exception):
    """This file cannot become a sample; the message is the reason recorded in the rejects list."""


class MissingArray(SampleError):
    """The file has no array at a field's path (OpenFile's reads raise it)."""


EMPTY = "empty file (0 bytes)"
COMPONENT_NAMES = "component_names"  # an array's attribute: names of the entries along its last axis
GEOMETRY = "geometry"  # an array's attribute: a mesh's geometry, axes, grid and layout (a mapping; openPMD)


def unreadable(e: OSError) -> SampleError:
    """The reason a file that cannot be read is rejected."""
    return SampleError(f"unreadable: {'permission denied' if e.errno == errno.EACCES else e.strerror}")


def one_line(error: BaseException) -> str:
    """A library's multi-line message as one line (a rejects list has a line per input)."""
    return " ".join(str(error).split())


def check_complete(path: Path) -> None:
    """SampleError for an input that is not there, or a BP4/BP5 directory without its index (md.idx): a
    truncated copy, or a writer that never got that far, which an ADIOS2 engine would wait for."""
    if not path.exists():
        raise SampleError("no such file or directory")
    if path.is_dir() and not (path / "md.idx").exists():
        raise SampleError(
            "not a complete BP directory (no md.idx: a truncated copy or a writer still running)"
        )


def readable_size(path: Path | str) -> int:
    """The input's size in bytes; SampleError (unreadable, with the reason) when it cannot be read."""
    try:
        size = os.stat(path).st_size
    except OSError as e:
        raise unreadable(e) from None
    if size and not os.access(path, os.R_OK):
        raise SampleError("unreadable: permission denied")
    return size


# Where a field's values come from (the key that names it in source.fields): an array in the file, a
# global attribute of the file, a column of source.labels_table, a named group of source.path_pattern.
FIELD_KINDS = ("path", "attr", "column", "path_group")


@dataclass(frozen=True)
class FieldSpec:
    name: str  # logical name used by every later step
    path: str  # where the field lives: an array's path in the file, an attribute, a column or a group name
    dtype: str | None = None  # None: any numeric dtype
    shape: tuple[int | None, ...] | None = None  # None: any shape; None entries: any length
    kind: str = "path"  # one of FIELD_KINDS
    categorical: bool = False  # values (text or integers) become class ids 0..K-1 (int64)
    classes: tuple[str, ...] | None = None  # the classes, as text, in id order; None: found in the data
    missing: str = "reject"  # a sample with missing values (CF markers): reject | fill | mask (readers/cf.py)
    fill_value: float | None = None  # what replaces a missing value (fill, mask); None: 0
    # Event-indexed tables (readers/events.py): the columns of the table at `path`, one sample per event
    columns: tuple[str, ...] | None = None
    ragged_by: str | None = None  # an index table of (start, count) rows
    group_by: str | None = None  # a sorted id column of the table
    key: str | None = None  # a sorted id column of ANOTHER table: a per-event value, reduced
    reduce: str = "first"  # first | sum | mean | count (with key)
    max_rows: int | None = None  # a sample's first axis at most this long (None: any)
    over_max_rows: str = "reject"  # reject | sample (seeded, rows kept in order)
    # the axis of a sample's array, as stored, that indexes its fields (channels first: (field, y, x) or
    # (time, field, y, x)); moved last as every later step has them. `shape` is the shape after the move.
    channel_axis: int | None = None

    @classmethod
    def from_config(cls, name: str, spec: Mapping[str, Any]) -> FieldSpec:
        shape, channel_axis = spec.get("shape"), spec.get("channel_axis")
        if shape is not None and channel_axis is not None:  # declared as stored: the shape after the move
            if not -len(shape) <= channel_axis < len(shape):
                raise Sim2dlError(
                    f"config key 'source.fields.{name}.channel_axis': {channel_axis} is not an axis "
                    f"of its shape {list(shape)}"
                )
            shape = list(fields_last_shape(shape, channel_axis))
        kind = next(k for k in FIELD_KINDS if k in spec)
        classes = spec.get("classes")
        return cls(
            name,
            str(spec[kind]),
            spec.get("dtype"),
            None if shape is None else tuple(shape),
            kind,
            bool(spec.get("categorical") or classes),
            None if classes is None else tuple(map(str, classes)),
            spec.get("missing", "reject"),
            spec.get("fill_value"),
            None if spec.get("columns") is None else tuple(spec["columns"]),
            spec.get("ragged_by"),
            spec.get("group_by"),
            spec.get("key"),
            spec.get("reduce", "first"),
            spec.get("max_rows"),
            spec.get("over_max_rows", "reject"),
            channel_axis,
        )

    def fields_last(self, array: np.ndarray) -> np.ndarray:
        """One sample's array as stored, its channel axis (if declared) moved last."""
        return (
            array
            if self.channel_axis is None or array.ndim == 0
            else np.moveaxis(array, self.channel_axis, -1)
        )

    @property
    def events(self) -> bool:
        """Columns of a table with one sample per event it defines (ragged_by or group_by)."""
        return self.ragged_by is not None or self.group_by is not None

    @property
    def keyed(self) -> bool:
        """Columns of a table keyed by event id: one reduced value per event."""
        return self.key is not None

    @property
    def mask_name(self) -> str | None:
        """The uint8 field written beside this one (1 where a value was missing), or None."""
        return None if self.missing == "reject" else self.name + MASK_SUFFIX

    @property
    def in_file(self) -> bool:
        """An array stored in the file (as opposed to a value of the file: attribute, column, path)."""
        return self.kind == "path"


@dataclass(frozen=True)
class ArrayInfo:
    """One array a file holds: its path in the format's terms (a field's `path`), shape and dtype."""

    path: str
    shape: tuple[int, ...]
    dtype: str  # numpy's name, e.g. 'int16'; the kind tells numbers from text
    dims: tuple[str, ...] | None = None  # dimension names, where the format has them (NetCDF, Zarr)
    # a coordinate variable (its dimension's values, CF bounds, auxiliary coordinates)
    coordinate: bool = False
    # CF attributes found (fill values, packing, units), as a person reads them; empty: none
    encoding: str = ""
    # a table (compound dtype): its columns and their dtypes
    columns: tuple[tuple[str, str], ...] | None = None
    # array | table | objects (ROOT object branches) | jagged (a variable length per entry)
    kind: str = "array"


@dataclass(frozen=True)
class Contents:
    """What one file holds: its arrays, and the scalar attributes that could name the sample (text or
    integers, by name: a root attribute, a global attribute, a string array, a TNamed's title)."""

    arrays: tuple[ArrayInfo, ...]
    attributes: dict[str, str]
    # what the reader recognised beyond the arrays (a format's conventions)
    conventions: Conventions | None = None
    # scalar numeric global attributes (a run's parameters)
    numbers: dict[str, float] = field(default_factory=dict)


@dataclass(frozen=True)
class Conventions:
    """What a reader recognises in a file beyond its arrays, for `sim2dl inspect`'s starter config: each
    format says this of itself (an openPMD series, a Gadget snapshot, a ROOT tree's entries), so that
    inspect has no branch per format. Paths are arrays' paths in the file."""

    why: str  # one line for the config's header
    format: str | None = None  # source.format to write (None: auto, by suffix)
    samples_along: int | str | None = None  # one sample per index of this axis of every array
    file_is_sample: bool = False  # a file is one sample whatever its arrays' axes (a snapshot's particles)
    fields: dict[str, dict[str, Any]] = field(default_factory=dict)  # more fields to map (attributes)
    # grids: positions/weights name arrays' paths
    deposit: dict[str, dict[str, Any]] = field(default_factory=dict)
    # the fields (of `fields`, or arrays' paths) that are the labels; () inspect's choice
    labels: tuple[str, ...] = ()
    features: tuple[str, ...] = ()  # the features (deposit names or arrays' paths); () inspect's choice
    notes: tuple[str, ...] = ()  # more lines for the config's header (what else could be mapped, and how)
    # arrays whose sample is a 2-D plane with channels last (a 2-D model's input)
    planes: tuple[str, ...] = ()
    # what a sample is, for the task inspect proposes (the task that takes it: Task.proposed_for):
    # `trajectory`: a run's states over time (time first, then the grid), with no labels (the targets are the
    # feature's own later states); None: inspect's choice
    kind: str | None = None
    model: dict[str, Any] | None = None  # train's model settings for that kind's task (model, model_args)
    # merge.split_by the layout calls for (None: by file where files hold several)
    split_by: str | None = None
    arrays: tuple[str, ...] | None = None  # the only arrays that hold samples (the rest: a grid's axes, ...)
    # convert.stack of arrays' paths (a state's fields)
    stack: dict[str, list[str]] = field(default_factory=dict)
    per_channel: tuple[str, ...] = ()  # features (paths or stack names) whose fields are normalised apart
    # that task's own settings the layout calls for
    task_settings: dict[str, Any] = field(default_factory=dict)


class OpenFile(ABC):
    """One input file opened to read ranges of its samples. Arrays are addressed by a field's `path`;
    reads take hyperslabs (only the chunks holding the samples asked for are read where the format is
    chunked). Raises SampleError (never anything else) for what cannot be read."""

    # NetCDF's default fill values apply to arrays without _FillValue (NetCDF only; cf.NETCDF_DEFAULT_FILLS)
    default_fill = False

    def __init__(self, path: Path) -> None:
        self.path = path
        self._encodings: dict[str, cf.Encoding | None] = {}

    def attributes(self, array: str) -> Mapping[str, Any]:
        """The array's own attributes (CF: _FillValue, scale_factor, units, ...); {} where the format has
        none."""
        return {}

    def stored_dtype(self, array: str) -> np.dtype:
        """The dtype of the array's values as stored (before CF decoding)."""
        return np.dtype(self.read(array, (slice(0, 0),) * len(self.shape(array))).dtype)

    def encoding(self, array: str) -> cf.Encoding | None:
        """How the array's values are stored (CF attributes), looked up once per array."""
        if array not in self._encodings:
            attributes = self.attributes(array)
            if not attributes and not self.default_fill:
                self._encodings[array] = None
                return None
            try:
                self._encodings[array] = cf.encoding(attributes, self.stored_dtype(array), self.default_fill)
            except cf.EncodingError as e:
                raise SampleError(f"array '{array}': {e}") from None
        return self._encodings[array]

    def decoded(self, array: str, raw: np.ndarray) -> np.ndarray:
        """Values as read, decoded by the array's CF attributes (masked where missing, unpacked)."""
        found = self.encoding(array)
        return raw if found is None else found.decode(raw)

    @abstractmethod
    def shape(self, array: str) -> tuple[int, ...]:
        """The array's shape in the file; SampleError when there is no such array."""

    def dims(self, array: str) -> tuple[str, ...] | None:
        """The array's dimension names, where the format names them (NetCDF, Zarr); else None."""
        return None

    def length(self, array: str, axis: int) -> int:
        """The array's length along one axis (ingest's survey counts samples with it): its shape's, unless
        a format knows it for less (openPMD: the iterations, without parsing one)."""
        return self.shape(array)[axis]

    def along(self, field: FieldSpec, samples_along: int | str) -> int | None:
        """The position of the sample axis in the field's array, or None when the array has no such axis
        (a per-file array, repeated for each sample). A dimension name is looked up in the array's
        dimension names; an axis number k is the sample axis when the array has one axis more than the
        field's declared shape (or, with no shape declared, more than k axes)."""
        shape = self.shape(field.path)
        if isinstance(samples_along, str):
            dims = self.dims(field.path)
            if dims is None:
                raise SampleError(
                    f"source.samples_along '{samples_along}' names a dimension, but this "
                    f"{type(self).__name__} "
                    "has no dimension names: give an axis number"
                )
            return dims.index(samples_along) if samples_along in dims else None
        if field.shape is not None:
            return samples_along if len(shape) == len(field.shape) + 1 else None
        return samples_along if len(shape) > samples_along else None

    @abstractmethod
    def read(self, array: str, index: tuple[slice, ...]) -> np.ndarray:
        """A hyperslab of the array (one slice per leading axis named; the rest whole)."""

    def samples(self, field: FieldSpec, axis: int, start: int, stop: int) -> np.ndarray | list[np.ndarray]:
        """Samples [start, stop) of the field, the sample axis first (each within field.max_rows)."""
        data = self.decoded(field.path, self.read(field.path, (slice(None),) * axis + (slice(start, stop),)))
        data = as_array(np.moveaxis(data, axis, 0) if axis else data, field)
        return data if field.max_rows is None else within_max_rows(data, field, self.path, start)

    def whole(self, field: FieldSpec) -> np.ndarray:
        """The field's whole array, decoded (masked where values are missing: `resolve_missing` next)."""
        data = as_array(self.decoded(field.path, self.read(field.path, ())), field)
        return bounded_rows(data, field, self.path, 0)

    def markers(self, field: FieldSpec) -> str:
        found = self.encoding(field.path)
        return "" if found is None else found.markers()

    @abstractmethod
    def attribute(self, name: str) -> Any:
        """A global attribute of the file (HDF5 root, NetCDF global, Zarr root group); SampleError when
        the file has none of that name."""

    def close(self) -> None:  # noqa: B027 - formats with nothing to release
        pass

    def __enter__(self) -> OpenFile:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


class Reader(ABC):
    """Reads one file. Raises SampleError (never anything else) for a file that cannot be used."""

    name: str
    suffixes: tuple[str, ...]
    directories = False  # True: an input is a directory with one of the suffixes (a Zarr store)
    # True: `read_contents` parses the file's bytes, which ingest reads itself (whole, ahead, direct I/O).
    reads_contents = False

    def read(
        self, path: Path, fields: Sequence[FieldSpec], id_attr: str | None
    ) -> tuple[dict[str, np.ndarray], str | None]:
        """Return the arrays by logical field name, and the sample id stored in the file (if asked).
        By default through `open` (formats whose files are read with their own library)."""
        with self.open(path) as f:
            arrays = {}
            for field in fields:
                try:
                    arrays.update(resolve_missing(field, f.whole(field), f.markers(field)))
                except MissingArray as e:
                    raise SampleError(f"missing field '{field.name}': {e}") from None
            sample_id = None
            if id_attr is not None:
                try:
                    sample_id = as_text(f.attribute(id_attr))
                except SampleError:
                    raise SampleError(f"missing sample id attribute '{id_attr}'") from None
            return arrays, sample_id

    @abstractmethod
    def describe(self, path: Path) -> Contents:
        """Every array in the file with its shape and dtype, without reading the data where the format
        allows. Raises SampleError for a file that cannot be opened."""

    def claims(self, path: Path) -> bool:
        """Whether `path` is in this format although its suffix names another's (an openPMD series in an
        HDF5 file): inspect reads it with this reader. Cheap: a root attribute at most."""
        return False

    def open(self, path: Path) -> OpenFile:
        """The file opened for reading samples along an axis (source.samples_along)."""
        raise SampleError(f"the {self.name} reader cannot read samples along an axis")

    def read_contents(
        self, contents: np.ndarray, path: Path, fields: Sequence[FieldSpec], id_attr: str | None
    ) -> tuple[dict[str, np.ndarray], str | None]:
        """As `read`, from the file's bytes (`path` names it in messages); for readers with reads_contents.
        The arrays may be views of `contents`, valid as long as it is."""
        raise NotImplementedError


def within_max_rows(data: np.ndarray, field: FieldSpec, path: Path, start: int) -> np.ndarray:
    """Samples (stacked, the sample axis first) whose rows (axis 1) exceed field.max_rows: SampleError, or
    max_rows of them drawn by a seed of the file's name, the sample's index and the field (rows in order)."""
    assert field.max_rows is not None
    if data.ndim < 2 or data.shape[1] <= field.max_rows:
        return data
    rows = data.shape[1]
    if field.over_max_rows != "sample":
        raise SampleError(
            f"field '{field.name}': {rows} rows, more than max_rows {field.max_rows} (over_max_rows: sample "
            "draws them)"
        )
    kept = []
    for k in range(len(data)):
        key = f"{Path(path).name}#{start + k}#{field.name}".encode()
        rng = np.random.default_rng(int.from_bytes(hashlib.sha256(key).digest()[:8], "little"))
        kept.append(data[k][np.sort(rng.choice(rows, field.max_rows, replace=False))])
    return np.stack(kept)


def bounded_rows(sample: np.ndarray, field: FieldSpec, path: Path, index: int) -> np.ndarray:
    """One sample (not stacked: a jagged entry) within field.max_rows, as `within_max_rows`."""
    return sample if field.max_rows is None else within_max_rows(sample[None], field, path, index)[0]


def dtype_text(dtype: np.dtype) -> str:
    """A dtype as the config names it: numpy's name for numbers ('int64', whatever the byte order)."""
    return dtype.name if dtype.kind in "biufc" else str(dtype)


def array_info(
    path: str,
    shape: tuple[int, ...],
    dtype: np.dtype,
    attributes: Mapping[str, Any],
    dims: tuple[str, ...] | None = None,
    coordinate: bool = False,
    default_fill: bool = False,
) -> ArrayInfo:
    """How `describe` reports one array of any format: a table for a compound dtype (its columns), a
    subarray dtype's axes appended to the shape, the dtype after CF unpacking and the CF encoding found."""
    if dtype.names:
        columns = tuple((column, subarray_text(dtype.fields[column][0])) for column in dtype.names)
        return ArrayInfo(path, shape, "compound", dims, coordinate, columns=columns, kind="table")
    if dtype.subdtype is not None:
        base, inner = dtype.subdtype
        shape, dtype = (*shape, *inner), base
    try:
        found = cf.encoding(attributes, dtype, default_fill)
    except cf.EncodingError as e:
        return ArrayInfo(
            path, shape, dtype_text(dtype), dims, coordinate, encoding=f"unusable CF attributes: {e}"
        )
    shown = ""
    if found is not None:  # netCDF's default fill applies to every variable: not repeated for each
        markers = found.markers(defaults=False)
        packed = "packed (scale_factor/add_offset)" if found.packed else ""
        shown = "; ".join(
            text for text in (markers, packed, f"units {found.units}" if found.units else "") if text
        )
    return ArrayInfo(
        path, shape, dtype_text(cf.unpacked_dtype(dtype, found)), dims, coordinate, encoding=shown
    )


def subarray_text(dtype: np.dtype) -> str:
    """A table column's dtype: 'float64', 'float64[10]' for a subarray, 'compound' for a nested table."""
    if dtype.names:
        return "compound"
    if dtype.subdtype is not None:
        base, inner = dtype.subdtype
        return f"{dtype_text(base)}[{', '.join(map(str, inner))}]"
    return dtype_text(dtype)


def resolve_missing(field: FieldSpec, value: np.ndarray, markers: str) -> dict[str, np.ndarray]:
    """One sample's field with its missing values handled by `field.missing`: {name: values} and, for
    fill and mask, {NAME_mask: 1 where a value was missing}. SampleError: rejected, with the count."""
    try:
        values, mask = cf.apply_missing(field.name, value, field.missing, field.fill_value, markers)
    except ValueError as e:
        raise SampleError(str(e)) from None
    resolved = {field.name: values}
    if field.mask_name is not None and mask is not None:
        resolved[field.mask_name] = mask
    return resolved


def as_array(value: Any, field: FieldSpec) -> np.ndarray:
    array = np.asanyarray(value)  # a masked array (missing values, readers/cf.py) stays one
    if array.dtype == object or not (np.issubdtype(array.dtype, np.number) or array.dtype == bool):
        raise SampleError(f"field '{field.name}' ({field.path}) is not a numeric array (dtype {array.dtype})")
    return array


def as_text(value: Any) -> str:
    if isinstance(value, bytes):
        return value.decode()
    if isinstance(value, np.ndarray) and value.shape == ():
        return as_text(value.item())
    return str(value)


FIELD_AXIS = 8  # an axis this short beside a grid's longer ones holds fields (u, v, c), not grid points


def fields_last_shape(shape: Sequence[Any], axis: int) -> tuple[Any, ...]:
    """A shape with its axis `axis` (the fields') moved last, as FieldSpec.fields_last moves an array."""
    axis %= len(shape)
    return (*shape[:axis], *shape[axis + 1 :], shape[axis])


def scalar_numbers(attributes: Mapping[str, Any]) -> dict[str, float]:
    """The global attributes that are one real number each (a run's parameters: Du, Reynolds, alpha)."""
    numbers = {}
    for name, value in attributes.items():
        array = np.asarray(value)
        if array.size == 1 and array.dtype.kind in "iuf":
            numbers[str(name)] = float(array.reshape(()))
    return numbers


def scalar_text(value: Any) -> str | None:
    """An attribute's value as text if it could be a sample id (a string or an integer), else None."""
    array = np.asarray(value)
    if array.size != 1 or array.dtype.kind not in "SUOiu":
        return None
    try:
        return as_text(array.reshape(()))
    except UnicodeDecodeError:
        return None


# ---------------------------------------------------------------- config checks of the fields


def check_source_fields(source: Mapping[str, Any], conv: Mapping[str, Any]) -> None:
    """Categorical fields hold class ids (never transformed); a labels_table or path_pattern is needed by
    the fields that read one. A feature may be any field: a forward surrogate's design is a runs table's
    columns, attributes or path groups (stacked by convert.stack into one vector)."""
    fields = {name: FieldSpec.from_config(name, spec) for name, spec in source["fields"].items()}
    for name, members in conv["stack"].items():  # a stack is in the files when its members are
        fields[name] = FieldSpec(
            name, name, kind="path" if all(fields[m].in_file for m in members if m in fields) else "attr"
        )
    for name in conv["deposit"]:  # a grid made from arrays in the files
        fields[name] = FieldSpec(name, name)
    for spec in list(fields.values()):
        if spec.mask_name is not None:
            fields[spec.mask_name] = FieldSpec(spec.mask_name, spec.path, "uint8")
    clash = [
        f.mask_name for f in fields.values() if f.mask_name is not None and f.mask_name in source["fields"]
    ]
    if clash:
        raise Sim2dlError(
            f"config key 'source.fields': {clash} name both fields and masks of fields (missing: mask)"
        )
    for key in ("log1p", "normalise"):
        wrong = [
            name
            for name in conv[key]
            if fields[name].categorical
            or name not in {**source["fields"], **conv["deposit"], **conv["stack"]}
        ]
        if wrong:
            raise Sim2dlError(
                f"config key 'convert.{key}': {wrong} are categorical or masks (class ids and masks stay as "
                "they are)"
            )
    check_tables(source, fields)
    moved = [name for name, spec in fields.items() if spec.channel_axis is not None and not spec.in_file]
    if moved:
        raise Sim2dlError(
            f"config key 'source.fields.{moved[0]}.channel_axis': only an array in the files (path) "
            "has axes to move"
        )
    for kind, needs in (("column", "labels_table"), ("path_group", "path_pattern")):
        users = [name for name, spec in fields.items() if spec.kind == kind]
        if users and not source[needs]:
            raise Sim2dlError(f"config key 'source.{needs}' is not set, but fields {users} read a {kind}")


def check_tables(source: Mapping[str, Any], fields: Mapping[str, Any]) -> None:
    """Event-indexed tables (readers/events.py): columns with exactly one of ragged_by, group_by, key; keyed
    fields need events to key on; events are the samples (no samples_along beside them)."""
    for name, spec in fields.items():
        given = [k for k in ("ragged_by", "group_by", "key") if getattr(spec, k) is not None]
        if spec.columns is None and given:
            raise Sim2dlError(
                f"config key 'source.fields.{name}.{given[0]}': needs columns (the table's columns)"
            )
        if spec.columns is not None and len(given) != 1:
            raise Sim2dlError(
                f"config key 'source.fields.{name}.columns': give exactly one of ragged_by, group_by or key "
                f"(the field has {given or 'none'})"
            )
        if spec.columns is not None and (spec.categorical or not spec.in_file):
            raise Sim2dlError(f"config key 'source.fields.{name}': table columns are numbers at a path")
    tables = [name for name, spec in fields.items() if spec.events]
    keyed = [name for name, spec in fields.items() if spec.keyed]
    if keyed and not tables:
        raise Sim2dlError(
            f"config key 'source.fields': {keyed} are keyed by event id, but no field defines events "
            "(ragged_by or group_by)"
        )
    if tables and source["samples_along"] is not None:
        raise Sim2dlError(
            f"config key 'source.samples_along': {tables} give one sample per event; set it to null"
        )

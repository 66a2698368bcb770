"""HDF5 files via h5py's low-level API.

Ingest reads each (small) file whole and this reader opens those bytes in memory (the `core` driver
with what HDF5 calls a file image): one read per file instead of HDF5's many small metadata reads, which
parallel file systems serve badly. `read` (from a path) does the same through the `core` driver.
Contiguous datasets are not read through HDF5 at all: their arrays are views of the file's bytes where
HDF5 says they are. The low-level calls cost about a quarter of the high-level `h5py.File` objects per
file, which matters with millions of files.

Files written by the same simulator are alike byte for byte except for their data and their sample id
(h5py records no times by default), and HDF5 interprets only its metadata bytes. So once HDF5 has opened
one file of a size, the reader remembers where that file's fields and id are (a `ByteTemplate`); a later file
of the same size whose every other byte equals that first file's has the same structure, and is read
from those places without HDF5, which is the larger part of ingest's CPU time per file. Any other file,
corrupt or laid out differently, goes through HDF5 as before; the first uses of each template are checked
against HDF5.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass, replace
from pathlib import Path

import h5py
import numpy as np

from pipeline.formats.readers import cf
from pipeline.formats.readers.base import (
    ArrayInfo,
    Contents,
    Conventions,
    FieldSpec,
    MissingArray,
    OpenFile,
    Reader,
    SampleError,
    array_info,
    as_array,
    as_text,
    resolve_missing,
    scalar_numbers,
    scalar_text,
)
from pipeline.formats.readers.cf import cf_attributes
from pipeline.formats.readers.pdebench import (
    SEEDS,
    field_conventions,
    in_every_group,
    numbered_groups,
    seed_conventions,
    stacked_read,
)

_FILE_ACCESS = h5py.h5p.create(h5py.h5p.FILE_ACCESS)
_FILE_ACCESS.set_fapl_core(backing_store=False)

Arrays = dict[str, np.ndarray]


def _view(contents: np.ndarray, offset: int, dtype: np.dtype, shape: tuple[int, ...]) -> np.ndarray:
    """The array of this dtype and shape stored at `offset` in the file's bytes (no copy)."""
    return contents[offset : offset + dtype.itemsize * math.prod(shape)].view(dtype).reshape(shape)


def _dataset_encoding(dataset: h5py.h5d.DatasetID, field: FieldSpec) -> cf.Encoding | None:
    """The dataset's CF encoding; None (at the cost of one call) for a dataset without attributes."""
    if not h5py.h5a.get_num_attrs(dataset):
        return None
    try:
        return cf.encoding(cf_attributes(h5py.Dataset(dataset).attrs), dataset.dtype)
    except cf.EncodingError as e:
        raise SampleError(f"field '{field.name}' ({field.path}): {e}") from None


def _read_dataset(
    file_id: h5py.h5f.FileID, field: FieldSpec, contents: np.ndarray | None
) -> tuple[dict[str, np.ndarray], int | None]:
    """The field's arrays (with its mask: missing values, readers/cf.py) and, when the field's array is a
    view of `contents`, its offset there."""
    try:
        dataset = h5py.h5d.open(file_id, field.path.encode())
    except KeyError:
        raise SampleError(f"missing field '{field.name}': no dataset '{field.path}'") from None
    found = _dataset_encoding(dataset, field)
    if found is not None and (found.masks or found.packed or found.unsigned):
        array, _ = _read_raw(dataset, field, None)
        return resolve_missing(field, as_array(found.decode(array), field), found.markers()), None
    array, offset = _read_raw(dataset, field, contents)
    return resolve_missing(field, array, ""), offset


def _read_raw(
    dataset: h5py.h5d.DatasetID, field: FieldSpec, contents: np.ndarray | None
) -> tuple[np.ndarray, int | None]:
    try:
        shape, dtype = dataset.shape, dataset.dtype
        if contents is not None and dtype.kind in "biufc" and not dtype.hasobject:
            # Contiguous data stored in the file's bytes: a view of those bytes (no read through HDF5, no
            # copy).
            offset = dataset.get_offset()  # None for chunked, compressed, external or unwritten data
            if offset is not None:
                nbytes = dtype.itemsize * math.prod(shape)
                if offset + nbytes > contents.size:
                    raise SampleError(f"dataset '{field.path}' ends past the end of the file (truncated?)")
                return as_array(_view(contents, offset, dtype, shape), field), offset
        data = np.empty(shape, dtype=dtype)
        if data.size:
            dataset.read(h5py.h5s.ALL, h5py.h5s.ALL, data)
    except (OSError, TypeError, ValueError) as e:
        raise SampleError(f"cannot read dataset '{field.path}' (corrupt?): {e}") from None
    return as_array(data, field), None


def _read_root_attr(file_id: h5py.h5f.FileID, name: str) -> str:
    try:
        attr = h5py.h5a.open(file_id, name.encode())  # an attribute of the root group
    except KeyError:
        raise SampleError(f"missing sample id attribute '{name}'") from None
    value = np.empty(attr.shape, dtype=attr.dtype)
    attr.read(value)
    return as_text(value)


@dataclass
class ByteTemplate:
    """Where the fields and the sample id of one HDF5 file lie, and the rest of its bytes (its
    structure). It holds for any file of the same size whose structure bytes are the same."""

    size: int
    structure: tuple[tuple[int, int, bytes], ...]  # start, stop and the bytes outside the fields and the id
    fields: tuple[tuple[str, int, np.dtype, tuple[int, ...]], ...]  # name, offset, dtype, shape
    id_range: tuple[int, int] | None
    checks_left: int = 2  # uses still compared with HDF5's reading

    def matches(self, contents: np.ndarray) -> bool:
        return contents.size == self.size and all(
            contents[start:stop].tobytes() == expected for start, stop, expected in self.structure
        )

    def read(self, contents: np.ndarray) -> tuple[Arrays, str | None]:
        arrays = {name: _view(contents, offset, dtype, shape) for name, offset, dtype, shape in self.fields}
        if self.id_range is None:
            return arrays, None
        start, stop = self.id_range
        try:  # fixed-length strings are padded with NULs, which HDF5 drops
            return arrays, contents[start:stop].tobytes().rstrip(b"\0").decode()
        except UnicodeDecodeError as e:
            raise SampleError(f"sample id is not UTF-8 text: {e}") from None


def learn_template(
    contents: np.ndarray,
    arrays: Arrays,
    offsets: dict[str, int | None],
    sample_id: str | None,
    id_attr: str | None,
) -> ByteTemplate | None:
    """The template of a file HDF5 has just read, or None when it cannot be told from the bytes alone:
    a field not stored contiguously, or an id whose text is not found exactly once outside the data."""
    places = {name: offset for name, offset in offsets.items() if offset is not None}
    if len(places) < len(offsets) or len(arrays) > len(offsets):  # not all views, or masks beside (cf.py)
        return None
    template = contents.tobytes()
    data = sorted((offset, offset + arrays[name].nbytes) for name, offset in places.items())
    variable = list(data)
    id_range = None
    if id_attr is not None:
        if not sample_id:
            return None
        masked = bytearray(template)  # the id's text may also occur, by chance, inside the data
        for start, stop in data:
            masked[start:stop] = bytes(stop - start)
        encoded = sample_id.encode()
        start = masked.find(encoded)
        if start < 0 or masked.find(encoded, start + 1) >= 0:
            return None
        id_range = (start, start + len(encoded))
        variable.append(id_range)
    structure, position = [], 0
    for start, stop in sorted(variable):
        if start < position:
            return None  # overlapping ranges: not a template this simple scheme can hold
        structure.append((position, start))
        position = stop
    structure.append((position, len(template)))
    fields = tuple((name, offset, arrays[name].dtype, arrays[name].shape) for name, offset in places.items())
    kept = tuple((a, b, template[a:b]) for a, b in structure if b > a)  # the structure only, not the data
    return ByteTemplate(len(template), kept, fields, id_range)


def same_array(a: np.ndarray, b: np.ndarray) -> bool:
    return a.dtype == b.dtype and a.shape == b.shape and a.tobytes() == b.tobytes()  # NaN equals NaN here


class HDF5File(OpenFile):
    """An HDF5 file opened with h5py for samples along an axis: a hyperslab read per range of samples
    (HDF5 reads only the chunks, or the contiguous bytes, that hold them)."""

    def __init__(self, path: Path) -> None:
        super().__init__(path)
        try:
            self.file = h5py.File(path, "r")
        except OSError as e:
            raise SampleError(f"cannot open as HDF5 (truncated or corrupt?): {e}") from None
        self._grouped: dict[str, list[h5py.Dataset]] = {}  # `*/REST` arrays: their datasets, once found

    def _dataset(self, array: str) -> h5py.Dataset:
        node = self._in_groups(array)[0] if array.startswith(SEEDS) else self.file.get(array)
        if not isinstance(node, h5py.Dataset):
            raise MissingArray(f"no dataset '{array}'")
        return node

    def _in_groups(self, array: str) -> list[h5py.Dataset]:
        """`*/REST`: the dataset REST of every numbered group (PDEBench's seeds: readers/pdebench.py),
        found once per open file (a batch's shape and read would each list the root's groups again)."""
        found = self._grouped.get(array)
        if found is None:
            found = in_every_group(self.file, array)
            if found is None:
                raise MissingArray(f"no dataset '{array[len(SEEDS) :]}' in every numbered group ('{array}')")
            self._grouped[array] = found
        return found

    def shape(self, array: str) -> tuple[int, ...]:
        if array.startswith(SEEDS):  # the groups are the first axis
            found = self._in_groups(array)
            return (len(found), *found[0].shape)
        return tuple(self._dataset(array).shape)

    def attributes(self, array: str) -> dict[str, object]:
        return cf_attributes(self._dataset(array).attrs)

    def stored_dtype(self, array: str) -> np.dtype:
        return self._dataset(array).dtype

    def read(self, array: str, index: tuple[slice, ...]) -> np.ndarray:
        try:
            if array.startswith(SEEDS):
                return stacked_read(self._in_groups(array), index)
            return np.asarray(self._dataset(array)[index] if index else self._dataset(array)[()])
        except (OSError, TypeError, ValueError) as e:
            raise SampleError(f"cannot read dataset '{array}' (corrupt?): {e}") from None

    def attribute(self, name: str) -> object:
        """A root attribute, or with a path a group's or dataset's (`Header/BoxSize`)."""
        where, _, attr = name.rpartition("/")
        if not where:
            node = self.file
        elif where in self.file:
            node = self.file[where]
        else:
            node = None
        if node is None or attr not in node.attrs:
            raise SampleError(f"no attribute '{name}'" if where else f"no root attribute '{name}'")
        return node.attrs[attr]

    def close(self) -> None:
        self.file.close()


def describe_dataset(name: str, node: h5py.Dataset) -> ArrayInfo:
    """One dataset as inspect shows it: an array (subarray dtypes' axes appended to its shape), a table (a
    compound dtype: its columns), or what cannot be read as numbers (text, references, types numpy lacks)."""
    try:
        dtype = node.dtype
        scale = node.attrs.get("CLASS") == b"DIMENSION_SCALE"  # a coordinate (netCDF-4 writes them too)
        attributes = cf_attributes(node.attrs)
    except (TypeError, ValueError, OSError, KeyError) as e:  # e.g. HDF5 time types: no numpy equivalent
        return ArrayInfo(name, tuple(node.shape), "unsupported", kind="unsupported", encoding=str(e))
    return array_info(name, tuple(node.shape), dtype, attributes, coordinate=scale)


class HDF5Reader(Reader):
    name = "hdf5"
    suffixes = (".h5", ".hdf5", ".hdf", ".he5")
    reads_contents = True
    max_templates = 16  # file sizes remembered (all different in, for example, the trace family)

    def __init__(self) -> None:
        self._image_access: h5py.h5p.PropFAID | None = None  # reused: set_file_image replaces the contents
        # By (size, fields, id attribute); None: a file of that size could not give a template.
        self._templates: dict[tuple[int, tuple[FieldSpec, ...], str | None], ByteTemplate | None] = {}

    def read(self, path: Path, fields: Sequence[FieldSpec], id_attr: str | None) -> tuple[Arrays, str | None]:
        arrays, _, sample_id = self._read(str(path).encode(), _FILE_ACCESS, fields, id_attr, None)
        return arrays, sample_id

    def open(self, path: Path) -> HDF5File:
        return HDF5File(path)

    def describe(self, path: Path) -> Contents:
        try:
            f = h5py.File(path, "r")
        except OSError as e:
            raise SampleError(f"cannot open as HDF5 (truncated or corrupt?): {e}") from None
        with f:
            arrays: list[ArrayInfo] = []
            groups = numbered_groups(f)  # a group per seed: described once, as */NAME with the groups first

            def visit(name: str, node: object) -> None:
                # PyTables keeps its column indexes in _i_TABLE groups: bookkeeping, not data
                if isinstance(node, h5py.Dataset) and not any(
                    part.startswith("_i_") for part in name.split("/")
                ):
                    arrays.append(describe_dataset(name, node))

            def visit_seed(name: str, node: object) -> None:
                if isinstance(node, h5py.Dataset):
                    info = describe_dataset(SEEDS + name, node)
                    arrays.append(replace(info, shape=(len(groups), *info.shape)))

            try:
                for name, node in f.items():
                    if name in groups:
                        continue
                    if isinstance(node, h5py.Group):
                        node.visititems(lambda rest, item, top=name: visit(f"{top}/{rest}", item))
                    else:
                        visit(name, node)
                if groups:
                    f[groups[0]].visititems(visit_seed)
            except (OSError, KeyError, RuntimeError) as e:  # a broken external link, a damaged group
                raise SampleError(f"cannot list the datasets: {e}") from None
            texts = {name: scalar_text(value) for name, value in f.attrs.items()}
            texts = {name: text for name, text in texts.items() if text is not None}
            conventions = (
                the_well_conventions(f)
                or seed_conventions(f)
                or field_conventions(f)
                or gadget_conventions(f)
            )
            return Contents(tuple(arrays), texts, conventions, scalar_numbers(f.attrs))

    def read_contents(
        self, contents: np.ndarray, path: Path, fields: Sequence[FieldSpec], id_attr: str | None
    ) -> tuple[Arrays, str | None]:
        key = (contents.size, tuple(fields), id_attr)
        template = self._templates.get(key)
        if template is not None and template.matches(contents):
            if not template.checks_left:
                return template.read(contents)
            arrays, sample_id = template.read(contents)
            checked, _, checked_id = self._read_image(contents, fields, id_attr)
            if checked_id == sample_id and all(same_array(arrays[k], v) for k, v in checked.items()):
                template.checks_left -= 1
            else:
                self._templates[key] = None  # HDF5 disagrees: never use this template again
            return checked, checked_id
        arrays, offsets, sample_id = self._read_image(contents, fields, id_attr)
        if key not in self._templates and len(self._templates) < self.max_templates:
            self._templates[key] = learn_template(contents, arrays, offsets, sample_id, id_attr)
        return arrays, sample_id

    def _read_image(
        self, contents: np.ndarray, fields: Sequence[FieldSpec], id_attr: str | None
    ) -> tuple[Arrays, dict[str, int | None], str | None]:
        if self._image_access is None:
            self._image_access = h5py.h5p.create(h5py.h5p.FILE_ACCESS)
            self._image_access.set_fapl_core(backing_store=False)
        self._image_access.set_file_image(contents)  # HDF5 copies it: the caller's buffer is free again
        # The name only labels the contents (a path would make HDF5 look for that file on disk).
        return self._read(b"sim2dl-file-contents", self._image_access, fields, id_attr, contents)

    def _read(
        self,
        name: bytes,
        access: h5py.h5p.PropFAID,
        fields: Sequence[FieldSpec],
        id_attr: str | None,
        contents: np.ndarray | None,
    ) -> tuple[Arrays, dict[str, int | None], str | None]:
        try:
            file_id = h5py.h5f.open(name, h5py.h5f.ACC_RDONLY, fapl=access)
        except OSError as e:
            raise SampleError(f"cannot open as HDF5 (truncated or corrupt?): {e}") from None
        try:
            arrays, offsets = {}, {}
            for field in fields:
                resolved, offsets[field.name] = _read_dataset(file_id, field, contents)
                arrays.update(resolved)
            sample_id = _read_root_attr(file_id, id_attr) if id_attr is not None else None
            return arrays, offsets, sample_id
        except (OSError, RuntimeError, KeyError, ValueError) as e:
            raise SampleError(f"corrupt HDF5 structure: {e}") from None
        finally:
            file_id.close()


def the_well_conventions(f: h5py.File) -> Conventions | None:
    """The Well's layout (PolymathicAI; its data-format document): `t0_fields/NAME` of trajectories x time x
    grid, the parameters in root attributes named by `simulation_parameters`. A sample per trajectory, its
    first scalar field's whole time series the feature of a next-state surrogate (windows of it: the task
    cuts them), the parameters its labels, given to the model as a conditioning vector."""
    fields = f.get("t0_fields")
    if not isinstance(fields, h5py.Group) or "n_spatial_dims" not in f.attrs:
        return None
    scalars = [name for name in fields if isinstance(fields[name], h5py.Dataset) and fields[name].ndim >= 4]
    if not scalars:
        return None
    first = f"t0_fields/{scalars[0]}"
    dims = int(f.attrs["n_spatial_dims"])
    parameters = [
        str(p.decode() if isinstance(p, bytes) else p) for p in f.attrs.get("simulation_parameters", [])
    ]
    mapped = {p: {"attr": p} for p in parameters if p in f.attrs and np.asarray(f.attrs[p]).size == 1}
    vectors = [f"t1_fields/{n}" for n in f.get("t1_fields", {})]
    grid = fields[scalars[0]].shape[2:]
    notes = [
        f"The Well: {f.attrs.get('dataset_name', '?')}, {dims}-D {f.attrs.get('grid_type', '?')} grid; "
        "a record per trajectory, split by trajectory (its windows stay together)"
    ]
    if len(scalars) > 1 or vectors:
        notes.append(
            f"more fields of the same trajectories: {', '.join([*scalars[1:], *vectors])} (stack them as "
            "channels with convert.stack where their shapes are equal)"
        )
    if mapped:
        notes.append(
            f"the simulation's parameters {', '.join(mapped)} (per file) given to the next state as a "
            "conditioning vector"
        )
    model = None
    if dims == 2:
        model = {"model": "fno2d", "model_args": {"modes": max(1, min(12, grid[0] // 2, grid[1] // 2 + 1))}}
    return Conventions(
        f"The Well's layout: {first} holds trajectories x time x grid: one sample per trajectory, a next "
        "state",
        samples_along=0,
        fields=mapped,
        labels=tuple(mapped),
        features=(first,),
        notes=tuple(notes),
        kind="trajectory",
        model=model,
        split_by="sample",
        arrays=tuple(f"t0_fields/{n}" for n in scalars) + tuple(vectors),
        task_settings={"states_in": 1, "states_out": 1, "condition": "vector"} if mapped and model else {},
    )


GADGET_GRID = 32  # cells per axis of the grid inspect proposes for a snapshot's particles
GADGET_PARAMETERS = ("Omega0", "OmegaLambda", "HubbleParam", "Redshift")  # Header attributes: the labels


def gadget_conventions(f: h5py.File) -> Conventions | None:
    """A Gadget/AREPO/SWIFT-style snapshot (`Header` attributes with `BoxSize`, particles in `PartTypeN/
    Coordinates`): its most numerous particle type deposited onto a grid over the box, the cosmology in
    Header's attributes as labels."""
    header = f.get("Header")
    if not isinstance(header, h5py.Group) or "BoxSize" not in header.attrs:
        return None
    types = [name for name in f if name.startswith("PartType") and "Coordinates" in f[name]]
    if not types:
        return None
    particles = max(types, key=lambda name: f[name]["Coordinates"].shape[0])
    dims = f[particles]["Coordinates"].shape[1] if f[particles]["Coordinates"].ndim == 2 else 3
    fields = {"box_size": {"attr": "Header/BoxSize"}}
    labels = []
    for name in GADGET_PARAMETERS:
        if name in header.attrs and np.asarray(header.attrs[name]).size == 1:
            fields[name.lower()] = {"attr": f"Header/{name}"}
            labels.append(name.lower())
    weights = f"{particles}/Masses" if "Masses" in f[particles] else None
    deposit = {
        "density": {
            "positions": f"{particles}/Coordinates",
            "weights": weights,
            "shape": [GADGET_GRID] * dims,
            "box": "box_size",
            "scheme": "cic",
        }
    }
    return Conventions(
        f"a Gadget-style snapshot: {particles}/Coordinates deposited (CIC) onto a {GADGET_GRID}^{dims} grid "
        "over Header/BoxSize, Header's cosmology as labels",
        file_is_sample=True,
        fields=fields,
        deposit=deposit,
        labels=tuple(labels),
        features=("density",),
    )

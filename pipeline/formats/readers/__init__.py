"""Input formats. Adding one: a module with a `Reader` subclass, registered in READERS."""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import Any

from pipeline import Sim2dlError
from pipeline.formats.readers.base import COMPONENT_NAMES, GEOMETRY, FieldSpec, Reader, SampleError
from pipeline.formats.readers.bp import BPReader
from pipeline.formats.readers.hdf5 import HDF5Reader
from pipeline.formats.readers.netcdf import NetCDFReader
from pipeline.formats.readers.numpy import NumpyReader
from pipeline.formats.readers.openpmd import OpenPMDReader
from pipeline.formats.readers.root import RootReader
from pipeline.formats.readers.zarr import ZarrReader

READERS: dict[str, Reader] = {
    r.name: r
    for r in (
        HDF5Reader(),
        NetCDFReader(),
        NumpyReader(),
        RootReader(),
        ZarrReader(),
        BPReader(),
        OpenPMDReader(),
    )
}
BY_SUFFIX = {suffix: reader for reader in READERS.values() for suffix in reader.suffixes}
# Suffixes of inputs that are directories (a Zarr store, a BP directory), listed as inputs by a glob like
# files.
DIRECTORY_SUFFIXES = tuple(s for reader in READERS.values() if reader.directories for s in reader.suffixes)

__all__ = [
    "COMPONENT_NAMES",
    "DIRECTORY_SUFFIXES",
    "READERS",
    "FieldSpec",
    "Reader",
    "SampleError",
    "field_descriptions",
    "is_input_directory",
    "reader_for",
]


def reader_for(path: Path, format_name: str) -> Reader:
    """The reader for `path`; raises SampleError for an unknown suffix when format is 'auto'."""
    if format_name != "auto":
        if format_name not in READERS:
            raise Sim2dlError(f"config key 'source.format': unknown format '{format_name}'")
        return READERS[format_name]
    reader = BY_SUFFIX.get(path.suffix.lower())
    if reader is None:
        raise SampleError(f"unknown file suffix '{path.suffix}' (set source.format)")
    return reader


def is_input_directory(path: str | Path) -> bool:
    """A directory that is one input (a Zarr store), by its suffix."""
    return str(path).lower().rstrip("/").endswith(DIRECTORY_SUFFIXES) and Path(path).is_dir()


def field_descriptions(path: Path, format_name: str, fields: list[FieldSpec]) -> dict[str, dict[str, Any]]:
    """What one file says about the fields' arrays, for metadata.json: {"units": {field: CF units},
    "component_names": {field: [names along the last axis]}, "geometry": {field: a mesh's geometry}} (the
    attribute `component_names`, a list or comma-separated text; `geometry`, openPMD's meshes). Empty where
    the file cannot be opened or the format has no attributes."""
    found: dict[str, dict[str, Any]] = {"units": {}, COMPONENT_NAMES: {}}
    try:
        with reader_for(path, format_name).open(path) as opened:
            for field in fields:
                if field.in_file and not (field.events or field.keyed or field.categorical):
                    encoding = opened.encoding(field.path)
                    if encoding is not None and encoding.units:
                        found["units"][field.name] = encoding.units
                    attributes = opened.attributes(field.path)
                    names = attributes.get(COMPONENT_NAMES)
                    if names is not None:
                        found[COMPONENT_NAMES][field.name] = component_list(names)
                    if isinstance(attributes.get(GEOMETRY), Mapping):
                        found.setdefault(GEOMETRY, {})[field.name] = dict(attributes[GEOMETRY])
    except (SampleError, OSError):
        pass
    return found


def component_list(names: Any) -> list[str]:
    if isinstance(names, bytes):
        names = names.decode()
    if isinstance(names, str):
        return [n.strip() for n in names.split(",")]
    return [n.decode() if isinstance(n, bytes) else str(n) for n in names]

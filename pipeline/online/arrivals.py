"""What one completed run (or one step of a stream) gives online training: its converted samples, read
through the same readers, field checks and casts as ingest (pipeline.data.records) and the same convert
transforms (pipeline.data.transforms), with the reason for each sample refused.

A run's files are those of `source.glob` below the run's directory; a file is one sample, or with
`source.samples_along` many. Fields are arrays in the file, or `{column: NAME}`: the run's own value of
the design parameter NAME (the runs table is the labels table, as offline); a categorical column's class
ids are its values in the order of simulate.space's choices, known before any run, so every rank numbers
them alike. Other field kinds (attributes, path groups, event tables) are refused by `check` with the key.

`held_fields` gives each converted field's shape and dtype before any data is read, by converting a
sample of zeros of the declared shapes: the model and the buffers are made first, and a shape that does not
fit is a config error naming the field.

Memory: one file's samples at a time (a file along an axis: one sample at a time). Time: one read and one
transform per sample.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from pipeline import Sim2dlError
from pipeline.data.records import read_one, validate_sample
from pipeline.data.transforms import transform
from pipeline.formats.readers import FieldSpec, SampleError, reader_for
from pipeline.online.buffer import BufferField


@dataclass
class Refused:
    """A sample (or a file) online training could not use, and why."""

    source: str
    reason: str


def fields_of(source: Mapping[str, Any]) -> list[FieldSpec]:
    return [FieldSpec.from_config(name, spec) for name, spec in source["fields"].items()]


def check(config: Mapping[str, Any]) -> None:
    """Config errors before any run: fields online training cannot fill, and shapes it cannot know."""
    for field in fields_of(config["source"]):
        key = f"config key 'source.fields.{field.name}'"
        if field.kind not in ("path", "column"):
            raise Sim2dlError(
                f"{key}: online training reads arrays in the runs' files and design columns "
                f"({{column: NAME}}), not {field.kind} fields"
            )
        if field.kind == "column" and field.path not in config["simulate"]["space"]:
            raise Sim2dlError(
                f"{key}: column '{field.path}' is no parameter of simulate.space "
                f"(have {sorted(config['simulate']['space'])})"
            )
        if field.kind == "path" and (field.shape is None or any(d is None for d in field.shape)):
            raise Sim2dlError(
                f"{key}: online training needs every array field's shape (the buffers are "
                f"made before any run ends): set shape to the sample's, e.g. [32, 32, 32]"
            )
        if field.kind == "path" and field.dtype is None:
            raise Sim2dlError(f"{key}: online training needs the field's dtype (e.g. float32)")


def class_values(config: Mapping[str, Any], field: FieldSpec) -> list[Any]:
    """A categorical column's classes: its choices in simulate.space, in their order there."""
    spec = config["simulate"]["space"][field.path]
    if spec["type"] != "choice":
        raise Sim2dlError(
            f"config key 'source.fields.{field.name}': categorical column '{field.path}' "
            f"needs a choice parameter in simulate.space (it is {spec['type']})"
        )
    return list(spec["values"])


def column_value(config: Mapping[str, Any], field: FieldSpec, row: Mapping[str, Any]) -> np.ndarray:
    value = row[field.path]
    if field.categorical:
        return np.array(class_values(config, field).index(value), np.int64)
    array = np.asarray(value, dtype=field.dtype or np.float64)
    return array.reshape(field.shape) if field.shape is not None else array


def zero_record(config: Mapping[str, Any]) -> dict[str, np.ndarray]:
    """A record of zeros in the declared shapes and dtypes (a column: the first run's kind of value)."""
    record = {}
    for field in fields_of(config["source"]):
        if field.kind == "column":
            first = {field.path: class_values(config, field)[0] if field.categorical else 0.0}
            record[field.name] = column_value(config, field, first)
        else:
            record[field.name] = np.zeros(field.shape, np.dtype(field.dtype))
    return record


def held_fields(config: Mapping[str, Any]) -> dict[str, BufferField]:
    """Each converted field's shape and dtype, from converting a record of zeros."""
    categorical = {f.name for f in fields_of(config["source"]) if f.categorical}
    settings = {**config["convert"], "log1p": []}  # log1p of zeros is fine, but changes no shape either way
    try:
        converted = transform(zero_record(config), settings, categorical)[0]
    except SampleError as e:
        raise Sim2dlError(
            f"config keys 'source.fields' and 'convert': the declared shapes do not convert: {e}"
        ) from None
    return {n: BufferField(tuple(a.shape), a.dtype) for n, a in converted.items()}


class RunReader:
    """Reads the converted samples of runs: `run_samples(directory, row)` yields them in a fixed order
    (files sorted, samples in file order), with a Refused for each one that cannot be used."""

    def __init__(self, config: Mapping[str, Any]) -> None:
        self.config = config
        self.source, self.convert = config["source"], config["convert"]
        self.fields = fields_of(self.source)
        self.in_file = [f for f in self.fields if f.kind == "path"]
        self.columns = [f for f in self.fields if f.kind == "column"]
        self.categorical = {f.name for f in self.fields if f.categorical}
        self.check_finite = config["ingest"]["check_finite"]

    def files(self, directory: Path) -> list[Path]:
        return sorted(p for p in directory.glob(self.source["glob"]) if p.is_file())

    def with_columns(self, arrays: dict[str, np.ndarray], row: Mapping[str, Any]) -> dict[str, np.ndarray]:
        for field in self.columns:
            arrays[field.name] = column_value(self.config, field, row)
        return arrays

    def converted(
        self, arrays: Mapping[str, np.ndarray], where: str
    ) -> list[dict[str, np.ndarray]] | Refused:
        try:
            return transform(arrays, self.convert, self.categorical)
        except SampleError as e:
            return Refused(where, str(e))

    def run_samples(
        self, directory: Path, row: Mapping[str, Any]
    ) -> Iterator[dict[str, np.ndarray] | Refused]:
        files = self.files(directory)
        if not files:
            yield Refused(
                str(directory), f"no file matches source.glob '{self.source['glob']}' in the run's directory"
            )
        for path in files:
            yield from self.file_samples(path, directory, row)

    def file_samples(
        self, path: Path, root: Path, row: Mapping[str, Any]
    ) -> Iterator[dict[str, np.ndarray] | Refused]:
        along = self.source["samples_along"]
        if along is None:
            try:
                arrays, _, _ = read_one(path, None, root, self.source, self.in_file, self.check_finite)
            except SampleError as e:
                yield Refused(str(path), str(e))
                return
            result = self.converted(self.with_columns(dict(arrays), row), str(path))
            yield from ([result] if isinstance(result, Refused) else result)
            return
        try:
            opened = reader_for(path, self.source["format"]).open(path)
        except SampleError as e:
            yield Refused(str(path), str(e))
            return
        try:
            yield from self.along_axis(opened, path, along, row)
        finally:
            opened.close()

    def along_axis(self, opened: Any, path: Path, along: int | str, row: Mapping[str, Any]) -> Iterator[Any]:
        try:
            axes = {f.name: opened.along(f, along) for f in self.in_file}
            count = min(opened.length(f.path, axes[f.name]) for f in self.in_file if axes[f.name] is not None)
        except (SampleError, ValueError) as e:
            yield Refused(str(path), f"cannot count samples along {along!r}: {e}")
            return
        for index in range(count):
            where = f"{path}[{index}]"
            try:
                arrays = {
                    f.name: (
                        opened.samples(f, axes[f.name], index, index + 1)[0]
                        if axes[f.name] is not None
                        else opened.whole(f)
                    )
                    for f in self.in_file
                }
                arrays = validate_sample(arrays, self.in_file, self.check_finite)
            except SampleError as e:
                yield Refused(where, str(e))
                continue
            result = self.converted(self.with_columns(dict(arrays), row), where)
            yield from ([result] if isinstance(result, Refused) else result)


def step_samples(
    reader: RunReader,
    arrays: Mapping[str, np.ndarray],
    row: Mapping[str, Any],
    where: str,
    fields: Sequence[FieldSpec],
) -> list[dict[str, np.ndarray]] | Refused:
    """The converted samples of one stream step's arrays (checked and cast as a file's would be)."""
    try:
        checked = validate_sample(arrays, fields, reader.check_finite)
    except SampleError as e:
        return Refused(where, str(e))
    return reader.converted(reader.with_columns(dict(checked), row), where)

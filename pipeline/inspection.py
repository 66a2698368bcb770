"""`sim2dl inspect`: a first look at existing simulation output, and a starter config for it.

Opens a few files spread over the matching ones (HDF5, NetCDF-4, .npy/.npz, ROOT, through each reader's
`describe`), lists every array with its shape and dtype, says which arrays differ in shape or dtype
between the files (those axes become `null`: any length), and writes a config that validates: the
simulator off, `source.path`/`glob`, every numeric array mapped as a field, the large arrays as
features, the small vectors as labels, and the sample id from an id attribute whose value differs
between files (else the file's relative path).

Memory and time: listing stops after `MAX_LISTED` matches (a directory of millions of files is not
walked whole; the files inspected are spread over those listed), and only the files inspected are
opened, their data not read where the format allows.
"""

from __future__ import annotations

import glob
import os
import re
from collections import Counter
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import yaml

from pipeline import Sim2dlError
from pipeline import config as cfg
from pipeline.fsutil import write_text_atomic
from pipeline.readers import BY_SUFFIX, SampleError
from pipeline.readers.base import Contents

MAX_LISTED = 10_000  # matches listed before the files to open are chosen
SMALL_VECTOR = 64  # an array of at most this many values, one axis at most, is a label
ID_WORDS = ("sample_id", "id", "uuid", "name", "key")  # attribute names tried first, in this order


@dataclass(frozen=True)
class Source:
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

    @property
    def numeric(self) -> bool:
        return self.dtype is not None and np.dtype(self.dtype).kind in "biuf"

    @property
    def is_label(self) -> bool:
        """A small vector (a few parameters): a regression target."""
        fixed = self.shape is not None and None not in self.shape
        return fixed and len(self.shape) <= 1 and self.values <= SMALL_VECTOR


@dataclass(frozen=True)
class Survey:
    source: Source
    files: tuple[Path, ...]  # the inspected files
    listed: int  # matches listed (at most MAX_LISTED)
    complete: bool  # False: listing stopped at MAX_LISTED
    fields: tuple[Field, ...]
    sample_id: str | None  # the id attribute, or None: the relative path
    unreadable: dict[str, str]  # file -> reason


def locate(spec: str) -> Source:
    """A directory (its most common known suffix, at any depth), a glob, or one file (its siblings of the
    same suffix)."""
    if glob.has_magic(spec):
        parts = Path(spec).parts
        fixed = next(i for i, part in enumerate(parts) if glob.has_magic(part))
        root = Path(*parts[:fixed]) if fixed else Path(".")
        return Source(root.resolve(), str(Path(*parts[fixed:])))
    path = Path(spec)
    if path.is_file():
        return Source(path.parent.resolve(), f"*{path.suffix}")
    if not path.is_dir():
        raise Sim2dlError(f"{spec}: no such file or directory")
    suffixes = Counter(p.suffix.lower() for p in _walk(path) if p.suffix.lower() in BY_SUFFIX)
    if not suffixes:
        raise Sim2dlError(f"{spec}: no files of a known format ({', '.join(sorted(BY_SUFFIX))}) below it")
    return Source(path.resolve(), f"**/*{suffixes.most_common(1)[0][0]}")


def _walk(root: Path) -> Iterator[Path]:
    """Files below root, at most MAX_LISTED, depth first in name order."""
    count = 0
    for directory, subdirs, names in os.walk(root):
        subdirs.sort()
        for name in sorted(names):
            yield Path(directory) / name
            count += 1
            if count >= MAX_LISTED:
                return


def list_matches(source: Source) -> tuple[list[Path], bool]:
    """Up to MAX_LISTED files matching the source, sorted; and whether that is all of them."""
    found = []
    for name in glob.iglob(str(source.root / source.pattern), recursive=True):
        if os.path.isfile(name):
            found.append(Path(name))
            if len(found) > MAX_LISTED:
                return sorted(found[:MAX_LISTED]), False
    return sorted(found), True


def spread(items: Sequence[Path], count: int) -> list[Path]:
    """`count` items spread evenly from the first to the last."""
    if len(items) <= count:
        return list(items)
    return [items[round(i * (len(items) - 1) / (count - 1))] for i in range(count)] if count > 1 else [items[0]]


def merge_fields(contents: Sequence[Contents]) -> list[Field]:
    """The arrays of all files, in first-seen order; axes or dtypes that differ become None."""
    seen: dict[str, list[tuple[tuple[int, ...], str]]] = {}
    for c in contents:
        for a in c.arrays:
            seen.setdefault(a.path, []).append((a.shape, a.dtype))
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
        fields.append(Field(path, dtypes.pop() if len(dtypes) == 1 else None, shape, len(found), values))
    return fields


def choose_sample_id(contents: Sequence[Contents]) -> str | None:
    """An attribute every file has, with a different value in each, preferring id-like names."""
    if not contents:
        return None
    common = set.intersection(*(set(c.attributes) for c in contents))
    candidates = [
        name for name in common if len(contents) < 2 or len({c.attributes[name] for c in contents}) == len(contents)
    ]

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
        reader = BY_SUFFIX.get(path.suffix.lower())
        if reader is None:
            unreadable[str(path)] = f"unknown file suffix '{path.suffix}'"
            continue
        try:
            contents.append(reader.describe(path))
            opened.append(path)
        except SampleError as e:
            unreadable[str(path)] = str(e)
    if not contents:
        raise Sim2dlError(f"none of the files inspected could be read: {unreadable}")
    fields = tuple(merge_fields(contents))
    return Survey(source, tuple(opened), len(matches), complete, fields, choose_sample_id(contents), unreadable)


def field_names(fields: Sequence[Field]) -> dict[str, str]:
    """path -> a logical name: the last path component as an identifier, with its group where two clash."""

    def identifier(text: str) -> str:
        name = re.sub(r"\W+", "_", text).strip("_") or "field"
        return f"f_{name}" if name[0].isdigit() else name

    last = {f.path: identifier(f.path.rstrip("/").split("/")[-1]) for f in fields}
    clashes = {n for n, k in Counter(last.values()).items() if k > 1}
    return {path: identifier(path) if name in clashes else name for path, name in last.items()}


def starter_config(result: Survey, workdir: str) -> tuple[str, dict[str, Any]]:
    """The starter config's YAML text (with comments) and its content; raises if it would not validate."""
    usable = [f for f in result.fields if f.numeric and f.in_files == len(result.files)]
    if not usable:
        raise Sim2dlError(f"no numeric array is in every inspected file below {result.source.root}")
    names = field_names(usable)
    labels = [names[f.path] for f in usable if f.is_label]
    features = [names[f.path] for f in usable if not f.is_label]
    if not features:  # only small arrays: the largest is the input
        largest = max((f for f in usable if names[f.path] in labels), key=lambda f: f.values)
        features = [names[largest.path]]
        labels.remove(features[0])
    first = next(f for f in usable if names[f.path] == features[0])
    model = "sequence" if first.shape is not None and len(first.shape) == 2 else "cosmoflow"

    def flow(value: Any) -> str:
        text = yaml.safe_dump(value, default_flow_style=True, width=1_000, sort_keys=False)
        return text.removesuffix("...\n").strip()

    field_lines = []
    for f in usable:
        spec = {"path": f.path, "dtype": f.dtype, "shape": None if f.shape is None else list(f.shape)}
        varies = f.shape is None or None in f.shape
        note = "  # null: differs between the files inspected" if varies else ""
        field_lines.append(f"    {names[f.path]}: {flow(spec)}{note}")
    skipped = [f.path for f in result.fields if f not in usable]
    text = "\n".join(
        [
            f"# Written by `sim2dl inspect` from {len(result.files)} of "
            f"{result.listed}{'' if result.complete else '+'} files. Check it, then run:",
            "#   snakemake --cores 2 --configfile THIS_FILE",
            "# Every key, with its default: pipeline/schema.yaml (config/schema.yaml in the repository).",
            f"workdir: {flow(workdir)}",
            "simulate:",
            "  enabled: false          # existing output, below source.path",
            "source:",
            f"  path: {flow(str(result.source.root))}",
            f"  glob: {flow(result.source.pattern)}",
            f"  sample_id: {flow(None if result.sample_id is None else {'attr': result.sample_id})}"
            + ("    # null: the file's relative path" if result.sample_id is None else ""),
            "  fields:",
            *field_lines,
            *([f"  # not mapped (not numeric, or not in every file): {flow(skipped)}"] if skipped else []),
            "convert:",
            f"  features: {flow(features)}    # the large arrays: the network's input",
            f"  labels: {flow(labels)}    # the small vectors: what it predicts",
            "  log1p: []               # e.g. the features, for particle counts",
            f"  normalise: {flow(features + labels)}   # standardised with the dataset's statistics",
            f"  per_channel: {flow(labels)}   # one mean and std per label component",
            "  split: null             # cut the features into sub-volumes, e.g. [32, 32, 32]",
            "train:",
            f"  model: {model}",
            "",
        ]
    )
    content = yaml.safe_load(text)
    try:
        cfg.validate(yaml.safe_load(text))
    except Sim2dlError as e:
        raise Sim2dlError(f"the starter config would not validate (please report this): {e}") from None
    return text, content


def report(result: Survey) -> str:
    """What a person reads: the arrays, their shapes and dtypes, what differs, what is unreadable."""
    n = len(result.files)
    lines = [
        f"{result.source.root}: {result.listed}{'' if result.complete else '+'} files match "
        f"{result.source.pattern!r}; inspected {n}:",
        *(f"  {p}" for p in result.files),
        "",
    ]
    width = max(len(f.path) for f in result.fields)
    lines.append(f"  {'array':<{width}}  {'dtype':<8}  {'shape':<24}  notes")
    for f in result.fields:
        axes = "rank differs" if f.shape is None else ", ".join("*" if a is None else str(a) for a in f.shape)
        shape = axes if f.shape is None else f"({axes}{',' if len(f.shape) == 1 else ''})"
        notes = []
        if f.shape is None or None in f.shape:
            notes.append("shape differs between files (*: any length)")
        if f.dtype is None:
            notes.append("dtype differs between files")
        elif not f.numeric:
            notes.append("not numeric")
        if f.in_files < n:
            notes.append(f"in {f.in_files} of {n} files")
        lines.append(f"  {f.path:<{width}}  {f.dtype or '?':<8}  {shape:<24}  {'; '.join(notes)}".rstrip())
    lines.append("")
    lines.append(
        f"sample id: attribute {result.sample_id!r}"
        if result.sample_id
        else "sample id: no id attribute differs between files; the file's relative path will be used"
    )
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

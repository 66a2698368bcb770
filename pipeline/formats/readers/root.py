"""ROOT files via uproot (event data from particle-physics generators). A field path is TREE/BRANCH.
Without source.samples_along the record is the branch over all entries of the file (its length is the
number of events); with it, every entry (event) is a sample, read a range of entries at a time, and a
jagged branch (a variable number of values per event) becomes a variable-length field; declared [null, k],
its flattened values become (n, k) items (particles with k numbers each)."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np

from pipeline.formats.readers.base import (
    ArrayInfo,
    Contents,
    Conventions,
    FieldSpec,
    MissingArray,
    OpenFile,
    Reader,
    SampleError,
    as_array,
    as_text,
    bounded_rows,
    dtype_text,
)


def _open(path: Path) -> Any:
    import uproot

    try:
        return uproot.open(path)
    except Exception as e:  # uproot raises many exception types for damaged files
        raise SampleError(f"cannot open as ROOT: {type(e).__name__}: {e}") from None


class RootFile(OpenFile):
    """A ROOT file whose trees' entries are the samples (whatever source.samples_along names)."""

    def __init__(self, path: Path) -> None:
        super().__init__(path)
        self.file = _open(path)

    def _branch(self, array: str) -> Any:
        tree_name, _, branch = array.rpartition("/")
        try:
            return self.file[tree_name][branch]
        except Exception:  # KeyError, or uproot's own for a path through a non-directory
            raise MissingArray(f"no branch '{array}'") from None

    def shape(self, array: str) -> tuple[int, ...]:
        branch = self._branch(array)
        try:
            return (branch.num_entries, *branch.interpretation.to_dtype.shape)
        except AttributeError:  # jagged: the values per entry vary
            return (branch.num_entries,)

    def along(self, field: FieldSpec, samples_along: int | str) -> int | None:
        self.shape(field.path)  # SampleError when there is no such branch
        return 0

    def read(self, array: str, index: tuple[slice, ...]) -> np.ndarray:
        entries = index[0] if index else slice(None)
        try:
            return self._branch(array).array(entry_start=entries.start, entry_stop=entries.stop, library="np")
        except SampleError:
            raise
        except Exception as e:
            raise SampleError(f"cannot read branch '{array}': {type(e).__name__}: {e}") from None

    def samples(self, field: FieldSpec, axis: int, start: int, stop: int) -> np.ndarray | list[np.ndarray]:
        data = self.read(field.path, (slice(start, stop),))
        if data.dtype == object:  # jagged: one array per entry
            entries = [per_item(as_array(entry, field), field) for entry in data]
        else:
            array = as_array(data, field)
            if not (itemised(field) and array.ndim == 2):
                return array
            entries = [per_item(row, field) for row in array]  # a jagged branch, equally long entries here
        return [bounded_rows(entry, field, self.path, start + k) for k, entry in enumerate(entries)]

    def attribute(self, name: str) -> object:
        try:
            return self.file[name].member("fTitle")
        except Exception:
            raise SampleError(f"no TNamed '{name}' (a ROOT file's attributes are TNamed titles)") from None

    def close(self) -> None:
        self.file.close()


class RootReader(Reader):
    name = "root"
    suffixes = (".root",)

    def open(self, path: Path) -> RootFile:
        return RootFile(path)

    def describe(self, path: Path) -> Contents:
        """Every TTree's branches and RNTuple's fields (a record: one over the file's events), and every
        TNamed's title."""
        import uproot

        try:
            f = uproot.open(path)
        except Exception as e:  # uproot raises many exception types for damaged files
            raise SampleError(f"cannot open as ROOT: {type(e).__name__}: {e}") from None
        with f:
            arrays, texts = [], {}
            for key, classname in f.classnames(recursive=True).items():
                name = key.split(";")[0]
                if classname == "TNamed":
                    texts[name] = str(f[name].member("fTitle"))
                elif classname in ("TTree", "ROOT::RNTuple"):
                    tree = f[name]
                    for branch in tree.keys():  # noqa: SIM118 - iterating a tree gives branch objects
                        arrays.append(branch_info(tree, branch, f"{name}/{branch}"))
            return Contents(
                tuple(arrays),
                texts,
                Conventions("ROOT: one sample per tree entry (event)", samples_along="entries"),
            )

    def read(
        self, path: Path, fields: Sequence[FieldSpec], id_attr: str | None
    ) -> tuple[dict[str, np.ndarray], str | None]:
        import uproot

        try:
            f = uproot.open(path)
        except Exception as e:  # uproot raises many exception types for damaged files
            raise SampleError(f"cannot open as ROOT: {type(e).__name__}: {e}") from None
        with f:
            arrays = {}
            for field in fields:
                tree_name, _, branch = field.path.rpartition("/")
                try:
                    array = f[tree_name][branch].array(library="np")
                except KeyError:
                    raise SampleError(f"missing field '{field.name}': no branch '{field.path}'") from None
                except Exception as e:
                    raise SampleError(f"cannot read branch '{field.path}': {type(e).__name__}: {e}") from None
                if array.dtype == object:  # jagged per-event values: stack if regular
                    try:
                        array = np.stack(array)
                    except ValueError:
                        raise SampleError(
                            f"branch '{field.path}' is jagged; declare one value per event"
                        ) from None
                arrays[field.name] = as_array(array, field)
            sample_id = None
            if id_attr is not None:
                try:
                    sample_id = as_text(f[id_attr].member("fTitle"))
                except Exception:
                    raise SampleError(f"missing sample id object '{id_attr}' (a TNamed)") from None
            return arrays, sample_id


def itemised(field: FieldSpec) -> bool:
    """Declared [null, k, ...]: a variable number of fixed-size items."""
    shape = field.shape
    return shape is not None and len(shape) >= 2 and shape[0] is None and None not in shape[1:]


def per_item(values: np.ndarray, field: FieldSpec) -> np.ndarray:
    """A jagged entry of n x k values as (n, k) when the field is declared [null, k] (particles with
    k numbers each, flattened into one branch)."""
    shape = field.shape
    if not itemised(field) or values.ndim != 1 or shape is None:
        return values
    width = int(np.prod(shape[1:]))
    if values.size % width:
        raise SampleError(
            f"field '{field.name}': {values.size} values per entry do not divide into items of {width}"
        )
    return values.reshape(-1, *shape[1:])


def branch_info(tree: Any, branch: str, path: str) -> ArrayInfo:
    """A branch as inspect shows it, from its interpretation without reading it: numbers per event (shape
    over the file's events), a jagged branch (kind 'jagged', its values' dtype), or objects (TLorentzVector
    and other classes: kind 'objects', not numbers sim2dl reads). An RNTuple field is read (inspect opens
    few files)."""
    entries = tree.num_entries
    try:
        interpretation = tree[branch].interpretation
    except AttributeError:  # an RNTuple field
        array = tree[branch].array(library="np")
        if array.dtype == object:
            return ArrayInfo(path, (entries,), "object", kind="jagged")
        return ArrayInfo(path, tuple(array.shape), dtype_text(array.dtype))
    except Exception as e:  # uproot cannot interpret it at all
        return ArrayInfo(path, (entries,), "object", kind="objects", encoding=f"{type(e).__name__}: {e}")
    dtype = getattr(interpretation, "to_dtype", None)
    if isinstance(dtype, np.dtype) and not dtype.names:
        # per event: inner shape in dtype
        return ArrayInfo(path, (entries, *dtype.shape), dtype_text(dtype.base))
    inner = getattr(getattr(interpretation, "content", None), "to_dtype", None)
    if isinstance(inner, np.dtype) and not inner.names:
        return ArrayInfo(path, (entries,), dtype_text(inner.base), kind="jagged")
    return ArrayInfo(path, (entries,), "object", kind="objects", encoding=type(interpretation).__name__)

"""categorical: true: values (text or integers) become class ids 0..K-1, int64. The classes are the
field's `classes` when the config lists them (in that order; any other value is a reject), else every
value found in the inputs, sorted (numerically when all are integers), so the ids are the same for any
rank count and on every rerun. Memory: the classes of each field (K names); a value's id is one dict
lookup."""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from typing import Any

import numpy as np

from pipeline.formats.readers.base import SampleError, as_text


def class_text(value: Any) -> str:
    """A categorical value as the text it is known by (integers as decimal)."""
    array = np.asarray(value)
    if array.size != 1:
        raise SampleError(f"a categorical value must be one value, not {array.size}")
    if array.dtype.kind == "f":
        number = float(array.reshape(()))
        if not number.is_integer():
            raise SampleError(f"categorical value {number} is not an integer or text")
        return str(int(number))
    return as_text(array.reshape(()))


def sorted_classes(values: Iterable[str]) -> list[str]:
    unique = set(values)
    try:
        return sorted(unique, key=int)
    except ValueError:
        return sorted(unique)


class Categories:
    """The classes of every categorical field, and the mapping of values to ids."""

    def __init__(self, classes: Mapping[str, Sequence[str]]) -> None:
        self.classes = {name: list(names) for name, names in classes.items()}
        self._ids = {name: {c: i for i, c in enumerate(names)} for name, names in self.classes.items()}

    def id_of(self, name: str, value: Any) -> np.ndarray:
        text = class_text(value)
        ids = self._ids[name]
        if text not in ids:
            raise SampleError(
                f"field '{name}': value '{text}' is not one of its classes {self.classes[name]}"
            )
        return np.array(ids[text], np.int64)

    def ids_of(self, name: str, values: np.ndarray) -> np.ndarray:
        """Class ids of an array of values (one sample each); SampleError names the first unknown value."""
        return np.array([self.id_of(name, v) for v in values], np.int64)

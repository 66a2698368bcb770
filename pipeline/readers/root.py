"""ROOT files via uproot (event data from particle-physics generators). A field path is TREE/BRANCH;
the record is the branch over all entries of the file (so its length is the number of events)."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

import numpy as np

from pipeline.readers.base import FieldSpec, Reader, SampleError, as_array, as_text


class RootReader(Reader):
    name = "root"
    suffixes = (".root",)

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
                        raise SampleError(f"branch '{field.path}' is jagged; declare one value per event") from None
                arrays[field.name] = as_array(array, field)
            sample_id = None
            if id_attr is not None:
                try:
                    sample_id = as_text(f[id_attr].member("fTitle"))
                except Exception:
                    raise SampleError(f"missing sample id object '{id_attr}' (a TNamed)") from None
            return arrays, sample_id

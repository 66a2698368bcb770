"""The user's own code named in the config, as 'path/to/file.py:NAME' (relative to the working directory)
or 'package.module:NAME' (on PYTHONPATH): a model's builder (train.model) or a task's class (train.task).
Found first (`locate`: the file, before any import), imported when it is used (`load`), each error naming
the config key. Memory and time: the user's module's import.
"""

from __future__ import annotations

import importlib
import importlib.util
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from pipeline import Sim2dlError


@dataclass(frozen=True)
class UserCode:
    """Where a name of the user's lives: its file, its module ('package.module' form; None for a file) and
    the name in it."""

    key: str  # the config key that named it
    file: Path
    module: str | None
    name: str

    @property
    def where(self) -> str:
        return f"{self.file}:{self.name}"

    def load(self, prefix: str, kind: str) -> Any:
        """The named object, its file or module imported (a file as module PREFIX_STEM); kind: what it
        should be, for the error ('function', 'class')."""
        try:
            if self.module is not None:
                module = importlib.import_module(self.module)
            else:
                spec = importlib.util.spec_from_file_location(f"{prefix}_{self.file.stem}", self.file)
                module = importlib.util.module_from_spec(spec)
                sys.modules[spec.name] = module
                spec.loader.exec_module(module)
        except Exception as e:
            problem = f"{type(e).__name__}: {e}"
            raise Sim2dlError(f"config key '{self.key}': importing {self.where} failed: {problem}") from e
        found = getattr(module, self.name, None)
        if found is None or (kind == "function" and not callable(found)):
            raise Sim2dlError(
                f"config key '{self.key}': {self.module or self.file} has no {kind} '{self.name}'"
            )
        return found


def locate(value: str, key: str, unknown: str) -> UserCode:
    """A config value in the 'path/to/file.py:NAME' or 'package.module:NAME' form, found; `unknown`: the
    error for a value in neither form (what the key takes)."""
    target, colon, name = value.rpartition(":")
    if not colon or not target or not name.isidentifier():
        raise Sim2dlError(f"config key '{key}': {unknown}")
    what = key.rpartition(".")[2]
    if target.endswith(".py") or "/" in target:
        file = Path(target).resolve()
        if not file.is_file():
            raise Sim2dlError(f"config key '{key}': {what} file {target} not found (from {Path.cwd()})")
        return UserCode(key, file, None, name)
    try:
        spec = importlib.util.find_spec(target)
    except (ImportError, ValueError):
        spec = None
    if spec is None or not spec.origin:
        raise Sim2dlError(f"config key '{key}': module '{target}' not found (is it on PYTHONPATH?)")
    return UserCode(key, Path(spec.origin), target, name)

"""Models: a built-in name (one small file each, behind the interface below) or the user's own builder.

    cosmoflow.py  3D CNN for cubes                  (regression, classification)
    sequence.py   1D CNN for traces of any length   (regression, classification)
    unet2d.py     2-D encoder-decoder for (H, W, C) (segmentation, classification, regression, surrogate;
                  model_args periodic: true for periodic padding)
    dense.py      MLP on the flattened input         (regression, classification)
    decoder.py    parameters to fields and vectors   (surrogate, regression)
    fno.py        Fourier neural operator, 2-D fields to fields on the same grid (surrogate, next_state)
    fno3d.py      the same on 3-D fields (D, H, W[, C])  (surrogate, next_state)
    fno1d.py      the same on 1-D fields (X[, C])        (surrogate, next_state)
    autoencoder.py  2-D or 3-D fields through a latent vector and back  (autoencoder)

A built-in module has NAME, SPATIAL_DIMS (a feature with that many axes gets a channel axis; None: any),
TASKS, OPTIONS (its own model_args and their defaults; optional), proposed_depth(shape, plane) where
`sim2dl inspect` may propose it (the depth for a sample of that shape, else None; PROPOSED_IN_ORDER), and
build(input_shape, outputs, task, args), args being train.depth/width/dense/dropout with
train.model_args on top; one that can be split across ranks (train.spatial.ranks_per_sample) also has
build_split(input_shape, outputs, task, args, layout, process_set) (pipeline.training.spatial). Adding
one: a module here, registered in BUILT_IN.

The user's model: train.model 'package.module:function' or 'path/to/file.py:function' (relative to the
working directory), called as function(input_shape, outputs, **train.model_args) -> tf.keras.Model with
raw outputs (regression values, class logits, per-pixel class logits of shape (H, W, classes)). It is
checked before any training (it must build, be a tf.keras.Model, take the feature and give the task's
output shape), and its file and checksum are recorded (`ModelSource`). Memory and time: TensorFlow's.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from types import ModuleType
from typing import Any

from pipeline import Sim2dlError
from pipeline.storage.fsutil import file_checksum
from pipeline.training.models import (
    autoencoder,
    cosmoflow,
    decoder,
    dense,
    fno,
    fno1d,
    fno3d,
    sequence,
    unet2d,
)
from pipeline.training.models.base import ARGS, ModelError
from pipeline.training.user_code import UserCode, locate

BUILT_IN: dict[str, ModuleType] = {
    m.NAME: m for m in (cosmoflow, sequence, unet2d, dense, decoder, fno, fno3d, fno1d, autoencoder)
}

# sim2dl inspect asks these in turn for a starter config's model (each module's proposed_depth)
PROPOSED_IN_ORDER: tuple[ModuleType, ...] = (sequence, unet2d, cosmoflow, dense)

__all__ = ["BUILT_IN", "ModelSource", "build_model", "input_shape", "model_source", "propose"]


def propose(shape: tuple[int | None, ...] | None, plane: bool = False) -> tuple[str, int]:
    """A built-in model for one sample's feature shape (None: its rank differs between files; `plane`: the
    reader says the array is a 2-D plane with channels last), and a depth its pooling allows: the first
    model in PROPOSED_IN_ORDER whose proposed_depth takes the shape (dense takes any)."""
    for module in PROPOSED_IN_ORDER:
        depth = module.proposed_depth(shape, plane)
        if depth is not None:
            return module.NAME, depth
    raise AssertionError("dense takes any shape")


@dataclass(frozen=True)
class ModelSource:
    """Where train.model's code comes from: a built-in module, or the user's (pipeline.training.user_code)."""

    name: str  # train.model as written
    built_in: ModuleType | None
    code: UserCode | None = None

    @property
    def file(self) -> Path | None:
        return self.code.file if self.code else None

    @property
    def function(self) -> str:
        return self.code.name if self.code else "build"

    @property
    def where(self) -> str:
        return self.code.where if self.code else self.name

    def provenance(self) -> dict[str, Any]:
        if self.code is None:
            return {"model": self.name, "built_in": True}
        return {
            "model": self.name,
            "built_in": False,
            "file": str(self.code.file),
            "function": self.code.name,
            "checksum": file_checksum(self.code.file),
        }

    def builder(self) -> Any:
        """The user's function (importing its file or module)."""
        assert self.code is not None
        return self.code.load("sim2dl_user_model", "function")


def model_source(name: str) -> ModelSource:
    """train.model resolved: a built-in, a file 'path.py:function' or a module 'package.module:function'."""
    if name in BUILT_IN:
        return ModelSource(name, BUILT_IN[name])
    unknown = (
        f"unknown model '{name}' (a built-in: {sorted(BUILT_IN)}, or your own as 'path/to/file.py:function' "
        "or 'package.module:function')"
    )
    return ModelSource(name, None, locate(name, "train.model", unknown))


def input_shape(source: ModelSource, feature_shape: Sequence[int | None]) -> tuple[int | None, ...]:
    """The model's input: the feature's shape, with a channel axis for a built-in whose convolutions
    need one, and any length for the sequence model."""
    shape = list(feature_shape)
    module = source.built_in
    if module is not None and module.SPATIAL_DIMS is not None and len(shape) == module.SPATIAL_DIMS:
        shape.append(1)
    if module is sequence and shape:
        shape[0] = None
    return tuple(shape)


def built_in_args(source: ModelSource, settings: Mapping[str, Any]) -> dict[str, Any]:
    """train's depth, width, dense and dropout, the model's own options (OPTIONS: name -> default), and
    train.model_args over both."""
    extra = dict(settings.get("model_args") or {})
    options = dict(getattr(source.built_in, "OPTIONS", {}))
    unknown = sorted(set(extra) - set(ARGS) - set(options))
    if unknown:
        raise Sim2dlError(
            f"config key 'train.model_args': {unknown} are not arguments of the built-in model "
            f"'{source.name}' "
            f"(it takes {[*ARGS, *options]})"
        )
    return {**{k: settings[k] for k in ARGS}, **options, **extra}


def build_model(
    settings: Mapping[str, Any],
    feature_shape: Sequence[int | None],
    task: Any,
    spatial: tuple[Any, Any] | None = None,
) -> tuple[Any, ModelSource]:
    """The configured model for the feature and task, checked; raises Sim2dlError before any training.
    With several features (task.data.several) your own builder gets {name: shape} and the model a dict.
    spatial: (SpatialLayout, Horovod process set) with train.spatial.ranks_per_sample > 1: the
    built-in's split model, which takes this rank's slab of each sample."""
    source = model_source(settings["model"])
    shape: Any = input_shape(source, feature_shape)
    module = source.built_in
    several = getattr(task.data, "several", False)
    if several:
        if module is not None:
            raise Sim2dlError(
                f"config key 'train.model': the built-in '{source.name}' takes one feature, "
                f"the data has {list(task.data.feature_shapes)}"
            )
        shape = dict(task.data.feature_shapes)
    if module is not None:
        if task.name not in module.TASKS and source.name not in task.built_in_models:
            raise Sim2dlError(
                f"config key 'train.model': model '{source.name}' does not do {task.name} (it does "
                f"{', '.join(module.TASKS)}; built-ins for {task.name}: "
                f"{sorted(n for n, m in BUILT_IN.items() if task.name in m.TASKS)})"
            )
        args = built_in_args(source, settings)
        try:
            if spatial is not None:
                return module.build_split(shape, task.outputs(), task, args, *spatial), source
            return module.build(shape, task.outputs(), task, args), source
        except ModelError as e:
            raise Sim2dlError(f"config key 'train.model': {e}") from None
    builder = source.builder()
    try:
        model = builder(shape, task.outputs(), **(settings.get("model_args") or {}))
    except Exception as e:
        raise Sim2dlError(f"model builder {source.where} raised {type(e).__name__}: {e}") from e
    check_user_model(model, source, shape, task, several)
    return model, source


def check_user_model(model: Any, source: ModelSource, shape: Any, task: Any, several: bool) -> None:
    """The user's model is a tf.keras.Model that takes the feature's shape and gives the task's output."""
    import tensorflow as tf

    if not isinstance(model, tf.keras.Model):
        raise Sim2dlError(
            f"model builder {source.where} returned {type(model).__name__}, not a tf.keras.Model "
            "(build it with tensorflow's tf.keras)"
        )
    first = shape[task.data.feature] if several else shape
    expected = (None, *task.output_shape(first))

    def zeros(dims: Sequence[int | None]) -> Any:
        return tf.zeros([1, *(8 if d is None else d for d in dims)])

    try:
        probe = {name: zeros(dims) for name, dims in shape.items()} if several else zeros(shape)
        produced = (None, *model(probe, training=False).shape[1:])
    except Exception as e:
        raise Sim2dlError(
            f"model builder {source.where}: the model cannot take the feature's shape "
            f"{shape if several else list(shape)}: "
            f"{type(e).__name__}: {str(e).splitlines()[0]}"
        ) from e
    if tuple(produced) != expected:
        raise Sim2dlError(
            f"model builder {source.where}: the model's output shape is {list(produced)}, task '{task.name}' "
            f"needs {list(expected)} ({task.outputs_in_words()})"
        )


def spatial_dims(source: ModelSource, shape: Sequence[int | None]) -> int:
    """How many leading axes of the model's input are space: a built-in's own count, else every axis but
    the last (channels last)."""
    module = source.built_in
    return module.SPATIAL_DIMS if module is not None and module.SPATIAL_DIMS is not None else len(shape) - 1

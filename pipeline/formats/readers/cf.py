"""CF conventions on read: missing values (`_FillValue`, `missing_value`, `valid_min`/`valid_max`/
`valid_range`, netCDF's default fill values) and packing (`scale_factor`/`add_offset`, `_Unsigned`), decoded
by the rules netCDF4-python applies with its auto mask-and-scale (its `_toma` and `_scale`), for every
format whose arrays carry such attributes (NetCDF variables, HDF5 datasets, Zarr arrays).

`Encoding.decode` turns the stored values into the values meant: a masked array (numpy.ma) where any value
is missing, the packed integers unpacked to the dtype of `scale_factor`/`add_offset`. What happens to a
sample with missing values is the field's `missing` setting (`apply_missing`): rejected with the count and
the markers, or replaced by `fill_value` with a mask beside it (`NAME_mask`, uint8: 1 where a value was
missing, 0 elsewhere; uint8 because every shard format and tf.io.decode_raw hold it) from which convert's
statistics leave those values out.

Memory: one boolean per value of the range read (the mask) and, when packed, one unpacked copy. Time: a
few comparisons per value per marker.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import numpy as np

MISSING_POLICIES = ("reject", "fill", "mask")
# netCDF's default fill values (netcdf.h NC_FILL_*), used where a NetCDF variable has no _FillValue: a value
# never written reads as these (9.969209968386869e36 for floats). Bytes have none (netCDF's own advice).
NETCDF_DEFAULT_FILLS = {
    "i2": -32767,
    "u2": 65535,
    "i4": -2147483647,
    "u4": 4294967295,
    "i8": -9223372036854775806,
    "u8": 18446744073709551614,
    "f4": 9.969209968386869e36,
    "f8": 9.969209968386869e36,
}
DEFAULT_FILL = "default _FillValue"  # how netCDF's default fill is named in the reasons of rejects
CF_ATTRIBUTES = (
    "_FillValue",
    "missing_value",
    "valid_min",
    "valid_max",
    "valid_range",
    "scale_factor",
    "add_offset",
    "_Unsigned",
    "units",
    "component_names",
)  # (sim2dl's: names of the entries along the last axis)


def cf_attributes(attributes: Mapping[str, Any]) -> dict[str, Any]:
    """The CF attributes among an array's attributes (any mapping: h5py's, zarr's, a NetCDF variable's);
    only these are read, so a format's own bookkeeping attributes are never touched."""
    return {name: attributes[name] for name in CF_ATTRIBUTES if name in attributes}


class EncodingError(ValueError):
    """The attributes cannot be applied (a packing attribute that is not a number, a marker not castable)."""


def _number(value: Any, name: str) -> np.ndarray:
    array = np.asarray(value)
    if array.dtype.kind not in "biuf" or array.size == 0:
        raise EncodingError(f"attribute {name} = {value!r} is not a number")
    return array.reshape(-1)


def _text(value: Any) -> str:
    if isinstance(value, bytes):
        return value.decode(errors="replace")
    if isinstance(value, np.ndarray):
        return " ".join(_text(v) for v in value.reshape(-1).tolist())
    return str(value)


@dataclass(frozen=True)
class Encoding:
    """How one array's values are stored: the raw values that mean 'missing' and the packing."""

    # (attribute, raw value) pairs that mark a missing value; NaN allowed
    fills: tuple[tuple[str, float], ...]
    valid_min: float | None
    valid_max: float | None
    scale_factor: np.ndarray | None  # 0-d, its dtype the unpacked dtype
    add_offset: np.ndarray | None
    unsigned: bool  # _Unsigned = "true": signed integers stored for unsigned ones
    units: str | None

    @property
    def packed(self) -> bool:
        return self.scale_factor is not None or self.add_offset is not None

    @property
    def masks(self) -> bool:
        return bool(self.fills) or self.valid_min is not None or self.valid_max is not None

    def markers(self, defaults: bool = True) -> str:
        """The missing-value markers, as a person reads them: '_FillValue 1e+20, valid_max 350' (without
        netCDF's default fill value where `defaults` is False)."""
        told = [f"{name} {value:g}" for name, value in self.fills if defaults or name != DEFAULT_FILL]
        if self.valid_min is not None:
            told.append(f"below valid_min {self.valid_min:g}")
        if self.valid_max is not None:
            told.append(f"above valid_max {self.valid_max:g}")
        return ", ".join(told)

    def decode(self, raw: np.ndarray) -> np.ndarray:
        """The values meant: masked where missing (a MaskedArray only then), unpacked where packed."""
        data = np.asarray(raw)
        if self.unsigned and data.dtype.kind == "i":
            data = data.view(data.dtype.newbyteorder("=").str.replace("i", "u"))
        mask = None
        if self.masks and data.dtype.kind in "biuf":
            mask = np.zeros(data.shape, bool)
            for _, value in self.fills:
                mask |= np.isnan(data) if np.isnan(value) else data == np.asarray(value).astype(data.dtype)
            if self.valid_min is not None:
                mask |= data < self.valid_min
            if self.valid_max is not None:
                mask |= data > self.valid_max
        if self.packed:
            scale = (
                self.scale_factor if self.scale_factor is not None else np.asarray(1, self.add_offset.dtype)
            )  # type: ignore[union-attr]
            offset = self.add_offset if self.add_offset is not None else np.asarray(0, scale.dtype)
            unpacked = np.result_type(scale, offset)
            data = data.astype(unpacked) * scale.astype(unpacked) + offset.astype(unpacked)
        if mask is not None and mask.any():
            return np.ma.MaskedArray(data, mask)
        return data


def encoding(attributes: Mapping[str, Any], dtype: np.dtype, default_fill: bool = False) -> Encoding | None:
    """The encoding an array's attributes declare (None: the values are stored as meant). `default_fill`:
    netCDF's default fill value applies when there is no _FillValue (NetCDF variables, not plain HDF5).
    Raises EncodingError for attributes that cannot be applied."""
    fills: list[tuple[str, float]] = []
    numeric = dtype.kind in "biuf"
    if numeric and "_FillValue" in attributes:
        fills += [("_FillValue", float(v)) for v in _number(attributes["_FillValue"], "_FillValue")]
    elif numeric and default_fill and dtype.str[1:] in NETCDF_DEFAULT_FILLS:
        fills.append((DEFAULT_FILL, float(NETCDF_DEFAULT_FILLS[dtype.str[1:]])))
    if numeric and "missing_value" in attributes:
        fills += [("missing_value", float(v)) for v in _number(attributes["missing_value"], "missing_value")]
    valid_min = valid_max = None
    if numeric and "valid_range" in attributes:
        bounds = _number(attributes["valid_range"], "valid_range")
        if bounds.size != 2:
            raise EncodingError(f"attribute valid_range = {attributes['valid_range']!r} is not two numbers")
        valid_min, valid_max = float(bounds[0]), float(bounds[1])
    else:
        if numeric and "valid_min" in attributes:
            valid_min = float(_number(attributes["valid_min"], "valid_min")[0])
        if numeric and "valid_max" in attributes:
            valid_max = float(_number(attributes["valid_max"], "valid_max")[0])
    scale = offset = None
    if "scale_factor" in attributes:
        scale = _number(attributes["scale_factor"], "scale_factor")[0].reshape(())
        if scale.dtype.kind != "f":
            scale = scale.astype(np.float64)
    if "add_offset" in attributes:
        offset = _number(attributes["add_offset"], "add_offset")[0].reshape(())
        if offset.dtype.kind != "f":
            offset = offset.astype(np.float64)
    if (scale is not None or offset is not None) and not numeric:
        raise EncodingError(f"scale_factor/add_offset on values of dtype {dtype}: not numbers to unpack")
    unsigned = _text(attributes.get("_Unsigned", "")).lower() == "true"
    units = _text(attributes["units"]) if "units" in attributes else None
    found = Encoding(tuple(dict.fromkeys(fills)), valid_min, valid_max, scale, offset, unsigned, units)
    if not (found.masks or found.packed or found.unsigned or found.units):
        return None
    return found


def unpacked_dtype(stored: np.dtype, found: Encoding | None) -> np.dtype:
    """The dtype the decoded values have (what `describe` and inspect report)."""
    if found is None or not found.packed:
        return stored
    scale = found.scale_factor if found.scale_factor is not None else found.add_offset
    offset = found.add_offset if found.add_offset is not None else found.scale_factor
    return np.result_type(scale, offset)


def apply_missing(
    name: str, value: np.ndarray, policy: str, fill_value: float | None, markers: str
) -> tuple[np.ndarray, np.ndarray | None]:
    """One sample's values of a field, with its missing values handled: (values, mask or None). Raises
    ValueError (the reject's reason) under `reject` when any value is missing."""
    if not isinstance(value, np.ma.MaskedArray):
        return value, (np.zeros(np.shape(value), np.uint8) if policy != "reject" else None)
    mask = np.ma.getmaskarray(value)
    data = np.ma.getdata(value)
    if not mask.any():
        return data, (mask.astype(np.uint8) if policy != "reject" else None)
    if policy == "reject":
        raise ValueError(f"field '{name}': {int(mask.sum())} of {mask.size} values are missing ({markers})")
    filled = np.where(mask, np.asarray(0 if fill_value is None else fill_value).astype(data.dtype), data)
    return filled, mask.astype(np.uint8)

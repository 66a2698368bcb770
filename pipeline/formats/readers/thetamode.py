"""openPMD meshes in cylindrical `thetaMode` geometry (FBPIC, WarpX RZ, HiPACE++): azimuthal modes over an
(r, z) plane, and the three layouts a field can be read in. Pure functions on arrays; the openPMD reader
(openpmd.py) reads the record and its attributes and calls them.

A thetaMode component is stored as (2·Nm − 1, N_a, N_b): the first axis is the mode (mode 0, then the
real and the imaginary part of each mode m ≥ 1, `geometryParameters` "m=Nm;imag=+"), the other two are r
and z in the order `axisLabels` gives (FBPIC writes [r, z], WarpX [z, r]; with `dataOrder: F` the labels
are listed fastest axis first, so reversed against the stored array). Every layout puts r before z,
whichever code wrote the file:

- `modes` (the default; path `meshes/E`): (Nr, Nz, components × modes), each component's modes side by
  side (Er m0, Er m1 re, Er m1 im, Et m0, ...). No value is changed or interpolated; a 2-D network sees
  each mode as a channel over the plane, which is what the data are.
- `plane` (path `meshes/E@theta=0.5`): the field rebuilt on the plane at angle θ (radians; θ = 0 is the
  x–z plane), r mirrored below the axis: (2·Nr, Nz, components), as openpmd-viewer's
  `get_field(theta=θ)` returns it; a vector's components are the plane's Cartesian ones (x, y, z: Fx =
  Fr cos θ − Ft sin θ, Fy = Fr sin θ + Ft cos θ, their sign reversed below the axis), a scalar's one.
- `cartesian` (path `meshes/E@cartesian`): the 3-D field on an (x, y, z) grid of (2·Nr, 2·Nr, Nz) cells,
  linearly interpolated in r from the modes as openpmd-viewer's `get_field(theta=None)` does. Opt-in:
  it holds 4·Nr times the values of the modes (Nr = 256, Nz = 2,048, 3 components: 3.2 GB of float32).

Memory: the record's values once more per layout (cartesian: the volume above); time: linear in the
values written.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass

import numpy as np

from pipeline.formats.readers.base import SampleError

SELECTOR = "@"  # meshes/E@theta=0.5, meshes/E@cartesian
LAYOUTS = ("modes", "plane", "cartesian")


@dataclass(frozen=True)
class Layout:
    """How a thetaMode mesh is read: its kind (one of LAYOUTS) and, for a plane, the angle θ."""

    kind: str = "modes"
    theta: float = 0.0


def split_layout(path: str) -> tuple[str, Layout]:
    """A field path's record and the layout it asks for: `meshes/E` (modes), `meshes/E@modes`,
    `meshes/E@theta=0.5` (the plane at θ, radians) or `meshes/E@cartesian`."""
    record, _, selector = path.partition(SELECTOR)
    if not selector or selector == "modes":
        return record, Layout()
    if selector == "cartesian":
        return record, Layout("cartesian")
    name, _, value = selector.partition("=")
    if name == "theta":
        try:
            return record, Layout("plane", float(value))
        except ValueError:
            pass
    raise SampleError(
        f"'{path}': unknown layout '{selector}' (a thetaMode mesh is read as {record} for its modes, "
        f"{record}@theta=ANGLE for the plane at an angle in radians, or {record}@cartesian for a 3-D volume)"
    )


def modes_count(geometry_parameters: str) -> int | None:
    """Nm of `geometryParameters` ("m=2;imag=+"), None where it does not say."""
    for item in geometry_parameters.split(";"):
        key, _, value = item.partition("=")
        if key.strip() == "m" and value.strip().isdigit():
            return int(value)
    return None


def in_array_order(per_axis: Sequence, data_order: str) -> list:
    """A per-axis attribute (axisLabels, gridSpacing, gridGlobalOffset, a component's position) in the
    stored array's numpy order: `dataOrder: F` lists them fastest axis first, reversed."""
    values = list(per_axis)
    return values[::-1] if data_order.upper() == "F" else values


def array_axes(axis_labels: Sequence[str], data_order: str) -> tuple[str, ...]:
    """The labels of the stored array's axes in their numpy order."""
    return tuple(str(label) for label in in_array_order(axis_labels, data_order))


def transposed(axes: Sequence[str], where: str) -> bool:
    """Whether a component's (modes, a, b) axes are (z, r), not (r, z); SampleError where they are neither."""
    if tuple(axes) in (("r", "z"), ("z", "r")):
        return tuple(axes) == ("z", "r")
    raise SampleError(f"{where}: thetaMode axes {list(axes)} are not r and z")


def r_first(values: np.ndarray, axes: Sequence[str], where: str) -> np.ndarray:
    """A component's (modes, a, b) values as (modes, r, z), from its axes' labels."""
    return values.transpose(0, 2, 1) if transposed(axes, where) else values


def check_modes(values: np.ndarray, declared: int | None, where: str) -> None:
    count = values.shape[0]
    if count % 2 == 0 or (declared is not None and count != 2 * declared - 1):
        said = f" (geometryParameters says m={declared}: {2 * declared - 1})" if declared is not None else ""
        raise SampleError(f"{where}: {count} entries along the thetaMode mode axis, not 2·Nm − 1{said}")


def layout_channels(layout: Layout, components: Sequence[str], modes: int) -> list[str]:
    """The names of a layout's channels (the last axis): each component's modes in the modes layout
    (r_m0, r_m1_re, r_m1_im, ...; a scalar's component is ''), else a vector's x, y (from r, t) and its
    other components, or the scalar's one."""
    if layout.kind == "modes":
        suffixes = ["m0"] + [f"m{m}_{part}" for m in range(1, (modes + 1) // 2) for part in ("re", "im")]
        return [f"{c}_{s}" if c else s for c in components for s in suffixes]
    if "r" in components and "t" in components:
        return ["x", "y", *(c for c in components if c not in ("r", "t"))]
    return [c or "value" for c in components]


def as_modes(components: Mapping[str, np.ndarray]) -> np.ndarray:
    """(Nr, Nz, components × modes) from each component's (modes, Nr, Nz)."""
    return np.concatenate([np.moveaxis(v, 0, -1) for v in components.values()], axis=-1)


def mode_weights(modes: int, theta: float) -> tuple[np.ndarray, np.ndarray]:
    """The weights of the stored modes at angle θ above the axis and at θ + π (below it)."""
    above, below = [1.0], [1.0]
    for m in range(1, (modes + 1) // 2):
        cos, sin = np.cos(m * theta), np.sin(m * theta)
        above += [cos, sin]
        below += [(-1) ** m * cos, (-1) ** m * sin]
    return np.array(above), np.array(below)


def on_plane(values: np.ndarray, theta: float) -> np.ndarray:
    """One component's (modes, Nr, Nz) summed at θ: (2·Nr, Nz), the rows below the axis (θ + π) mirrored."""
    above, below = mode_weights(values.shape[0], theta)
    return np.concatenate(
        [np.tensordot(below, values, axes=(0, 0))[::-1], np.tensordot(above, values, axes=(0, 0))]
    )


def as_plane(components: Mapping[str, np.ndarray], theta: float) -> np.ndarray:
    """(2·Nr, Nz, channels) at θ: x, y (from r and t) and z of a vector, or the scalar's one (the order of
    layout_channels)."""
    planes = {name: on_plane(values, theta) for name, values in components.items()}
    if "r" not in planes or "t" not in planes:
        return np.stack(list(planes.values()), axis=-1)
    half = planes["r"].shape[0] // 2
    sign = np.ones((2 * half, 1))
    sign[:half] = -1  # below the axis the plane's x and y point against r and t at θ + π
    cos, sin = np.cos(theta), np.sin(theta)
    cartesian = {
        "x": sign * (cos * planes["r"] - sin * planes["t"]),
        "y": sign * (sin * planes["r"] + cos * planes["t"]),
    }
    cartesian.update({name: plane for name, plane in planes.items() if name not in ("r", "t")})
    return np.stack(list(cartesian.values()), axis=-1)


def radii(count: int, spacing: float, offset: float, position: float) -> np.ndarray:
    """The r of each stored cell (in the grid's units)."""
    return offset + (np.arange(count) + position) * spacing


def in_volume(values: np.ndarray, r: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """One component's (modes, Nr, Nz) on the (x, y) grid of the mirrored radii, linearly interpolated in
    r between neighbouring cells (as openpmd-viewer's construct_3d_from_circ): (2·Nr, 2·Nr, Nz), and each
    column's cos θ and sin θ."""
    nr, dr = len(r), r[1] - r[0] if len(r) > 1 else 1.0
    xs = np.concatenate([-r[::-1], r])
    x, y = np.meshgrid(xs, xs, indexing="ij")
    radius = np.sqrt(x**2 + y**2)
    cell = np.clip(nr - 1 - ((r[-1] - radius) / dr + 0.5).astype(np.int64), 0, nr - 1)
    s0 = np.where(cell > 0, cell + 0.5 - radius / dr, 0.0)
    inner = np.maximum(cell - 1, 0)

    def projected(mode: np.ndarray) -> np.ndarray:  # one stored mode on the grid: a volume at a time
        return (1 - s0)[..., None] * mode[cell] + s0[..., None] * mode[inner]

    cos = np.where(radius > 0, x / np.where(radius > 0, radius, 1), 1.0)
    sin = np.where(radius > 0, y / np.where(radius > 0, radius, 1), 0.0)
    phase = cos + 1j * sin
    volume = projected(values[0])
    for m in range(1, (values.shape[0] + 1) // 2):
        turn = phase**m
        volume += (
            projected(values[2 * m - 1]) * turn.real[..., None]
            + projected(values[2 * m]) * turn.imag[..., None]
        )
    return volume, cos, sin


def as_cartesian(components: Mapping[str, np.ndarray], r: np.ndarray) -> np.ndarray:
    """(2·Nr, 2·Nr, Nz, channels): x, y (from r and t) and z of a vector, or the scalar's one (the order
    of layout_channels)."""
    volumes, cos, sin = {}, None, None
    for name, values in components.items():
        volumes[name], cos, sin = in_volume(values, r)
    if "r" in volumes and "t" in volumes:
        fr, ft = volumes.pop("r"), volumes.pop("t")
        volumes = {
            "x": cos[..., None] * fr - sin[..., None] * ft,
            "y": sin[..., None] * fr + cos[..., None] * ft,
            **volumes,
        }
    return np.stack(list(volumes.values()), axis=-1)

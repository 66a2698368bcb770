"""openPMD series (the openPMD 1.x standard: WarpX, PIConGPU, ImpactX, HiPACE++) via `openpmd-api`, on HDF5
and ADIOS2, in every iteration encoding. An input is what openPMD-api opens: a file of a file-based
series (`diags/openpmd_%06T.h5`: each file holds its one iteration; list them with a glob), a
group-based file (all iterations in one HDF5 file or BP directory) or a variable-based BP series (one
iteration per ADIOS2 step). `source.format: openpmd` (the suffix alone says HDF5 or BP, not openPMD).

Every array has the input's iterations as its first axis, named `iteration`, so
`source.samples_along: iteration` makes each iteration a sample. A field's `path` names:
- `meshes/NAME`: a mesh record; a vector record's components stacked as the last axis in the order x,
  y, z (then r, t, then any other name alphabetically; a thetaMode record's r, t, z; `component_names` in
  metadata.json);
- `particles/SPECIES/RECORD`: a particle record, a `[null]` (scalar) or `[null, k]` (vector) field per
  iteration, its length the species' count in that iteration (`position` is joined with
  `positionOffset`, as the standard defines a particle's position);
- `time`, `dt` (in seconds: times `timeUnitSI`) and `iteration` (the iteration's number).

A mesh's geometry is honoured: `cartesian` meshes are read as stored (their axes in numpy order, which
`dataOrder: F` reverses against `axisLabels`); `thetaMode` meshes (FBPIC, WarpX RZ: azimuthal modes over an
(r, z) plane) in the layout the path asks for, r before z whatever `axisLabels`' order: `meshes/E` their
modes as channels over the plane, `meshes/E@theta=0.5` the plane at an angle, `meshes/E@cartesian` a 3-D
volume (thetamode.py); `cylindrical` and `spherical` meshes are refused by name. Each mesh's geometry,
axes, grid (`gridSpacing`, `gridGlobalOffset`, `gridUnitSI`) and components' `position` (staggering) are
recorded (metadata.json's `geometry`).
Values are in SI: each component times its `unitSI`; constant components are filled; the record's
`unitDimension` is recorded as its units (e.g. `kg m s^-3 A^-1`). Series attributes are `{attr: NAME}`
fields and sample ids.

Variable-based BP5 series are opened for random access (`Access.read_only`), which openPMD-api 0.17.1
serves for BP5 (tests/test_openpmd.py reads each encoding), so ranks start at their own iterations.
`read_linear` would keep memory flat but walks every step before a rank's first (~1 ms a step) and cannot
go back to read a range's next field.

Memory: the iterations of one read range, parsed (closed when the next range is read); what openPMD-api
keeps per iteration of the series in random access, ~15 KB from the open and ~23 KB more per iteration
read (bench/exascale.py: 83 MB per 1,000 BP5 iterations; a file-based series holds one per file). Time:
per iteration, one parse and one flush per record; the survey counts iterations without parsing one.
"""

from __future__ import annotations

import json
from dataclasses import replace
from pathlib import Path
from typing import Any

import numpy as np

from pipeline.formats.readers.base import (
    COMPONENT_NAMES,
    GEOMETRY,
    Contents,
    Conventions,
    FieldSpec,
    MissingArray,
    OpenFile,
    Reader,
    SampleError,
    array_info,
    check_complete,
    one_line,
    scalar_text,
)
from pipeline.formats.readers.bp import forget_profile
from pipeline.formats.readers.thetamode import (
    Layout,
    array_axes,
    as_cartesian,
    as_modes,
    as_plane,
    check_modes,
    in_array_order,
    layout_channels,
    modes_count,
    r_first,
    radii,
    split_layout,
    transposed,
)

ITERATION = "iteration"  # the name of every array's first axis (source.samples_along)
# iterations parsed when read, not all at open; ADIOS2 engines without their per-open profile file in /tmp
SERIES_OPTIONS = json.dumps(
    {"defer_iteration_parsing": True, "adios2": {"engine": {"parameters": {"Profile": "Off"}}}}
)
PER_ITERATION = ("time", "dt", ITERATION)  # scalars of each iteration
COMPONENT_ORDER = ("x", "y", "z", "r", "t")
CYLINDRICAL_ORDER = ("r", "t", "z")  # a thetaMode vector's components
# openPMD's unitDimension: powers of (L, M, T, I, theta, N, J), as SI units
SI_BASE = ("m", "kg", "s", "A", "K", "mol", "cd")
READ_GEOMETRIES = ("cartesian", "thetaMode")
# the standard's own root attributes: bookkeeping, never a run's parameter
STANDARD_ATTRIBUTES = {
    "openPMD",
    "openPMDextension",
    "basePath",
    "meshesPath",
    "particlesPath",
    "iterationEncoding",
    "iterationFormat",
    "author",
    "software",
    "softwareVersion",
    "softwareDependencies",
    "machine",
    "date",
    "comment",
}


def units_text(dimension: list[float]) -> str:
    """A record's unitDimension as SI units ('kg m s^-3 A^-1'; '' for a dimensionless record)."""
    order = (1, 0, 2, 3, 4, 5, 6)  # kg first, as physicists write it
    parts = []
    for k in order:
        power = dimension[k] if k < len(dimension) else 0
        if power:
            shown = f"{power:g}"
            parts.append(SI_BASE[k] if shown == "1" else f"{SI_BASE[k]}^{shown}")
    return " ".join(parts)


def geometry_parameters(mesh: Any) -> str:
    """A mesh's `geometryParameters` ('' where it has none: the attribute is optional)."""
    return str(mesh.get_attribute("geometryParameters")) if "geometryParameters" in mesh.attributes else ""


def component_order(names: list[str], order: tuple[str, ...] = COMPONENT_ORDER) -> list[str]:
    known = [c for c in order if c in names]
    return known + sorted(n for n in names if n not in order)


def _open(path: Path) -> Any:
    import openpmd_api as io

    check_complete(path)
    try:
        return io.Series(str(path), io.Access.read_only, SERIES_OPTIONS)
    except Exception as e:  # openPMD-api raises its own error types for files it cannot read
        raise SampleError(f"cannot open as an openPMD series: {type(e).__name__}: {one_line(e)}") from None


def in_si(values: np.ndarray, unit_si: float, dtype: Any = None) -> np.ndarray:
    """Stored values times their unitSI, in their own float dtype (float64 for integers, or as asked)."""
    dtype = np.dtype(dtype or (values.dtype if values.dtype.kind == "f" else np.float64))
    values = values.astype(dtype, copy=False)
    return values * np.asarray(unit_si, dtype) if unit_si != 1 else values


class OpenPMDFile(OpenFile):
    def __init__(self, path: Path) -> None:
        super().__init__(path)
        self.series = _open(path)
        try:
            self.iterations = [int(i) for i in self.series.iterations]
        except Exception as e:
            self.series.close()
            raise SampleError(
                f"cannot list the series' iterations: {type(e).__name__}: {one_line(e)}"
            ) from None
        self._shapes: dict[str, tuple[int, ...]] = {}
        self._open_iterations: set[int] = set()

    # -- records -------------------------------------------------------------------------------------

    def _iteration(self, iteration: int) -> Any:
        """The iteration, parsed (opened) on first use since its last close."""
        it = self.series.iterations[iteration]
        if iteration not in self._open_iterations:
            it.open()
            self._open_iterations.add(iteration)
        return it

    def _close_iterations(self, keep: set[int]) -> None:
        """Every open iteration but `keep` closed: what openPMD-api parsed of them is released, so memory
        does not grow with the iterations a rank has read (a closed iteration opens again when read again).
        Kept: the range being read, whose other fields ingest reads next (parsing an iteration costs more
        than loading a small one)."""
        for iteration in self._open_iterations - keep:
            self.series.iterations[iteration].close()
        self._open_iterations &= keep

    def length(self, array: str, axis: int) -> int:
        return len(self.iterations) if axis == 0 else self.shape(array)[axis]

    def along(self, field: FieldSpec, samples_along: int | str) -> int | None:
        """Every array's first axis is the iterations: known without parsing one (a record an iteration
        lacks is that sample's reject, when it is read)."""
        return 0 if samples_along in (ITERATION, 0) else super().along(field, samples_along)

    def _record(self, array: str, iteration: int) -> tuple[Any, bool]:
        """(the record, whether it is a particle position to join with positionOffset); a mesh's layout
        (`@...`, thetamode.py) is not part of the record's path."""
        parts = split_layout(array)[0].strip("/").split("/")
        try:
            it = self._iteration(iteration)
            if parts[0] == "meshes" and len(parts) == 2:
                meshes = it.meshes
                if parts[1] in meshes:
                    return meshes[parts[1]], False
            elif parts[0] == "particles" and len(parts) == 3:
                species = it.particles
                if parts[1] in species and parts[2] in species[parts[1]]:
                    return species[parts[1]][parts[2]], parts[2] == "position"
        except SampleError:
            raise
        except Exception as e:
            raise SampleError(f"iteration {iteration}: cannot read '{array}': {one_line(e)}") from None
        raise MissingArray(
            f"no record '{array}' in iteration {iteration} (meshes/NAME or particles/SPECIES/RECORD; "
            "openPMD-api leaves out a record it cannot read, e.g. components of different shapes, with a "
            "warning on stderr)"
        )

    def _components(self, record: Any) -> list[tuple[str, Any]]:
        if record.scalar:
            return [("", record[next(iter(record))])]
        geometry = getattr(record, "geometry", None)
        order = (
            CYLINDRICAL_ORDER if geometry is not None and geometry.name == "thetaMode" else COMPONENT_ORDER
        )
        return [(name, record[name]) for name in component_order(list(record), order)]

    def _iteration_shape(self, array: str, iteration: int) -> tuple[int, ...]:
        if array in PER_ITERATION:
            return ()
        record, _ = self._record(array, iteration)
        components = self._components(record)
        shapes = {tuple(int(n) for n in rc.shape) for _, rc in components}
        if len(shapes) > 1:
            raise SampleError(
                f"iteration {iteration}: the components of '{array}' disagree in shape: {sorted(shapes)}"
            )
        shape = shapes.pop()
        layout = self._layout(array, record)
        if layout is None:
            return shape if record.scalar else (*shape, len(components))
        axes = array_axes(record.axis_labels, str(record.data_order))
        nr, nz = shape[2:0:-1] if transposed(axes, array) else shape[1:]
        if layout.kind == "modes":
            return (nr, nz, len(components) * shape[0])
        return (
            (2 * nr, nz, len(components)) if layout.kind == "plane" else (2 * nr, 2 * nr, nz, len(components))
        )

    def _layout(self, array: str, record: Any) -> Layout | None:
        """How a mesh is read: None as stored (Cartesian meshes, particles), or its thetaMode layout;
        SampleError for a geometry sim2dl does not read, or a layout asked of a Cartesian mesh."""
        path, layout = split_layout(array)
        geometry = getattr(record, "geometry", None)
        if geometry is None:  # a particle record
            if path != array:
                raise SampleError(f"'{array}': a layout (@...) applies to thetaMode meshes, not to particles")
            return None
        name = geometry.name
        if name not in READ_GEOMETRIES:
            raise SampleError(
                f"'{path}' is in {name} geometry, which sim2dl does not read (it reads cartesian and "
                "thetaMode meshes); it is never treated as Cartesian"
            )
        if name == "cartesian":
            if path != array:
                raise SampleError(
                    f"'{array}': a layout (@...) applies to thetaMode meshes; '{path}' is Cartesian"
                )
            return None
        return layout

    def shape(self, array: str) -> tuple[int, ...]:
        if array not in self._shapes:
            if not self.iterations:
                raise SampleError("the series has no iterations")
            self._shapes[array] = (len(self.iterations), *self._iteration_shape(array, self.iterations[0]))
        return self._shapes[array]

    def dims(self, array: str) -> tuple[str, ...]:
        shape = self.shape(array)
        return (ITERATION, *(f"{array}_{k}" for k in range(1, len(shape))))

    def attributes(self, array: str) -> dict[str, Any]:
        if array in PER_ITERATION:
            return {"units": "s"} if array != ITERATION else {}
        record, _ = self._record(array, self.iterations[0])
        found: dict[str, Any] = {}
        units = units_text(list(record.unit_dimension))
        if units:
            found["units"] = units
        layout = self._layout(array, record)
        names = [name for name, _ in self._components(record)]
        if layout is not None:
            modes = int(self._components(record)[0][1].shape[0])
            found[COMPONENT_NAMES] = layout_channels(layout, names if not record.scalar else [""], modes)
        elif not record.scalar:
            found[COMPONENT_NAMES] = names
        geometry = self.geometry(array)
        if geometry is not None:
            found[GEOMETRY] = geometry
        return found

    def stored_dtype(self, array: str) -> np.dtype:
        return np.dtype("float64")

    def _load(self, array: str, iteration: int) -> np.ndarray:
        """One iteration's values of the record, in SI, components last."""
        it = self._iteration(iteration)
        if array == "time":
            return np.float64(it.time * it.time_unit_SI)
        if array == "dt":
            return np.float64(it.dt * it.time_unit_SI)
        if array == ITERATION:
            return np.int64(iteration)
        record, joined = self._record(array, iteration)
        self._iteration_shape(array, iteration)  # components agree in shape
        offsets = None
        if joined:
            offsets = self._record(array.rsplit("/", 1)[0] + "/positionOffset", iteration)[0]
        try:
            # every component and offset queued, then one flush: one pass over the backend per record
            queued = []
            for name, rc in self._components(record):
                offset = offsets[name] if offsets is not None and name in offsets else None
                queued.append((rc, rc.load_chunk(), offset, None if offset is None else offset.load_chunk()))
            self.series.flush()
        except Exception as e:  # a missing dataset, a truncated file
            raise SampleError(f"iteration {iteration}: cannot load '{array}': {one_line(e)}") from None
        loaded = []
        for rc, values, offset, shift in queued:
            if offset is None:
                loaded.append(in_si(values, rc.unit_SI))
            else:  # positions in float64: an offset of many cells plus a fraction of one keeps its precision
                loaded.append(
                    in_si(values, rc.unit_SI, np.float64) + in_si(shift, offset.unit_SI, np.float64)
                )
        layout = self._layout(array, record)
        if layout is not None:
            names = [name for name, _ in self._components(record)]
            return self._in_layout(array, record, dict(zip(names, loaded, strict=True)), layout)
        return loaded[0] if record.scalar else np.stack(loaded, axis=-1)

    def _in_layout(
        self, array: str, record: Any, components: dict[str, np.ndarray], layout: Layout
    ) -> np.ndarray:
        """A thetaMode record's components (modes, a, b) in its layout (thetamode.py)."""
        axes = array_axes(record.axis_labels, str(record.data_order))
        declared = modes_count(geometry_parameters(record))
        rz = {}
        for name, values in components.items():
            check_modes(values, declared, array)
            rz[name] = r_first(values, axes, array)
        if layout.kind == "modes":
            return as_modes(rz)
        if layout.kind == "plane":
            return as_plane(rz, layout.theta)
        order, r_axis = str(record.data_order), axes.index("r")  # per-axis attributes in numpy order, as axes
        position = float(in_array_order(self._components(record)[0][1].position, order)[r_axis])
        spacing, offset = (
            in_array_order(v, order)[r_axis] * record.grid_unit_SI
            for v in (record.grid_spacing, record.grid_global_offset)
        )
        return as_cartesian(rz, radii(next(iter(rz.values())).shape[1], spacing, offset, position))

    def geometry(self, array: str) -> dict[str, Any] | None:
        """A mesh's geometry as metadata.json records it (None for particles and per-iteration scalars):
        its geometry and parameters, the stored array's axes (numpy order) and dataOrder, the layout read,
        the grid in SI (spacing and offset in the stored axes' order) and each component's position."""
        if array in PER_ITERATION or split_layout(array)[0].startswith("particles/"):
            return None
        record, _ = self._record(array, self.iterations[0])
        self._layout(array, record)  # refuses what is not read
        layout = split_layout(array)[1]
        order = str(record.data_order)
        found = {
            "geometry": record.geometry.name,
            "geometry_parameters": geometry_parameters(record),
            "axes": list(array_axes(record.axis_labels, order)),
            "data_order": order,
            "grid_spacing_m": [h * record.grid_unit_SI for h in in_array_order(record.grid_spacing, order)],
            "grid_global_offset_m": [
                o * record.grid_unit_SI for o in in_array_order(record.grid_global_offset, order)
            ],
            "position": {
                name or "scalar": in_array_order(rc.position, order) for name, rc in self._components(record)
            },
        }
        if record.geometry.name == "thetaMode":
            found["layout"] = {
                "kind": layout.kind,
                **({"theta": layout.theta} if layout.kind == "plane" else {}),
            }
        return found

    def read(self, array: str, index: tuple[slice, ...]) -> np.ndarray:
        picked = self.iterations[index[0] if index else slice(None)]
        self._close_iterations(keep=set(picked))
        values = [self._load(array, iteration) for iteration in picked]
        if not values:
            return np.zeros((0, *self.shape(array)[1:]))
        shapes = {v.shape for v in values}
        if len(shapes) > 1:  # particles: a count per iteration (ingest reads them one at a time)
            raise SampleError(f"'{array}' changes shape between iterations {picked[0]} and {picked[-1]}")
        data = np.stack(values)
        return data[(slice(None), *index[1:])]

    def attribute(self, name: str) -> Any:
        if name not in self.series.attributes:
            raise SampleError(f"no series attribute '{name}'")
        return self.series.get_attribute(name)

    def close(self) -> None:
        self.series.close()
        if self.path.suffix.lower() in (".bp", ".bp4", ".bp5"):  # the ADIOS2 backend's reader profile
            forget_profile(self.path)

    # -- what the series holds (inspect) ---------------------------------------------------------------

    def conventions(self) -> Conventions:
        """One sample per iteration; as labels the series' numeric attributes (a run's parameters), else
        time; each thetaMode mesh named with its layout (a plane
        of modes as channels, which a 2-D model reads) and the other two; each species' positions (and
        weighting) with the deposit that would grid them onto the first Cartesian mesh's grid (its extent
        from gridSpacing, gridUnitSI and gridGlobalOffset), for inspect to offer."""
        deposit: dict[str, dict[str, Any]] = {}
        it = self._iteration(self.iterations[0]) if self.iterations else None
        meshes = list(it.meshes) if it is not None else []
        theta = (
            [name for name in meshes if it.meshes[name].geometry.name == "thetaMode"]
            if it is not None
            else []
        )
        cartesian = (
            [name for name in meshes if it.meshes[name].geometry.name == "cartesian"]
            if it is not None
            else []
        )
        if it is not None and cartesian:
            mesh = it.meshes[cartesian[0]]
            shape = self._iteration_shape(f"meshes/{cartesian[0]}", self.iterations[0])[
                : len(mesh.grid_spacing)
            ]
            unit = mesh.grid_unit_SI
            box = [float(n * h * unit) for n, h in zip(shape, mesh.grid_spacing, strict=False)]
            origin = [float(o * unit) for o in mesh.grid_global_offset][: len(box)]
            for species in it.particles:
                records = it.particles[species]
                if "position" in records:
                    deposit[f"{species}_density"] = {
                        "positions": f"particles/{species}/position",
                        "weights": f"particles/{species}/weighting" if "weighting" in records else None,
                        "shape": list(shape),
                        "box": box,
                        "origin": origin,
                        "scheme": "cic",
                    }
        notes = tuple(self._theta_note(f"meshes/{name}") for name in theta)
        parameters = self.parameters()
        if parameters:
            notes += (
                f"labels: the series' numeric attributes {', '.join(parameters)} (a run's parameters, as a "
                "simulator writes them beside its output)",
            )
        return Conventions(
            "openPMD: one sample per iteration, values in SI",
            format="openpmd",
            samples_along=ITERATION,
            fields={name: {"attr": name} for name in parameters},
            labels=tuple(parameters) or ("time",),
            deposit=deposit,
            notes=notes,
            planes=tuple(f"meshes/{name}" for name in theta),
        )

    def parameters(self) -> list[str]:
        """The series' numeric scalar attributes beyond the standard's own: what a simulator records of its
        run (a0, a waist, a density), the labels a user learns back."""
        found = []
        for name in sorted(self.series.attributes):
            if name in STANDARD_ATTRIBUTES:
                continue
            value = np.asarray(self.series.get_attribute(name))
            if value.size == 1 and value.dtype.kind in "iuf":
                found.append(name)
        return found

    def _theta_note(self, path: str) -> str:
        """What inspect says of a thetaMode mesh: its geometry, the layout it maps, and the other two."""
        record, _ = self._record(path, self.iterations[0])
        nr, nz, channels = self._iteration_shape(path, self.iterations[0])
        names = [name for name, _ in self._components(record)]
        components = len(names)
        volume_mb = 4 * nr * nr * nz * components * 4 / 1e6
        return (
            f"{path}: thetaMode geometry ({geometry_parameters(record) or 'modes'}; axisLabels "
            f"{list(record.axis_labels)}), mapped as its modes over the (r, z) plane: ({nr}, {nz}, "
            f"{channels}), channels {', '.join(layout_channels(Layout(), names, channels // components))}; "
            f"{path}@theta=0 is the field on the x-z plane ({2 * nr}, {nz}, {components}), {path}@cartesian "
            f"a 3-D volume ({2 * nr}, {2 * nr}, {nz}, {components}: {volume_mb:.1f} MB a sample as float32)"
        )

    def record_paths(self) -> list[str]:
        if not self.iterations:
            return []
        it = self._iteration(self.iterations[0])
        meshes = [f"meshes/{name}" for name in it.meshes]
        particles = [
            f"particles/{species}/{record}"
            for species in it.particles
            for record in it.particles[species]
            if record != "positionOffset"
        ]
        return sorted(meshes) + sorted(particles)


class OpenPMDReader(Reader):
    name = "openpmd"
    suffixes = ()  # chosen by source.format: openpmd (an .h5 or .bp is HDF5's or ADIOS2's by suffix)
    directories = True  # a BP series is a directory

    def claims(self, path: Path) -> bool:
        """An HDF5 file or BP directory whose root attribute `openPMD` names the standard's version."""
        suffix = path.suffix.lower()
        try:
            if suffix in (".h5", ".hdf5"):
                import h5py

                with h5py.File(path, "r") as f:
                    return "openPMD" in f.attrs
            if suffix in (".bp", ".bp4", ".bp5") and (path / "md.idx").exists():
                import adios2

                try:
                    with adios2.FileReader(str(path)) as f:
                        # written as "/openPMD"
                        return bool({"openPMD", "/openPMD"} & set(f.available_attributes()))
                finally:
                    forget_profile(path)
        except Exception:  # not this format: the suffix's reader says why
            return False
        return False

    def open(self, path: Path) -> OpenPMDFile:
        return OpenPMDFile(path)

    def describe(self, path: Path) -> Contents:
        with OpenPMDFile(path) as f:
            infos = []
            for name in (*f.record_paths(), *PER_ITERATION):
                try:
                    shape = f.shape(name)
                except SampleError:
                    continue
                dtype = np.dtype("int64" if name == ITERATION else "float64")
                kind = "jagged" if name.startswith("particles/") else "array"
                info = array_info(
                    name, shape, dtype, {"units": f.attributes(name).get("units", "")}, f.dims(name)
                )
                infos.append(replace(info, kind=kind))
            texts = {name: scalar_text(f.series.get_attribute(name)) for name in f.series.attributes}
            texts = {name: text for name, text in texts.items() if text is not None}
            return Contents(tuple(infos), texts, f.conventions())

"""next_state: a surrogate that steps a simulation forward: from k states to the next m. A record holds one
trajectory (the feature: time x H x W, or time x H x W x channels: several fields stacked by convert; with
train.next_state.spatial_dims: 3, time x D x H x W[ x channels]), so pairs are cut within a run and never
across two, and a split keeps every window of a trajectory together (merge splits records). Each record
gives every window of k + m consecutive states (`windows`, after the parse, shuffled across records): the
k states as channels in, the m next as channels out. Settings: train.next_state {states_in: k, states_out: m,
horizon: the rollout's steps (0: to the trajectory's end), condition, spatial_dims}. With `condition`,
the record's labels (the run's parameters: convert.labels, normalised by convert) are constant channels
after the states, in every window and every step of a rollout, so that one network steps runs of
different physics (PDEBench's way of giving an FNO or a U-Net its parameters); `condition: vector` has a
built-in model read those channels as one vector that scales and shifts the features of every block
(FiLM) instead of convolving them (`vector_channels`).

Scored as the forward surrogate is (tasks/surrogate.py: NRMSE per field over the evaluated windows in
physical units, VRMSE per window and step over those with spread beside it; the output is named after the
feature), one step ahead on the validation and test windows, beside persistence (the last input state
held: `persistence_nrmse`) and the classical baseline (a linear map from the block-averaged input states
onto the next states' principal components). After training, `rollout` runs the kept model
autoregressively from each test trajectory's first k states to the horizon: NRMSE per step (the curve and
train/scores.png), persistence's per step beside it, and the relative error of the isotropic power
spectrum in three log-spaced k bands at the horizon (The Well's binned spectral error).

Memory: the windows of a batch of trajectories; a rollout holds a batch of trajectories and per step a
few sums. Time: the model once per step of the horizon for each test trajectory.
"""

from __future__ import annotations

import itertools
from collections.abc import Callable, Mapping
from dataclasses import replace
from pathlib import Path
from typing import Any

import numpy as np

from pipeline import Sim2dlError
from pipeline.data.scores import SUMS, batch_sums, field_scores, mean_or_none, nrmse_of_sums, vrmse_of_sums
from pipeline.training.tasks.base import DataSpec, Evaluation, LabelField, TrainedModel
from pipeline.training.tasks.surrogate import Surrogate, in_own_units, normalised, physical_moments

SPECTRUM_BANDS = 3
# train.next_state.condition: how the model is given a run's parameters (true: as channels, as before)
CONDITIONS = {False: None, True: "channels", "channels": "channels", "vector": "vector"}


class NextState(Surrogate):
    name = "next_state"
    proposed_for = ("trajectory",)
    loss_name = "mean squared error of the next states (normalised units)"
    needs_labels = False

    def __init__(self, settings: Mapping[str, Any], data: DataSpec) -> None:
        own = settings.get("next_state") or {}
        self.k, self.m = int(own.get("states_in", 1)), int(own.get("states_out", 1))
        self.horizon_setting = int(own.get("horizon", 0))
        # the run's parameters (train.next_state.condition): convert's label fields, as constant channels
        # after the states; `vector`: which a built-in model reads as one vector (FiLM) instead
        self.condition = CONDITIONS[own.get("condition", False)]
        self.conditions = tuple(data.labels) if self.condition else ()
        self.condition_width = sum(int(np.prod(f.shape)) for f in self.conditions if None not in f.shape)
        self.trajectory_shape = tuple(data.feature_shape)
        self.rolled_out: dict[str, Any] = {}  # the rollout, once after_training ran it: the figure shows it
        shape = self.trajectory_shape
        self.spatial = int(own.get("spatial_dims", 2))  # a state's grid axes after time: (H, W) or (D, H, W)
        self.grid = tuple(shape[1 : 1 + self.spatial])
        channels = int(np.prod(shape[1 + self.spatial :])) if len(shape) > 1 + self.spatial else 1
        self.channels = channels
        self.field_names = field_names(data.feature, channels, data.component_names.get(data.feature))
        # the output: the m next states as channels, named after the trajectory, in its units
        stats = data.feature_statistics.get(data.feature)
        target = LabelField(data.feature, (*self.grid, self.m * channels), "float32", tiled(stats, self.m))
        super().__init__(settings, replace(data, labels=(target,), label_names=(data.feature,)))

    # ---- before training
    def check(self) -> None:
        shape = self.trajectory_shape
        if len(shape) not in (1 + self.spatial, 2 + self.spatial) or None in shape:
            grid = {1: "X", 2: "H, W", 3: "D, H, W"}[self.spatial]
            raise Sim2dlError(
                f"config key 'convert.features': next_state needs a trajectory of fixed shape "
                f"(time, {grid}[, channels]) (train.next_state.spatial_dims: {self.spatial}), "
                f"'{self.data.feature}' has {list(shape)}"
            )
        if shape[0] < self.k + self.m:
            raise Sim2dlError(
                f"config key 'train.next_state': states_in {self.k} and states_out {self.m} need "
                f"{self.k + self.m} states, the trajectory holds {shape[0]}"
            )
        self.check_conditions()
        stats = self.data.feature_statistics.get(self.data.feature)
        per_field = len(shape) == 2 + self.spatial and np.size(stats["mean"] if stats else 0) == self.channels
        if stats is not None and np.size(stats["mean"]) > 1 and not per_field:
            raise Sim2dlError(
                f"config key 'convert.per_channel': the trajectory '{self.data.feature}' {list(shape)} "
                "has no axis of fields after its grid, so per channel would give each column of the "
                "grid its own scale: normalise it as a whole (a stack of fields, time x grid x fields, "
                "takes one mean and std per field over time and space)"
            )

    def check_conditions(self) -> None:
        """train.next_state.condition: labels to give, each a fixed vector (a run's parameters) that
        convert normalised (a parameter of 1e-3 would be a channel of near zeros)."""
        if not self.condition:
            return
        if not self.conditions:
            raise Sim2dlError(
                "config key 'train.next_state.condition': there are no convert.labels to give the "
                "model (list the run's parameters there)"
            )
        for f in self.conditions:
            if None in f.shape or len(f.shape) > 1 or f.integer:
                raise Sim2dlError(
                    f"config key 'train.next_state.condition': '{f.name}' is not a vector of values "
                    f"({f.dtype} {list(f.shape)}): a run's parameters are"
                )
            if f.statistics is None:
                raise Sim2dlError(
                    f"config key 'convert.normalise': the parameters '{f.name}' given as channels "
                    "(train.next_state.condition) must be normalised: list them there"
                )

    @property
    def model_feature_shape(self) -> tuple[int | None, ...]:
        return (*self.grid, self.k * self.channels + self.condition_width)

    def vector_channels(self) -> int:
        return self.condition_width if self.condition == "vector" else 0

    def samples_per_record(self) -> int:
        return self.trajectory_shape[0] - self.k - self.m + 1

    def record_labels(self) -> list[str]:
        return [f.name for f in self.conditions]  # the targets are cut from the feature (`windows`)

    def label_tensor(self, values: Any, batched: bool) -> Any:
        """The record's parameters (B, P) where the model is given them, else nothing."""
        import tensorflow as tf

        if not self.conditions:
            return tf.zeros([0])
        flat = [
            tf.reshape(v, [-1, int(np.prod(f.shape))] if batched else [int(np.prod(f.shape))])
            for v, f in zip(values, self.conditions, strict=True)
        ]
        return tf.cast(tf.concat(flat, -1), tf.float32)

    def samples(self, x: Any, y: Any, starts: Any = None) -> tuple[Any, Any]:
        """(B, T, *grid[, C]) trajectories -> every window: (B x n, *grid, k C [+ P]) inputs (the record's P
        parameters as constant channels last, with `condition`), (B x n, grid size x m C) targets; with
        `starts` (B,), only the window of each record at its start (n = 1: online training's draw)."""
        import tensorflow as tf

        grid, d = list(self.grid), self.spatial
        states = tf.reshape(x, [-1, self.trajectory_shape[0], *grid, self.channels])
        if starts is None:
            count = self.samples_per_record()
            # (B, n, k, *grid, C)
            inputs = tf.stack([states[:, t : t + self.k] for t in range(count)], axis=1)
            targets = tf.stack([states[:, t + self.k : t + self.k + self.m] for t in range(count)], axis=1)
        else:
            count = 1
            steps = tf.cast(starts, tf.int32)[:, None] + tf.range(self.k + self.m)
            span = tf.gather(states, steps, batch_dims=1)[:, None]  # (B, 1, k + m, *grid, C)
            inputs, targets = span[:, :, : self.k], span[:, :, self.k :]
        # (B, n, *grid, k, C): a window's states as channels
        steps_after_grid = [0, 1, *range(3, 3 + d), 2, 3 + d]
        inputs = tf.reshape(tf.transpose(inputs, steps_after_grid), [-1, *grid, self.k * self.channels])
        if self.conditions:  # each record's parameters beside every one of its windows
            each = tf.repeat(tf.cast(y, inputs.dtype), count, axis=0)
            planes = tf.reshape(each, [-1, *[1] * d, self.condition_width])
            inputs = tf.concat([inputs, tf.tile(planes, [1, *grid, 1])], axis=-1)
        targets = tf.transpose(targets, steps_after_grid)
        return inputs, tf.reshape(targets, [-1, int(np.prod(grid)) * self.m * self.channels])

    def planes(self, conditions: np.ndarray, like: np.ndarray) -> list[np.ndarray]:
        """The parameters (B, P) as constant channels of states shaped `like` (B, *grid, C): [] without."""
        if not self.conditions:
            return []
        values = np.asarray(conditions, like.dtype).reshape(len(like), *[1] * self.spatial, -1)
        return [np.broadcast_to(values, (*like.shape[: 1 + self.spatial], values.shape[-1]))]

    # ---- evaluation: per field (each channel of a state), and persistence holds the last input state
    def persisted(self) -> list[LabelField]:
        return list(self.data.labels)

    def evaluation(self) -> Evaluation:
        fields, outputs = len(self.field_names), self.outputs()
        sums = {
            "n": np.zeros(1),
            "scores": np.zeros((fields, len(SUMS))),
            "persistence": np.zeros((fields, len(SUMS))),
        }
        return Evaluation(sums, {"predicted": np.zeros((0, outputs)), "true": np.zeros((0, outputs))})

    def state_sums(self, predicted: np.ndarray, true: np.ndarray) -> np.ndarray:
        """(fields, SUMS): each field's score sums, VRMSE per sample and step over the grid; predicted and
        true (B, *grid, steps C) in physical units (the m next states, or one step of a rollout). Scoring
        the channels jointly would put the gap between the fields' means into the spread and flatter every
        figure."""
        shape = (len(true), *self.grid, -1, self.channels)
        predicted, true = predicted.reshape(shape), true.reshape(shape)
        return np.stack([self.channel_sums(predicted[..., c], true[..., c], c) for c in range(self.channels)])

    def channel_sums(self, predicted: np.ndarray, true: np.ndarray, channel: int) -> np.ndarray:
        """One field's score sums, (B, *grid[, steps]) in physical units: about its training mean, its
        flatness judged against its training variance (convert's statistics of the trajectory)."""
        statistics = channel_statistics(
            self.data.feature_statistics.get(self.data.feature), channel, self.channels
        )
        shift, variance = physical_moments(statistics, self.data.feature in self.data.log1p)
        return batch_sums(
            predicted, true, over=tuple(range(1, 1 + self.spatial)), shift=shift, reference_variance=variance
        )

    def update(
        self, evaluation: Evaluation, outputs: np.ndarray, labels: np.ndarray, features: np.ndarray
    ) -> None:
        feature = self.data.feature
        predicted, true = self.physical(outputs)[feature], self.physical(labels)[feature]
        evaluation.sums["scores"] += self.state_sums(predicted, true)
        evaluation.sums["persistence"] += self.state_sums(self.input_field(features), true)
        evaluation.sums["n"] += len(labels)
        self.keep_examples(evaluation, outputs, labels)

    def metrics(self, evaluation: Evaluation) -> dict[str, Any]:
        """NRMSE (the headline) and VRMSE per field, persistence's beside them (by the stack's members or
        the format's component names; the trajectory's name where it holds one field), and their means."""
        if not evaluation.sums["n"][0]:
            return {"nrmse": {}}
        return {
            **field_scores(self.field_names, evaluation.sums["scores"]),
            **field_scores(self.field_names, evaluation.sums["persistence"], prefix="persistence_"),
        }

    def input_field(self, features: np.ndarray) -> np.ndarray:
        """The last input state, in physical units, repeated for each of the m outputs."""
        shape = self.model_feature_shape
        last = slice((self.k - 1) * self.channels, self.k * self.channels)  # before any parameters' channels
        x = np.asarray(features, np.float64).reshape(len(features), *shape)[..., last]
        return np.concatenate([self.physical_states(x)] * self.m, axis=-1)

    def input_statistics(self) -> Mapping[str, Any] | None:
        return tiled(self.data.feature_statistics.get(self.data.feature), self.k)  # the k input states

    def physical_states(self, x: np.ndarray) -> np.ndarray:
        """States in normalised units to physical ones (the trajectory's normalisation and log1p undone)."""
        feature = self.data.feature
        return in_own_units(x, self.data.feature_statistics.get(feature), feature in self.data.log1p)

    def exported_input(self, model: Any, shape: tuple[int | None, ...] | None = None) -> tuple[Any, Any]:
        """With `condition`, two inputs: the k states and the run's parameters (each in its own units), the
        parameters normalised and tiled as channels after the states."""
        if not self.conditions:
            return super().exported_input(model)
        import tensorflow as tf

        layers = tf.keras.layers
        states, x = super().exported_input(model, (*self.grid, self.k * self.channels))
        given = [layers.Input(shape=(int(np.prod(f.shape)),), name=f.name) for f in self.conditions]
        normal = [normalised(p, f.statistics) for p, f in zip(given, self.conditions, strict=True)]
        joined = normal[0] if len(normal) == 1 else layers.Concatenate()(normal)
        # (B, P) -> (B, *grid, P) by layers a saved model keeps (no Lambda: its closure is not saved)
        upsampling = {1: layers.UpSampling1D, 2: layers.UpSampling2D, 3: layers.UpSampling3D}[self.spatial]
        point = layers.Reshape((*[1] * self.spatial, self.condition_width))(joined)
        planes = upsampling(size=self.grid[0] if self.spatial == 1 else self.grid)(point)
        return [states, *given], layers.Concatenate(axis=-1)([x, planes])

    # ---- the rollout
    def after_training(self, trained: TrainedModel) -> dict[str, Any]:
        """The kept model rolled out on its own outputs from every rank's whole trajectories of the split,
        joined over the ranks: summary.json's `rollout` (the curves per step), and the figure's."""
        batches = ((x, y) for x, y, _ in trained.records())
        joined = self.rollout_summary(trained.comm.allgather(self.rollout(trained.predict, batches)))
        if not joined:
            return {}
        self.rolled_out = joined
        return {"rollout": {"split": trained.split, **{k: v for k, v in joined.items() if k != "examples"}}}

    def horizon(self) -> int:
        available = self.trajectory_shape[0] - self.k
        return min(self.horizon_setting, available) if self.horizon_setting else available

    def rollout(self, predict: Callable[[np.ndarray], np.ndarray], batches: Any) -> dict[str, Any]:
        """The model fed its own outputs from each trajectory's first k states (normalised units in and out,
        scored in physical units): NRMSE per step of the horizon, persistence's beside it, and the
        relative error of the power spectrum at the horizon per k band. `batches`: whole trajectories and
        their records' labels (the parameters given as channels at every step, with `condition`)."""
        steps, c = self.horizon(), self.channels
        # per step and field
        sums = {key: np.zeros((steps, c, len(SUMS))) for key in ("network", "persistence")}
        spectra = {"true": 0.0, "predicted": 0.0}
        count = 0
        examples: dict[str, np.ndarray] = {}
        for trajectories, conditions in batches:
            states = np.asarray(trajectories, np.float64).reshape(
                len(trajectories), self.trajectory_shape[0], *self.grid, c
            )
            planes = self.planes(conditions, states[:, 0])
            window = [states[:, t] for t in range(self.k)]  # each (B, *grid, C); joined as channels t C + c
            last = self.physical_states(states[:, self.k - 1])  # persistence's answer at every step
            predicted_steps = []
            while len(predicted_steps) < steps:
                x = np.concatenate([*window[-self.k :], *planes], axis=-1).astype(np.float32)
                out = np.asarray(predict(x), np.float64).reshape(len(states), *self.grid, self.m, c)
                for j in range(self.m):
                    predicted_steps.append(out[..., j, :])
                    window.append(out[..., j, :])
            for s in range(steps):
                truth = self.physical_states(states[:, self.k + s])
                sums["network"][s] += self.state_sums(self.physical_states(predicted_steps[s]), truth)
                sums["persistence"][s] += self.state_sums(last, truth)
            final_true = self.physical_states(states[:, self.k + steps - 1])
            final_predicted = self.physical_states(predicted_steps[steps - 1])
            spectra["true"] = spectra["true"] + band_power(final_true).sum(axis=0)
            spectra["predicted"] = spectra["predicted"] + band_power(final_predicted).sum(axis=0)
            if not examples:
                shown = sorted({0, steps // 2, steps - 1})
                examples = {
                    "steps": np.array(shown) + 1,
                    "true": np.stack([self.physical_states(states[0, self.k + s]) for s in shown]),
                    "predicted": np.stack([self.physical_states(predicted_steps[s][0]) for s in shown]),
                }
            count += len(states)
        return {"steps": steps, "trajectories": count, "sums": sums, "spectra": spectra, "examples": examples}

    def rollout_summary(self, parts: list[dict[str, Any]]) -> dict[str, Any]:
        """Every rank's rollout joined: the sums added, the curves (NRMSE per step over all trajectories, and
        VRMSE over the trajectories with spread) per field and the fields' mean (the headline curves), the
        spectra added."""
        parts = [p for p in parts if p and p["trajectories"]]
        if not parts:
            return {}
        count = sum(p["trajectories"] for p in parts)
        network = sum(p["sums"]["network"] for p in parts)  # (steps, fields, SUMS)
        persistence = sum(p["sums"]["persistence"] for p in parts)
        true = sum(p["spectra"]["true"] for p in parts)  # (bands, fields)
        predicted = sum(p["spectra"]["predicted"] for p in parts)
        relative = np.abs(predicted / np.maximum(true, 1e-30) - 1)

        def by_field(values: np.ndarray) -> dict[str, list[float]]:
            return {name: values[:, i].tolist() for i, name in enumerate(self.field_names)}

        curves = {}
        for key, summed in (("", network), ("persistence_", persistence)):
            for figure, of_sums in (("nrmse", nrmse_of_sums), ("vrmse", vrmse_of_sums)):
                values = np.array([[of_sums(row) for row in step] for step in summed])  # (steps, fields)
                curves[f"{key}{figure}_per_step"] = [mean_or_none(step) for step in values]
                curves.setdefault("by_field", {})[f"{key}{figure}_per_step"] = by_field(values)
        ours, held = (
            np.array(curves[k], dtype=float) for k in ("nrmse_per_step", "persistence_nrmse_per_step")
        )
        curves["by_field"]["spectrum_relative_error"] = by_field(relative)
        return {
            "steps": parts[0]["steps"],
            "trajectories": count,
            **curves,
            "below_persistence_at_every_step": bool(np.all(ours < held)),
            "spectrum_relative_error": relative.mean(axis=1).tolist(),
            "examples": parts[0]["examples"],
        }

    def figure(self, evaluation: Evaluation, path: Path, baseline: Mapping[str, Any] | None = None) -> None:
        """The rollout (its curves per field and fields at a few steps) once it ran, else the one-step
        examples (titled with the fields' mean NRMSE)."""
        if not self.rolled_out:
            from pipeline.reporting.plots import surrogate_examples

            mean = {self.data.feature: self.metrics(evaluation).get("nrmse_mean") or float("nan")}
            theirs = (
                {self.data.feature: (baseline or {})["nrmse_mean"]}
                if (baseline or {}).get("nrmse_mean")
                else {}
            )
            surrogate_examples(
                self.physical(evaluation.examples["true"]),
                self.physical(evaluation.examples["predicted"]),
                mean,
                theirs,
                path,
            )
            return None
        from pipeline.reporting.plots import rollout_curves

        rollout_curves(self.rolled_out, self.data.feature, path)
        return None


def field_names(feature: str, channels: int, named: Any) -> tuple[str, ...]:
    """A state's fields by name: a stack's members or the format's component names, else the trajectory's
    name (one field) or name[c]."""
    if named is not None and len(named) == channels and channels > 1:
        return tuple(str(n) for n in named)
    return (feature,) if channels == 1 else tuple(f"{feature}[{c}]" for c in range(channels))


def channel_statistics(
    statistics: Mapping[str, Any] | None, channel: int, channels: int
) -> Mapping[str, Any] | None:
    """convert's statistics of one of a state's `channels` (one mean and std for all, or per entry of
    another axis: as they are, physical_moments averages them)."""
    if statistics is None or np.size(statistics["mean"]) != channels or channels == 1:
        return statistics
    return {k: np.ravel(statistics[k])[channel] for k in ("mean", "std")}


def tiled(statistics: Mapping[str, Any] | None, times: int) -> Mapping[str, Any] | None:
    """convert's statistics of a state for `times` states joined along the channels: per-field means and
    stds repeated (one mean and std stay as they are)."""
    if statistics is None or np.size(statistics["mean"]) == 1:
        return statistics
    repeated = {k: np.tile(np.asarray(statistics[k], np.float64), times).tolist() for k in ("mean", "std")}
    return {**statistics, **repeated}


def band_power(states: np.ndarray) -> np.ndarray:
    """(B, SPECTRUM_BANDS, C): each sample's isotropic power summed in log-spaced bands of |k| (1 to the
    largest), per channel; states (B, *grid, C) on a 2-D or 3-D grid."""
    grid = states.shape[1:-1]
    axes = tuple(range(1, 1 + len(grid)))
    power = np.abs(np.fft.rfftn(states, axes=axes)) ** 2
    wavenumbers = [np.fft.fftfreq(n, 1 / n) for n in grid[:-1]] + [np.fft.rfftfreq(grid[-1], 1 / grid[-1])]
    k = np.sqrt(sum(w**2 for w in np.meshgrid(*wavenumbers, indexing="ij")))
    edges = np.logspace(0, np.log10(k.max() * (1 + 1e-9)), SPECTRUM_BANDS + 1)
    bands = [(k >= low) & (k < high) for low, high in itertools.pairwise(edges)]
    return np.stack([power[:, band].sum(axis=1) for band in bands], axis=1)

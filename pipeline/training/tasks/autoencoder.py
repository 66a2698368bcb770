"""autoencoder: fields in, the same fields out through a vector of train.autoencoder.latent values (learning
without labels: dimensionality reduction, feature learning, clustering and anomaly scores from it). A record
is one sample, its feature (H, W[, fields]) or with train.autoencoder.spatial_dims 3 (D, H, W[, fields]);
the target is the feature itself, so no label is needed. The loss is the reconstruction's mean squared
error (normalised units).

Scored per field (a stack's members, the format's component names) by the reconstruction's NRMSE over the
evaluated set in physical units (convert's normalisation and log1p undone; VRMSE per record over those with
spread beside it), as the surrogates are (pipeline.data.scores), beside
the classical baseline: PCA with as many components as the latent, fitted on the same training split
(pipeline.training.baseline.PcaSums: exact up to PCA_MAX_OUTPUTS entries per sample, else a streamed
Nyström sketch), with the below-baseline warning.

After training (`after_training`), on the test split's records (else the validation's):
- latents.parquet/part-RANK.parquet: per record its sample id, split, latent (the output of the model's
  layer named `latent`: the built-in's, or your own model's if it has one), its reconstruction error (the
  squared error in convert's normalised units, its mean or with anomaly_score `max` its largest entry:
  `anomaly_score`) and PCA's beside it;
- clustering: k-means (scikit-learn, CLUSTER_SEED) on the latents and on PCA's coefficients, scored by the
  adjusted Rand index against train.autoencoder.cluster_label (a label field of class ids);
- anomaly detection: the reconstruction error as the score, ROC AUC against train.autoencoder.anomaly_label
  (a label field, 1: anomalous), the network's beside PCA's.
The clustering and the AUC use up to CLUSTER_SAMPLE records (each rank's first share, gathered on every rank).

Memory: a batch of records and the gathered sample (CLUSTER_SAMPLE x (latent + components + 4) numbers);
time: the model once per record of the split, k-means on the sample.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import replace
from pathlib import Path
from typing import Any

import numpy as np

from pipeline import Sim2dlError
from pipeline.data.scores import SUMS, batch_sums, field_scores
from pipeline.training.baseline import BaselineSums, PcaSums
from pipeline.training.tasks.base import ClassicalBaseline, DataSpec, Evaluation, LabelField, TrainedModel
from pipeline.training.tasks.next_state import channel_statistics, field_names
from pipeline.training.tasks.surrogate import EmulatorBaseline, Surrogate, normalised, physical_moments

CLUSTER_SAMPLE = 20000  # records the clustering and the anomaly AUC are computed on, at most
CLUSTER_SEED = 0
LATENT_LAYER = "latent"  # the layer whose output is a record's latent vector


class Autoencoder(Surrogate):
    name = "autoencoder"
    proposed_for = ()  # learning without labels: the user's choice, not a layout's
    loss_name = "mean squared error of the reconstruction (normalised units)"
    needs_labels = False

    def __init__(self, settings: Mapping[str, Any], data: DataSpec) -> None:
        own = settings.get("autoencoder") or {}
        self.latent = int(own.get("latent", 8))
        self.spatial = int(own.get("spatial_dims", 2))
        self.cluster_label, self.anomaly_label = own.get("cluster_label"), own.get("anomaly_label")
        self.score = own.get("anomaly_score", "mean")
        # a real-valued cluster label in this many equal-count bins
        self.cluster_bins = own.get("cluster_bins")
        self.carried = tuple(f for f in data.labels if f.name in (self.cluster_label, self.anomaly_label))
        self.sample_shape = tuple(data.feature_shape)
        shape = self.sample_shape
        self.grid = tuple(shape[: self.spatial])
        self.channels = int(np.prod(shape[self.spatial :])) if len(shape) > self.spatial else 1
        self.field_names = field_names(data.feature, self.channels, data.component_names.get(data.feature))
        self.pca: PcaSums | None = None  # the baseline's fit, once the train step fitted it
        target = LabelField(
            data.feature, (*self.grid, self.channels), "float32", data.feature_statistics.get(data.feature)
        )
        super().__init__(settings, replace(data, labels=(target,), label_names=(data.feature,)))
        self.data_labels = data.labels

    # ---- before training
    def check(self) -> None:
        shape = self.sample_shape
        if None in shape or len(shape) not in (self.spatial, self.spatial + 1):
            grid = {1: "X", 2: "H, W", 3: "D, H, W"}.get(self.spatial, "grid")
            raise Sim2dlError(
                f"config key 'convert.features': an autoencoder takes fields of fixed shape ({grid}"
                f"[, fields]) (train.autoencoder.spatial_dims: {self.spatial}), '{self.data.feature}' "
                f"has {list(shape)}"
            )
        if not 1 <= self.latent < self.outputs():
            raise Sim2dlError(
                f"config key 'train.autoencoder.latent': {self.latent} must be at least 1 and fewer "
                f"than the {self.outputs()} values of a sample"
            )
        names = {f.name: f for f in self.data_labels}
        for key in ("cluster_label", "anomaly_label"):
            wanted = getattr(self, key)
            if wanted is None:
                continue
            if wanted not in names:
                raise Sim2dlError(
                    f"config key 'train.autoencoder.{key}': '{wanted}' is not a label field "
                    f"(convert.labels: {sorted(names)})"
                )
            binned = key == "cluster_label" and self.cluster_bins is not None
            if names[wanted].size != 1 or not (names[wanted].integer or binned):
                what = (
                    "a value per record to bin (train.autoencoder.cluster_bins)"
                    if binned
                    else (
                        "one integer per record (class ids; 1 for an anomaly)"
                        + (
                            "; a real value, a design's parameter, is binned with "
                            "train.autoencoder.cluster_bins"
                            if key == "cluster_label"
                            else ""
                        )
                    )
                )
                raise Sim2dlError(
                    f"config key 'train.autoencoder.{key}': '{wanted}' must hold {what}, it is "
                    f"{names[wanted].dtype} {list(names[wanted].shape)}"
                )

    def output_fields(self) -> list[tuple[int, ...]]:
        return [(*(int(d) for d in self.grid), self.channels)]

    def bottleneck(self) -> int | None:
        return self.latent

    # ---- the input pipeline: the record's own feature is the target
    def record_labels(self) -> list[str]:
        return [f.name for f in self.carried]  # for after_training's clustering and anomaly scores only

    def label_tensor(self, values: Sequence[Any], batched: bool) -> Any:
        import tensorflow as tf

        if not self.carried:
            return tf.zeros([0])
        flat = [tf.reshape(v, [-1, 1] if batched else [1]) for v in values]
        return tf.cast(tf.concat(flat, -1), tf.float32)

    def samples(self, x: Any, y: Any, starts: Any = None) -> tuple[Any, Any]:
        """(B, *sample[, 1]) fields -> the same fields in, their entries flat as the target."""
        import tensorflow as tf

        return x, tf.reshape(x, [-1, self.outputs()])

    def augmented(self, x: Any, y: Any, transforms: Sequence[Any], seed: Any) -> tuple[Any, Any]:
        """The field under the symmetries, and the target is the moved field."""
        from pipeline.training.augment import augment_batch

        moved, _ = augment_batch(x, y, transforms, seed, moves_labels=False)
        return self.samples(moved, y)

    def test_time_augmentation_refused(self) -> str | None:
        return "an autoencoder's output is the field itself (averaging it over symmetries needs them undone)"

    def outputs_in_words(self) -> str:
        return "the sample's entries, flat: the reconstruction"

    # ---- evaluation: per field, in physical units
    def persisted(self) -> list[LabelField]:
        return []

    def evaluation(self) -> Evaluation:
        fields, outputs = len(self.field_names), self.outputs()
        sums = {"n": np.zeros(1), "scores": np.zeros((fields, len(SUMS)))}
        return Evaluation(sums, {"predicted": np.zeros((0, outputs)), "true": np.zeros((0, outputs))})

    def reconstruction_sums(self, outputs: np.ndarray, labels: np.ndarray) -> np.ndarray:
        """(fields, SUMS): each field's reconstruction score sums (VRMSE over the grid per record), in
        physical units, about its training mean and with flatness judged against its training variance."""
        feature = self.data.feature
        predicted, true = self.physical(outputs)[feature], self.physical(labels)[feature]
        shape = (len(true), *self.grid, self.channels)
        predicted, true = predicted.reshape(shape), true.reshape(shape)
        statistics = self.data.feature_statistics.get(feature)
        rows = []
        for c in range(self.channels):
            channel = channel_statistics(statistics, c, self.channels)
            shift, variance = physical_moments(channel, feature in self.data.log1p)
            rows.append(batch_sums(predicted[..., c], true[..., c], shift=shift, reference_variance=variance))
        return np.stack(rows)

    def update(
        self, evaluation: Evaluation, outputs: np.ndarray, labels: np.ndarray, features: np.ndarray
    ) -> None:
        evaluation.sums["scores"] += self.reconstruction_sums(outputs, labels)
        evaluation.sums["n"] += len(labels)
        self.keep_examples(evaluation, outputs, labels)

    def metrics(self, evaluation: Evaluation) -> dict[str, Any]:
        if not evaluation.sums["n"][0]:
            return {"nrmse": {}}
        return field_scores(self.field_names, evaluation.sums["scores"])

    # ---- the classical baseline: PCA of as many components as the latent
    def classical_baseline(self) -> ClassicalBaseline:
        return PcaBaseline(self)

    # ---- the saved model and the figure
    def exported(self, model: Any) -> Any:
        """The model as a user calls it: the field in its own units in; its reconstruction (in those units,
        the sample's shape) and, where the model has a layer named `latent`, the latent vector out."""
        import tensorflow as tf

        layers = tf.keras.layers
        inputs = layers.Input(shape=self.sample_shape, name=self.data.feature)
        x = normalised(inputs, self.input_statistics())
        flat = model(x)
        y = self.own_units_layers(layers.Reshape(self.sample_shape)(flat), self.data.labels[0])
        outputs = {"reconstruction": layers.Activation("linear", dtype="float32", name="reconstruction")(y)}
        encoder = latent_model(model)
        if encoder is not None:
            outputs["latent"] = layers.Activation("linear", dtype="float32", name="latent")(encoder(x))
        return tf.keras.Model(inputs, outputs, name=f"{model.name}_physical")

    def figure(self, evaluation: Evaluation, path: Path, baseline: Mapping[str, Any] | None = None) -> None:
        from pipeline.reporting.plots import surrogate_examples

        feature = self.data.feature
        mean = {feature: self.metrics(evaluation).get("nrmse_mean") or float("nan")}
        theirs = {feature: baseline["nrmse_mean"]} if (baseline or {}).get("nrmse_mean") is not None else {}
        surrogate_examples(
            self.physical(evaluation.examples["true"]),
            self.physical(evaluation.examples["predicted"]),
            mean,
            theirs,
            path,
        )

    # ---- after training: latents, clusters, anomaly scores
    def after_training(self, trained: TrainedModel) -> dict[str, Any]:
        """Every record of the split through the kept model: its latent and reconstruction error (and PCA's)
        written as Parquet by each rank; k-means and the anomaly AUC on a gathered sample."""
        encoder = latent_model(trained.model)
        comm, rank = trained.comm, trained.comm.Get_rank()
        share = CLUSTER_SAMPLE // trained.comm.Get_size()
        sample: dict[str, list[np.ndarray]] = {
            "latent": [],
            "pca": [],
            "labels": [],
            "error": [],
            "pca_error": [],
        }
        kept = 0
        width = int(encoder.output_shape[-1]) if encoder is not None else 0
        writer = LatentsWriter(trained.out, rank, width) if trained.out is not None and encoder else None
        records = 0
        for x, labels, ids in trained.records():
            flat = x.reshape(len(x), -1)
            error = anomaly_score(trained.predict(x), flat, self.score)
            latent = np.asarray(encoder(x, training=False), np.float32) if encoder else np.zeros((len(x), 0))
            coefficients = (
                self.pca.coefficients(flat) if self.pca is not None and self.pca.basis is not None else None
            )
            pca_error = None
            if coefficients is not None:
                pca_error = anomaly_score(coefficients @ self.pca.basis.T + self.pca.mean, flat, self.score)
            if writer is not None:
                writer.write(ids, trained.split, latent, error, pca_error)
            room = min(share - kept, len(x))
            if room > 0:
                sample["latent"].append(latent[:room])
                sample["labels"].append(np.asarray(labels, np.float64).reshape(len(x), -1)[:room])
                sample["error"].append(error[:room])
                if coefficients is not None:
                    sample["pca"].append(coefficients[:room])
                    sample["pca_error"].append(pca_error[:room])
                kept += room
            records += len(x)
        if writer is not None:
            writer.close()
            if rank == 0:  # a part of an earlier run on more ranks is not this run's
                for stale in (trained.out / LatentsWriter.folder).glob("part-*.parquet"):
                    if int(stale.stem.split("-")[1]) >= comm.Get_size():
                        stale.unlink()
        joined = {k: [np.concatenate(v) for v in comm.allgather(parts) if v] for k, parts in sample.items()}
        joined = {k: np.concatenate(v) if v else None for k, v in joined.items()}
        out: dict[str, Any] = {
            "split": trained.split,
            "records": int(comm.allreduce(records)),
            "latent": width or None,
            "sample": 0 if joined["error"] is None else len(joined["error"]),
        }
        if encoder is None:
            out["latents_skipped"] = f"the model has no layer named '{LATENT_LAYER}'"
        elif trained.out is not None:
            out["latents"] = LatentsWriter.folder
        out.update(self.scored(joined))
        return {"autoencoder": out}

    def scored(self, joined: Mapping[str, np.ndarray | None]) -> dict[str, Any]:
        """The clustering's adjusted Rand index and the anomaly ROC AUC of the gathered sample, the network's
        (latents, reconstruction error) beside PCA's (coefficients, its error)."""
        from sklearn.metrics import adjusted_rand_score, roc_auc_score

        out: dict[str, Any] = {}
        labels = joined["labels"]
        if labels is None or not len(labels):
            return out
        columns = [f.name for f in self.carried]
        if self.cluster_label is not None:
            truth = labels[:, columns.index(self.cluster_label)]
            out["clustering"] = {"label": self.cluster_label}
            if self.cluster_bins is not None:
                truth, edges = equal_count_bins(truth, self.cluster_bins)
                out["clustering"]["bin_edges"] = edges.tolist()
            truth = truth.astype(np.int64)
            k = len(np.unique(truth))
            out["clustering"]["clusters"] = k
            for name, values in (("latent", joined["latent"]), ("pca", joined["pca"])):
                if values is not None and values.shape[1] and k > 1:
                    found = kmeans_clusters(values, k)
                    out["clustering"][f"ari_{name}"] = float(adjusted_rand_score(truth, found))
        if self.anomaly_label is not None:
            truth = labels[:, columns.index(self.anomaly_label)] > 0
            out["anomaly"] = {
                "label": self.anomaly_label,
                "score": f"{self.score} squared reconstruction error",
                "anomalous": int(truth.sum()),
            }
            if 0 < truth.sum() < len(truth):
                for name, key in (("network", "error"), ("pca", "pca_error")):
                    if joined[key] is not None:
                        out["anomaly"][f"roc_auc_{name}"] = float(roc_auc_score(truth, joined[key]))
        return out


def anomaly_score(reconstructed: np.ndarray, flat: np.ndarray, how: str = "mean") -> np.ndarray:
    """Per record the reconstruction's squared error in the model's units (convert's normalisation: each
    field by its standard deviation over the training split), its mean over the record (a record unlike the
    others as a whole) or its largest entry (`max`: a local fault, stuck pixels or spikes, that the mean over
    thousands of entries dilutes). Not VRMSE: that divides by the record's own variance, which a corrupted
    record's spikes inflate, so its worst records would look best."""
    squared = (np.asarray(reconstructed, np.float64) - flat) ** 2
    return squared.max(axis=1) if how == "max" else squared.mean(axis=1)


def equal_count_bins(values: np.ndarray, bins: int) -> tuple[np.ndarray, np.ndarray]:
    """A real value per record (a design's parameter) as a class id: `bins` bins holding about as many
    records each (between the values' quantiles; tied values share a bin, so there may be fewer). Returns
    the ids and the inner edges."""
    values = np.asarray(values, np.float64)
    edges = np.unique(np.quantile(values, np.arange(1, bins) / bins))
    return np.searchsorted(edges, values, side="right"), edges


def kmeans_clusters(values: np.ndarray, k: int) -> np.ndarray:
    """k-means (scikit-learn, k-means++ with 10 starts, CLUSTER_SEED) cluster ids of the rows."""
    from sklearn.cluster import KMeans

    return KMeans(n_clusters=k, n_init=10, random_state=CLUSTER_SEED).fit_predict(
        np.asarray(values, np.float64)
    )


def latent_model(model: Any) -> Any:
    """The model from its input to its layer named LATENT_LAYER (None: it has none)."""
    import tensorflow as tf

    try:
        layer = model.get_layer(LATENT_LAYER)
    except ValueError:
        return None
    return tf.keras.Model(model.inputs, layer.output)


class LatentsWriter:
    """One rank's latents.parquet/part-RANK.parquet, a row group per batch, renamed into place when closed."""

    folder = "latents.parquet"

    def __init__(self, out: Path, rank: int, latent: int) -> None:
        import pyarrow as pa

        from pipeline.data.tables import parquet_writer

        self.latent = latent
        self.schema = pa.schema(
            [
                ("sample_id", pa.string()),
                ("split", pa.string()),
                ("latent", pa.list_(pa.float32(), latent)),
                ("reconstruction_error", pa.float64()),
                ("pca_error", pa.float64()),
            ]
        )
        (out / self.folder).mkdir(parents=True, exist_ok=True)
        self.context = parquet_writer(out / self.folder / f"part-{rank:05d}.parquet", self.schema)
        self.writer = self.context.__enter__()

    def write(
        self, ids: np.ndarray, split: str, latent: np.ndarray, error: np.ndarray, pca_error: np.ndarray | None
    ) -> None:
        import pyarrow as pa

        n = len(ids)
        flat = pa.array(np.asarray(latent, np.float32).reshape(-1), pa.float32())
        columns = [
            pa.array([i.decode() if isinstance(i, bytes) else str(i) for i in ids], pa.string()),
            pa.array([split] * n, pa.string()),
            pa.FixedSizeListArray.from_arrays(flat, self.latent),
            pa.array(error, pa.float64()),
            pa.array(pca_error if pca_error is not None else [None] * n, pa.float64()),
        ]
        self.writer.write_table(pa.Table.from_arrays(columns, schema=self.schema))

    def close(self) -> None:
        self.context.__exit__(None, None, None)


class PcaBaseline(EmulatorBaseline):
    """An autoencoder's: PCA of as many components as the latent, judged by each field's NRMSE."""

    task: Autoencoder

    def method(self, statistics: str) -> str:
        return (
            f"PCA with {self.task.latent} components (as many as the latent) of the training split's samples"
        )

    def features(self, x: np.ndarray, spatial_dims: int) -> np.ndarray:
        return np.asarray(x, np.float64).reshape(len(x), -1)

    def sums(self, features: int) -> BaselineSums:
        self.task.pca = PcaSums(features, self.task.latent)  # the task's latents are scored against it
        return self.task.pca

    def hybrid_refused(self) -> str | None:
        return "an autoencoder's baseline is PCA (a network started from it is not built)"

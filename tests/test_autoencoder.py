"""Learning without labels: the autoencoder task (tasks/autoencoder.py), its built-in model
(models/autoencoder.py) and its classical baseline, PCA (baseline.PcaSums); end to end, its latents,
clustering and anomaly scores against scikit-learn run on the same numbers."""

from __future__ import annotations

import json

import numpy as np
import pytest

from pipeline.training import baseline
from pipeline.training.tasks import DataSpec, make_task

from .conftest import SLOW, run_cli, write_config

GRID = 16


def blobs(parameters: np.ndarray, grid: int = GRID) -> np.ndarray:
    """A known family of fields of 3 parameters, nonlinear in them: a Gaussian blob centred at (a, b) of
    width c on the unit square. Moving a blob is not a sum of a few fixed patterns, so PCA with 3
    components cannot represent the family, while a 3-number code can."""
    axis = (np.arange(grid) + 0.5) / grid
    y, x = np.meshgrid(axis, axis, indexing="ij")
    a, b, c = (parameters[:, i, None, None] for i in range(3))
    return np.exp(-((x - a) ** 2 + (y - b) ** 2) / (2 * c**2)).astype(np.float32)


def family(count: int, seed: int) -> np.ndarray:
    rng = np.random.default_rng(seed)
    return np.column_stack(
        [rng.uniform(0.3, 0.7, count), rng.uniform(0.3, 0.7, count), rng.uniform(0.1, 0.18, count)]
    )


def autoencoder_task(shape: tuple[int, ...], latent: int = 3, spatial_dims: int = 2, **own):
    data = DataSpec("field", shape, (), (), feature_shapes={"field": shape})
    task = make_task(
        {"task": "autoencoder", "autoencoder": {"latent": latent, "spatial_dims": spatial_dims, **own}}, data
    )
    task.check()
    return task


@pytest.mark.parametrize("cap", [4096, 64], ids=["exact", "sketch"])
def test_pca_baseline_equals_scikit_learns_pca(cap, monkeypatch):
    """PcaSums summed over two ranks' batches reconstructs as scikit-learn's PCA of the same samples, exactly
    from the covariance up to PCA_MAX_OUTPUTS entries, and from the Nyström sketch beyond (a covariance of
    rank 3 plus noise: the subspace found to 1e-4)."""
    from sklearn.decomposition import PCA

    monkeypatch.setattr(baseline, "PCA_MAX_OUTPUTS", cap)
    rng = np.random.default_rng(0)
    samples = rng.standard_normal((400, 3)) * [5, 3, 2] @ rng.standard_normal((3, 200))
    samples += 0.05 * rng.standard_normal(samples.shape) + 2
    ranks = [baseline.PcaSums(200, 3), baseline.PcaSums(200, 3)]
    for start in range(0, 400, 50):
        ranks[start // 50 % 2].add(samples[start : start + 50], None)
    summed = [a + b for a, b in zip(ranks[0].arrays(), ranks[1].arrays(), strict=True)]
    fitted = ranks[0].fitted(summed)
    assert fitted.settings["components"] == 3
    assert fitted.settings["pca"] == ("exact covariance" if cap == 4096 else "Nyström sketch of 22 columns")
    weights, bias = fitted.linear
    pca = PCA(3).fit(samples)
    expected = pca.inverse_transform(pca.transform(samples))
    np.testing.assert_allclose(samples @ weights + bias, expected, atol=1e-9 if cap == 4096 else 2e-3)
    overlap = np.abs(ranks[0].basis.T @ pca.components_.T)  # the same subspace, up to signs
    np.testing.assert_allclose(overlap, np.eye(3), atol=1e-9 if cap == 4096 else 1e-4)
    coefficients = ranks[0].coefficients(samples)
    np.testing.assert_allclose(
        np.abs(coefficients), np.abs(pca.transform(samples)), atol=1e-7 if cap == 4096 else 0.05
    )


def test_an_autoencoder_is_fields_in_the_same_fields_out_per_field_and_in_2d_and_3d():
    """The target is the sample itself, flat; the built-in model passes it through a layer `latent` of
    train.autoencoder.latent units, for 2-D fields with channels and 3-D fields alike; scores are per
    field (channel), and a reconstruction that is the field scores 0."""
    import tensorflow as tf

    from pipeline.training.models import build_model

    settings = {"model": "autoencoder", "depth": 2, "width": 4, "dense": 16, "dropout": 0.0}
    for shape, spatial in (((8, 12, 2), 2), ((8, 8, 4), 3)):
        task = autoencoder_task(shape, latent=5, spatial_dims=spatial)
        x = tf.random.normal((3, *shape))
        inputs, target = task.samples(x, task.label_tensor([], batched=True))
        np.testing.assert_array_equal(target.numpy(), x.numpy().reshape(3, -1))
        model, _ = build_model(settings, shape, task)
        assert model(inputs).shape == (3, int(np.prod(shape)))
        assert model.get_layer("latent").output.shape[-1] == 5
        evaluation = task.evaluation()
        task.update(evaluation, target.numpy(), target.numpy(), inputs.numpy())
        scores = task.metrics(evaluation)
        expected = ["field[0]", "field[1]"] if spatial == 2 else ["field"]
        assert list(scores["vrmse"]) == expected and scores["vrmse_mean"] == 0.0
    with pytest.raises(Exception, match="latent"):
        autoencoder_task((8, 8), latent=64)
    with pytest.raises(Exception, match="cluster_label"):
        autoencoder_task((8, 8), cluster_label="kind")


@SLOW
def test_a_latent_of_three_reconstructs_a_three_parameter_family_below_pca_of_three():
    """Blobs of 3 parameters: the built-in autoencoder with latent 3, trained in-process on them, scores a
    lower reconstruction VRMSE on new blobs than PCA with 3 components fitted on the same training
    samples (where the family is nonlinear, a code beats a linear subspace)."""
    import tensorflow as tf

    from pipeline.training.baseline import StreamingFit
    from pipeline.training.models import build_model

    tf.keras.utils.set_random_seed(0)
    task = autoencoder_task((GRID, GRID), latent=3)
    train, test = blobs(family(768, 1)), blobs(family(128, 2))
    settings = {"model": "autoencoder", "depth": 2, "width": 8, "dense": 64, "dropout": 0.0}
    model, _ = build_model(settings, (GRID, GRID), task)
    model.compile(tf.keras.optimizers.Adam(3e-3), task.loss())
    model.fit(train, train.reshape(len(train), -1), batch_size=32, epochs=40, verbose=0)

    def scored(predicted: np.ndarray) -> float:
        evaluation = task.evaluation()
        task.update(evaluation, predicted, test.reshape(len(test), -1), test)
        return task.metrics(evaluation)["vrmse_mean"]

    fitting = StreamingFit(task, (GRID, GRID), 2)
    fitting.add(train, train.reshape(len(train), -1))
    predict, settings_found = fitting.fit(lambda sums: sums)
    network, pca = scored(model.predict(test, verbose=0)), scored(predict(test))
    print(f"reconstruction VRMSE: autoencoder {network:.3f}, PCA-3 {pca:.3f}")
    assert settings_found["components"] == 3 and pca > 0.3
    assert network < 0.6 * pca


@SLOW
def test_the_anomaly_preset_writes_latents_and_its_clustering_and_anomaly_scores_equal_scikit_learns(
    tmp_path,
):
    """config/presets/climate-anomalies.yaml at a test's size on 2 ranks (the docs' block is its train
    section): the simulator corrupts a share of its samples and says which; the autoencoder is scored per
    field beside PCA; every test record's latent is in latents.parquet (a part per rank); the summary's
    adjusted Rand index and ROC AUCs equal scikit-learn's on the Parquet's numbers and the simulator's own
    files; the saved model gives the reconstruction in the fields' units and the latent."""
    import h5py
    import pyarrow.parquet as pq
    import tensorflow as tf
    import yaml
    from sklearn.cluster import KMeans
    from sklearn.metrics import adjusted_rand_score, roc_auc_score

    from .conftest import REPO
    from .helpers import doc_blocks

    preset = yaml.safe_load((REPO / "config" / "presets" / "climate-anomalies.yaml").read_text())
    block = next(text for _, _, text in doc_blocks() if "task: autoencoder" in text)
    assert yaml.safe_load(block)["train"] == preset["train"]  # the docs show the preset's settings
    size = 16
    preset["workdir"] = str(tmp_path / "work")
    preset["simulate"]["runs"] = 160
    preset["simulate"]["climate"].update({"size": size, "anomalies": 0.25})
    preset["source"]["fields"]["fields"]["shape"] = [size, size, 4]
    preset["stage"] = {"target": str(tmp_path / "local")}
    preset["train"]["epochs"] = 4
    path = write_config(tmp_path, preset)
    for step in ("simulate", "ingest", "convert", "merge", "stage", "train"):
        run_cli([step, "--config", str(path)], ranks=2, timeout=600)
    truth = {}  # from the simulator's own files: sample id -> (cyclones, anomaly)
    for file in (tmp_path / "work" / "raw").rglob("*.h5"):
        with h5py.File(file) as f:
            truth[f.attrs["sample_id"]] = (int(f["cyclones"][()]), int(f["anomaly"][()]))
    assert 20 < sum(a for _, a in truth.values()) < 60  # about a quarter corrupted

    out = tmp_path / "work" / "train"
    summary = json.loads((out / "summary.json").read_text())
    assert len(summary["vrmse"]) == 4  # a VRMSE per channel of the fields
    assert summary["baseline"]["method"].startswith("PCA with 8 components")
    assert set(summary["baseline"]["vrmse"]) == set(summary["vrmse"])
    found = summary["autoencoder"]
    assert found["split"] == "test" and found["latent"] == 8 and found["latents"] == "latents.parquet"

    parts = sorted((out / "latents.parquet").glob("part-*.parquet"))
    assert [p.name for p in parts] == ["part-00000.parquet", "part-00001.parquet"]
    table = pq.read_table(out / "latents.parquet").to_pandas()
    meta = json.loads((tmp_path / "work" / "merged" / "metadata.json").read_text())
    assert (
        len(table) == found["records"] == meta["splits"]["test"]["records"] and table["sample_id"].is_unique
    )
    assert set(table["split"]) == {"test"} and all(len(v) == 8 for v in table["latent"])
    # the gathered sample is every rank's records in rank order: the parts in order
    rows = [pq.read_table(p).to_pandas() for p in parts]
    latents = np.concatenate([np.stack(r["latent"].to_numpy()) for r in rows]).astype(np.float64)
    ids = [i for r in rows for i in r["sample_id"]]
    cyclones, anomalous = (np.array([truth[i][k] for i in ids]) for k in (0, 1))
    clusters = len(np.unique(cyclones))
    expected = adjusted_rand_score(cyclones, KMeans(clusters, n_init=10, random_state=0).fit_predict(latents))
    assert found["clustering"]["clusters"] == clusters
    assert found["clustering"]["ari_latent"] == pytest.approx(expected, abs=1e-12)
    assert -1 <= found["clustering"]["ari_pca"] <= 1
    assert 0 < anomalous.sum() < len(anomalous)
    for name, column in (("network", "reconstruction_error"), ("pca", "pca_error")):
        scores = np.concatenate([r[column].to_numpy() for r in rows])
        assert found["anomaly"][f"roc_auc_{name}"] == pytest.approx(
            roc_auc_score(anomalous, scores), abs=1e-12
        )
    print(json.dumps({"vrmse": summary["vrmse"], "baseline": summary["baseline"]["vrmse"], **found}))

    model = tf.keras.models.load_model(str(out / "model"), compile=False)
    answer = model(np.zeros((1, size, size, 4), np.float32))
    assert answer["reconstruction"].shape == (1, size, size, 4) and answer["latent"].shape == (1, 8)

    # a population of two trainers, and without the baseline as a search's trials train (--no-baseline): the
    # same task's latents and scores, of the kept trainer's model, no PCA column
    population = {
        "enabled": True,
        "trainers": 2,
        "rounds": 2,
        "steps_per_round": 4,
        "tournament_fraction": 0.3,
    }
    preset["train"]["population"] = population  # tournament_fraction: a batch of each trainer's records
    run_cli(["train", "--config", str(write_config(tmp_path, preset)), "--no-baseline"], ranks=2, timeout=600)
    summary = json.loads((out / "summary.json").read_text())
    found = summary["autoencoder"]
    assert summary["population"]["trainers"] == 2 and summary["population"]["rounds_trained"] == 2
    assert summary["baseline"]["method"] is None and len(summary["vrmse"]) == 4
    table = pq.read_table(out / "latents.parquet").to_pandas()
    assert (
        len(table) == found["records"] == meta["splits"]["test"]["records"]
        and table["pca_error"].isna().all()
    )
    assert -1 <= found["clustering"]["ari_latent"] <= 1 and 0 <= found["anomaly"]["roc_auc_network"] <= 1


BLOB_RUN = """
import sys
from pathlib import Path

import h5py
import numpy as np

out, seed, width = Path(sys.argv[1]), int(sys.argv[2]), float(sys.argv[3])
axis = (np.arange(8) + 0.5) / 8
z, y, x = np.meshgrid(axis, axis, axis, indexing="ij")
for i in range(4):
    a, b, c = np.random.default_rng([seed, i]).uniform(0.3, 0.7, 3)
    cube = np.exp(-((x - a) ** 2 + (y - b) ** 2 + (z - c) ** 2) / (2 * width**2))
    with h5py.File(out / f"cube_{i:05d}.h5", "w") as f:
        f["density"], f["params"] = cube.astype(np.float32), np.array([a, b, c], np.float32)
"""


@SLOW
def test_an_autoencoder_of_cubes_trains_online_while_the_ensemble_runs(tmp_path):
    """The online mode with the autoencoder task on 3-D fields (train.autoencoder.spatial_dims: 3): one
    producer runs a simulator of blobs in a cube (a family of 4 numbers: the centre, the width from the
    design), one rank trains the built-in on each cube as it arrives; it is scored per field beside PCA of
    as many components fitted on the arrivals, and must reconstruct the held-out cubes better than the
    mean does and within 1.6 x PCA's error (0.571 against 0.406 here; 4 steps of training give 0.981, and
    fail), and every validation cube's latent is written."""
    import sys

    import pyarrow.parquet as pq

    from .helpers import online_config

    script = tmp_path / "blob_run.py"
    script.write_text(BLOB_RUN)
    config = online_config(tmp_path, runs=10, samples=4, optimizer_steps=120, validate_every_steps=20)
    config["simulate"]["command"] = [sys.executable, str(script), "{out}", "{seed}", "{sigma_8}"]
    config["simulate"]["space"]["sigma_8"] = {"type": "uniform", "low": 0.1, "high": 0.2}
    config["convert"].update(labels=[], normalise=["density"], log1p=[])
    own = {"latent": 4, "spatial_dims": 3}
    config["train"].update(
        {
            "task": "autoencoder",
            "model": "autoencoder",
            "autoencoder": own,
            "learning_rate": 0.003,
            "width": 8,
            "dense": 32,
        }
    )
    proc = run_cli(["online", "--config", str(write_config(tmp_path, config))], ranks=2, timeout=300)
    summary = json.loads(proc.stdout.strip().splitlines()[-1])
    assert summary["task"] == "autoencoder" and list(summary["vrmse"]) == ["density"]
    network, pca = summary["nrmse"]["density"], summary["baseline"]["nrmse"]["density"]
    print(f"online autoencoder: validation NRMSE {network:.3f}, PCA-4 {pca:.3f}")
    assert network < 0.8 and network < 1.6 * pca
    assert summary["baseline"]["method"].startswith("PCA with 4 components")
    found = summary["autoencoder"]
    assert found["split"] == "validation" and found["latent"] == 4 and found["records"] > 0
    table = pq.read_table(tmp_path / "work" / "train" / "latents.parquet").to_pandas()
    assert len(table) == found["records"] and all(len(v) == 4 for v in table["latent"])
    assert all(i.startswith("run-") for i in table["sample_id"])
    assert summary["online"]["samples"]["arrived"] > 0


def test_a_design_parameter_binned_is_the_classes_the_clusters_are_scored_against():
    """train.autoencoder.cluster_bins: a real-valued label (a design's parameter) in equal-count bins is the
    class the k-means clusters are scored against; the ARI equals scikit-learn's on bins made by hand. A real
    label without bins is a config error naming the key."""
    from sklearn.cluster import KMeans
    from sklearn.metrics import adjusted_rand_score

    from pipeline import Sim2dlError
    from pipeline.training.tasks.base import LabelField

    rng = np.random.default_rng(3)
    width = rng.uniform(0.1, 0.18, 400)  # the family's third parameter
    # sorted by width
    latents = np.column_stack([width * 50 + rng.normal(0, 0.1, 400), rng.normal(0, 0.2, 400)])
    shape = (GRID, GRID)
    label = LabelField("width", (1,), "float32")
    data = DataSpec("field", shape, (label,), ("width",), feature_shapes={"field": shape})
    settings = {
        "task": "autoencoder",
        "autoencoder": {"latent": 2, "cluster_label": "width", "cluster_bins": 4},
    }
    task = make_task(settings, data)
    task.check()
    found = task.scored(
        {"labels": width[:, None], "latent": latents, "pca": None, "error": None, "pca_error": None}
    )
    quartiles = np.quantile(width, [0.25, 0.5, 0.75])
    truth = np.searchsorted(quartiles, width, side="right")
    assert np.bincount(truth).tolist() == [100, 100, 100, 100]
    expected = adjusted_rand_score(truth, KMeans(4, n_init=10, random_state=0).fit_predict(latents))
    clustering = found["clustering"]
    assert clustering["clusters"] == 4 and clustering["bin_edges"] == pytest.approx(quartiles.tolist())
    assert clustering["ari_latent"] == pytest.approx(expected, abs=1e-12) and clustering["ari_latent"] > 0.3
    unbinned = make_task({**settings, "autoencoder": {"latent": 2, "cluster_label": "width"}}, data)
    with pytest.raises(Sim2dlError, match=r"train\.autoencoder\.cluster_label.*cluster_bins"):
        unbinned.check()

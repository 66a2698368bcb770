"""Tasks and models: metrics against numpy, label checks, built-in and user models and their errors, and
each task end to end with real Horovod ranks (segmentation on the climate family, classification with a
user's model file through the workflow)."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
import yaml

from pipeline import Sim2dlError
from pipeline import config as cfg
from pipeline.steps.search import train_settings
from pipeline.training.models import model_source
from pipeline.training.tasks import data_spec, make_task
from pipeline.training.tasks.base import confusion
from pipeline.training.tasks.classification import f1_scores
from pipeline.training.tasks.segmentation import iou_scores

from .conftest import SLOW, make_config, run_cli, snakemake_configfile, write_config

CLIMATE_SIZE = 32
CLIMATE_FIELDS = {
    "fields": {"path": "fields", "dtype": "float32", "shape": [CLIMATE_SIZE, CLIMATE_SIZE, 4]},
    "mask": {"path": "mask", "dtype": "uint8", "shape": [CLIMATE_SIZE, CLIMATE_SIZE]},
    "cyclones": {"path": "cyclones", "dtype": "int64", "shape": [], "categorical": True},
}
TINY = {"epochs": 3, "batch_size": 8, "depth": 2, "width": 4, "dense": 16, "learning_rate": 0.003}


def climate_config(tmp_path: Path, labels: list[str], **sections) -> dict:
    return make_config(
        tmp_path,
        simulate={"family": "climate", "runs": 128, "climate": {"size": CLIMATE_SIZE, "cyclones": 2}},
        source={"fields": CLIMATE_FIELDS},
        convert={
            "features": ["fields"],
            "labels": labels,
            "log1p": [],
            "normalise": ["fields"],
            "per_channel": ["fields"],
        },
        merge={"splits": {"train": 0.75, "validation": 0.25}, "shard_size_mb": 0.25},
        stage={"target": str(tmp_path / "local")},
        **sections,
    )


def metadata(labels: list[dict], feature_shape=(8, 8, 2)) -> dict:
    spec = {"x": {"role": "feature", "shape": list(feature_shape), "dtype": "float32"}}
    extra: dict = {"class_counts": {}, "statistics": {}, "classes": {}}
    for label in labels:
        spec[label["name"]] = {"role": "label", "shape": label["shape"], "dtype": label["dtype"]}
        for key in ("class_counts", "statistics", "classes"):
            if key in label:
                extra[key][label["name"]] = label[key]
    return {"feature_spec": spec, **extra}


# ---------------------------------------------------------------- metrics against numpy


def test_confusion_iou_and_f1_match_their_definitions():
    rng = np.random.default_rng(1)
    true, pred = rng.integers(0, 3, 500), rng.integers(0, 3, 500)
    matrix = confusion(true, pred, 3)
    for c in range(3):
        tp = np.sum((true == c) & (pred == c))
        fp, fn = np.sum((true != c) & (pred == c)), np.sum((true == c) & (pred != c))
        assert matrix[c, c] == tp and matrix[:, c].sum() - tp == fp and matrix[c].sum() - tp == fn
        assert iou_scores(matrix)[c] == pytest.approx(tp / (tp + fp + fn))
        assert f1_scores(matrix)[c] == pytest.approx(2 * tp / (2 * tp + fp + fn))
    assert np.isnan(iou_scores(np.array([[5, 0], [0, 0]]))[1])  # a class never present nor predicted


def test_regression_r2_from_sums_and_plots_in_the_labels_own_units(tmp_path):
    meta = metadata(
        [
            {
                "name": "p",
                "shape": [2],
                "dtype": "float32",
                "statistics": {"mean": [0.8, 10.0], "std": [0.1, 2.0]},
            }
        ]
    )
    task = make_task({"task": "regression"}, data_spec(meta))
    rng = np.random.default_rng(2)
    true = rng.normal(size=(300, 2))
    pred = true + rng.normal(scale=0.3, size=true.shape)
    ev = task.evaluation()
    for i in range(0, 300, 64):  # in batches, as validation feeds it
        task.update(ev, pred[i : i + 64], true[i : i + 64], np.zeros(0))
    expected = 1 - ((pred - true) ** 2).sum(0) / ((true - true.mean(0)) ** 2).sum(0)
    assert list(task.metrics(ev)["r2"].values()) == pytest.approx(expected.tolist(), rel=1e-9)
    np.testing.assert_allclose(task.in_label_units(true[:5]), true[:5] * [0.1, 2.0] + [0.8, 10.0])
    task.figure(ev, tmp_path / "v.png")
    assert (tmp_path / "v.png").stat().st_size > 10_000


# ---------------------------------------------------------------- labels that do not fit the task


@pytest.mark.parametrize(
    ("task", "label", "settings", "message"),
    [
        (
            "classification",
            {"name": "y", "shape": [], "dtype": "float32"},
            {},
            "task 'classification' needs integer class ids, label field 'y' holds float32",
        ),
        (
            "segmentation",
            {"name": "m", "shape": [8, 4], "dtype": "uint8", "class_counts": {"min": 0, "max": 1}},
            {},
            "label field 'm' has shape [8, 4] but feature 'x' has shape [8, 8, 2]",
        ),
        (
            "segmentation",
            {"name": "m", "shape": [8, 8], "dtype": "uint8", "class_counts": {"min": 0, "max": 2}},
            {"classes": 2},
            "label field 'm' holds class id 2, which needs at least 3 classes (have 2)",
        ),
        (
            "classification",
            {"name": "y", "shape": [], "dtype": "int64", "class_counts": {"min": -1, "max": 3}},
            {},
            "class ids must be >= 0, found -1",
        ),
        (
            "classification",
            {"name": "y", "shape": [3], "dtype": "int64", "class_counts": {"min": 0, "max": 3}},
            {},
            "needs one class id per sample, label field 'y' has shape [3]",
        ),
        (
            "classification",
            {"name": "y", "shape": [], "dtype": "int64", "class_counts": {"min": 0, "max": 2}},
            {"class_weights": [1, 2]},
            "'train.class_weights': 2 weights for 3 classes",
        ),
    ],
)
def test_labels_that_do_not_fit_the_task_are_config_errors(task, label, settings, message):
    with pytest.raises(Sim2dlError) as error:
        make_task({"task": task, **settings}, data_spec(metadata([label]))).check()
    assert message in str(error.value)


def test_a_validation_split_without_a_class_is_a_warning(caplog):
    counts = {"min": 0, "max": 2, "counts": {"train": [50, 5, 3], "validation": [20, 0, 1]}}
    label = {"name": "m", "shape": [8, 8], "dtype": "uint8", "class_counts": counts}
    task = make_task(
        {"task": "segmentation", "class_names": ["sea", "storm", "river"]}, data_spec(metadata([label]))
    )
    with caplog.at_level("WARNING"):
        task.check()
    assert "validation split has no records of the classes ['storm']" in caplog.text
    weights = make_task({"task": "segmentation", "class_weights": "balanced"}, task.data).class_weights()
    np.testing.assert_allclose(weights, 58 / (3 * np.array([50, 5, 3])), rtol=1e-6)


# ---------------------------------------------------------------- models


USER_MODELS = """
import tensorflow as tf


def build(input_shape, outputs, units=8):
    inputs = tf.keras.layers.Input(shape=input_shape)
    x = tf.keras.layers.GlobalAveragePooling2D()(inputs)
    x = tf.keras.layers.Dense(units, activation="relu")(x)
    return tf.keras.Model(inputs, tf.keras.layers.Dense(outputs)(x))


def two_inputs(input_shape, outputs, units=8):
    # several features: a dict of inputs by name (the fields and the mask of a climate sample)
    fields = tf.keras.layers.Input(shape=input_shape["fields"], name="fields")
    mask = tf.keras.layers.Input(shape=input_shape["mask"], name="mask")
    pooled = tf.keras.layers.GlobalAveragePooling2D()(fields)
    area = tf.keras.layers.Flatten()(mask)
    x = tf.keras.layers.Dense(units, activation="relu")(tf.keras.layers.Concatenate()([pooled, area]))
    return tf.keras.Model({"fields": fields, "mask": mask}, tf.keras.layers.Dense(outputs)(x))


def raises(input_shape, outputs):
    raise RuntimeError("no GPU here")


def not_a_model(input_shape, outputs):
    return "a model"


def wrong_outputs(input_shape, outputs):
    inputs = tf.keras.layers.Input(shape=input_shape)
    return tf.keras.Model(inputs, tf.keras.layers.Dense(outputs + 1)(tf.keras.layers.Flatten()(inputs)))
"""


def test_model_names_resolve_to_built_ins_files_or_modules_with_clear_errors(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    (tmp_path / "my_models.py").write_text(USER_MODELS)
    assert model_source("unet2d").built_in is not None
    source = model_source("my_models.py:build")
    assert source.file == tmp_path / "my_models.py" and source.provenance()["checksum"]
    monkeypatch.syspath_prepend(str(tmp_path))
    assert model_source("my_models:build").file == tmp_path / "my_models.py"
    for name, message in [
        ("resnet", "unknown model 'resnet'"),
        ("missing.py:build", "model file missing.py not found"),
        ("no_such_module:build", "module 'no_such_module' not found"),
    ]:
        with pytest.raises(Sim2dlError, match=message):
            model_source(name)
    with pytest.raises(Sim2dlError, match=r"my_models\.py has no function 'nothing'"):
        model_source("my_models.py:nothing").builder()


def test_search_space_names_model_args_and_best_yaml_nests_them(tmp_path):
    space = {"model_args.units": {"type": "int", "low": 4, "high": 16}}
    config = make_config(tmp_path, search={"space": space})
    assert "model_args.units" in config["search"]["space"]
    assert train_settings({"model_args.units": np.int64(8), "learning_rate": 0.01}) == {
        "learning_rate": 0.01,
        "model_args": {"units": 8},
    }


# ---------------------------------------------------------------- end to end, real ranks


@pytest.fixture(scope="module")
def climate(tmp_path_factory):
    """128 climate samples (32 x 32 x 4 fields, a mask, the cyclone count) merged and staged once."""
    tmp = tmp_path_factory.mktemp("climate")
    config = climate_config(tmp, ["mask"], train={**TINY, "task": "segmentation", "model": "unet2d"})
    path = write_config(tmp, config)
    for step in ("simulate", "ingest", "convert", "merge", "stage"):
        run_cli([step, "--config", str(path)], ranks=2)
    return tmp, config


def validation_arrays(merged: Path, label: str) -> tuple[np.ndarray, np.ndarray]:
    from pipeline.formats.shards.shard_reader import ShardReader

    records = list(ShardReader(merged, "validation"))
    return np.stack([r["fields"] for r in records]), np.stack([r[label] for r in records])


@SLOW
def test_segmentation_trains_unet2d_and_its_metrics_match_numpy(tmp_path, climate):
    import tensorflow as tf

    data, config = climate
    config = {**config, "train": {**config["train"], "class_names": ["background", "cyclone", "river"]}}
    path = write_config(tmp_path, config)
    out = tmp_path / "train"
    run_cli(["train", "--config", str(path), "--out", str(out)], ranks=2, timeout=600)
    summary = json.loads((out / "summary.json").read_text())
    assert summary["task"] == "segmentation" and summary["weights_identical_across_ranks"]
    assert set(summary["iou"]) == {"background", "cyclone", "river"} and (out / "scores.png").exists()
    features, masks = validation_arrays(data / "work" / "merged", "mask")
    model = tf.keras.models.load_model(str(out / "model"), compile=False)
    predicted = model.predict(features, verbose=0).argmax(-1)
    matrix = confusion(masks.astype(np.int64), predicted, 3)
    assert summary["validation_records"] == len(masks)
    assert np.abs(np.array(summary["confusion_matrix"]) - matrix).sum() <= 0.001 * masks.size  # argmax ties
    iou = [
        np.sum((masks == c) & (predicted == c)) / np.sum((masks == c) | (predicted == c)) for c in range(3)
    ]
    assert summary["mean_iou"] == pytest.approx(np.mean(iou), abs=2e-3)
    assert summary["baseline_mean_iou"] == pytest.approx(np.mean(masks == 0) / 3, rel=1e-9)


@pytest.mark.parametrize(
    ("change", "message"),
    [
        (
            {"model": "models.py:raises"},
            "model builder {dir}/models.py:raises raised RuntimeError: no GPU here",
        ),
        ({"model": "models.py:not_a_model"}, "models.py:not_a_model returned str, not a tf.keras.Model"),
        (
            {"model": "models.py:wrong_outputs"},
            "models.py:wrong_outputs: the model's output shape is [None, 4], "
            "task 'segmentation' needs [None, 32, 32, 3]",
        ),
        (
            {"depth": 6},
            "model 'unet2d' with depth 6 halves the input [32, 32] 6 times: each spatial size must be "
            "divisible by 64",
        ),
        ({"model": "cosmoflow"}, "model 'cosmoflow' does not do segmentation"),
        ({"model_args": {"filters": 3}}, "['filters'] are not arguments of the built-in model 'unet2d'"),
    ],
)
def test_model_errors_name_the_builder_before_training(tmp_path, climate, change, message):
    _, config = climate
    (tmp_path / "models.py").write_text(USER_MODELS)
    path = write_config(tmp_path, {**config, "train": {**config["train"], **change}})
    out = tmp_path / "train"
    proc = run_cli(["train", "--config", str(path), "--out", str(out)], ranks=1, check=False, cwd=tmp_path)
    assert proc.returncode != 0 and message.format(dir=tmp_path) in proc.stderr
    assert not out.exists()  # nothing trained, nothing staged again


def test_classification_with_a_user_model_file_through_the_workflow(tmp_path):
    """The cyclone count as a categorical label, classified by a user's Keras model file on 2 Horovod ranks
    under Snakemake; accuracy and macro-F1 match numpy on the saved model's predictions. convert.features
    lists two fields: the user's model gets {name: shape} and a dict of tensors, and a built-in with the same
    features is refused when the config is read."""
    import tensorflow as tf

    from pipeline.formats.shards.shard_reader import ShardReader

    (tmp_path / "models.py").write_text(USER_MODELS)
    config = climate_config(
        tmp_path,
        ["cyclones"],
        train={
            **TINY,
            "task": "classification",
            "model": f"{tmp_path}/models.py:two_inputs",
            "model_args": {"units": 12},
            "epochs": 2,
        },
        search={"enabled": False},
    )
    config["convert"]["features"] = ["fields", "mask"]
    path = tmp_path / "workflow.yaml"
    path.write_text(yaml.safe_dump(config))
    proc = snakemake_configfile(path, tmp_path)
    assert proc.returncode == 0, proc.stderr[-3000:]
    work = Path(config["workdir"])
    summary = json.loads((work / "train" / "summary.json").read_text())
    assert summary["task"] == "classification" and summary["weights_identical_across_ranks"]
    assert summary["model"]["file"] == str(tmp_path / "models.py") and summary["model"]["checksum"]
    assert summary["settings"]["model_args"] == {"units": 12} and summary["classes"] == ["0", "1", "2"]
    model = tf.keras.models.load_model(str(work / "train" / "model"), compile=False)
    assert sorted(model.input) == ["fields", "mask"]
    records = list(ShardReader(work / "merged", "validation"))
    features = {name: np.stack([r[name] for r in records]) for name in ("fields", "mask")}
    labels = np.stack([r["cyclones"] for r in records])
    predicted = model.predict(features, verbose=0).argmax(-1)
    assert summary["accuracy"] == pytest.approx(np.mean(predicted == labels), abs=1.5 / len(labels))
    f1 = f1_scores(confusion(labels, predicted, 3))
    present = np.isin(np.arange(3), np.concatenate([labels, predicted]))
    assert summary["macro_f1"] == pytest.approx(f1[present].mean(), abs=0.02)
    assert (work / "train" / "scores.png").exists()
    with pytest.raises(Sim2dlError, match="are several inputs, but the built-in model 'unet2d' takes one"):
        cfg.validate(
            yaml.safe_load(yaml.safe_dump({**config, "train": {**config["train"], "model": "unet2d"}}))
        )
    # The model file is an input of the train rule: changing it retrains.
    (tmp_path / "models.py").write_text(USER_MODELS.replace("units=8", "units=9"))
    dry = snakemake_configfile(path, tmp_path, "--dry-run")
    assert "rule train:" in dry.stdout and "rule merge:" not in dry.stdout

"""The built-in models learn what a minimal model learns: each on a small task of its shape whose answer
is known, against a reference written here (a few layers, no tricks), same data, same epochs, same
optimizer and loss (Keras fit in one process: the model is what is compared, not sim2dl's loop).

Covered so far: unet2d on segmentation (issue 37's case). The other built-ins and tasks follow.
"""

import numpy as np
import pytest
from scipy.ndimage import gaussian_filter

from pipeline.training.models import unet2d

EPOCHS, BATCH, LEARNING_RATE = 6, 16, 0.002


def threshold_masks(samples: int = 384, shape: tuple[int, int, int] = (48, 64, 4)) -> tuple[np.ndarray, np.ndarray]:
    """Spatially correlated noise fields and a 3-class mask that is a threshold of two of their channels:
    a pixel's class is a function of that pixel alone (a 1x1 convolution could learn it exactly)."""
    rng = np.random.default_rng(0)
    x = np.stack([gaussian_filter(rng.normal(size=shape), sigma=(2, 2, 0)) for _ in range(samples)])
    x = (x / x.std()).astype("float32")
    y = np.zeros(x.shape[:-1], "int32")
    y[x[..., 0] > 0.8] = 1
    y[x[..., 1] > 0.8] = 2
    return x, y


def mean_iou(logits: np.ndarray, true: np.ndarray, classes: int = 3) -> float:
    predicted = logits.argmax(-1)
    ious = [
        ((predicted == c) & (true == c)).sum() / max(((predicted == c) | (true == c)).sum(), 1) for c in range(classes)
    ]
    return float(np.mean(ious))


def fit(model, x, y):
    import tensorflow as tf

    model.compile(
        tf.keras.optimizers.Adam(LEARNING_RATE), tf.keras.losses.SparseCategoricalCrossentropy(from_logits=True)
    )
    model.fit(x, y, batch_size=BATCH, epochs=EPOCHS, verbose=0, shuffle=True)
    return model


@pytest.fixture
def seeded():
    import tensorflow as tf

    tf.keras.utils.set_random_seed(0)
    tf.config.experimental.enable_op_determinism()


def test_unet2d_segments_as_well_as_a_two_layer_network_and_validates_as_it_trains(seeded):
    """The short-run trap: batch normalisation's moving statistics (what inference uses) after ~120 steps.
    With Keras' default momentum 0.99 they were still ~30 % their initial values, and unet2d scored mean IoU
    0.78 here in inference against 0.89 with batch statistics (the reference: 0.76); with momentum 0.9,
    0.885. Both are checked: against the reference, and inference against training mode."""
    from types import SimpleNamespace

    import tensorflow as tf

    x, y = threshold_masks()
    (xt, yt), (xv, yv) = (x[:320], y[:320]), (x[320:], y[320:])
    layers = tf.keras.layers
    two_layers = [layers.Conv2D(16, 3, padding="same", activation="relu"), layers.Conv2D(3, 1)]
    reference = fit(tf.keras.Sequential([tf.keras.Input(x.shape[1:]), *two_layers]), xt, yt)
    args = {"depth": 2, "width": 8, "dense": 64, "dropout": 0.0}
    built_in = fit(unet2d.build(x.shape[1:], 3, SimpleNamespace(per_pixel=True), args), xt, yt)
    reached = mean_iou(built_in(xv, training=False).numpy(), yv)
    minimal = mean_iou(reference(xv, training=False).numpy(), yv)
    batch_statistics = mean_iou(built_in(xv, training=True).numpy(), yv)
    print(f"mean IoU: unet2d {reached:.3f} (batch statistics {batch_statistics:.3f}), reference {minimal:.3f}")
    assert reached >= 0.9 * minimal, (reached, minimal)
    assert reached >= batch_statistics - 0.03, (reached, batch_statistics)

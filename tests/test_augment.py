"""train.augment (pipeline/training/augment.py): the symmetry group each config allows, TensorFlow's transform
of a batch equal to numpy's of each sample, masks moving with their fields, and seeded draws."""

import numpy as np
import pytest

from pipeline import Sim2dlError
from pipeline.training.augment import Transform, apply_numpy, augment_batch, plan


def test_a_cube_has_48_distinct_symmetries_a_square_8_and_unequal_axes_only_flips():
    cube = plan({"symmetries": True}, (4, 4, 4))
    sample = np.arange(64).reshape(4, 4, 4)  # every entry distinct: distinct transforms give distinct arrays
    images = {apply_numpy(sample, t).tobytes() for t in cube}
    assert len(cube) == 48 and len(images) == 48
    assert cube[0] == Transform((0, 1, 2), ())  # the identity first
    assert len(plan({"symmetries": True}, (8, 8))) == 8
    assert plan({"symmetries": True}, (8, 6)) == [Transform((0, 1), f) for f in [(), (1,), (0,), (0, 1)]]
    # a cube split along depth (train.spatial.ranks_per_sample 2): axis 0 stays, the 8 symmetries of the
    # other two
    split = plan({"symmetries": True}, (4, 4, 4), split=2)
    assert len(split) == 8 and all(t.order[0] == 0 and 0 not in t.flips for t in split)
    assert plan({}, (4, 4, 4)) == []
    assert len(plan({"permute": [1, 2], "flips": [0]}, (4, 4, 4))) == 4


@pytest.mark.parametrize(
    "augment, shape, split, message",
    [
        (
            {"permute": [0, 1]},
            (8, 6),
            1,
            "config key 'train.augment.permute': axes [0, 1] have lengths [8, 6]",
        ),
        ({"flips": [3]}, (4, 4, 4), 1, "config key 'train.augment.flips': axes [3] are not spatial axes"),
        (
            {"flips": [0]},
            (4, 4, 4),
            2,
            "with train.spatial.ranks_per_sample 2 the split axis 0 is neither permuted nor flipped",
        ),
        (
            {"symmetries": True, "vector_labels": ["velocity"]},
            (4, 4),
            1,
            "labels ['velocity'] are directions",
        ),
        ({"symmetries": True}, (None, 4), 1, "variable-length samples"),
    ],
)
def test_augmentations_that_cannot_hold_are_config_errors(augment, shape, split, message):
    with pytest.raises(Sim2dlError, match=message.replace("[", r"\[").replace("]", r"\]")):
        plan(augment, shape, split)


def test_each_sample_of_a_batch_gets_numpy_s_transform_and_a_mask_moves_with_its_field():
    import tensorflow as tf

    transforms = plan({"symmetries": True}, (4, 4, 4))
    rng = np.random.default_rng(0)
    x = rng.normal(size=(16, 4, 4, 4, 2)).astype(np.float32)  # channels last stay last
    mask = (x[..., 0] > 0).astype(np.int32)  # a segmentation mask: a function of the field, pixel by pixel
    seed = tf.constant([7, 3], tf.int64)
    out_x, out_mask = (
        a.numpy() for a in augment_batch(tf.constant(x), tf.constant(mask), transforms, seed, True)
    )
    picked = []
    for i in range(len(x)):  # which transform each sample got: the one numpy's reference matches
        matches = [t for t in transforms if np.array_equal(apply_numpy(x[i], t), out_x[i])]
        assert len(matches) == 1, i
        picked.append(matches[0])
        assert np.array_equal(out_mask[i], apply_numpy(mask[i], matches[0]))  # the same transform
        assert np.array_equal(out_mask[i], (out_x[i][..., 0] > 0).astype(np.int32))
    assert len(set(picked)) > 4  # drawn per sample, not one for the batch
    # seeded: the same seed draws the same, another seed another; labels that are not masks stay put
    again = augment_batch(tf.constant(x), tf.constant(mask), transforms, seed, True)[0].numpy()
    assert np.array_equal(again, out_x)
    other = augment_batch(tf.constant(x), tf.constant(mask), transforms, tf.constant([7, 4], tf.int64), True)[
        0
    ]
    assert not np.array_equal(other.numpy(), out_x)
    labels = rng.normal(size=(16, 3)).astype(np.float32)
    _, same = augment_batch(tf.constant(x), tf.constant(labels), transforms, seed, False)
    assert np.array_equal(same.numpy(), labels)


def test_test_time_augmentation_averages_the_outputs_over_the_symmetries():
    """train.augment_eval: predict's outputs are the mean of the model's over the group's transforms of
    each sample (numpy's reference transforms), and its loss is that mean's."""
    import tensorflow as tf

    from pipeline.training.steps import step_functions

    tf.keras.utils.set_random_seed(5)
    inputs = tf.keras.layers.Input(shape=(4, 4, 4, 1))
    outputs = tf.keras.layers.Dense(2)(tf.keras.layers.Flatten()(inputs))  # not invariant: the mean differs
    model = tf.keras.Model(inputs, outputs)
    group = plan({"symmetries": True}, (4, 4, 4))
    assert len(group) == 48
    loss = tf.keras.losses.MeanSquaredError()
    _, predict = step_functions(model, None, loss, autograph=False, averaged_over=group)
    x = np.random.default_rng(6).normal(size=(3, 4, 4, 4, 1)).astype(np.float32)
    y = np.zeros((3, 2), np.float32)
    averaged, averaged_loss = predict(x, y)
    expected = np.mean([model(np.stack([apply_numpy(s, t) for s in x])).numpy() for t in group], axis=0)
    np.testing.assert_allclose(averaged.numpy(), expected, rtol=1e-5, atol=1e-6)
    assert not np.allclose(expected, model(x).numpy(), atol=1e-3)
    assert float(averaged_loss) == pytest.approx(float(np.mean(expected**2)), rel=1e-5)

"""train.device and train.mixed_precision: which device each rank takes for every way GPUs can be
visible (the GPU cases cannot run here: no GPU; they are the pure choice), and float16 loss scaling, run
for real on the CPU."""

import numpy as np
import pytest

from pipeline import Sim2dlError
from pipeline.training.devices import choose_device, precision_policy

SLURM_BOUND = {"SLURM_STEP_GPUS": "2"}  # Slurm bound one GPU to each task: each sees one
UNBOUND: dict[str, str] = {}  # mpiexec, or srun without a GPU binding


def test_a_rank_takes_the_one_gpu_it_sees_or_the_gpu_at_its_local_rank():
    bound = [choose_device("auto", 1, r, 4, SLURM_BOUND) for r in range(4)]
    assert {(c.kind, c.gpu_index, c.shared_by) for c in bound} == {("gpu", 0, 1)}
    node = [choose_device("gpu", 4, r, 4, UNBOUND) for r in range(4)]  # mpiexec on a 4-GPU node: all visible
    assert [c.gpu_index for c in node] == [0, 1, 2, 3] and all(c.shared_by == 1 for c in node)
    # more GPUs than ranks: one each, the rest idle
    assert choose_device("auto", 8, 1, 2, UNBOUND).gpu_index == 1


def test_more_ranks_than_gpus_share_them_under_auto_and_are_refused_under_gpu():
    shared = [choose_device("auto", 2, r, 4, UNBOUND) for r in range(4)]
    assert [c.gpu_index for c in shared] == [0, 1, 0, 1] and {c.shared_by for c in shared} == {2}
    assert "4 ranks on 2 GPUs, shared by 2 ranks" in shared[0].reason
    one = choose_device("auto", 1, 1, 2, UNBOUND)  # two ranks, one GPU, no per-task binding: they share it
    assert (one.gpu_index, one.shared_by) == (0, 2)
    with pytest.raises(Sim2dlError, match=r"'train.device': gpu, but 2 ranks of a node would share each GPU"):
        choose_device("gpu", 2, 0, 4, UNBOUND)


def test_cpu_and_no_gpu():
    hidden = {"CUDA_VISIBLE_DEVICES": ""}
    assert choose_device("cpu", 4, 0, 1, hidden).kind == "cpu"  # asked for: the GPUs stay unused
    auto = choose_device("auto", 0, 0, 2, hidden)
    assert (auto.kind, auto.reason) == ("cpu", "no GPU visible")
    no_gpu = r"'train.device': gpu, but local rank 3 sees no GPU .*CUDA_VISIBLE_DEVICES=''"
    with pytest.raises(Sim2dlError, match=no_gpu):
        choose_device("gpu", 0, 3, 4, hidden)
    with pytest.raises(Sim2dlError, match=r"'train.device': 'tpu' is not one of"):
        choose_device("tpu", 0, 0, 1, hidden)


def test_mixed_precision_is_float16_on_gpus_and_bfloat16_on_cpus():
    assert precision_policy(True, "gpu") == "mixed_float16"
    assert precision_policy(True, "cpu") == "mixed_bfloat16"
    assert precision_policy(False, "gpu") == precision_policy(False, "cpu") == "float32"


def test_float16_training_scales_the_loss_and_unscales_the_gradients():
    """The GPU policy's arithmetic, on the CPU: the loss-scaling optimizer's gradients equal float32's."""
    import tensorflow as tf

    from pipeline.training.optimizer import make_optimizer, scale_loss, unscale_gradients

    x = np.random.default_rng(0).normal(size=(16, 4)).astype("float32")
    grads = {}
    for policy in ("float32", "mixed_float16"):
        tf.keras.mixed_precision.set_global_policy(policy)
        try:
            tf.keras.utils.set_random_seed(1)
            layers = [
                tf.keras.Input((4,)),
                tf.keras.layers.Dense(8),
                tf.keras.layers.Dense(1, dtype="float32"),
            ]
            model = tf.keras.Sequential(layers)  # the hidden layer computes in the policy's float16
            optimizer = make_optimizer({"learning_rate": 0.01, "weight_decay": 0.0}, policy)
            with tf.GradientTape() as tape:
                scaled = scale_loss(optimizer, tf.reduce_mean(tf.square(model(x) - 1.0)))
            found = unscale_gradients(optimizer, tape.gradient(scaled, model.trainable_variables))
            grads[policy] = [g.numpy() for g in found]
        finally:
            tf.keras.mixed_precision.set_global_policy("float32")
        if policy == "mixed_float16":
            assert isinstance(optimizer, tf.keras.mixed_precision.LossScaleOptimizer)
            assert float(optimizer.loss_scale) > 1  # the loss really was scaled
    for a, b in zip(grads["float32"], grads["mixed_float16"], strict=True):
        assert b.dtype == np.float32  # float32 weights' gradients, at the loss's own scale
        np.testing.assert_allclose(a, b, rtol=2e-2, atol=1e-3)  # within float16's precision


def test_doctor_probes_the_gpus_where_a_rank_trains_and_judges_them_against_train_device(tmp_path):
    """The probe for real on this machine (no GPU, no container): TensorFlow sees none, so auto trains on
    the CPU and gpu is a failure with its fix; the verdicts for what a GPU node shows."""
    from pipeline.runtime.doctor import check_gpus, gpu_verdict

    from .conftest import make_config

    here = check_gpus(make_config(tmp_path), tmp_path)
    assert here.status == "ok" and "TensorFlow sees 0 GPU(s)" in here.detail and "uses the CPU" in here.detail
    refused = check_gpus(make_config(tmp_path, train={"device": "gpu"}), tmp_path)
    assert refused.status == "fail" and "train.device gpu will refuse to run" in refused.detail
    assert "container.gpus: true" in refused.fix
    node = {
        "cuda_visible_devices": "0",
        "device_files": ["/dev/nvidia0"],
        "tensorflow_gpus": ["/physical_device:GPU:0"],
    }
    assert gpu_verdict("gpu", node).status == "ok" and "one GPU per rank" in gpu_verdict("auto", node).detail
    # a GPU on the node that TensorFlow cannot use (no --nv, no driver)
    hidden = {**node, "tensorflow_gpus": []}
    assert gpu_verdict("auto", hidden).status == "warn" and gpu_verdict("cpu", hidden).status == "ok"


def test_weight_decay_makes_the_optimizer_adamw_decoupled_from_the_gradient():
    """train.weight_decay: AdamW, whose decay shrinks a weight whose gradient is zero (Adam would not move
    it)."""
    import tensorflow as tf

    from pipeline.training.optimizer import make_optimizer

    plain = make_optimizer({"learning_rate": 0.1, "weight_decay": 0.0}, "float32")
    decayed = make_optimizer({"learning_rate": 0.1, "weight_decay": 0.5}, "float32")
    assert type(plain).__name__ == "Adam" and type(decayed).__name__ == "AdamW"
    weight = tf.Variable([2.0])
    decayed.apply_gradients([(tf.constant([0.0]), weight)])
    assert float(weight.numpy()[0]) == pytest.approx(2.0 * (1 - 0.1 * 0.5))

"""The compiled steps every way of training runs (offline epochs, online steps): a data-parallel training
step (Horovod's averaged gradients, loss scaling under float16, every rank starting from rank 0's weights
and optimizer state after its first step) and a prediction; and the validation over a rank's batches,
added across ranks. Memory: the model's activations for one batch; the task's validation sums.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from typing import Any

from pipeline.training.augment import Transform, transform_batch
from pipeline.training.optimizer import scale_loss, unscale_gradients
from pipeline.training.tasks import Evaluation, Task


def step_functions(
    model: Any, optimizer: Any, loss_fn: Any, autograph: bool, averaged_over: Sequence[Transform] = ()
) -> tuple[Any, Any]:
    """(train_step(x, y, first) -> loss, predict(x, y) -> (outputs, loss)), as tf.functions; averaged_over:
    the symmetries whose outputs predict averages (train.augment_eval: test-time augmentation). AutoGraph's
    rewrite of the step and of all it calls was half of a small run's time (~10 s of 23, profiled); the
    built-in models have no Python control flow on tensors, so they are traced as written (autograph
    False); a user's model may have such flow: it keeps AutoGraph."""
    import horovod.tensorflow as hvd
    import tensorflow as tf

    @tf.function(autograph=autograph)
    def train_step(x: Any, y: Any, first: bool) -> Any:  # `first` is a Python bool: traced twice
        with tf.GradientTape() as tape:
            loss = loss_fn(y, model(x, training=True))
            scaled = scale_loss(optimizer, loss)
        tape = hvd.DistributedGradientTape(tape)
        grads = unscale_gradients(optimizer, tape.gradient(scaled, model.trainable_variables))
        optimizer.apply_gradients(zip(grads, model.trainable_variables, strict=True))
        if first:  # after the optimizer has created its slots: everyone starts from rank 0's state
            hvd.broadcast_variables(model.variables, root_rank=0)
            hvd.broadcast_variables(optimizer.variables(), root_rank=0)
        return loss

    @tf.function(autograph=autograph)
    def predict(x: Any, y: Any) -> Any:
        if averaged_over:
            outputs = tf.add_n([model(transform_batch(x, t), training=False) for t in averaged_over])
            outputs = outputs / len(averaged_over)
        else:
            outputs = model(x, training=False)
        return outputs, loss_fn(y, outputs)

    return train_step, predict


def evaluate(
    pipeline: Iterable[Any], task: Task, predict: Any, comm: Any, counted: bool = True
) -> tuple[float, Evaluation]:
    """The validation loss (the training loss's definition, over every rank's validation records) and
    the task's evaluation, its sums added and its examples joined across ranks (on every rank). A rank
    whose records another rank counts already (spatial parallelism: `counted` False) runs the model on them
    all the same (its share of the split layers) and adds nothing."""
    evaluation = task.evaluation()
    loss_sum, count = 0.0, 0
    for x, y in pipeline:
        outputs, loss = predict(x, y)
        if not counted:
            continue
        n = int(y.shape[0])
        loss_sum += float(loss) * n
        count += n
        first = x[task.data.feature] if isinstance(x, dict) else x  # the figure shows the first feature
        task.update(evaluation, outputs.numpy(), y.numpy(), first.numpy())
    totals = comm.allgather((loss_sum, count, evaluation))
    loss_sum, count = sum(t[0] for t in totals), sum(t[1] for t in totals)
    combined = Evaluation.combine([t[2] for t in totals], task.max_examples)
    return (loss_sum / count if count else float("nan")), combined

"""train: data-parallel TensorFlow + Horovod training from the staged shards.

Each rank reads its own staged files (from the node's `staged.json`), interleaves them, shuffles records
across shards with a per-epoch seed, batches, parses (one vectorised parse per batch) and prefetches.
Variable-length records are bucketed by length. The task (pipeline.training.tasks: regression, classification,
segmentation) shapes the labels and gives the loss and metrics; the model (pipeline.training.models) is a
built-in or the user's own builder, checked before any data is touched.

Horovod: hvd.init, weights and optimizer state broadcast from rank 0 after the first step, gradients
averaged with DistributedGradientTape, metrics averaged with allreduce, learning rate scaled by the number
of ranks with a linear warm-up. The loop is explicit (not Keras fit) so the time spent waiting for input
is measured directly: the time blocked in `next(iterator)` against the step time.

Spatial parallelism (`train.spatial.ranks_per_sample: S`, pipeline.training.spatial): the ranks form
data-parallel groups of S consecutive ranks (on one node, or across nodes that each hold every shard); the
ranks of a group read the same records, each decodes its depth slab of every sample, and the split model
exchanges halos within the group.
The learning rate scales with the groups, validation counts each group once, and the model saved at the
end is the unsplit one with the trained weights (it takes whole samples).

Few simulations (docs/training.md): `train.augment` draws a symmetry of each training sample's spatial
axes in the input pipeline (pipeline.training.augment, seeded by the epoch seed and the batch's number);
`train.keep: best` saves and scores the epoch of lowest validation loss (its weights written beside the
checkpoints, so a resumed run keeps it), `train.patience` stops early, `train.weight_decay` is AdamW's.
After training, a classical baseline (pipeline.training.baseline) is fitted on the same training records
and scored on the same validation records: one more streamed pass, its sums allreduced; the summary has
it beside every score and the log warns where the network is below it.

Rank 0 writes a TF checkpoint every epoch (TF writes the data first and the `checkpoint` state file
last, so an interrupted save leaves the previous checkpoint valid); a rerun resumes from it. Outputs in
{workdir}/train: metrics.csv/json, the final model, learning curves, the task's validation figure
(predicted vs true, a confusion matrix, or masks), and a summary with the task's metrics on the validation
set (R² per label; accuracy and macro-F1; IoU per class) and the model's provenance.

The step is one call: the epochs (pipeline/training/epochs.py) or a population (train.population:
population_run.py, its rounds tournament.py, its plan population.py, its model transfers exchange.py).
What runs lives below it in pipeline/training/: the ends every mode shares (run.py: the start's record,
the kept model's scores, the baseline, the summary and the saved model), the set-up (session.py), the
input pipeline and each rank's files (inputs.py) and the training kernel (kernel.py).

Memory: the model (and a copy of the best epoch's weights), the input pipeline's buffers, the task's
validation sums and the baseline's (never a value per record). Time: epochs x records / (ranks x
samples/s per rank), plus one pass for the baseline.
"""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import Any

from pipeline.formats.metadata import load_metadata
from pipeline.training import devices
from pipeline.training.session import check_before_tensorflow


def train(
    config: Mapping[str, Any],
    merged_dir: Path,
    stage_summary: Path,
    out_dir: Path,
    comm: Any,
    baseline: bool = True,
    trial: Mapping[str, Any] | None = None,
) -> dict[str, Any]:
    """One training run from the staged shards, in epochs or as a population (train.population). baseline
    False: no classical baseline (search trials, which only need the validation loss); trial: a search
    trial's {id, hyperparameters}, written beside its curves for TensorBoard's HParams dashboard."""
    devices.hide_gpus_if_cpu(config["train"])  # before TensorFlow is imported (start_horovod's again)
    check_before_tensorflow(config, load_metadata(merged_dir), comm)
    if config["train"]["population"]["enabled"]:
        from pipeline.training.population_run import train_population

        return train_population(config, merged_dir, stage_summary, out_dir, comm, baseline, trial)
    from pipeline.training.epochs import train_epochs

    return train_epochs(config, merged_dir, stage_summary, out_dir, comm, baseline, trial)

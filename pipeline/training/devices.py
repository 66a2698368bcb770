"""Which device each training rank computes on (`train.device: auto | cpu | gpu`), and the precision policy
that goes with it (`train.mixed_precision`).

One GPU per rank. Where Slurm bound GPUs to the task (`--gpus-per-task=1 --gpu-bind=...`) or a user
narrowed `CUDA_VISIBLE_DEVICES`, a rank sees exactly one GPU and takes it; where a rank sees all of its
node's GPUs (mpiexec, `srun` without a binding), it takes the one at its local rank. More ranks on a node
than GPUs share them round-robin, said in the log (`auto`) or refused (`gpu`). `cpu` hides CUDA before
TensorFlow initialises it, so no rank touches a GPU.

`choose_device` is pure (counts in, a `DeviceChoice` out); `apply` does what it says in TensorFlow, once
per process, before any operation runs. Memory and time: nothing that grows with the data.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from pipeline import Sim2dlError

DEVICES = ("auto", "cpu", "gpu")


@dataclass(frozen=True)
class DeviceChoice:
    """What one rank computes on: `gpu_index` among the GPUs it sees (None: the CPU), and why."""

    kind: str  # "cpu" or "gpu"
    gpu_index: int | None
    reason: str
    shared_by: int = 1  # ranks of this node on the same GPU

    def describe(self, visible: str | None) -> dict[str, Any]:
        """The summary's record of it, with the CUDA_VISIBLE_DEVICES the rank was given."""
        return {
            "kind": self.kind,
            "gpu_index": self.gpu_index,
            "cuda_visible_devices": visible,
            "shared_by": self.shared_by,
            "reason": self.reason,
        }


def choose_device(
    setting: str,
    visible_gpus: int,
    local_rank: int,
    local_size: int,
    environ: Mapping[str, str] | None = None,
) -> DeviceChoice:
    """The device of a rank that sees `visible_gpus` GPUs, being `local_rank` of `local_size` ranks on
    its node, under train.device `setting`; `environ` (default os.environ) says how Slurm bound GPUs."""
    environ = os.environ if environ is None else environ
    if setting not in DEVICES:
        raise Sim2dlError(f"config key 'train.device': '{setting}' is not one of {list(DEVICES)}")
    if setting == "cpu":
        return DeviceChoice("cpu", None, "train.device is cpu")
    if visible_gpus == 0:
        if setting == "gpu":
            visible = environ.get("CUDA_VISIBLE_DEVICES")
            raise Sim2dlError(
                f"config key 'train.device': gpu, but local rank {local_rank} sees no GPU that TensorFlow "
                f"can use (CUDA_VISIBLE_DEVICES={visible!r}; on Slurm ask for --gpus-per-task, in a "
                "container give the runtime its GPU switch: docs/training.md)"
            )
        return DeviceChoice("cpu", None, "no GPU visible")
    if visible_gpus == 1:
        shared = local_size if local_size > 1 and not bound_per_task(environ) else 1
        return _gpu(setting, 0, "the one GPU this rank sees", shared)
    if visible_gpus >= local_size:
        return DeviceChoice("gpu", local_rank, f"GPU {local_rank} of {visible_gpus}: its local rank")
    per_gpu = -(-local_size // visible_gpus)
    return _gpu(setting, local_rank % visible_gpus, f"{local_size} ranks on {visible_gpus} GPUs", per_gpu)


def _gpu(setting: str, index: int, reason: str, shared_by: int) -> DeviceChoice:
    if shared_by > 1 and setting == "gpu":
        raise Sim2dlError(
            f"config key 'train.device': gpu, but {shared_by} ranks of a node would share each GPU "
            f"({reason}): start one rank per GPU (MPI_TASKS, --gpus-per-task), or set train.device: auto to "
            "share them"
        )
    return DeviceChoice(
        "gpu", index, reason + (f", shared by {shared_by} ranks" if shared_by > 1 else ""), shared_by
    )


def bound_per_task(environ: Mapping[str, str]) -> bool:
    """Slurm gave this task its own GPUs (SLURM_STEP_GPUS, --gpus-per-task): one GPU seen is its own."""
    return bool(environ.get("SLURM_STEP_GPUS") or environ.get("SLURM_GPUS_PER_TASK"))


def hide_gpus_if_cpu(settings: Mapping[str, Any]) -> None:
    """train.device cpu: no GPU is visible to this process (call before TensorFlow initialises CUDA)."""
    if settings["device"] == "cpu":
        os.environ["CUDA_VISIBLE_DEVICES"] = ""


def apply(settings: Mapping[str, Any], local_rank: int, local_size: int) -> dict[str, Any]:
    """Choose this rank's device, make it the only one TensorFlow uses (memory growth on), and set the
    precision policy for it; returns the summary's record. Before any TensorFlow operation."""
    import tensorflow as tf

    visible = os.environ.get("CUDA_VISIBLE_DEVICES")
    gpus = tf.config.list_physical_devices("GPU")
    choice = choose_device(settings["device"], len(gpus), local_rank, local_size)
    if choice.kind == "gpu":
        gpu = gpus[choice.gpu_index]
        tf.config.set_visible_devices([gpu], "GPU")
        tf.config.experimental.set_memory_growth(gpu, True)
    elif gpus:
        tf.config.set_visible_devices([], "GPU")
    policy = precision_policy(settings["mixed_precision"], choice.kind)
    if policy != "float32":
        tf.keras.mixed_precision.set_global_policy(policy)
    return {**choice.describe(visible), "precision": policy}


def precision_policy(mixed: bool, kind: str) -> str:
    """Keras' policy: float16 compute with loss scaling on GPUs (their tensor cores), bfloat16 on CPUs
    (float16 there is slow and needs scaling for nothing); float32 without mixed precision."""
    if not mixed:
        return "float32"
    return "mixed_float16" if kind == "gpu" else "mixed_bfloat16"

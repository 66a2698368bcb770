"""Splits (`merge.splits`): which named subset each record belongs to, from a stable hash, in one place
for the steps that need to know it: convert (normalisation statistics from the training split only, class
counts per split) and merge (each split's shards). Without merge.splits, train holds out
train.validation_fraction of the records by TensorFlow's hash of their sample ids (`holdout_validation`);
`SampleSplits` gives convert the same answer by the same hash without TensorFlow.

A record's split is xxh3_64 of its key / 2^64 against the cumulative fractions of the splits in name
order: the same for any rank count, rerun or part layout. The key is the record's parent sample id (the
sub-volumes of one input stay together), or with `merge.split_by: file` its file's id (every sample of a
file, its time steps or events, stays together). Memory and time: one hash per record, a byte per record.
"""

from __future__ import annotations

import bisect
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

import numpy as np
import xxhash

TRAINING = "train"  # the split whose records training passes read (and statistics come from)


def split_bounds(fractions: Sequence[float]) -> np.ndarray:
    """The splits' upper bounds on the unit interval, the last above 1: fractions summing to 1 within
    rounding still put every hash in a split."""
    bounds = np.cumsum(fractions)
    bounds[-1] = 2.0
    return bounds


def split_numbers(keys: Iterable[str], fractions: Sequence[float]) -> np.ndarray:
    """Each record's split (its number in `fractions`' order), from a stable hash of its key."""
    unit = np.array([xxhash.xxh3_64_intdigest(k.encode()) for k in keys], np.uint64) / 2.0**64
    return np.searchsorted(split_bounds(fractions), unit, side="right").astype(np.uint8)


def split_key(parent: str, index: int, split_by: str) -> str:
    """What a record's split is drawn from: its parent sample id, or (split_by 'file') its file's id,
    which the parent is with the '#INDEX' of a sample along source.samples_along (index >= 0) removed."""
    return parent.rpartition("#")[0] if split_by == "file" and index >= 0 else parent


def split_keys(parents: Sequence[str], indices: Sequence[int] | None, split_by: str) -> list[str]:
    """split_key of every record (indices None: no sample is one along an axis)."""
    if split_by == "sample" or indices is None:
        return list(parents)
    return [split_key(p, i, split_by) for p, i in zip(parents, indices, strict=True)]


class SplitPlan:
    """The configured splits (merge.splits, merge.split_by): names in order and their fractions."""

    def __init__(self, merge_settings: Mapping[str, Any]) -> None:
        self.names = sorted(merge_settings["splits"])
        self.fractions = [merge_settings["splits"][name] for name in self.names]
        self.split_by = merge_settings.get("split_by", "sample")
        self.bounds = split_bounds(self.fractions).tolist() if self.names else []

    def __bool__(self) -> bool:
        return bool(self.names)

    def record_split(self, sample_id: str, index: int | None) -> int:
        """One record's split number as ingest meets it (its sample id, its index along the file or None):
        the number part_split_numbers gives it later, so ingest can put each split's records in parts of
        their own. About a microsecond: no array per record."""
        unit = xxhash.xxh3_64_intdigest(
            split_key(sample_id, -1 if index is None else index, self.split_by).encode()
        )
        return bisect.bisect_right(self.bounds, unit / 2.0**64)

    @property
    def largest(self) -> float:
        """The largest split's fraction (1 without splits)."""
        return max(self.fractions, default=1.0)


def part_split_numbers(part: Any, id_column: str, fractions: Sequence[float], split_by: str) -> np.ndarray:
    """The split of every record of a part (pipeline.formats.parts.Part), keyed by its `id_column` text and,
    with split_by 'file', its index along source.samples_along."""
    indices = part.meta_columns.get("index")
    keys = split_keys(part.texts(id_column), None if indices is None else indices.tolist(), split_by)
    return split_numbers(keys, fractions)


HOLDOUT_BUCKETS = 1000


def holdout_validation(sample_ids: Any, fraction: float) -> Any:
    """Whether records are held out for validation when there are no merge.splits (train.validation_fraction):
    TensorFlow's FarmHash (Fingerprint64) of the sample id into 1,000 buckets, in train's tf.data graph. A
    tensor in, a tensor out; `holdout_validation_of_ids` is the same answer without TensorFlow."""
    import tensorflow as tf

    return tf.strings.to_hash_bucket_fast(sample_ids, HOLDOUT_BUCKETS) < round(fraction * HOLDOUT_BUCKETS)


def holdout_validation_of_ids(sample_ids: Iterable[str | bytes], fraction: float) -> np.ndarray:
    """`holdout_validation` for convert (statistics from the training records alone), by the same
    Fingerprint64 (cityhash's farmhash; tests/test_convert.py checks them equal): importing TensorFlow for it
    was most of a small convert's CPU."""
    import farmhash

    buckets = np.fromiter((farmhash.Fingerprint64(i) % HOLDOUT_BUCKETS for i in sample_ids), np.int64)
    return buckets < round(fraction * HOLDOUT_BUCKETS)


def holdout_tournament(sample_ids: Any, fraction: float) -> Any:
    """Whether training records are a population trainer's tournament set (train.population's
    tournament_fraction of its partition, never trained on): the same hash as the validation hold-out, of
    the sample id with a suffix, so that the two hold-outs are independent. A tensor in, a tensor out."""
    import tensorflow as tf

    salted = tf.strings.join([sample_ids, "/tournament"])
    return tf.strings.to_hash_bucket_fast(salted, HOLDOUT_BUCKETS) < round(fraction * HOLDOUT_BUCKETS)


class SampleSplits:
    """The split of every converted sample, as convert sees them: merge.splits by its hash of the parent
    record (or file), else train's hold-out ('train' / 'validation') by the hash of each sample's own id."""

    def __init__(self, merge_settings: Mapping[str, Any], validation_fraction: float) -> None:
        self.plan = SplitPlan(merge_settings)
        self.fraction = validation_fraction
        self.names = self.plan.names if self.plan else [TRAINING, "validation"]
        self.training = self.names.index(TRAINING) if TRAINING in self.names else None

    def of_records(self, part: Any) -> np.ndarray | None:
        """The split of each record of an ingested part (its samples share it), or None where each sample's
        own id decides (train's hold-out)."""
        if self.plan:
            return part_split_numbers(part, "sample_id", self.plan.fractions, self.plan.split_by)
        return None

    def of_samples(self, sample_ids: Sequence[str]) -> np.ndarray:
        """The splits of converted samples by their ids (train's hold-out)."""
        if not self.fraction or not sample_ids:
            return np.zeros(len(sample_ids), np.uint8)
        return holdout_validation_of_ids(sample_ids, self.fraction).astype(np.uint8)

    def describe(self) -> dict[str, Any]:
        if self.plan:
            if self.training is None:
                return {"split": None, "why": "every record (merge.splits has no 'train' split)"}
            return {"split": TRAINING, "split_by": self.plan.split_by}
        return {
            "split": TRAINING,
            "held_out": "train.validation_fraction by hash of the sample id",
            "validation_fraction": self.fraction,
        }

"""merge's metadata.json: what is about the dataset as a whole (format, feature spec, statistics, counts,
shards, splits, classes, units); its size grows with the shards, not with the records."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from pipeline import __version__
from pipeline.data.tables import PROVENANCE_SCHEMA
from pipeline.data.transforms import stack_component_names
from pipeline.formats.shards import ShardWriter
from pipeline.formats.slabs import sliced_fields
from pipeline.steps.merge.generations import MergeHistory


def metadata(
    settings: Mapping[str, Any],
    writer_class: type[ShardWriter],
    history: MergeHistory,
    stats_doc: Mapping[str, Any],
    ingested: Mapping[str, Any],
) -> dict[str, Any]:
    """What is about the dataset as a whole, every generation merged so far (history); its size grows with
    the shards, not with the records."""
    spec, shard_info, records = history.spec, history.shards, history.records
    doc = {
        "sim2dl_version": __version__,
        "format": writer_class.format,
        "compression": settings["compression"],
        "encoding": writer_class.encoding(),
        "index": writer_class.index_meaning,
        "feature_spec": spec,
        "sort_by": settings["sort_by"],
        "plan_digest": history.digest,
        "counts": {
            "input_files": ingested["inputs"],
            "accepted_files": ingested["accepted"],
            "rejected_files": ingested["rejected"],
            "convert_rejected": stats_doc.get("rejected", 0),
            "records": records,
            "shards": sum(1 for s in shard_info if s.get("slab", 0) == 0),  # slab files count once
        },
        "normalisation": "x -> (x - mean) / std with the statistics below, applied to the listed fields",
        "statistics": stats_doc["statistics"],
        # convert's log1p, applied before the normalisation (what a surrogate's saved model undoes)
        "log1p": list(stats_doc.get("settings", {}).get("log1p", [])),
        "statistics_from": stats_doc.get("statistics_from", {"split": None}),
        # integer labels: {min, max, counts per split} (what train checks classes and weights against)
        "class_counts": stats_doc.get("class_counts", {}),
        "shards": shard_info,
        "provenance": {
            "path": "provenance",
            "format": "parquet",
            "columns": PROVENANCE_SCHEMA.names,
            "rows": "one per record: its shard, its number in the shard, its sample id, source file and "
            "index along source.samples_along in that file (null: the file is the sample)",
        },
    }
    if "samples" in ingested:  # many samples per file: accepted and rejected count samples
        doc["counts"]["samples_found"] = ingested["samples"]
    doc.update(ingested_extras(ingested, spec, stats_doc))
    doc.update(layout_sections(settings, spec, shard_info, sorted(settings["splits"])))
    # the first generation's plan: the same as the dataset grows (stage keeps its copy's directory)
    doc["first_plan_digest"] = history.generations[0].digest
    if len(history.generations) > 1:
        doc["generations"] = history.summary()
    return doc


def ingested_extras(
    ingested: Mapping[str, Any], spec: Mapping[str, Any], stats_doc: Mapping[str, Any] | None = None
) -> dict[str, Any]:
    """What ingest learned of the sources that a reader of the shards needs: class names, units,
    component names (a convert.stack's: its members) and mesh geometry of the fields in the spec."""
    doc: dict[str, Any] = {}
    if ingested.get("classes"):
        doc["classes"] = ingested["classes"]  # categorical fields: class names in id order
    units = {name: unit for name, unit in ingested.get("units", {}).items() if name in spec}
    if units:
        doc["units"] = units  # CF units of the values as read (before convert's log1p and normalisation)
    names = {name: n for name, n in ingested.get("component_names", {}).items() if name in spec}
    names.update(stack_component_names((stats_doc or {}).get("settings", {}), spec))
    if names:
        doc["component_names"] = names  # the entries along a field's last axis (e.g. a label's parameters)
    geometry = {name: g for name, g in ingested.get("geometry", {}).items() if name in spec}
    if geometry:
        doc["geometry"] = geometry  # a mesh's geometry, axes, grid and layout (openPMD)
    return doc


def layout_sections(
    settings: Mapping[str, Any],
    spec: Mapping[str, Any],
    shard_info: list[dict[str, Any]],
    split_names: Sequence[str],
) -> dict[str, Any]:
    """The slabs' and the splits' sections (present only when configured)."""
    doc: dict[str, Any] = {}
    if settings["slabs"] > 1:
        doc["slabs"] = {
            "count": settings["slabs"],
            "fields": sliced_fields(spec),
            "layout": "each shard is `count` files (NAME.slab-K-of-COUNT.SUFFIX) of the same records in the "
            "same order; file K holds planes [K*T, (K+1)*T) of the listed fields (T = first axis / count), "
            "every other field and the sample id whole; the feature spec gives the whole shapes",
        }
    if split_names:
        doc["splits"] = {
            name: {
                "fraction": settings["splits"][name],
                "directory": f"shards/{name}",
                "records": sum(s["records"] for s in shard_info if s["split"] == name),
                "shards": sum(1 for s in shard_info if s["split"] == name and s.get("slab", 0) == 0),
            }
            for name in split_names
        }
        doc["split_assignment"] = (
            f"xxh3_64({'file id' if settings['split_by'] == 'file' else 'parent sample id'}, UTF-8) / 2^64 "
            "against the cumulative fractions of the splits in name "
            "order: the same for every rank count and rerun; sub-volumes of one input share its split"
        )
    return doc

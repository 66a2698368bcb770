# merge: pack converted samples into globally sorted shards (TFRecord or HDF5) with indexes and one
# metadata file. Only metadata.json is declared: shards of an interrupted run are kept and reused.
rule merge:
    input:
        manifest=LAYOUT.manifest,
        stats=LAYOUT.stats,
    output:
        metadata=LAYOUT.metadata,
    params:
        settings=settings("convert", "merge"),
    resources:
        tasks=2,
    shell:
        "sim2dl launch --mpi {resources.mpi:q} --tasks {resources.tasks} --config {RESOLVED_CONFIG:q} merge"
        " --ingest {LAYOUT.ingest:q} --convert {LAYOUT.convert:q} --out {LAYOUT.merged:q}"

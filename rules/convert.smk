# convert: select features/labels, cast, log1p, crop/split; global statistics by MPI reduction.
rule convert:
    input:
        manifest=LAYOUT.manifest,
    output:
        stats=LAYOUT.stats,
    log:
        rejects=LAYOUT.convert_rejects,
    params:
        settings=settings("convert"),
    resources:
        tasks=2,
    shell:
        "{resources.mpi} -n {resources.tasks} sim2dl convert --config {RESOLVED_CONFIG:q}"
        " --ingest {LAYOUT.ingest:q} --out {LAYOUT.convert:q}"

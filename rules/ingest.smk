# ingest: scan and validate the input files into a manifest, packing accepted samples into parts.
# The rejects list is declared as a log so that it is kept when the run fails on too many rejects.
rule ingest:
    input:
        LAYOUT.simulate_summary if config["simulate"]["enabled"] else [],
    output:
        manifest=LAYOUT.manifest,
    log:
        rejects=LAYOUT.ingest_rejects,
    params:
        settings=settings("source", "ingest"),
    resources:
        tasks=2,
    shell:
        "sim2dl launch --mpi {resources.mpi:q} --tasks {resources.tasks} --config {RESOLVED_CONFIG:q} ingest --source {SOURCE:q}"
        " --out {LAYOUT.ingest:q}"

# ingest: scan and validate the input files into a manifest, packing accepted samples into parts.
# The rejects list is declared as a log so that it is kept when the run fails on too many rejects.
rule ingest:
    input:
        ingest_inputs,
    output:
        summary=LAYOUT.ingest_summary,
    log:
        step=LAYOUT.log("ingest"),
        rejects=LAYOUT.ingest_rejects,
    params:
        config=run_config,
        settings=settings("ingest"),
    threads: MPI_TASKS["ingest"]
    resources:
        tasks=MPI_TASKS["ingest"],
    shell:
        mpi_step("ingest")

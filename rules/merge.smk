# merge: pack converted samples into globally sorted shards (TFRecord or HDF5) with indexes and one
# metadata file. Only metadata.json is declared: shards of an interrupted run are kept and reused.
rule merge:
    input:
        ingested=LAYOUT.ingest_summary,
        stats=LAYOUT.stats,
    output:
        metadata=LAYOUT.metadata,
    log:
        step=LAYOUT.log("merge"),
    params:
        config=run_config,
        settings=settings("merge"),
    threads: MPI_TASKS["merge"]
    resources:
        tasks=MPI_TASKS["merge"],
    shell:
        mpi_step("merge")

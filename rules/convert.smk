# convert: select features/labels, cast, log1p, crop/split; global statistics by MPI reduction.
rule convert:
    input:
        ingested=LAYOUT.ingest_summary,
    output:
        stats=LAYOUT.stats,
    log:
        step=LAYOUT.log("convert"),
        rejects=LAYOUT.convert_rejects,
    params:
        config=run_config,
        settings=settings("convert"),
    threads: MPI_TASKS["convert"]
    resources:
        tasks=MPI_TASKS["convert"],
    shell:
        mpi_step("convert")

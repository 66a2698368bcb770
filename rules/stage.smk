# stage: copy the shards to node-local storage, every byte read once from the shared file system and
# forwarded between nodes over MPI; each node gets staged.json for the training input pipeline.
rule stage:
    input:
        metadata=LAYOUT.metadata,
    output:
        summary=LAYOUT.stage_summary,
    log:
        step=LAYOUT.log("stage"),
    params:
        config=run_config,
        settings=settings("stage"),
    threads: MPI_TASKS["stage"]
    resources:
        tasks=MPI_TASKS["stage"],
    shell:
        mpi_step("stage")

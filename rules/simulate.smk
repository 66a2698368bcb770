# simulate: the built-in fast simulator writes one HDF5 file per sample (not needed when
# simulate.enabled is false and source.path points at existing output).
rule simulate:
    output:
        LAYOUT.simulate_summary,
    log:
        step=LAYOUT.log("simulate"),
    params:
        config=run_config,
        source=lambda wc: RUN[wc.workdir].source,
        settings=settings("simulate"),
    threads: MPI_TASKS["simulate"]
    resources:
        tasks=MPI_TASKS["simulate"],
    shell:
        mpi_step("simulate", "--out {params.source:q}")

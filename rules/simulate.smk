# simulate: the built-in fast simulator writes one HDF5 file per sample (not needed when
# simulate.enabled is false and source.path points at existing output). An adaptive design's figures
# (simulate.adaptive) go to the report: declared when every run of the workflow is adaptive (a sweep
# mixing adaptive and fixed designs keeps them in raw/adaptive/ only).
rule simulate:
    output:
        LAYOUT.simulate_summary,
        **ADAPTIVE_FIGURES,
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

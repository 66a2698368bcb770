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
    resources:
        tasks=2,
    shell:
        "sim2dl launch --mpi {resources.mpi:q} --tasks {resources.tasks} --config {params.config:q}"
        " simulate --out {params.source:q} > {log.step:q} 2>&1"

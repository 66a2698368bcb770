# simulate: the built-in fast simulator writes one HDF5 file per sample (skipped when simulate.enabled
# is false and source.path points at existing output).
if config["simulate"]["enabled"]:

    rule simulate:
        output:
            LAYOUT.simulate_summary,
        params:
            settings=settings("simulate"),
        resources:
            tasks=2,
        shell:
            "sim2dl launch --mpi {resources.mpi:q} --tasks {resources.tasks} --config {RESOLVED_CONFIG:q} simulate --out {SOURCE:q}"

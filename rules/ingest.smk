# ingest: scan and validate the input files into a manifest, packing accepted samples into parts.
# The rejects list is declared as a log so that it is kept when the run fails on too many rejects.
def ingest_inputs(wildcards):
    """The simulator's output, and the files beside the data (source.list, source.labels_table) if set."""
    run = RUN[wildcards.workdir]
    simulated = run.config["simulate"]["enabled"]
    side = sim2dl_config.side_files(run.config["source"], run.source)
    return [
        *([run.layout.simulate_summary] if simulated else []),
        # an ensemble's runs table is written by simulate, with its summary
        *(p for p in side if not (simulated and p.parent == run.layout.raw)),
    ]


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
    resources:
        tasks=2,
    shell:
        "sim2dl launch --mpi {resources.mpi:q} --tasks {resources.tasks} --config {params.config:q}"
        " ingest > {log.step:q} 2>&1"

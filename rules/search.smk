# search: BOHB over real training trials (rank 0 master, other ranks workers); its best configuration
# is merged into the final train rule's config when search.enabled is true.
rule search:
    input:
        metadata=LAYOUT.metadata,
        staged=LAYOUT.stage_summary,
        model=lambda wc: sim2dl_config.model_files(RUN[wc.workdir].config["train"]),
    output:
        best=LAYOUT.search_best,
        progress=report(LAYOUT.search_plot, caption="../report/search.rst", category="Search"),
    log:
        step=LAYOUT.log("search"),
    params:
        config=run_config,
        settings=settings("search"),
    resources:
        tasks=2,
    shell:
        "sim2dl launch --mpi {resources.mpi:q} --tasks {resources.tasks} --config {params.config:q}"
        " search > {log.step:q} 2>&1"

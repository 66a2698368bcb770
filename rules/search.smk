# search: BOHB over real training trials (rank 0 master, other ranks workers); its best configuration
# is merged into the final train rule's config when search.enabled is true.
rule search:
    input:
        metadata=LAYOUT.metadata,
        staged=LAYOUT.stage_summary,
        model=model_inputs,
    output:
        best=LAYOUT.search_best,
        progress=report(LAYOUT.search_plot, caption="../report/search.rst", category="Search"),
    log:
        step=LAYOUT.log("search"),
    params:
        config=run_config,
        settings=settings("search"),
    threads: MPI_TASKS["search"]
    resources:
        tasks=MPI_TASKS["search"],
        gpu=gpus("search"),
        tasks_per_gpu=tasks_per_gpu("search"), runtime=120,
    shell:
        mpi_step("search")

# throughput: a figure of the data steps' times and rates, from the JSON summaries in their logs.
rule throughput:
    input:
        metadata=LAYOUT.metadata,
        staged=LAYOUT.stage_summary,
    output:
        report(LAYOUT.throughput_plot, caption="../report/throughput.rst", category="Data"),
    log:
        step=LAYOUT.log("throughput"),
    params:
        config=run_config,
    threads: MPI_TASKS["throughput"]
    resources:
        tasks=MPI_TASKS["throughput"],
    shell:
        mpi_step("throughput")


localrules:
    throughput,

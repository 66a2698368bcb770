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
    resources:
        tasks=1,
    shell:
        "sim2dl launch --mpi {resources.mpi:q} --tasks {resources.tasks} --config {params.config:q}"
        " throughput > {log.step:q} 2>&1"


localrules:
    throughput,

# train: data-parallel TensorFlow + Horovod training from the staged shards, one process per rank.
# With search.enabled, the search's best configuration is merged on top of the config (--overrides).
def searched(wildcards):
    run = RUN[wildcards.workdir]
    return run.layout.search_best if run.config["search"]["enabled"] else None


rule train:
    input:
        metadata=LAYOUT.metadata,
        staged=LAYOUT.stage_summary,
        model=lambda wc: sim2dl_config.model_files(RUN[wc.workdir].config["train"]),
        best=lambda wc: searched(wc) or [],
    output:
        summary=LAYOUT.train_summary,
        curves=report(LAYOUT.learning_curves, caption="../report/learning_curves.rst", category="Training"),
        validation=report(LAYOUT.validation_figure, caption="../report/validation.rst", category="Training"),
    log:
        step=LAYOUT.log("train"),
    params:
        config=run_config,
        overrides=lambda wc: ["--overrides", searched(wc)] if searched(wc) else [],
        settings=settings("train"),
    resources:
        tasks=2,
    shell:
        "sim2dl launch --mpi {resources.mpi:q} --tasks {resources.tasks} --config {params.config:q}"
        " {params.overrides:q} train > {log.step:q} 2>&1"

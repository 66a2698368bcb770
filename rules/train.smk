# train: data-parallel TensorFlow + Horovod training from the staged shards, one process per rank.
# With search.enabled, the search's best configuration is merged on top of the config (--overrides).
rule train:
    input:
        metadata=LAYOUT.metadata,
        staged=LAYOUT.stage_summary,
        model=model_inputs,
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
    threads: MPI_TASKS["train"]
    resources:
        tasks=MPI_TASKS["train"],
        gpu=gpus("train"),
        tasks_per_gpu=tasks_per_gpu("train"),
    shell:
        mpi_step("train", launch_options="{params.overrides:q}")

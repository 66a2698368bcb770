# train: data-parallel TensorFlow + Horovod training from the staged shards, one process per rank.
# With search.enabled, the search's best configuration is merged on top of the config (--overrides).
# With train.online.enabled, `sim2dl online` instead: the ensemble and training in one job, from no file
# (the simulations run inside it), so no data step runs.
rule train:
    input:
        unpack(train_inputs),
    output:
        summary=LAYOUT.train_summary,
        curves=report(LAYOUT.learning_curves, caption="../report/learning_curves.rst", category="Training"),
        scores=report(LAYOUT.scores_figure, caption="../report/scores.rst", category="Training"),
    log:
        step=LAYOUT.log("train"),
    params:
        config=run_config,
        overrides=lambda wc: ["--overrides", searched(wc)] if searched(wc) else [],
        settings=lambda wc: RUN[wc.workdir].settings(training_step(wc)),
        step=training_step,
    threads: MPI_TASKS["train"]
    resources:
        tasks=MPI_TASKS["train"],
        gpu=gpus("train"),
        tasks_per_gpu=tasks_per_gpu("train"),
    shell:
        mpi_step("{params.step}", launch_options="{params.overrides:q}")

# train: data-parallel TensorFlow + Horovod training from the staged shards, one process per rank.
# With search.enabled, the search's best configuration is merged on top of the config (--overrides).
SEARCHED = config["search"]["enabled"]


rule train:
    input:
        metadata=LAYOUT.metadata,
        staged=LAYOUT.stage_summary,
        best=LAYOUT.search_best if SEARCHED else [],
    output:
        summary=LAYOUT.train_summary,
    params:
        settings=settings("train", "search") if SEARCHED else settings("train"),
        overrides=["--overrides", LAYOUT.search_best] if SEARCHED else [],
    resources:
        tasks=2,
    shell:
        "sim2dl launch --mpi {resources.mpi:q} --tasks {resources.tasks} --config {RESOLVED_CONFIG:q} {params.overrides:q} train"
        " --merged {LAYOUT.merged:q} --stage-summary {input.staged:q} --out {LAYOUT.train:q}"

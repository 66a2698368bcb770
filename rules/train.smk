# train: data-parallel TensorFlow + Horovod training from the staged shards, one process per rank.
rule train:
    input:
        metadata=LAYOUT.metadata,
        staged=LAYOUT.stage_summary,
    output:
        summary=LAYOUT.train_summary,
    params:
        settings=settings("train"),
    resources:
        tasks=2,
    shell:
        "{resources.mpi} -n {resources.tasks} sim2dl train --config {RESOLVED_CONFIG:q}"
        " --merged {LAYOUT.merged:q} --stage-summary {input.staged:q} --out {LAYOUT.train:q}"

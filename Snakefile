# sim2dl workflow: simulation output -> validated manifest -> converted samples -> sorted shards
# -> node-local staging -> (hyperparameter search ->) distributed training.
#
#   snakemake --cores 2                      # the laptop demo (config/config.yaml)
#   snakemake --cores 2 --configfile my-data.yaml   # your data: that file is the whole config
#   snakemake --profile slurm                # a cluster (profiles/slurm)
#   snakemake --config workdir=results/x merge='{shard_size_mb: 4}'   # overrides / sweeps
#
# Every rule runs `sim2dl <step>` (the pipeline package) with one MPI launch; the rule files only wire
# inputs, outputs, logs, resources and the command.

include: "rules/common.smk"


wildcard_constraints:
    workdir="|".join(re.escape(w) for w in RUN),



# The image every step's code is in (container.name:tag). Steps enter it through `sim2dl launch`, one
# container per MPI rank with the host's MPI bound in (container.runtime); this directive records it for
# Snakemake's own tools (--lint, --containerize) and single-node `--sdm apptainer` runs.
container: f"docker://{config['container']['name']}:{config['container']['tag']}"


include: "rules/simulate.smk"
include: "rules/ingest.smk"
include: "rules/convert.smk"
include: "rules/merge.smk"
include: "rules/stage.smk"
include: "rules/search.smk"
include: "rules/train.smk"
include: "rules/throughput.smk"


report: "report/workflow.rst"


rule all:
    default_target: True
    input:
        [r.layout.train_summary for r in RUNS],
        [r.layout.throughput_plot for r in RUNS if not r.config["train"]["online"]["enabled"]],
        [SWEEP_DIR / "summary.csv"] if "sweep" in config else [],


if "sweep" in config:

    localrules:
        sweep_summary,

    # The points compared: validation loss, R² per parameter, throughput (summary.csv, summary.png).
    rule sweep_summary:
        input:
            [r.layout.train_summary for r in RUNS],
        output:
            SWEEP_DIR / "summary.csv",
            report(SWEEP_DIR / "summary.png", caption="report/sweep.rst", category="Sweep"),
        log:
            SWEEP_DIR / "sweep.log",
        shell:
            "sim2dl sweep --config {SWEEP_CONFIG:q} >> {log:q} 2>&1"


# Under the Slurm executor, a job waiting for nodes that are down would hold the workflow forever: a
# watcher reports such jobs and cancels them after slurm.unavailable_nodes_timeout_s (pipeline/runtime/slurm_watch.py).
onstart:
    if submits_to_slurm():
        from pipeline.runtime import slurm_watch

        slurm_watch.start(Path(workflow.workdir_init), config["slurm"]["unavailable_nodes_timeout_s"])


# Ended well: the scores beside their baselines, and where the summary, the figures and the report are
# (pipeline/reporting/status.py: outcome), so that a run says what it gave, not only "9 of 9 steps".
onsuccess:
    from pipeline.reporting.status import outcome

    for r in RUNS:
        said = outcome(r.layout.workdir)
        if said:
            print(said)


# Ended in error (Ctrl-C included): no job of this workflow stays in the queue (Snakemake can miss one).
onerror:
    if submits_to_slurm():
        from pipeline.runtime import slurm_watch

        slurm_watch.cancel_leftovers(Path(workflow.workdir_init))

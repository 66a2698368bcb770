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

import json
import re
from pathlib import Path

import yaml
from snakemake.utils import min_version

from pipeline import Sim2dlError
from pipeline import config as sim2dl_config
from pipeline.storage.fsutil import write_text_atomic

min_version("9.0")


# No `configfile:` directive: Snakemake would merge the demo config into a user's --configfile, adding
# the demo's fields and search space to theirs. The demo applies only when no config file is given.
_resolved = sim2dl_config.workflow_config(dict(config), bool(workflow.overwrite_configfiles))
config.clear()
config.update(_resolved)
# sim2dl's own validation (the same schema, defaults filled in): strings from --config coerced where the
# schema wants numbers, every problem named as `config key 'a.b.c': ...` (unknown keys with the nearest
# valid one), as `sim2dl STEP --config` says it.
try:
    sim2dl_config.validate(config)
except Sim2dlError as e:
    raise WorkflowError(str(e)) from None


def write_resolved(path, resolved_config):
    """The validated config (defaults filled in), which every step reads; rewritten only when it changes."""
    text = yaml.safe_dump(json.loads(json.dumps(resolved_config)), sort_keys=False)
    if not path.exists() or path.read_text() != text:
        write_text_atomic(path, text)


class Run:
    """One run of the workflow: a validated config and its workdir (a sweep has one per point)."""

    def __init__(self, run_config):
        self.config = run_config
        self.layout = sim2dl_config.layout(run_config)
        self.source = sim2dl_config.source_dir(run_config)
        self.resolved = self.layout.workdir / "config.resolved.yaml"
        write_resolved(self.resolved, run_config)

    def settings(self, step):
        """The config values `step` reads (pipeline.config.STEP_SETTINGS), as a stable string: a rule's
        `params`, so Snakemake reruns exactly the steps whose settings changed."""
        return json.dumps(sim2dl_config.step_settings(self.config, step), sort_keys=True)


if "sweep" in config:
    from pipeline.steps.sweep import point_configs, sweep_workdir

    try:
        RUNS = [Run(point) for point in point_configs(config).values()]
    except Sim2dlError as e:
        raise WorkflowError(str(e)) from None
    SWEEP_DIR = sweep_workdir(config)
    SWEEP_CONFIG = SWEEP_DIR / "sweep.resolved.yaml"
    write_resolved(SWEEP_CONFIG, config)
else:
    RUNS = [Run(config)]
RUN = {str(r.layout.workdir): r for r in RUNS}

# Rules are patterns over the run's workdir: one DAG holds every point of a sweep.
LAYOUT = sim2dl_config.Layout(Path("{workdir}"))


wildcard_constraints:
    workdir="|".join(re.escape(w) for w in RUN),


def run_config(wildcards):
    return str(RUN[wildcards.workdir].resolved)


def settings(step):
    return lambda wildcards: RUN[wildcards.workdir].settings(step)


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
        [r.layout.throughput_plot for r in RUNS],
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
    plugin = workflow.executor_plugin
    if plugin is not None and plugin.name == "slurm" and not (workflow.remote_exec or workflow.subprocess_exec):
        from pipeline.runtime import slurm_watch

        slurm_watch.start(Path(workflow.workdir_init), config["slurm"]["unavailable_nodes_timeout_s"])

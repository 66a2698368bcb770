# Helpers of the rule files, as in the snakemake-workflows catalog (common.smk). The validated config of each
# run, the input functions, and the one command line every rule runs. The rule files only wire inputs,
# outputs, logs and the command; MPI task counts live in one place, MPI_TASKS below (memory and runtime
# defaults in the workflow profile, profiles/default/config.yaml).

import json
import re
from pathlib import Path

import yaml
from snakemake.utils import min_version

from pipeline import Sim2dlError
from pipeline import config as sim2dl_config
from pipeline import steps as sim2dl_checks
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
    sim2dl_checks.validated(config)
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
        if run_config["train"]["online"]["enabled"] and run_config["search"]["enabled"]:
            raise WorkflowError("config keys 'train.online.enabled' and 'search.enabled': a search's trials train "
                                "on staged shards, which online training does not write: set search.enabled: false")
        population = run_config["train"]["population"]["enabled"]
        if population and run_config["search"]["enabled"]:
            raise WorkflowError("config keys 'train.population.enabled' and 'search.enabled': a search's trials train "
                                "one model each, and the population is its own search (train.population.mutate): "
                                "set one of them to false")
        if population and run_config["train"]["online"]["enabled"]:
            raise WorkflowError("config keys 'train.population.enabled' and 'train.online.enabled': online training "
                                "has one trainer (its ranks share the arriving runs): set one of them to false")
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
# An adaptive design's figures, for the report (rules/simulate.smk says when)
ADAPTIVE_FIGURES = (
    {
        "design": report(LAYOUT.design_figure, caption="../report/adaptive_design.rst", category="Design"),
        "error": report(LAYOUT.design_error_figure, caption="../report/adaptive_error.rst", category="Design"),
    }
    if all(r.config["simulate"]["enabled"] and r.config["simulate"]["adaptive"]["enabled"] for r in RUNS)
    else {}
)


def run_config(wildcards):
    return str(RUN[wildcards.workdir].resolved)


def settings(step):
    return lambda wildcards: RUN[wildcards.workdir].settings(step)


def ingest_inputs(wildcards):
    """The simulator's output, and the files beside the data (source.list, source.labels_table) if set."""
    run = RUN[wildcards.workdir]
    simulated = run.config["simulate"]["enabled"]
    side = sim2dl_config.side_files(run.config["source"], run.source)
    return [
        *([run.layout.simulate_summary] if simulated else []),
        # an ensemble's runs table is written by simulate, with its summary
        *(p for p in side if not (simulated and p.parent == run.layout.raw)),
    ]


def searched(wildcards):
    run = RUN[wildcards.workdir]
    return run.layout.search_best if run.config["search"]["enabled"] else None


def online(wildcards):
    return RUN[wildcards.workdir].config["train"]["online"]["enabled"]


def training_step(wildcards):
    """train, or with train.online.enabled online (the ensemble and training in one job)."""
    return "online" if online(wildcards) else "train"


def train_inputs(wildcards):
    """The staged shards (and the search's best configuration) train reads; online training reads none."""
    if online(wildcards):
        return {"model": model_inputs(wildcards)}
    best = searched(wildcards)
    layout = RUN[wildcards.workdir].layout
    return {"metadata": layout.metadata, "staged": layout.stage_summary, "model": model_inputs(wildcards),
            **({"best": best} if best else {})}


def model_inputs(wildcards):
    """A train.model that is a file of the user's (and the files beside it that it names)."""
    return sim2dl_config.model_files(RUN[wildcards.workdir].config["train"])


# MPI ranks of each rule (resources.tasks), and the cores a local run reserves for them (threads). Here and
# not in the workflow profile: a command line's --set-resources replaces the profile's set-resources as a
# whole, so `--set-resources train:tasks=8` would drop every other rule to one rank.
MPI_TASKS = {"simulate": 2, "ingest": 2, "convert": 2, "merge": 2, "stage": 2, "search": 2, "train": 2, "throughput": 1}


def gpus(step):
    """The GPUs a training step's batch job asks Slurm for (the plugin's `gpu` resource: sbatch --gpus):
    its ranks x slurm.gpus_per_task; `sim2dl launch` then binds them per rank. 0 asks for none. The
    command runs once whatever the count: MPI rules are not wrapped in srun by the job-step executor."""
    return lambda wildcards: MPI_TASKS[step] * RUN[wildcards.workdir].config["slurm"]["gpus_per_task"]


def tasks_per_gpu(step):
    """The Slurm plugin gives a GPU job `--ntasks-per-gpu=<its tasks>` unless this resource says otherwise:
    all ranks on one GPU. 1 (each rank beside a GPU of its own) for one GPU per rank; 0 (no such option)
    for several, which --ntasks-per-gpu cannot say."""
    return lambda wildcards: int(RUN[wildcards.workdir].config["slurm"]["gpus_per_task"] == 1)


def mpi_step(step, *step_arguments, launch_options=""):
    """The shell command of a rule: `sim2dl launch` runs the step with the rule's MPI tasks (resources
    from the workflow profile) on its run's config; its output goes to the rule's step log."""
    options = f" {launch_options}" if launch_options else ""
    arguments = "".join(f" {a}" for a in step_arguments)
    return (
        "sim2dl launch --mpi {resources.mpi:q} --tasks {resources.tasks} --config {params.config:q}"
        f"{options} {step}{arguments} > {{log.step:q}} 2>&1"
    )


def submits_to_slurm():
    """This Snakemake process submits the jobs to Slurm (not one running inside a job)."""
    plugin = workflow.executor_plugin
    return plugin is not None and plugin.name == "slurm" and not (workflow.remote_exec or workflow.subprocess_exec)

# sim2dl workflow: simulation output -> validated manifest -> converted samples -> sorted shards
# -> node-local staging -> (hyperparameter search ->) distributed training.
#
#   snakemake --cores 2                      # the laptop demo (config/config.yaml)
#   snakemake --profile slurm                # a cluster (profiles/slurm, issue #7)
#   snakemake --config workdir=results/x merge='{shard_size_mb: 4}'   # overrides / sweeps
#
# Every rule runs `sim2dl <step>` (the pipeline package) with one MPI launch; the rule files only wire
# inputs, outputs, resources and the command.

import json

import yaml
from snakemake.utils import min_version, validate

from pipeline import Sim2dlError
from pipeline import config as sim2dl_config
from pipeline.fsutil import write_text_atomic

min_version("9.0")


configfile: "config/config.yaml"


# --config delivers nested values as strings: coerce them where the schema wants numbers, then validate.
sim2dl_config.coerce_strings(config, sim2dl_config.schema(), sim2dl_config.schema())
validate(config, "config/schema.yaml")
try:
    sim2dl_config.check_consistency(config)
except Sim2dlError as e:
    raise WorkflowError(str(e)) from None

LAYOUT = sim2dl_config.layout(config)
SOURCE = sim2dl_config.source_dir(config)

# The validated config (defaults filled in) is what every step reads. It is rewritten only when it
# changes; per-rule `params` hold the sections a step depends on, so Snakemake reruns exactly the steps
# whose settings changed.
RESOLVED_CONFIG = LAYOUT.workdir / "config.resolved.yaml"
_resolved_text = yaml.safe_dump(json.loads(json.dumps(config)), sort_keys=False)
if not RESOLVED_CONFIG.exists() or RESOLVED_CONFIG.read_text() != _resolved_text:
    write_text_atomic(RESOLVED_CONFIG, _resolved_text)


def settings(*sections):
    """The config sections a step depends on, as a stable string (a Snakemake params rerun trigger)."""
    return json.dumps({s: config[s] for s in sections}, sort_keys=True)


include: "rules/simulate.smk"
include: "rules/ingest.smk"
include: "rules/convert.smk"
include: "rules/merge.smk"
include: "rules/stage.smk"
include: "rules/search.smk"
include: "rules/train.smk"


rule all:
    default_target: True
    input:
        LAYOUT.train_summary,

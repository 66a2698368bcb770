"""Configuration: one YAML file validated against the schema (pipeline/schema.yaml, shipped with the
package; config/schema.yaml links to it), with defaults filled in.

The Snakefile validates with Snakemake's `validate` (same schema); the CLI uses `load` so a step run
by hand gets the same checks and the same error messages.

A user's config file is the whole config: what it leaves out comes from the schema's defaults, never from
the demo config (config/config.yaml), which is used only when no config file is given to `snakemake`.
`STEP_SETTINGS` says which config keys each step reads: the Snakefile makes them each rule's rerun
trigger, and the CLI hands each step only those keys (`step_config`), so the table cannot fall behind
the code. Memory and time: proportional to the config's size (a few KB), independent of the data.
"""

from __future__ import annotations

import copy
import difflib
import functools
import sys
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import jsonschema
import yaml

from pipeline import OLD_NAMES_UNTIL, Sim2dlError
from pipeline.paths import Layout

REPO = Path(__file__).resolve().parent.parent
SCHEMA_PATH = Path(__file__).resolve().parent / "schema.yaml"  # package data: found by any install
DEMO_CONFIG = REPO / "config" / "config.yaml"  # in a source checkout only

# The config keys (a section, or a dotted key inside one) that each step reads; None: the whole config.
# Snakemake reruns a step when one of its values changes (and only then); `sim2dl STEP` gives the step
# a config holding only these keys, so reading any other key fails at once, in the tests too.
MASK_SUFFIX = "_mask"  # source.fields.NAME.missing: mask adds the uint8 field NAME_mask (1: missing)
SHARD_FORMAT_SETTINGS = ("merge.format", "merge.compression", "merge.shard_size_mb")
SPLIT_SETTINGS = ("merge.splits", "merge.split_by")
STEP_SETTINGS: dict[str, tuple[str, ...] | None] = {
    "simulate": ("simulate", "source.path"),
    # Parts are framed, sized and split as merge will write shards; the first feature gives a record's length.
    "ingest": (
        "source",
        "ingest",
        "convert.features",
        "convert.stack",
        "convert.deposit",
        *SHARD_FORMAT_SETTINGS,
        *SPLIT_SETTINGS,
    ),
    # Normalisation statistics come from the training split alone (pipeline.data.splits).
    # (or, without splits, from the records train does not hold out: train.validation_fraction)
    "convert": ("convert", *SPLIT_SETTINGS, "train.validation_fraction"),
    "merge": ("convert", "merge"),
    "stage": ("stage",),
    # Stages again itself where node-local copies are gone; the simulator's label names for the plots.
    # simulate and source: a surrogate of levels is saved answering for the costliest (training/levels.py
    # reads simulate.fidelities and source.fields); a change of either reruns ingest, and so train, anyway
    "train": ("train", "stage", "simulate", "simulate.enabled", "source", "convert.stack"),
    "search": ("search", "train", "stage", "simulate", "simulate.enabled", "source", "convert.stack"),
    # The ensemble and training in one job: the simulator, reading and converting each run, training.
    "online": ("simulate", "source", "ingest", "convert", "train"),
    "sweep": None,  # every point's config is built from the whole file
    "throughput": (),  # a figure from the data steps' summaries: reads no setting
}


# Keys renamed so that one name has one meaning: old dotted key -> new (in the same section, or one above
# it). An old key keeps working for this release, moved to its new name before validation with a warning
# that names the new key; both given is an error.
RENAMED = {
    # `split` was also merge.splits and train.spatial's ranks: here it is a sub-volume's size
    "convert.split": "convert.subvolume",
    # `split` here: the ranks that share each sample
    "train.spatial.split": "train.spatial.ranks_per_sample",
    # `initial` is a run count (simulate.adaptive.initial); here: the starting blobs, fixed or random
    "simulate.reaction.initial": "simulate.reaction.blobs",
    # `features` names fields (convert.features); here: a count, the channels of each step
    "simulate.trace.features": "simulate.trace.channels",
    # `inputs` and `outputs` are a model's tensors (and simulate.adaptive.outputs array names); here: counts
    "train.next_state.inputs": "train.next_state.states_in",
    "train.next_state.outputs": "train.next_state.states_out",
    # `steps` is also the steps/ package: here optimizer steps, there time steps
    "train.online.steps": "train.online.optimizer_steps",
    "simulate.reaction.steps": "simulate.reaction.time_steps",
    # one key for an ensemble's size in runs, whatever runs it: a built-in family's samples, a command's
    # runs and an adaptive design's budget were three keys
    "simulate.samples": "simulate.runs",
    "simulate.adaptive.budget": "simulate.runs",
}


def renamed(config: dict[str, Any]) -> list[str]:
    """Old keys moved to their new names in place (RENAMED); returns a warning per key moved. Both names
    given is an error naming the two."""
    warnings = []
    for old, new in RENAMED.items():
        *section, old_name = old.split(".")
        parent = section_of(config, section)
        if parent is None or old_name not in parent:
            continue
        *new_section, new_name = new.split(".")
        new_parent = section_of(config, new_section)  # the old key's section or one above it: it exists
        assert new_parent is not None
        if new_name in new_parent:
            raise Sim2dlError(
                f"config keys '{old}' and '{new}': '{old}' is the old name of '{new}'; give only '{new}'"
            )
        new_parent[new_name] = parent.pop(old_name)
        warnings.append(
            f"config key '{old}' is now '{new}': the old name works until release {OLD_NAMES_UNTIL}"
        )
    return warnings


def section_of(config: Mapping[str, Any], section: Sequence[str]) -> dict[str, Any] | None:
    """The config's section at a dotted path's parts (None where it is not a mapping)."""
    parent: Any = config
    for name in section:
        parent = parent.get(name) if isinstance(parent, dict) else None
    return parent if isinstance(parent, dict) else None


def _with_defaults(validator_class: type) -> type:
    """A validator that also fills in `default` values (the jsonschema FAQ's recipe)."""
    validate_properties = validator_class.VALIDATORS["properties"]

    def set_defaults(validator: Any, properties: Any, instance: Any, schema: Any) -> Any:
        if isinstance(instance, dict):
            for name, sub in properties.items():
                if "default" in sub and name not in instance:
                    instance[name] = _copy(sub["default"])
        yield from validate_properties(validator, properties, instance, schema)

    return jsonschema.validators.extend(validator_class, {"properties": set_defaults})


def _copy(value: Any) -> Any:
    return copy.deepcopy(value)


@functools.lru_cache(maxsize=1)
def _schema_parsed() -> dict[str, Any]:
    # libyaml's parser where PyYAML has it: every step parses the schema, ~0.2 s in pure Python
    loader = getattr(yaml, "CSafeLoader", yaml.SafeLoader)
    return yaml.load(SCHEMA_PATH.read_text(), Loader=loader)


def schema() -> dict[str, Any]:
    """The config schema (parsed once per process; each caller gets its own copy)."""
    return copy.deepcopy(_schema_parsed())


def coerce_strings(value: Any, sub_schema: Mapping[str, Any], root: Mapping[str, Any]) -> Any:
    """Turn strings into numbers/booleans/null where the schema wants those.

    `snakemake --config merge='{shard_size_mb: 4}'` delivers nested values (and list items) as strings.
    """
    if "$ref" in sub_schema:
        ref = sub_schema["$ref"].split("/")[-1]
        sub_schema = {**root["definitions"][ref], **{k: v for k, v in sub_schema.items() if k != "$ref"}}
    for option in sub_schema.get("oneOf", []):
        coerced = coerce_strings(value, option, root)
        if coerced is not value:
            return coerced
    types = sub_schema.get("type", [])
    types = [types] if isinstance(types, str) else types
    if (
        isinstance(value, str)
        and "string" not in types
        and set(types) & {"number", "integer", "boolean", "null"}
    ):
        try:
            parsed = yaml.safe_load(value)
        except yaml.YAMLError:
            return value
        return parsed if not isinstance(parsed, str) else value
    if isinstance(value, dict):
        props = sub_schema.get("properties", {})
        extra = sub_schema.get("additionalProperties")
        for key, item in value.items():
            item_schema = props.get(key, extra if isinstance(extra, dict) else {})
            value[key] = coerce_strings(item, item_schema, root)
    elif isinstance(value, list) and isinstance(sub_schema.get("items"), dict):
        return [coerce_strings(item, sub_schema["items"], root) for item in value]
    return value


def validate(config: dict[str, Any]) -> dict[str, Any]:
    """Validate in place and fill defaults (old key names moved to the new, with a warning on stderr);
    raise Sim2dlError naming the offending key."""
    for warning in renamed(config):
        print(f"sim2dl: warning: {warning}", file=sys.stderr)
    the_schema = schema()
    coerce_strings(config, the_schema, the_schema)
    validator = _with_defaults(jsonschema.Draft202012Validator)(the_schema)
    # Two passes: the first fills defaults of nested objects, the second validates those defaults too.
    for _ in range(2):
        errors = sorted(validator.iter_errors(config), key=lambda e: list(e.absolute_path))
    if errors:
        lines = [f"  {line}" for e in errors[:10] for line in error_lines(e)]
        raise Sim2dlError("invalid configuration:\n" + "\n".join(lines))
    ensemble_defaults(config)
    check_consistency(config)
    return config


def error_lines(error: jsonschema.ValidationError) -> list[str]:
    """One line per problem, naming the whole key: an unknown key with the nearest valid one suggested."""
    key = ".".join(str(p) for p in error.absolute_path)
    if error.validator == "additionalProperties" and isinstance(error.instance, dict):
        known = list(error.schema.get("properties", {}))
        lines = []
        for name in sorted(set(error.instance) - set(known)):
            full = f"{key}.{name}" if key else str(name)
            near = difflib.get_close_matches(str(name), known, n=1)
            hint = (
                f"; did you mean '{key + '.' if key else ''}{near[0]}'?"
                if near
                else f" (known: {', '.join(known)})"
            )
            lines.append(f"config key '{full}': unknown key{hint}")
        if lines:
            return lines
    return [f"config key '{key or '(top level)'}': {error.message}"]


ENSEMBLE_LABELS = {"path": "runs.parquet", "key": "run", "match": "run_directory"}


def runs_a_command(simulate: Mapping[str, Any]) -> bool:
    """Whether the simulate step runs the user's simulator (simulate.command, or levels with commands of
    their own: simulate.fidelities) rather than a built-in family."""
    return bool(simulate.get("command") or simulate.get("fidelities"))


def ensemble_defaults(config: dict[str, Any]) -> None:
    """The ensemble's size where simulate.runs is null (DEFAULT_RUNS), and labels without glue: the data
    an ensemble wrote (simulate.command, or levels with their own commands; no source.path) is matched to
    its runs table by run directory, so {column: PARAMETER} fields need no source.labels_table."""
    sim, source = config["simulate"], config["source"]
    if sim["runs"] is None:
        sim["runs"] = default_runs(sim)
    if sim["enabled"] and runs_a_command(sim) and not source["path"] and source["labels_table"] is None:
        source["labels_table"] = dict(ENSEMBLE_LABELS)


# simulate.runs where it is null, by what runs the ensemble
DEFAULT_RUNS = {"built-in family": 1024, "command": 100, "adaptive": 64}


def default_runs(sim: Mapping[str, Any]) -> int:
    if sim["adaptive"]["enabled"]:
        return DEFAULT_RUNS["adaptive"]
    return DEFAULT_RUNS["command" if runs_a_command(sim) else "built-in family"]


def check_consistency(config: Mapping[str, Any]) -> None:
    """Rules a JSON schema cannot say: names used in convert must be declared source fields."""
    specs = config["source"]["fields"]
    masks = {name + MASK_SUFFIX for name, spec in specs.items() if spec.get("missing") == "mask"}
    conv = config["convert"]
    check_deposits(conv, set(specs))
    check_stacks(conv, set(specs) | masks | set(conv["deposit"]))
    fields = set(specs) | masks | set(conv["stack"]) | set(conv["deposit"])
    for key in ("features", "labels", "log1p", "normalise", "per_channel"):
        unknown = [f for f in conv[key] if f not in fields]
        if unknown:
            raise Sim2dlError(
                f"config key 'convert.{key}': {unknown} not declared in source.fields ({sorted(fields)})"
            )
    check_model_inputs(conv, config["train"]["model"])
    overlap = set(conv["features"]) & set(conv["labels"])
    if overlap:
        raise Sim2dlError(f"config key 'convert.labels': {sorted(overlap)} also listed in convert.features")
    check_adaptive(config["simulate"], config["train"]["online"]["enabled"])
    check_fidelities(config)
    trace = config["simulate"]["trace"]
    if trace["min_length"] > trace["max_length"]:
        raise Sim2dlError("config key 'simulate.trace': min_length is larger than max_length")
    train_keys = schema()["properties"]["train"]["properties"]
    unknown = [
        k for k in config["search"]["space"] if k not in train_keys and not k.startswith("model_args.")
    ]
    if unknown:
        raise Sim2dlError(
            f"config key 'search.space': {unknown} are not train settings (nor model_args.NAME)"
        )
    merge = config["merge"]
    if merge["splits"] and abs(sum(merge["splits"].values()) - 1) > 1e-6:
        raise Sim2dlError(f"config key 'merge.splits': the fractions {merge['splits']} do not sum to 1")


def check_adaptive(sim: Mapping[str, Any], online: bool) -> None:
    """simulate.adaptive: an ensemble of the user's simulator whose runs are chosen: offline in rounds by an
    emulator of named outputs, or online by the trainers."""
    adaptive = sim["adaptive"]
    if not adaptive["enabled"]:
        return
    if not runs_a_command(sim):
        raise Sim2dlError(
            "config key 'simulate.adaptive.enabled': an adaptive design runs simulate.command over "
            "simulate.space (the built-in families draw their own parameters)"
        )
    if not online and not adaptive["outputs"]:
        raise Sim2dlError(
            "config key 'simulate.adaptive.outputs': name the arrays of a run's file the emulator learns "
            "(e.g. [state])"
        )
    if sim["fidelities"] and sim["runs"] < 3:
        raise Sim2dlError(f"config key 'simulate.runs': {sim['runs']}, a design's budget, is below 3")
    if adaptive["initial"] > sim["runs"] and not sim["fidelities"]:
        raise Sim2dlError(
            f"config key 'simulate.runs': {sim['runs']} runs, the adaptive design's budget, is below "
            f"its initial design's {adaptive['initial']} (simulate.adaptive.initial)"
        )


# What simulate.fidelities does not work with yet, by the key that turns it on: why
FIDELITIES_REFUSE = {
    "simulate.design": "a grid's points are not nested (a smaller grid is not part of a larger one): "
    "use sobol, random or lhs",
    "simulate.adaptive.emulator": "the rounds choose with a multi-fidelity emulator of one Gaussian "
    "process per level (pipeline/design/multifidelity.py): set emulator: gp",
    "simulate.adaptive.acquisition": "the rounds choose (point, level) pairs by the costliest level's "
    "integrated variance taken off per unit cost (pipeline/design/fidelity_choice.py): set acquisition: "
    "integrated_variance",
    "train.online.enabled": "online training on several levels is not built: train on the finished runs",
}


def check_fidelities(config: Mapping[str, Any]) -> None:
    """simulate.fidelities: levels of the user's simulator, each with a command, nested (each level's runs
    at most the cheaper one's before it), named once, for a surrogate that knows each run's level; what is
    not built with them is refused by name."""
    sim = config["simulate"]
    levels = sim["fidelities"]
    if not levels:
        return
    if not sim["command"] and not all(spec.get("command") for spec in levels):
        raise Sim2dlError(
            "config key 'simulate.command': with simulate.fidelities, a level without a command: give each "
            "level its own `command`, or set simulate.command for their `args`"
        )
    turned_on = {
        "simulate.design": sim["design"] == "grid",
        "simulate.adaptive.emulator": sim["adaptive"]["enabled"] and sim["adaptive"]["emulator"] != "gp",
        "simulate.adaptive.acquisition": sim["adaptive"]["enabled"]
        and sim["adaptive"]["acquisition"] != "integrated_variance",
        "train.online.enabled": config["train"]["online"]["enabled"],
    }
    for key, why in FIDELITIES_REFUSE.items():
        if turned_on[key]:
            raise Sim2dlError(f"config key '{key}': with simulate.fidelities, {why}")
    for i, spec in enumerate(levels):
        key, cheaper = f"simulate.fidelities[{i}]", levels[i - 1]
        if [other["name"] for other in levels].index(spec["name"]) != i:
            raise Sim2dlError(f"config key '{key}.name': '{spec['name']}' names two levels")
        if spec.get("command") and spec["args"]:
            raise Sim2dlError(
                f"config key '{key}': give `command` (the whole argument vector) or `args` (appended to "
                "simulate.command), not both"
            )
        if sim["adaptive"]["enabled"] and spec["runs"] < 3:
            raise Sim2dlError(
                f"config key '{key}.runs': with simulate.adaptive each level starts with at least 3 runs "
                f"(round 0), which its emulator needs; '{spec['name']}' has {spec['runs']}"
            )
        if i and spec["runs"] > cheaper["runs"]:
            raise Sim2dlError(
                f"config key '{key}.runs': {spec['runs']} runs of '{spec['name']}' are more than the "
                f"{cheaper['runs']} of the cheaper level before it ('{cheaper['name']}'): a level runs the "
                "first points of the design, each of them also run by every cheaper level"
            )
    check_level_input(config)


def check_level_input(config: Mapping[str, Any]) -> None:
    """With simulate.fidelities the model learns the levels' outputs with each run's level among its
    inputs, whatever the task (this module names no task: the tasks are plug-ins)."""
    conv = config["convert"]
    inputs = {f for name in conv["features"] for f in conv["stack"].get(name, [name])}
    levels = {
        name for name, spec in config["source"]["fields"].items() if spec.get("column") == "fidelity_index"
    }
    if not inputs & levels:
        raise Sim2dlError(
            "config key 'convert.features': with simulate.fidelities the model must know each run's "
            "level: declare a field {column: fidelity_index} in source.fields and put it among the features "
            "(e.g. in the stack of the parameters; docs/ensembles.md, Multi-fidelity)"
        )
    entry = (config["train"].get("model_args") or {}).get("level_entry")
    stacks = [conv["stack"].get(name, [name]) for name in conv["features"]]
    places = [stack.index(name) for stack in stacks for name in sorted(levels) if name in stack]
    if entry is not None and entry not in places:
        raise Sim2dlError(
            f"config key 'train.model_args.level_entry': {entry!r} is not the level's place in the stack of "
            f"the features {stacks} (the level, {sorted(levels)}, is entry {places})"
        )


def check_deposits(conv: Mapping[str, Any], fields: set[str]) -> None:
    """convert.deposit: new names, from declared fields (positions, weights, and box or origin named)."""
    for name, spec in conv["deposit"].items():
        if name in fields:
            raise Sim2dlError(f"config key 'convert.deposit.{name}': a source field has that name already")
        for key in ("positions", "weights", "box", "origin"):
            value = spec.get(key)
            if isinstance(value, str) and value not in fields:
                raise Sim2dlError(
                    f"config key 'convert.deposit.{name}.{key}': '{value}' not declared in source.fields"
                )
        for key in ("box", "origin"):
            value = spec.get(key)
            if isinstance(value, list) and len(value) not in (1, len(spec["shape"])):
                raise Sim2dlError(
                    f"config key 'convert.deposit.{name}.{key}': {len(value)} values for a "
                    f"{len(spec['shape'])}-d grid"
                )


def check_stacks(conv: Mapping[str, Any], fields: set[str]) -> None:
    """convert.stack: new names, made of declared fields."""
    for name, members in conv["stack"].items():
        if name in fields:
            raise Sim2dlError(f"config key 'convert.stack.{name}': a source field has that name already")
        unknown = [m for m in members if m not in fields]
        if unknown:
            raise Sim2dlError(f"config key 'convert.stack.{name}': {unknown} not declared in source.fields")


def check_model_inputs(conv: Mapping[str, Any], model: str) -> None:
    """A built-in model takes one input: several features must be stacked first (before any step runs)."""
    if ":" not in model and len(conv["features"]) > 1:
        raise Sim2dlError(
            f"config key 'convert.features': {conv['features']} are several inputs, but the built-in "
            f"model '{model}' takes one: stack them (convert.stack: {{x: {conv['features']}}}, "
            "features: [x]) where their shapes are equal, or use your own model (train.model: "
            "file.py:function), which gets a dict"
        )


def primary_field(conv: Mapping[str, Any]) -> str:
    """The ingested field whose length is a record's length: the first feature, or its stack's first
    member."""
    first = conv["features"][0]
    first = conv.get("stack", {}).get(first, [first])[0]
    deposit = conv.get("deposit", {}).get(first)
    return first if deposit is None else deposit["positions"]


def get_dotted(config: Mapping[str, Any], key: str) -> Any:
    """config['a']['b'] for 'a.b'; KeyError names the whole key."""
    value: Any = config
    for part in key.split("."):
        if not isinstance(value, Mapping) or part not in value:
            raise KeyError(key)
        value = value[part]
    return value


def step_settings(config: Mapping[str, Any], step: str) -> dict[str, Any]:
    """The values of the keys `step` reads, by dotted key (a Snakemake params rerun trigger)."""
    keys = STEP_SETTINGS[step]
    if keys is None:
        return dict(config)
    return {key: get_dotted(config, key) for key in keys}


def step_config(config: Mapping[str, Any], step: str) -> dict[str, Any]:
    """A copy of `config` holding only the keys `step` reads, nested as in the config."""
    keys = STEP_SETTINGS[step]
    if keys is None:
        return _copy(dict(config))
    view: dict[str, Any] = {}
    for key, value in step_settings(config, step).items():
        *sections, leaf = key.split(".")
        node = view
        for section in sections:
            node = node.setdefault(section, {})
        node[leaf] = _copy(value)
    return view


def read_yaml_mapping(path: Path) -> dict[str, Any]:
    try:
        data = yaml.safe_load(path.read_text()) or {}
    except OSError as e:
        raise Sim2dlError(f"cannot read config file {path}: {e.strerror}") from e
    except yaml.YAMLError as e:
        raise Sim2dlError(f"config file {path} is not valid YAML: {e}") from e
    if not isinstance(data, dict):
        raise Sim2dlError(f"config file {path}: expected a mapping at the top level")
    return data


def deep_merge(base: dict[str, Any], update: Mapping[str, Any]) -> dict[str, Any]:
    """`update` on top of `base`, section by section (like Snakemake's --configfile)."""
    for key, value in update.items():
        if isinstance(value, Mapping) and isinstance(base.get(key), dict):
            deep_merge(base[key], value)
        else:
            base[key] = _copy(value)
    return base


def demo_config() -> dict[str, Any]:
    """The laptop demo's config (config/config.yaml in a source checkout); {} where there is none, so
    the schema's defaults apply."""
    return read_yaml_mapping(DEMO_CONFIG) if DEMO_CONFIG.is_file() else {}


def workflow_config(command_line: dict[str, Any], configfiles_given: bool) -> dict[str, Any]:
    """The config of a `snakemake` run, before validation: the user's --configfile files as given
    (Snakemake has merged them with --config), or, with none, the demo config with --config on top.
    The demo's maps (source.fields, search.space, ...) never merge into a user's."""
    if configfiles_given:
        return command_line
    return deep_merge(demo_config(), command_line)


def load(
    path: Path | str,
    overrides: Mapping[str, Any] | None = None,
    override_files: Sequence[Path] = (),
) -> dict[str, Any]:
    """The config file, then each override file merged on top (e.g. search's best.yaml), then validated."""
    config = read_yaml_mapping(Path(path))
    for extra in override_files:
        deep_merge(config, read_yaml_mapping(Path(extra)))
    for key, value in (overrides or {}).items():
        config[key] = value
    return validate(config)


def layout(config: Mapping[str, Any]) -> Layout:
    return Layout(Path(config["workdir"]))


def source_dir(config: Mapping[str, Any]) -> Path:
    path = config["source"]["path"]
    return Path(path) if path else layout(config).raw


def input_list(source: Mapping[str, Any], root: Path) -> Path | None:
    """The file naming the inputs (source.list; relative to the source directory), if one is set."""
    listed = source.get("list")
    if not listed:
        return None
    return Path(listed) if Path(listed).is_absolute() else root / listed


def labels_table_file(source: Mapping[str, Any], root: Path) -> Path | None:
    """The labels table (source.labels_table; relative to the source directory), if one is set."""
    setting = source.get("labels_table")
    if not setting:
        return None
    path = Path(setting if isinstance(setting, str) else setting["path"])
    return path if path.is_absolute() else root / path


def side_files(source: Mapping[str, Any], root: Path) -> list[Path]:
    """The files beside the data that ingest reads (the input list, the labels table): ingest reruns
    when they change, and containers bind their directories."""
    return [path for path in (input_list(source, root), labels_table_file(source, root)) if path]


def model_file(name: str) -> Path | None:
    """The user's model file named by train.model (a rerun trigger, bound into containers); None for a
    built-in or a module (found on the path)."""
    target, colon, _ = name.rpartition(":")
    return Path(target) if colon and (target.endswith(".py") or "/" in target) else None


def model_files(train: Mapping[str, Any]) -> list[Path]:
    """The user's model file (train.model 'path/to/file.py:function'): train and search rerun when it
    changes, and containers bind its directory."""
    path = model_file(train["model"])
    return [path] if path else []

"""Every YAML block of the docs and the README, as a user would copy it: a whole config that validates (a
config file given to snakemake is the whole config), or, where the block is marked `<!-- config: reference
-->` (an annotated overview of keys), keys that all exist in the schema. Blocks marked `<!-- config: run -->`
are run (tests/test_ensemble.py runs docs/ensembles.md's)."""

from __future__ import annotations

from typing import Any

import pytest
import yaml

from pipeline import config as cfg
from pipeline.steps import validated

from .conftest import REPO
from .helpers import doc_blocks


def unknown_keys(value: Any, schema: dict[str, Any], root: dict[str, Any], prefix: str = "") -> list[str]:
    """Keys of `value` that the schema does not know (maps of user-named entries are not walked into)."""
    if "$ref" in schema:
        schema = root["definitions"][schema["$ref"].split("/")[-1]]
    if not isinstance(value, dict) or "properties" not in schema:
        return []
    unknown = []
    for key, item in value.items():
        if key not in schema["properties"]:
            unknown.append(prefix + str(key))
        else:
            unknown += unknown_keys(item, schema["properties"][key], root, f"{prefix}{key}.")
    return unknown


def test_the_docs_have_config_blocks_and_every_one_is_marked_or_whole():
    blocks = doc_blocks()
    fences = sum(p.read_text().count("```yaml") for p in [REPO / "README.md", *(REPO / "docs").glob("*.md")])
    assert len(blocks) == fences > 0  # every block is found, so every block is checked below
    assert {mark for _, mark, _ in blocks} <= {"", "reference", "run"}


@pytest.mark.parametrize(("name", "mark", "text"), doc_blocks(), ids=[b[0] for b in doc_blocks()])
def test_every_config_block_in_the_docs_validates_as_written(tmp_path, monkeypatch, name, mark, text):
    content = yaml.safe_load(text)
    assert isinstance(content, dict), name
    if mark == "reference":
        schema = cfg.schema()
        assert unknown_keys(content, schema, schema) == [], name
        return
    monkeypatch.chdir(tmp_path)  # a block naming a model file relative to the working directory finds it
    (tmp_path / "my_model.py").write_text(
        "def build(input_shape, outputs, **kwargs):\n    raise NotImplementedError\n"
    )
    validated(content)


@pytest.mark.parametrize("preset", sorted((REPO / "config" / "presets").glob("*.yaml")), ids=lambda p: p.name)
def test_every_preset_validates_as_a_whole_config(preset):
    """What `make demo CONFIG=config/presets/X.yaml` reads; the presets that run are run elsewhere at a
    small size (test_ensemble, test_reader, test_spatial; nbody-few's simulator by bench/learning.py)."""
    config = validated(yaml.safe_load(preset.read_text()))
    if preset.name == "nbody-few.yaml":  # the simulator in the environment examples/nbody/setup.sh makes
        assert config["simulate"]["command"][:2] == [
            "examples/nbody/.venv/bin/python",
            "examples/nbody/simulate.py",
        ]
        assert (
            config["train"]["augment"]["symmetries"] and (REPO / "examples" / "nbody" / "setup.sh").exists()
        )

"""The merge step: parts -> sorted shards with their index, provenance and metadata.json."""

from pipeline.steps.merge.step import merge

__all__ = ["merge"]

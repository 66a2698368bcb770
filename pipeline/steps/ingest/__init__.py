"""The ingest step: input files -> parts of framed records, the manifest and the rejects list."""

from pipeline.steps.ingest.step import ingest

__all__ = ["ingest"]

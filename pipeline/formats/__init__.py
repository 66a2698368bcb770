"""Formats: input readers (readers/), values that are not arrays (fields/), shard formats (shards/), parts."""
